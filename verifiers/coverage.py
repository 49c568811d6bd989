"""``coverage``: the answer carries enough of what the expert's answer says.

The expert's answer's *content words* (:func:`pivot_envs.facts.content_words`: its dates, times, numbers,
IDs and every token that is not a common English word, lower-cased; a path's components too) are what it
says; the action passes when it carries at least ``min_share`` of them. Connecting words, order and
framing ("Answer: X", "It is X") do not count, so a reworded answer passes; "Done.", a refusal or another
task's answer carry few of them. It decides the answers whose expert answer reports no fact a tool returned
(the ``otherwise`` of :class:`pivot_envs.verifiers.facts.FactsVerifier`)::

    build_verifier({"name": "coverage", "min_share": 0.6})
"""

from __future__ import annotations

from dataclasses import dataclass

from pivot_envs.facts import coverage
from pivot_envs.types import Action, Pivot, VerifyResult, content_text
from pivot_envs.verifiers.base import Verifier, register_verifier
from pivot_envs.verifiers.compose import PicklesByConfig


@register_verifier("coverage", accepted_by="facts")
@dataclass
class CoverageVerifier(PicklesByConfig, Verifier):
    """The action's text carries at least ``min_share`` of the expert text's content words."""

    version = 2  # 2: numbers written as words count as the numbers (issue 48)

    min_share: float = 0.6
    """Share of the expert text's content words the action must carry (0 < min_share <= 1)."""

    def __post_init__(self) -> None:
        if not 0.0 < float(self.min_share) <= 1.0:
            raise ValueError(f"coverage: min_share must be in (0, 1], got {self.min_share!r}")

    def verify(self, action: Action, pivot: Pivot) -> VerifyResult:
        expected = content_text(pivot.expert.get("content"))
        share, missing = coverage(action.content or "", expected)
        ok = share >= float(self.min_share) - 1e-9
        detail = f"{share:.0%} of the expert answer's content words" + (f" (missing {', '.join(missing[:5])})" if missing else "")
        return VerifyResult(1.0 if ok else 0.0, ok, self.name, ("carries " if ok else "carries only ") + detail)
