"""Scoring sampled groups with the domain verifier (one ``verify_many`` call per batch).

Every sample of every group goes to the verifier in ONE ``verify_many(actions,
pivots)`` call, so verifiers that parallelise (LLM judge, sandboxed execution)
run the whole step's samples concurrently. Actions are re-parsed from the raw
text with the domain's parser (as :meth:`pivot_envs.env.PivotEnv.step` does).

A sample whose verification failed (``VerifyResult.error``: judge down,
sandbox crash...) is *masked*: ``valid = False``, it is counted, and it never
enters the group statistics or the loss as a 0 or a 1. A verifier whose
``verify_many`` raises (a bug in a third-party verifier) masks the whole batch
with that error instead of killing the run (:func:`pivot_envs.verifiers.batch.verify_batch`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from pivot_envs.actions import parse_action as default_parse
from pivot_envs.trainers.sampling import Group
from pivot_envs.types import Action, Pivot, VerifyResult
from pivot_envs.verifiers import Verifier
from pivot_envs.verifiers.batch import verify_batch
from pivot_envs.verifiers.hack_monitor import HackCounts, hack_counts


@dataclass
class GroupScores:
    """Verifier results of one group, aligned with its completions.

    Attributes:
        rewards: functional rewards (0.0 where masked).
        valid: False where the verifier errored (masked samples).
        passed: the verifier's pass flags (False where masked).
        errors: the error text of masked samples, else None.
        strict: strict-match rewards (None where the strict verifier errored or is off).
        actions: the parsed actions that were scored.
        results: the verifier's verdicts.
        strict_passed: the strict verifier's passes (an item None where it errored; the list None when it is off:
            the hack monitor then compares with the strict verifier's key itself).
    """

    rewards: list[float]
    valid: list[bool]
    passed: list[bool]
    errors: list[str | None]
    strict: list[float | None]
    actions: list[Action] = field(default_factory=list)
    results: list[VerifyResult] = field(default_factory=list)
    strict_passed: list[bool | None] | None = None

    @property
    def masked(self) -> int:
        return sum(1 for ok in self.valid if not ok)

    @property
    def scored_rewards(self) -> list[float]:
        return [r for r, ok in zip(self.rewards, self.valid) if ok]

    def hacks(self, pivot: Pivot) -> HackCounts:
        """The hack monitor's counts over the group's accepted samples (:mod:`pivot_envs.verifiers.hack_monitor`)."""
        return hack_counts(self.actions, [pivot] * len(self.actions), self.results, self.strict_passed)


def score_groups(
    verifier: Verifier,
    groups: Sequence[Group],
    *,
    parse: Callable[[str], Action] = default_parse,
    strict_verifier: Verifier | None = None,
) -> list[GroupScores]:
    """Score every completion of ``groups``; returns one :class:`GroupScores` per group."""
    actions = [parse(c.text) for g in groups for c in g.completions]
    pivots = [g.pivot for g in groups for _ in g.completions]
    results = verify_batch(actions, pivots, verifier)
    strict = verify_batch(actions, pivots, strict_verifier) if strict_verifier is not None else [None] * len(actions)
    out, i = [], 0
    for g in groups:
        n = len(g.completions)
        chunk, strict_chunk = results[i : i + n], strict[i : i + n]
        i += n
        out.append(GroupScores(
            rewards=[0.0 if r.error else float(r.reward) for r in chunk],
            valid=[r.error is None for r in chunk],
            passed=[r.error is None and bool(r.passed) for r in chunk],
            errors=[r.error for r in chunk],
            strict=[None if s is None or s.error else float(s.reward) for s in strict_chunk],
            actions=actions[i - n : i],
            results=list(chunk),
            strict_passed=None if strict_verifier is None else [None if s is None or s.error else bool(s.passed)
                                                                       for s in strict_chunk],
        ))
    return out
