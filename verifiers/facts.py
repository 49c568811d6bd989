"""``facts``: an answer judged by the facts of the expert's answer.

``facts`` is the episode success rule's fact recall (:func:`pivot_envs.facts.answer_facts`
and :func:`pivot_envs.facts.facts_given`, one implementation for both): a *fact* is a value of an
earlier tool result (a JSON leaf of any type and case, a token of shell output or of a document, a
date, number or ID) that the expert's answer repeats and that the task did not give. Where the
expert's answer reports such facts, the action passes when its text carries them (``min_recall``):
a refusal, "Done." or another task's answer carries none of them. An expert answer that reports
nothing a tool returned (a bare confirmation after writes: "Done, the file is renamed.") is decided
by ``otherwise`` (``None``: any answer but a refusal, and the reason says the expert's answer carried
nothing to check). A refusal (:func:`pivot_envs.refusal.is_refusal`) fails wherever the expert did
not refuse.

Decides text turns only; ``final_turn`` routes a trajectory's turns and gives it the answer turns (its ``answer``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pivot_envs.additions import Budget, added_problem
from pivot_envs.facts import answer_facts, conversation_text, facts_given, ungrounded
from pivot_envs.refusal import is_refusal
from pivot_envs.types import Action, Pivot, VerifyResult, content_text
from pivot_envs.verifiers.base import Verifier, register_verifier
from pivot_envs.verifiers.compose import PicklesByConfig, build_child
from pivot_envs.verifiers.helpers.normalize import PivotCache
from pivot_envs.verifiers.stop import expert_stopped


@register_verifier("facts", accepted_by="facts")
@dataclass
class FactsVerifier(PicklesByConfig, Verifier):
    """The action's answer carries the facts of the expert's answer (see the module docstring).

    Decides text turns only: an action with a tool call fails (another call where the expert
    stopped); a pivot whose expert made a call is an ``error`` (route such turns with ``final_turn``).
    """

    version = 2  # 2: what an answer adds (retractions, hedges, claims, names, value and length budgets); number words

    min_recall: float = 1.0
    """Share of the expert answer's facts the action must carry (1.0: all)."""
    otherwise: Any = "coverage"
    """Verifier spec for expert answers that report no fact (bare confirmations, small talk); default
    ``coverage``: half of the expert answer's content words (:mod:`pivot_envs.verifiers.coverage`);
    ``None``: any non-empty answer but a refusal passes."""

    grounded: bool = True
    """Judge what the answer adds, not only what it carries: it may state no specific value (number, date, ID,
    e-mail, path, key, file name) that neither the conversation nor the expert's answer states
    (:func:`pivot_envs.facts.ungrounded`), and may not retract, hedge, claim an action nothing did, list values past
    ``max_extra_values`` or run past ``length_factor`` x the expert's answer + ``length_slack`` characters
    (:func:`pivot_envs.additions.added_problem`)."""
    max_extra_values: int = 2
    """Specific values the answer may state beyond the expert answer's count."""
    length_factor: float = 3.0
    """The answer may be at most this times as long as the expert's ..."""
    length_slack: int = 100
    """... plus this many characters."""

    _otherwise: Verifier | None = field(init=False, repr=False, compare=False, default=None)
    _budget: Budget = field(init=False, repr=False, compare=False, default_factory=Budget)
    _sources: PivotCache = field(init=False, repr=False, compare=False, default_factory=PivotCache)
    """The conversation's texts per pivot (what an answer's values may come from)."""
    _facts: PivotCache = field(init=False, repr=False, compare=False, default_factory=PivotCache)
    """The expert answer's facts per pivot: a group of G actions at one pivot computes them once."""

    def __post_init__(self) -> None:
        if not 0.0 <= float(self.min_recall) <= 1.0:
            raise ValueError(f"min_recall must be in [0, 1], got {self.min_recall!r}")
        self._budget = Budget(int(self.max_extra_values), float(self.length_factor), int(self.length_slack))
        self._otherwise = build_child(self.otherwise) if self.otherwise is not None else None

    def verify(self, action: Action, pivot: Pivot) -> VerifyResult:
        if not expert_stopped(pivot):
            return VerifyResult.failure(self.name, "the expert made a tool call at this turn: `facts` decides answer "
                                        "turns only (use `final_turn` to route call turns to another verifier)")
        if action.tool_calls:
            return VerifyResult(0.0, False, self.name, "another tool call where the expert stopped and answered")
        answer = action.content.strip()
        expected = content_text(pivot.expert.get("content")).strip()
        if not answer:
            if not expected:
                return VerifyResult(1.0, True, self.name, "stopped without a text, as the expert did")
            return VerifyResult(0.0, False, self.name, "empty answer")
        if self.grounded:
            foreign = ungrounded(answer, [*self._sources.get(pivot, lambda p: conversation_text(p.context)), expected])
            if foreign:
                return VerifyResult(0.0, False, self.name, f"the answer states {', '.join(foreign[:3])}, which nothing "
                                    "in the conversation gave (another task's answer, or made up)")
            added = added_problem(answer, expected, pivot.context, self._budget)
            if added:
                return VerifyResult(0.0, False, self.name, added)
        facts = self._facts.get(pivot, lambda p: answer_facts(p.context, expected))
        if not facts:
            if is_refusal(answer) and not is_refusal(expected):
                return VerifyResult(0.0, False, self.name, "a refusal where the expert answered")
            if self._otherwise is not None:
                return self._otherwise.safe_verify(action, pivot)
            return VerifyResult(1.0, True, self.name, "stopped with an answer; the expert's answer reports nothing a "
                                "tool returned (a bare confirmation), so there was no fact to check")
        ok, missing = facts_given(answer, facts, float(self.min_recall))
        if ok:
            return VerifyResult(1.0, True, self.name, f"the answer carries {len(facts) - len(missing)} of {len(facts)} facts")
        return VerifyResult(0.0, False, self.name, f"{len(missing)} of {len(facts)} facts missing: {', '.join(missing[:5])}")
