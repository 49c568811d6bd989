"""Stopping judged by the world's state: the rules ``final_turn`` applies to a text action (a stop).

A stop ends the agent's work with an answer. Whether that is right depends on where the task stands
(:class:`~pivot_envs.worlds.TaskState`, read off the pivot's world) and on what the answer tells:

=======================================  ============================================================
the task at the pivot                    a stop is right when the answer ...
=======================================  ============================================================
state task, done (the world already has  is no refusal, states nothing the conversation did not give,
the expert's final state)                and carries the facts of the expert's final answer that the
                                         tools had returned by then (a bare "Done." passes where the
                                         expert's answer reports no such fact): :func:`judge_done`
state task, not done                     never: work is left (:func:`judge_stop_at_call`)
information task (the expert changed     carries every fact of the expert's final answer, each already
nothing)                                 returned by a tool by then, and states nothing that neither the
                                         conversation nor that answer gave; where the expert's answer
                                         reports no fact, the expert went on to look things up, so a stop
                                         before its last call is wrong: :func:`judge_information`
no world or no record of the expert's    never where the expert made a call (the rule before the
later turns                              world's state was read)
=======================================  ============================================================

Where the expert itself stopped, only the first row changes the answer's rule (``final_turn`` leaves the other
rows to its ``answer`` verifier): at the expert's own final turn of a state task, task success is the world's
state alone, so the answer is not held to 60 % of the expert's words.
"""

from __future__ import annotations

from typing import Sequence

from pivot_envs.facts import answer_facts, conversation_text, facts_given, ungrounded
from pivot_envs.refusal import is_refusal
from pivot_envs.types import Action, Pivot, VerifyResult, content_text
from pivot_envs.worlds import TaskState

STOP = "stop"
"""The verifier name of a verdict these rules decided by the world's state (what accepted it: the state)."""


def _fail(reason: str, name: str = STOP) -> VerifyResult:
    return VerifyResult(0.0, False, name, reason)


def _answer_problem(answer: str, sources: Sequence[str], expert_answer: str) -> str | None:
    """Why ``answer`` cannot end the task whatever its facts: empty, a refusal (where the expert did not refuse),
    or a value nothing gave."""
    if not answer:
        return "empty answer"
    if is_refusal(answer) and not is_refusal(expert_answer):
        return "a refusal"
    foreign = ungrounded(answer, sources)
    if foreign:
        return f"the answer states {', '.join(foreign[:3])}, which nothing in the conversation gave"
    return None


def obvious_failure(action: Action, pivot: Pivot) -> VerifyResult | None:
    """The verdict of a stop that fails whatever the world's state (empty, a refusal, a value nothing gave), or None:
    such a stop needs no replay of the world."""
    after = pivot.meta.get("after") or {}
    expert_answer = expert_text(pivot) if not pivot.expert.get("tool_calls") else str(after.get("answer") or "")
    problem = _answer_problem(action.content.strip(), [*conversation_text(pivot.context), expert_answer], expert_answer)
    return _fail(problem, "final_turn") if problem else None


def judge_done(action: Action, pivot: Pivot, expert_answer: str) -> VerifyResult:
    """A stop where the task's state is already the expert's final one: right unless the answer is a refusal,
    states a value nothing gave, or leaves out a fact of ``expert_answer`` that a tool had returned by now."""
    answer = action.content.strip()
    problem = _answer_problem(answer, [*conversation_text(pivot.context), expert_answer], expert_answer)
    if problem:
        return _fail(f"{problem} (the task was done in the world's state)")
    facts = answer_facts(pivot.context, expert_answer)
    ok, missing = facts_given(answer, facts)
    if not ok:
        return _fail(f"the task was done in the world's state, but the answer leaves out {len(missing)} of the "
                     f"{len(facts)} facts the expert reported: {', '.join(missing[:5])}")
    told = f"and carries the {len(facts)} facts the expert reported" if facts else \
        "and the expert's answer reports nothing a tool returned"
    return VerifyResult(1.0, True, STOP, f"stopped where the world already holds the task's final state, {told}")


def judge_stop_at_call(action: Action, pivot: Pivot, state: TaskState | None) -> VerifyResult:
    """A stop where the expert made a tool call (see the module table)."""
    after = pivot.meta.get("after") or {}
    if state is None:
        return _fail("stopped (no tool call) where the expert made a tool call (no world state to tell whether "
                     "the task was done)", "final_turn")
    if state.changes_state:
        if state.done:
            return judge_done(action, pivot, str(after.get("answer") or ""))
        return _fail("stopped with work left: the world is not yet in the state the expert's calls lead to")
    return judge_information(action, pivot, after)


def judge_information(action: Action, pivot: Pivot, after: dict) -> VerifyResult:
    """A stop in an information task where the expert made a call: every fact of the expert's final answer
    (``after["facts"]``) must have been returned by a tool by now (none ``pending``) and be in the answer, which
    states nothing that neither the conversation nor the expert's final answer gave."""
    facts, pending = list(after.get("facts") or []), list(after.get("pending") or [])
    if not facts:
        return _fail("stopped where the expert went on to look things up (an information task whose expert "
                     "answer reports no fact to check a stop against)", "facts")
    if pending:
        return _fail(f"stopped before the expert had found what it told the user: {len(pending)} of {len(facts)} "
                     f"facts of its answer came from later tool results ({', '.join(pending[:3])})", "facts")
    answer = action.content.strip()
    final_answer = str(after.get("answer") or "")
    problem = _answer_problem(answer, [*conversation_text(pivot.context), final_answer], final_answer)
    if problem:
        return _fail(f"{problem} (an information task, stopped where the expert made a call)", "facts")
    ok, missing = facts_given(answer, facts)
    if not ok:
        return _fail(f"stopped before the expert had found what it told the user: {len(missing)} of "
                     f"{len(facts)} facts missing: {', '.join(missing[:5])}", "facts")
    return VerifyResult(1.0, True, "facts", f"the answer already carries the {len(facts)} facts the expert told "
                        "the user (an information task)")


def expert_text(pivot: Pivot) -> str:
    """The text of the expert's own answer at ``pivot``."""
    return content_text(pivot.expert.get("content")).strip()
