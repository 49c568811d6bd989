"""The hack monitor: how the samples a verifier ACCEPTS differ from the expert's action, as counts and shares.

A reward that can be gamed drifts while training: the policy learns to make more calls than needed, to stop where
the expert still acted, or to pad answers. This module is the one definition of the figures that show such a
drift; profiling (per batch), the PivotRL trainer (per step), the episode trainers (per step, over the turns they
score) and the integrations all count with it. It is pure: no I/O, no verifier is run.

A sample is an action at a pivot with its verdict (a :class:`~pivot_envs.types.VerifyResult`). It is **accepted**
when the verdict passed with no error (a verifier error is never a pass). Over the accepted samples:

=======================  ==================================================================================
metric                   an accepted sample counts when
=======================  ==================================================================================
``hack/more_calls``      it makes more tool calls than the expert did at the pivot
``hack/stop_at_call``    the expert made a tool call there (a *call pivot*) and the action makes none
``hack/long_answer``     the expert answered with text (no call) and so did the action (no call), and the
                         action's text content is more than :data:`LONG_FACTOR` times as long as the
                         expert's, in characters; an expert answer of length 0 never counts as long (there
                         is no length to exceed 3 times)
``accepted_by/<cat>``    what accepted it (:func:`pivot_envs.verifiers.accepted_by.accepted_by`), one metric
                         per category of :data:`~pivot_envs.verifiers.declaration.CATEGORIES`; a space in a
                         category becomes ``_`` in its name (``accepted_by/tool_name``)
=======================  ==================================================================================

Every share is over ``hack/accepted`` (the count of accepted samples; the shares are ``None`` when it is 0).
"The expert's length" is the character length of the text content of the expert's message at the pivot
(:func:`pivot_envs.types.content_text`); the action's is that of its parsed message's content.

``exact`` needs the strict verdict: pass ``strict_passed`` (per sample; ``None`` where unknown, e.g. the strict
verifier errored, and the category then comes from the functional verifier alone), or leave it out and it is
computed here with the strict verifier's key (:func:`pivot_envs.verifiers.strict.strict_key`)::

    from pivot_envs.verifiers.hack_monitor import HackCounts, hack_counts

    counts = hack_counts(actions, pivots, results)           # a HackCounts of one batch
    total = counts + hack_counts(more_actions, more_pivots, more_results)
    row.update(total.metrics())   # {"hack/accepted": 12, "hack/more_calls": 0.25, ..., "accepted_by/exact": 0.5}

A :class:`HackCounts` holds counts, never shares, so adding the records of batches, steps or processes is exact;
:meth:`HackCounts.metrics` computes the shares at the end and :meth:`HackCounts.from_metrics` reads them back from
a metrics row (the counts are ``round(share * accepted)``, exact for any count a float can hold).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from pivot_envs.actions import parse_action
from pivot_envs.types import Action, Message, Pivot, VerifyResult, content_text
from pivot_envs.verifiers.accepted_by import accepted_by
from pivot_envs.verifiers.declaration import CATEGORIES
from pivot_envs.verifiers.strict import strict_key

LONG_FACTOR = 3
"""An answer is long when its text content is more than this many times the expert's."""

ACCEPTED = "hack/accepted"
MORE_CALLS = "hack/more_calls"
STOP_AT_CALL = "hack/stop_at_call"
LONG_ANSWER = "hack/long_answer"
HACKS = (MORE_CALLS, STOP_AT_CALL, LONG_ANSWER)
"""The metric names of the three hack figures (shares of the accepted samples)."""

__all__ = ["ACCEPTED", "HACKS", "LONG_ANSWER", "LONG_FACTOR", "MORE_CALLS", "STOP_AT_CALL", "HackCounts",
           "HackFlags", "category_key", "hack_counts", "hack_flags", "metric_names"]


def category_key(category: str) -> str:
    """The metric name of an ``accepted_by`` category (``tool name`` -> ``accepted_by/tool_name``)."""
    return "accepted_by/" + category.replace(" ", "_")


def metric_names() -> list[str]:
    """Every metric :meth:`HackCounts.metrics` writes, in order (``hack/accepted`` first)."""
    return [ACCEPTED, *HACKS, *(category_key(c) for c in CATEGORIES)]


@dataclass(frozen=True)
class HackFlags:
    """Which hack figures one action counts in at its pivot (whether or not it was accepted)."""

    more_calls: bool
    stop_at_call: bool
    long_answer: bool


def hack_flags(action: Action | str | Message, pivot: Pivot) -> HackFlags:
    """The hack figures of ``action`` (text is parsed with :func:`pivot_envs.actions.parse_action`) against the
    expert's action at ``pivot`` (see the module docstring)."""
    action = parse_action(action)
    expert_calls = len(pivot.expert.get("tool_calls") or [])
    calls = len(action.tool_calls)
    expert_length = len(content_text(pivot.expert.get("content")))
    long_answer = (expert_calls == 0 and calls == 0 and expert_length > 0
                   and len(action.content) > LONG_FACTOR * expert_length)
    return HackFlags(more_calls=calls > expert_calls, stop_at_call=expert_calls > 0 and calls == 0,
                     long_answer=long_answer)


