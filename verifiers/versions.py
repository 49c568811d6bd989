"""Verifier versions: what a run records of the reward's code, and the refusal to resume under other versions.

A verifier's config says *what* it checks; its ``version`` (a class attribute of every
:class:`~pivot_envs.verifiers.base.Verifier`, 1 unless the class declares another) says *which code* checks
it. A verifier bumps its version whenever a code change changes its verdicts (``tests/verifiers/test_golden_verdicts.py``
fails until it does). Everything whose numbers depend on verdicts records the versions and refuses to resume
under others: the profile's checkpoint (:mod:`pivot_envs.pipeline.profile`), the trainers' checkpoints, the
demo's stages and its run folders::

    verifier_versions("tool_call")                           # {"tool_call": 1, "fuzzy": 1}
    verifier_versions(default_verifier_spec("terminal"))     # every verifier the built object holds
    verifier_fingerprint(spec)                               # a hash of the config and those versions
    check_versions(recorded, current, where="out/run/checkpoint-000040", fix="...")  # raises when they differ

The versions are read off the *built* object: every verifier reachable from it through instance attributes,
lists, tuples, sets, dicts and dataclasses (a composite's children, a ``final_turn``'s ``calls`` and
``answer``, a ``tool_call``'s text verifier), keyed by registered name.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Iterable, Mapping

from pivot_envs.config import ConfigError
from pivot_envs.types import stable_hash
from pivot_envs.verifiers.base import Verifier, VerifierSpec, build_verifier
from pivot_envs.verifiers.defaults import default_verifier_spec

Versions = dict[str, int]
"""Registered verifier name -> version."""

_LEAVES = (str, bytes, bytearray, int, float, complex, bool, type(None), type, range)
"""Values the walk never looks into (classes included: a class attribute is not part of the built object)."""


class VerifierVersionsChanged(ConfigError):
    """A resume under verifier versions other than the recorded ones (its message names them and the fix)."""


def verifier_versions(verifier_or_spec: VerifierSpec) -> Versions:
    """``{registered name: version}`` of every verifier the built ``verifier_or_spec`` holds, itself included."""
    found: Versions = {}
    seen: set[int] = set()
    todo: list[Any] = [build_verifier(verifier_or_spec)]
    while todo:
        obj = todo.pop()
        if isinstance(obj, _LEAVES) or id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, Verifier):
            found[type(obj).name] = int(type(obj).version)
        todo.extend(_parts(obj))
    return dict(sorted(found.items()))


def _parts(obj: Any) -> list[Any]:
    """What the walk looks into next: a container's items, an object's attributes."""
    if isinstance(obj, Mapping):
        return [*obj.keys(), *obj.values()]
    if isinstance(obj, (list, tuple, set, frozenset)):
        return list(obj)
    parts: list[Any] = []
    if dataclasses.is_dataclass(obj):
        parts += [getattr(obj, f.name, None) for f in dataclasses.fields(obj)]
    attrs = getattr(obj, "__dict__", None)
    if isinstance(attrs, dict):
        parts += list(attrs.values())
    for slot in getattr(type(obj), "__slots__", ()):
        if isinstance(slot, str) and hasattr(obj, slot):
            parts.append(getattr(obj, slot))
    return parts


def merged_versions(specs: Iterable[VerifierSpec]) -> Versions:
    """The versions of several verifiers together (e.g. a functional verifier and the strict baseline)."""
    out: Versions = {}
    for spec in specs:
        out.update(verifier_versions(spec))
    return dict(sorted(out.items()))


def domain_versions(domains: Iterable[str]) -> Versions:
    """The versions of the default verifiers of ``domains`` (:func:`~pivot_envs.verifiers.defaults.default_verifier_spec`)."""
    return merged_versions(default_verifier_spec(d) for d in sorted(set(domains)))


def verifier_fingerprint(spec: VerifierSpec) -> str:
    """A stable hash of the verifier's config and of the versions of every verifier it holds."""
    verifier = build_verifier(spec)
    config = json.loads(json.dumps(verifier.config(), sort_keys=True, default=str))
    return stable_hash("verifier", config, verifier_versions(verifier))


def changed_versions(recorded: Mapping[str, int], current: Mapping[str, int]) -> list[str]:
    """The verifiers whose versions differ: ``"final_turn 1 -> 2"``, ``"exec: none recorded -> 1"``, ..."""
    out = []
    for name in sorted(set(recorded) | set(current)):
        old, new = recorded.get(name), current.get(name)
        if old != new:
            shown_old = "not used" if old is None else old
            shown_new = "not used" if new is None else new
            out.append(f"{name} {shown_old} -> {shown_new}")
    return out


def check_versions(recorded: Mapping[str, int] | None, current: Mapping[str, int], *, where: str, fix: str) -> None:
    """Refuse (:class:`VerifierVersionsChanged`) a resume whose ``recorded`` versions are not ``current``.

    ``where`` names what was recorded (a checkpoint, a stage file); ``fix`` says how to go on (a fresh output
    folder, deleting the stale stage). ``recorded`` ``None``: written before versions were recorded (refused too:
    which code made it is unknown).
    """
    if recorded is None:
        raise VerifierVersionsChanged(
            f"{where} records no verifier versions (written before pivot-envs recorded them), so the verifier code "
            f"that scored it is unknown (now: {_shown(current)}); {fix}")
    changed = changed_versions(recorded, current)
    if changed:
        raise VerifierVersionsChanged(
            f"{where} was scored by other verifier code: {', '.join(changed)} (recorded -> now); its rewards "
            f"would mix with the new verifiers' in one run. {fix}")


def _shown(versions: Mapping[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(versions.items())) or "none"


__all__ = ["VerifierVersionsChanged", "Versions", "changed_versions", "check_versions", "domain_versions",
           "merged_versions", "verifier_fingerprint", "verifier_versions"]
