"""Stopping judged by the world's state: the rules ``final_turn`` applies to a text action (a stop).

The ``stop`` verdict is declared here (:data:`STOP`): the name these rules' passing verdicts carry, a verdict that no
verifier builds, which reports count as accepted by the world's ``state`` (:mod:`pivot_envs.verifiers.accepted_by`).

A stop ends the agent's work with an answer. Whether that is right depends on where the task stands
(:class:`~pivot_envs.worlds.TaskState`, read off the pivot's world) and on what the answer tells:

=======================================  ============================================================
the task at the pivot                    a stop is right when the answer ...
=======================================  ============================================================
state task, done (the world already has  comes after the expert found every value its final answer
the expert's final state)                reports, is no refusal, states nothing the conversation did not
                                         give, adds nothing wrong to that answer, and carries its facts;
                                         where the expert's answer reports no fact, it must read as a stop
                                         (:mod:`pivot_envs.stop_language`: no gibberish, command, failure
                                         claim or words before a call) or say what that answer says:
                                         :func:`judge_done`
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

import dataclasses
from typing import Sequence

from pivot_envs.additions import added_problem
from pivot_envs.facts import answer_facts, conversation_text, coverage, facts_given, ungrounded
from pivot_envs.refusal import is_refusal
from pivot_envs.stop_language import confirms, stop_problem
from pivot_envs.types import Action, Pivot, VerifyResult, content_text
from pivot_envs.verifiers.base import Verifier
from pivot_envs.verifiers.declaration import declare
from pivot_envs.worlds import TaskState

STOP = declare("stop", accepted_by="state", module=__name__,
               doc="A stop where the world already holds the task's final state and the answer carries what the "
                   "expert's answer told: the verdict of ``final_turn``'s stop rules, not a verifier one builds").name
"""The verifier name of a verdict these rules decided by the world's state (what accepted it: the state)."""


def _fail(reason: str, name: str = STOP) -> VerifyResult:
    return VerifyResult(0.0, False, name, reason)


COVERAGE_SHARE = 0.6
"""A stop that says 60 % of what the expert's fact-less final answer says reads as that answer."""


def _answer_problem(answer: str, sources: Sequence[str], expert_answer: str, pivot: Pivot | None = None) -> str | None:
    """Why ``answer`` cannot end the task whatever its facts: empty, a refusal (where the expert did not refuse),
    a value nothing gave, or something wrong it adds to ``expert_answer`` (:func:`pivot_envs.additions.added_problem`,
    with ``pivot``'s conversation)."""
    if not answer:
        return "empty answer"
    if is_refusal(answer) and not is_refusal(expert_answer):
        return "a refusal"
    foreign = ungrounded(answer, sources)
    if foreign:
        return f"the answer states {', '.join(foreign[:3])}, which nothing in the conversation gave"
    if pivot is not None and expert_answer:
        return added_problem(answer, expert_answer, pivot.context)
    return None


def obvious_failure(action: Action, pivot: Pivot) -> VerifyResult | None:
    """The verdict of a stop that fails whatever the world's state (empty, a refusal, a value nothing gave), or None:
    such a stop needs no replay of the world."""
    after = pivot.meta.get("after") or {}
    expert_answer = expert_text(pivot) if not pivot.expert.get("tool_calls") else str(after.get("answer") or "")
    problem = _answer_problem(action.content.strip(), [*conversation_text(pivot.context), expert_answer], expert_answer,
                              pivot)
    return _fail(problem, "final_turn") if problem else None


