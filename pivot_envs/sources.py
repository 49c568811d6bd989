"""Where pivots come from: one resolver for every command and API that takes "pivots".

A pivot source is one of::

    None                      the bundled ``split`` of ``domain`` (the domain's ``load_pivots``)
    "bundled:DOMAIN[:SPLIT]"  a domain's bundled data (SPLIT defaults to ``split``)
    "PATH"                    a pivot JSONL file, ours or NeMo Gym rows (read by pivot_envs.formats.read_pivots)
    [Pivot | dict, ...]       pivots already in memory

::

    from pivot_envs.sources import resolve_pivots
    pivots = resolve_pivots("bundled:terminal:test")
    pivots = resolve_pivots(None, domain="tool_use", split="train")
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence, TypeVar

from pivot_envs.domains import get_domain
from pivot_envs.envs_data import GENERATORS, load_trajectories
from pivot_envs.formats import read_pivots, read_trajectories
from pivot_envs.formats.tau2_tasks import DOMAINS as TAU2_DOMAINS
from pivot_envs.formats.tau2_tasks import read_tau2_tasks
from pivot_envs.jsonl import ReadReport
from pivot_envs.types import Pivot, Trajectory

T = TypeVar("T")

PivotSource = str | Path | Sequence[Pivot | dict[str, Any]] | None
"""A pivot file, ``bundled:DOMAIN[:SPLIT]``, a list of pivots, or ``None`` (a domain's bundled split)."""

BUNDLED = "bundled:"
HINT = "give a pivot JSONL file or bundled:DOMAIN[:SPLIT]"
TRAJECTORY_HINT = "give a trajectory file, bundled:DOMAIN[:SPLIT], tau2:airline|retail or a list of trajectories"
TAU2 = "tau2:"
"""``tau2:DOMAIN``: the tau2-bench tasks of the installed server package (:mod:`pivot_envs.formats.tau2_tasks`)."""


def resolve_pivots(source: PivotSource, *, domain: str | None = None, split: str = "train",
                   skip_bad: bool = False, report: ReadReport | None = None) -> list[Pivot]:
    """The pivots of ``source`` (see the module docstring).

    Raises ``ValueError`` (or ``FileNotFoundError``) with a message that names the source and the fix.
    ``skip_bad`` keeps reading a file past bad rows; they are counted in ``report`` (a
    :class:`pivot_envs.jsonl.ReadReport`), not returned.
    """
    def read(path: Path) -> list[Pivot]:
        return read_pivots(path, skip_bad=skip_bad, report=report)

    return _resolve(source, domain, split, "pivot", HINT, bundled_pivots, read,
                    lambda p: p if isinstance(p, Pivot) else Pivot.from_dict(p))


def resolve_trajectories(source: Any, *, domain: str | None = None, split: str = "train",
                         kind: str = "trajectory") -> list[Trajectory]:
    """Trajectories from the same kinds of source: a trajectory file (any format
    :func:`pivot_envs.formats.read_trajectories` reads), ``bundled:DOMAIN[:SPLIT]``, ``tau2:DOMAIN`` (tau2-bench's
    tasks of an installed server package, ``airline`` or ``retail``), a list of
    trajectories (or dicts), or ``None`` (the bundled ``split`` of ``domain``). ``kind`` names them in
    errors (episode envs call them tasks)."""

    def bundled(name: str, named_split: str, *, label: str | None = None) -> list[Trajectory]:
        return bundled_trajectories(name, named_split, label=label, kind=kind)

    if isinstance(source, str) and source.startswith(TAU2):
        name = source[len(TAU2):]
        if name not in TAU2_DOMAINS:
            known = " or ".join(TAU2 + d for d in TAU2_DOMAINS)
            raise ValueError(f"{source}: unknown tau2 domain {name!r}; use {known}")
        return read_tau2_tasks(domain=name)

    return _resolve(source, domain, split, kind, TRAJECTORY_HINT, bundled, read_trajectories,
                    lambda t: t if isinstance(t, Trajectory) else Trajectory.from_dict(t))


def _resolve(source: Any, domain: str | None, split: str, kind: str, hint: str,
             bundled: Callable[..., list[T]], read: Callable[[Path], list[T]], convert: Callable[[Any], T]) -> list[T]:
    if source is None:
        if not domain:
            raise ValueError(f"no {kind}s given: {hint}")
        return bundled(domain, split)
    if not isinstance(source, (str, Path)):
        return [convert(item) for item in source]
    text = str(source)
    if not text:
        raise ValueError(f"no {kind}s given: {hint}")
    if text.startswith(BUNDLED):
        name, _, named_split = text[len(BUNDLED):].partition(":")
        return bundled(name, named_split or split, label=text)
    path = Path(text)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such {kind} file ({hint})")
    if path.is_dir():
        raise ValueError(f"{path}: is a folder, not a {kind} file ({hint})")
    return read(path)


def bundled_trajectories(domain: str, split: str, *, label: str | None = None,
                         kind: str = "trajectory") -> list[Trajectory]:
    """The bundled trajectories of ``split`` of a built-in domain; errors name the domain and the fix."""
    where = f"{label}: " if label else ""
    if not domain:
        raise ValueError(f"{where}no domain named; {TRAJECTORY_HINT}")
    if domain not in GENERATORS:
        get_domain(domain)  # an unknown domain: the error names the known ones
        raise ValueError(f"{where}domain {domain!r} ships no bundled {kind}s; give a trajectory file")
    return load_trajectories(domain, split)


def bundled_pivots(domain: str, split: str, *, label: str | None = None) -> list[Pivot]:
    """The bundled ``split`` of ``domain``; errors name the domain (or ``label``) and the fix."""
    where = f"{label}: " if label else ""
    if not domain:
        raise ValueError(f"{where}no domain named; {HINT}")
    loader = get_domain(domain).load_pivots
    if loader is None:
        raise ValueError(f"{where}domain {domain!r} ships no bundled data; give a pivot file")
    return list(loader(split))
