"""A call turn is judged whole: every call of it, not the first one.

A child verifier that compares one call (a similarity stage reads the first call of a turn; a route picks its
child by the expert's first tool) would accept the expert's call followed by ``rm -rf ./*``. So ``final_turn``
judges a call turn, where both sides made calls, by this rule:

* one call on each side: the child decides, as before;
* as many calls on each side: each call of the action must match a **distinct** call of the expert's turn (the
  child decides each pair, with the expert's turn cut to that one call; a perfect matching of the pairs it passes,
  so a repeated call cannot stand for two);
* otherwise (an extra, missing or repeated call), or where the calls do not match one to one: the turn passes only
  when ``effect`` (the whole turn's effect: the terminal domain's ``exec``, which runs every call) says it does what
  the expert's turn did; without an ``effect``, it fails.

An accept of the first call never ends the judgement of a turn with more calls than the expert's.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

from pivot_envs.types import Action, Message, Pivot, VerifyResult

MAX_CALLS = 8
"""Turns with more calls than this on one side are not matched pair by pair (``effect`` decides, or they fail)."""


def single_calls(message: Message) -> list[Message]:
    """One assistant message per call of ``message`` (no content)."""
    return [{"role": "assistant", "content": None, "tool_calls": [call]} for call in message.get("tool_calls") or []]


def call_pivots(pivot: Pivot) -> list[Pivot]:
    """``pivot`` once per call of the expert's turn, its expert cut to that call (ids ``ID#callJ``)."""
    return [dataclasses.replace(pivot, id=f"{pivot.id}#call{j}", expert=message)
            for j, message in enumerate(single_calls(pivot.expert))]


def perfect_matching(ok: Sequence[Sequence[bool]]) -> bool:
    """Whether every row can take a distinct column it is ``ok`` with (Kuhn's augmenting paths; square input)."""
    n = len(ok)
    owner: list[int | None] = [None] * n

    def augment(row: int, seen: set[int]) -> bool:
        for col in range(n):
            if ok[row][col] and col not in seen:
                seen.add(col)
                held = owner[col]
                if held is None or augment(held, seen):
                    owner[col] = row
                    return True
        return False

    return all(augment(row, set()) for row in range(n))


def route(action: Action, pivot: Pivot) -> str:
    """How a call turn is judged: ``one`` (one call each), ``pairs`` (as many, matched pair by pair) or ``whole``."""
    mine, theirs = len(action.tool_calls or []), len(pivot.expert.get("tool_calls") or [])
    if mine == theirs == 1:
        return "one"
    if mine == theirs and mine <= MAX_CALLS:
        return "pairs"
    return "whole"


@dataclasses.dataclass
class PairPlan:
    """The pairs of one turn judged pair by pair: ``(action call, expert call)`` items of a flat batch."""

    item: int
    n: int
    start: int


def pair_batch(items: Sequence[tuple[int, Action, Pivot]]) -> tuple[list[Message], list[Pivot], list[PairPlan]]:
    """The flat batch of every (action call, expert call) pair of ``items`` (``(index, action, pivot)``)."""
    actions: list[Message] = []
    pivots: list[Pivot] = []
    plans = []
    for index, action, pivot in items:
        mine, theirs = single_calls(action.message), call_pivots(pivot)
        plans.append(PairPlan(index, len(mine), len(actions)))
        for call in mine:
            for expert in theirs:
                actions.append(call)
                pivots.append(expert)
    return actions, pivots, plans


def pair_verdict(plan: PairPlan, results: Sequence[VerifyResult], name: str) -> tuple[VerifyResult | None, str]:
    """The verdict of one turn from its pairs' results: a pass when the passing pairs match every call to a distinct
    expert call, an error when an erroring pair might have completed the matching, else ``None`` (not matched), with
    why (the child's reason for a call that matches no expert call, against the expert call in its place)."""
    n = plan.n
    grid = [results[plan.start + i * n: plan.start + (i + 1) * n] for i in range(n)]
    clean = [[r.passed and r.error is None for r in row] for row in grid]
    if perfect_matching(clean):
        first = grid[0][next(j for j in range(n) if clean[0][j])]
        return VerifyResult(1.0, True, first.verifier, f"each of the {n} calls matches a distinct call of the "
                            f"expert's turn ({first.reason})"), ""
    hopeful = [[clean[i][j] or grid[i][j].error is not None for j in range(n)] for i in range(n)]
    if perfect_matching(hopeful):
        errors = sorted({r.error for row in grid for r in row if r.error})
        return VerifyResult.failure(name, "a call of the turn could not be judged: " + "; ".join(errors)[:500]), ""
    lone = next((i for i in range(n) if not any(clean[i])), None)
    if lone is None:
        return None, "two of its calls match the same expert call"
    return None, f"its call {lone + 1} matches no call of the expert's turn ({grid[lone][lone].reason})"


def count_failure(action: Action, pivot: Pivot, name: str, why: str = "") -> VerifyResult:
    """The verdict of a turn whose calls do not match the expert's one to one, where no effect stage judges it
    (``why``: what the pair matching found)."""
    mine, theirs = len(action.tool_calls or []), len(pivot.expert.get("tool_calls") or [])
    if mine == theirs:
        why = f"its {mine} calls do not each match a distinct call of the expert's turn" + (f": {why}" if why else "")
    else:
        why = f"it makes {mine} calls where the expert's turn made {theirs} (an extra, missing or repeated call)"
    return VerifyResult(0.0, False, name, f"a turn is judged whole: {why}")


__all__ = ["MAX_CALLS", "PairPlan", "call_pivots", "count_failure", "pair_batch", "pair_verdict", "perfect_matching",
           "route", "single_calls"]