def judge_done(action: Action, pivot: Pivot, expert_answer: str, judge: Verifier | None = None) -> VerifyResult:
    """A stop where the task's state is already the expert's final one: right unless the answer is a refusal,
    states a value nothing gave, adds something wrong to ``expert_answer``, or leaves out a fact of it that a tool had
    returned by now; where ``expert_answer`` reports no fact, the stop must read as one (:func:`bare_stop`)."""
    answer = action.content.strip()
    problem = _answer_problem(answer, [*conversation_text(pivot.context), expert_answer], expert_answer, pivot)
    if problem:
        return _fail(f"{problem} (the task was done in the world's state)")
    facts = answer_facts(pivot.context, expert_answer)
    if not facts:
        return bare_stop(action, pivot, expert_answer, judge)
    ok, missing = facts_given(answer, facts)
    if not ok:
        return _fail(f"the task was done in the world's state, but the answer leaves out {len(missing)} of the "
                     f"{len(facts)} facts the expert reported: {', '.join(missing[:5])}")
    problem = stop_problem(answer, expert_answer)
    if problem and "command" not in problem and "before a call" not in problem:  # a fact-carrying answer may name paths
        return _fail(f"{problem} (the task was done in the world's state)")
    return VerifyResult(1.0, True, STOP, f"stopped where the world already holds the task's final state, and "
                        f"carries the {len(facts)} facts the expert reported")


def bare_stop(action: Action, pivot: Pivot, expert_answer: str, judge: Verifier | None = None) -> VerifyResult:
    """A stop where the task is done and the expert's final answer reports no fact: right when it reads as a stop
    (:mod:`pivot_envs.stop_language`) or says what that answer says (:data:`COVERAGE_SHARE` of its content words),
    breaks none of the stop-language rules, and states no specific value that neither the task, the calls made (what
    the conversation said outside tool results) nor the expert's answer names; ``judge`` (an LLM judge) decides
    instead when given."""
    answer = action.content.strip()
    if judge is not None:
        target = dataclasses.replace(pivot, expert={"role": "assistant", "content": expert_answer or "Done."})
        verdict = judge.safe_verify(action, target)
        return dataclasses.replace(verdict, reason=f"a stop where the task was done, judged: {verdict.reason}")
    problem = stop_problem(answer, expert_answer)
    if problem:
        return _fail(f"the task was done in the world's state, but the stop is {problem}")
    told = conversation_text([m for m in pivot.context if m.get("role") != "tool"])
    foreign = ungrounded(answer, [expert_answer, *told])
    if foreign:
        return _fail(f"the task was done, but the stop states {', '.join(foreign[:3])}, which neither the task, the "
                     "calls made nor the expert's answer name (another task's answer)")
    share, _ = coverage(answer, expert_answer) if expert_answer else (0.0, [])
    if share >= COVERAGE_SHARE or confirms(answer):
        why = "says what the expert's answer says" if share >= COVERAGE_SHARE else "reads as a stop"
        return VerifyResult(1.0, True, STOP, f"stopped where the world already holds the task's final state; the "
                            f"expert's answer reports nothing a tool returned, and this one {why}")
    return _fail("the task was done in the world's state, but the text does not read as a stop: no word of a "
                 "confirmation or a closing, and little of what the expert's answer says")


def judge_stop_at_call(action: Action, pivot: Pivot, state: TaskState | None, judge: Verifier | None = None
                       ) -> VerifyResult:
    """A stop where the expert made a tool call (see the module table)."""
    after = pivot.meta.get("after") or {}
    if state is None:
        return _fail("stopped (no tool call) where the expert made a tool call (no world state to tell whether "
                     "the task was done)", "final_turn")
    if state.changes_state:
        if not state.done:
            return _fail("stopped with work left: the world is not yet in the state the expert's calls lead to")
        pending = list(after.get("pending") or [])
        if pending:
            return _fail(f"stopped before the values the user asked for were known: {len(pending)} facts of the "
                         f"expert's final answer came from later tool results ({', '.join(pending[:3])})")
        return judge_done(action, pivot, str(after.get("answer") or ""), judge)
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
    problem = _answer_problem(answer, [*conversation_text(pivot.context), final_answer], final_answer, pivot)
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


def expert_stopped(pivot: Pivot) -> bool:
    """The expert wrote text without a tool call at this turn (it ended the task or answered)."""
    return not pivot.expert.get("tool_calls")