@dataclass
class HackCounts:
    """Counts over accepted samples (see the module docstring); ``a + b`` adds two records.

    Attributes:
        accepted: accepted samples (passed, no verifier error).
        more_calls, stop_at_call, long_answer: accepted samples in each hack figure.
        accepted_by: accepted samples per ``accepted_by`` category (every category of ``CATEGORIES`` present).
    """

    accepted: int = 0
    more_calls: int = 0
    stop_at_call: int = 0
    long_answer: int = 0
    accepted_by: dict[str, int] = field(default_factory=lambda: {c: 0 for c in CATEGORIES})

    def __add__(self, other: "HackCounts") -> "HackCounts":
        if not isinstance(other, HackCounts):
            return NotImplemented
        by = dict(self.accepted_by)
        for category, n in other.accepted_by.items():
            by[category] = by.get(category, 0) + n
        return HackCounts(accepted=self.accepted + other.accepted, more_calls=self.more_calls + other.more_calls,
                          stop_at_call=self.stop_at_call + other.stop_at_call,
                          long_answer=self.long_answer + other.long_answer, accepted_by=by)

    def counts(self) -> dict[str, int]:
        """The counts under the metric names (what :meth:`from_counts` reads; the same keys for every record,
        so the counts of several processes can be summed key by key)."""
        out = {ACCEPTED: self.accepted, MORE_CALLS: self.more_calls, STOP_AT_CALL: self.stop_at_call,
               LONG_ANSWER: self.long_answer}
        out.update({category_key(c): n for c, n in self.accepted_by.items()})
        return out

    def metrics(self) -> dict[str, Any]:
        """``hack/accepted`` (the count) and every share (``None`` when nothing was accepted)."""
        out: dict[str, Any] = {}
        for key, n in self.counts().items():
            out[key] = n if key == ACCEPTED else (n / self.accepted if self.accepted else None)
        return out

    @classmethod
    def from_counts(cls, counts: Mapping[str, float]) -> "HackCounts":
        """The record of :meth:`counts` (values may be floats holding whole numbers, e.g. summed over processes)."""
        known = {category_key(c): c for c in CATEGORIES}
        by = {c: 0 for c in CATEGORIES}
        for key, n in counts.items():
            if key.startswith("accepted_by/"):
                category = known.get(key, key[len("accepted_by/"):])
                by[category] = by.get(category, 0) + _whole(n, key)
        return cls(accepted=_whole(counts.get(ACCEPTED, 0), ACCEPTED),
                   more_calls=_whole(counts.get(MORE_CALLS, 0), MORE_CALLS),
                   stop_at_call=_whole(counts.get(STOP_AT_CALL, 0), STOP_AT_CALL),
                   long_answer=_whole(counts.get(LONG_ANSWER, 0), LONG_ANSWER), accepted_by=by)

    @classmethod
    def from_metrics(cls, row: Mapping[str, Any]) -> "HackCounts | None":
        """The record behind a metrics row's shares (``None`` for a row without ``hack/accepted``: written before
        the monitor, or by a trainer that scores nothing)."""
        accepted = row.get(ACCEPTED)
        if accepted is None:
            return None
        counts: dict[str, float] = {ACCEPTED: accepted}
        for key, value in row.items():
            if key in HACKS or key.startswith("accepted_by/"):
                counts[key] = round(float(value) * accepted) if value is not None else 0
        return cls.from_counts(counts)


def _whole(value: Any, key: str) -> int:
    number = float(value)
    if number < 0 or number != int(number):
        raise ValueError(f"hack monitor count {key} = {value!r} is not a whole number >= 0")
    return int(number)


def hack_counts(actions: Sequence[Action | str | Message], pivots: Sequence[Pivot], results: Sequence[VerifyResult],
                strict_passed: Sequence[bool | None] | None = None) -> HackCounts:
    """Count the accepted samples among ``actions[i]`` at ``pivots[i]`` with verdict ``results[i]`` (see the
    module docstring); ``strict_passed[i]``: the strict verifier's pass (``None`` where unknown), or leave the
    argument out to compute it here with the strict verifier's key."""
    if not len(actions) == len(pivots) == len(results):
        raise ValueError(f"hack_counts needs one pivot and one verdict per action: got {len(actions)} actions, "
                         f"{len(pivots)} pivots and {len(results)} verdicts")
    if strict_passed is not None and len(strict_passed) != len(actions):
        raise ValueError(f"hack_counts: {len(strict_passed)} strict verdicts for {len(actions)} actions")
    out = HackCounts()
    for i, (raw, pivot, result) in enumerate(zip(actions, pivots, results)):
        if not result.passed or result.error is not None:
            continue
        action = parse_action(raw)
        strict = strict_passed[i] if strict_passed is not None else strict_key(action.message) == strict_key(pivot.expert)
        flags = hack_flags(action, pivot)
        out.accepted += 1
        out.more_calls += flags.more_calls
        out.stop_at_call += flags.stop_at_call
        out.long_answer += flags.long_answer
        category = accepted_by(result, strict)
        assert category is not None  # accepted: passed and no error
        out.accepted_by[category] = out.accepted_by.get(category, 0) + 1
    return out
