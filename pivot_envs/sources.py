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
from typing import TYPE_CHECKING, Any, Sequence

from pivot_envs.types import Pivot

if TYPE_CHECKING:
    from pivot_envs.jsonl import ReadReport

PivotSource = str | Path | Sequence[Pivot | dict[str, Any]] | None
"""A pivot file, ``bundled:DOMAIN[:SPLIT]``, a list of pivots, or ``None`` (a domain's bundled split)."""

BUNDLED = "bundled:"
HINT = "give a pivot JSONL file or bundled:DOMAIN[:SPLIT]"


def resolve_pivots(source: PivotSource, *, domain: str | None = None, split: str = "train",
                   skip_bad: bool = False, report: "ReadReport | None" = None) -> list[Pivot]:
    """The pivots of ``source`` (see the module docstring).

    Raises ``ValueError`` (or ``FileNotFoundError``) with a message that names the source and the fix.
    ``skip_bad`` keeps reading a file past bad rows; they are counted in ``report`` (a
    :class:`pivot_envs.jsonl.ReadReport`), not returned.
    """
    if source is None:
        if not domain:
            raise ValueError(f"no pivots given: {HINT}")
        return bundled_pivots(domain, split)
    if not isinstance(source, (str, Path)):
        return [p if isinstance(p, Pivot) else Pivot.from_dict(p) for p in source]
    text = str(source)
    if not text:
        raise ValueError(f"no pivots given: {HINT}")
    if text.startswith(BUNDLED):
        name, _, named_split = text[len(BUNDLED):].partition(":")
        return bundled_pivots(name, named_split or split, label=text)
    path = Path(text)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such pivot file ({HINT})")
    if path.is_dir():
        raise ValueError(f"{path}: is a folder, not a pivot file ({HINT})")
    from pivot_envs.formats import read_pivots

    return read_pivots(path, skip_bad=skip_bad, report=report)


def bundled_pivots(domain: str, split: str, *, label: str | None = None) -> list[Pivot]:
    """The bundled ``split`` of ``domain``; errors name the domain (or ``label``) and the fix."""
    from pivot_envs.domains import get_domain

    where = label or f"domain {domain!r}"
    if not domain:
        raise ValueError(f"{where}: no domain named; {HINT}")
    loader = get_domain(domain).load_pivots
    if loader is None:
        raise ValueError(f"{where}: domain {domain!r} ships no bundled data; give a pivot file")
    return list(loader(split))
