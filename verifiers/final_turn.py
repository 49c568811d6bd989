"""``final_turn``: the decision to stop; a turn is routed on who stopped (:data:`ROUTES`), an answer goes to ``answer``
(``facts`` by default: :mod:`pivot_envs.verifiers.facts`).

A turn where the expert wrote text without a tool call *ends the task or answers the user*
(the paper: "natural-language-only assistant turns are also actions when the benchmark
includes them"). What the task needs there is the stop itself and the facts of the answer:

========================================  ======  =====================================
expert                                    action  reward
========================================  ======  =====================================
stopped (text)                            text    ``answer`` decides (default ``facts``);
                                                  at a state task's done turn, the stop
                                                  rule (:func:`~pivot_envs.verifiers.stop.judge_done`)
stopped (text)                            a call  0: another tool call where the expert stopped
made a call                               text    the world's state decides
                                                  (:mod:`pivot_envs.verifiers.stop`): right
                                                  where the task is already done (or, in an
                                                  information task, the answer carries every
                                                  fact the expert told); else 0
made a call                               a call  ``calls`` decides (the domain's verifier)
========================================  ======  =====================================

The world's state (``world_state``, default on) is read off the pivot's world (``world``, else the
pivot's domain world) with what extraction records of the expert's later turns (``pivot.meta["after"]``):
:class:`~pivot_envs.verifiers.helpers.task_states.TaskStates`. A pivot without a world or that record keeps the rule
before the state was read: a stop where the expert made a call is 0. A world that fails is an error.

A judge replaces the fact rule for free-form answers::

    build_verifier({"name": "final_turn", "calls": "tool_call",
                    "answer": {"name": "judge", "base_url": "http://127.0.0.1:8000/v1", "model": "m"}})
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generator, Sequence

from pivot_envs.actions import parse_action, stray_text
from pivot_envs.types import Action, Message, Pivot, VerifyResult
from pivot_envs.verifiers.base import Verifier, broadcast, register_verifier
from pivot_envs.verifiers.compose import PicklesByConfig, arun_child, build_child, run_child
from pivot_envs.verifiers.helpers.pivot_worlds import PivotWorlds
from pivot_envs.verifiers.helpers.task_states import TaskStates
from pivot_envs.verifiers.helpers.whole_turn import count_failure, pair_batch, pair_verdict, route
from pivot_envs.verifiers.stop import expert_stopped, expert_text, judge_done, judge_stop_at_call, obvious_failure
from pivot_envs.worlds import TaskState, WorldError


ROUTES: dict[tuple[str, str], str] = {
    ("stop", "stop"): "answer",
    ("stop", "call"): "another call",
    ("call", "stop"): "stop rules",
    ("call", "call"): "calls",
}
"""(the expert's turn, the action) -> where ``final_turn`` sends a turn (:func:`turn_kind` names both): ``answer``
(its ``answer`` child, then a second look by the stop rules), ``another call`` (0), ``stop rules`` (the world's
state: :mod:`pivot_envs.verifiers.stop`) or ``calls`` (its ``calls`` child, the turn judged whole).

An action is a *call* when it has tool calls and a *stop* otherwise, whatever its text says: a text-form action
(an SQL query, a patch or a command written as text, not as a tool call) is a stop. Where the expert also wrote
text it goes to ``answer`` (``facts`` by default, which judges it as an answer); where the expert made a call, to
the stop rules. To judge text-form actions by their content, give the verifier that does as ``answer`` (or as
``by_tool``'s ``text``) instead of ``final_turn``'s defaults."""


def turn_kind(tool_calls: object) -> str:
    """``call`` for a turn with tool calls, ``stop`` for a text turn (a text-form action included: see :data:`ROUTES`)."""
    return "call" if tool_calls else "stop"


Plan = Generator[tuple[Verifier, list[Action] | list[Message], list[Pivot]], list[VerifyResult], None]
"""A verification plan: yields ``(child, actions, pivots)`` runs, receives their results."""


@register_verifier("final_turn")
@dataclass
class FinalTurnVerifier(PicklesByConfig, Verifier):
    """Routes on the stop decision (see the module table): both made calls -> ``calls``; the action stopped ->
    the stop rules (the world's state, then ``answer``); the expert stopped and the action made a call -> 0.
    Each child runs once per batch."""

    version = 2  # 2: a turn judged whole; the world refuses calls; stops after the values are known, reading as stops

    calls: Any = "tool_call"
    """Verifier spec for turns where the expert made a tool call."""
    answer: Any = "facts"
    """Verifier spec for turns where the expert stopped with an answer (``facts``, a judge, ...)."""
    world_state: bool = True
    """Judge stops by the world's state (:mod:`pivot_envs.verifiers.stop`); ``False``: the rule before it, a stop
    where the expert made a call is 0 and every answer goes to ``answer``."""
    world: Any = None
    """The world the state is read from (a world spec); ``None``: the pivot's domain world."""
    whole_turn: bool = True
    """Judge a call turn whole (:mod:`pivot_envs.verifiers.helpers.whole_turn`): each call must match a distinct call of the
    expert's turn, or ``turn_effect`` must find the whole turn's effect equal; ``False``: the turn goes to ``calls``
    as it is (how many calls a turn may make is then the child's rule, as NeMo Gym's rows configure it)."""
    stop_judge: Any = None
    """A verifier spec (an LLM judge) that decides a stop where the task is done and the expert's answer reports no
    fact, in place of the stop-language rule (:mod:`pivot_envs.stop_language`); ``None``: the rule."""
    turn_effect: Any = None
    """Verifier spec of a call turn whose calls do not match the expert's one to one (an extra, missing or repeated
    call): it judges the whole turn's effect (terminal: ``exec``, which runs every call). ``None``: such a turn
    fails."""

    _calls: Verifier = field(init=False, repr=False, compare=False)
    _answer: Verifier = field(init=False, repr=False, compare=False)
    _effect: Verifier | None = field(init=False, repr=False, compare=False, default=None)
    _stop_judge: Verifier | None = field(init=False, repr=False, compare=False, default=None)
    _states: TaskStates = field(init=False, repr=False, compare=False)
    _worlds: PivotWorlds = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._calls = build_child(self.calls)
        self._answer = build_child(self.answer)
        self._effect = build_child(self.turn_effect) if self.turn_effect is not None else None
        self._stop_judge = build_child(self.stop_judge) if self.stop_judge is not None else None
        self._states = TaskStates(self.world)
        self._worlds = PivotWorlds(self.world)

    def verify(self, action: Action, pivot: Pivot) -> VerifyResult:
        return self.verify_many([action], [pivot])[0]

    def _split(self, actions: Sequence[Any], pivots: Sequence[Pivot] | Pivot) -> tuple[list[Action], list[Pivot], list[VerifyResult | None]]:
        pivot_list = broadcast(pivots, len(actions))
        parsed = [parse_action(a) for a in actions]
        return parsed, pivot_list, [self._decide_here(a, p) for a, p in zip(parsed, pivot_list)]

    def _decide_here(self, action: Action, pivot: Pivot) -> VerifyResult | None:
        """The verdict of a turn the children do not decide (a stop where the expert made a call, a call where the
        expert stopped), or None: where :data:`ROUTES` sends the turn."""
        where = ROUTES[(turn_kind(pivot.expert.get("tool_calls")), turn_kind(action.tool_calls))]
        if where == "answer":
            return None  # the answer child decides; a failure gets a second look (:meth:`_second_look`)
        if where == "another call":
            return VerifyResult(0.0, False, self.name, "another tool call where the expert stopped and answered")
        if where == "calls":
            return text_after_calls(action, self.name) or self._refused(action, pivot)
        if not self.world_state:
            return judge_stop_at_call(action, pivot, None)
        obvious = obvious_failure(action, pivot)
        if obvious is not None:
            return obvious  # a refusal or an empty answer fails in any state: no replay of the world
        state, error = self._state(pivot)
        return error or judge_stop_at_call(action, pivot, state, self._stop_judge)

    def _refused(self, action: Action, pivot: Pivot) -> VerifyResult | None:
        """The verdict of a turn with a call the pivot's world refuses outright (:meth:`World.refusal`: a command
        longer than the shell takes), or None. The world is asked through its API; a world that fails is an error."""
        spec = self._worlds.spec(pivot)
        if spec is None:
            return None
        try:
            with self._worlds.using(spec) as world:
                for call in action.tool_calls or []:
                    fn = call.get("function") or {}
                    why = world.refusal(str(fn.get("name", "")), fn.get("arguments") or "{}")
                    if why:
                        return VerifyResult(0.0, False, self.name, f"the world refuses the call: {why}")
        except (WorldError, ValueError) as exc:
            return VerifyResult.failure(self.name, f"pivot {pivot.id}: asking the world about the call: {exc}")
        return None

    def _state(self, pivot: Pivot) -> tuple[TaskState | None, VerifyResult | None]:
        """The task's state at ``pivot`` (None without a world), or the error result of a world that failed."""
        try:
            return self._states.get(pivot), None
        except (WorldError, ValueError) as exc:
            return None, VerifyResult.failure(self.name, f"pivot {pivot.id}: reading the task's state in its world: {exc}")

    def _second_look(self, action: Action, pivot: Pivot, result: VerifyResult) -> VerifyResult:
        """An answer the ``answer`` child refused at the expert's own answer turn: right after all where the task
        changed the world and is done there (a bare confirmation is then enough: :func:`judge_done`)."""
        if result.passed or result.error is not None or not self.world_state or obvious_failure(action, pivot):
            return result
        state, error = self._state(pivot)
        if error is not None:
            return error
        return judge_done(action, pivot, expert_text(pivot), self._stop_judge) if _done_state(state) else result

    def _plan(self, parsed: list[Action], pivots: list[Pivot], out: list[VerifyResult | None]) -> Plan:
        """Asks for ``(child, actions, pivots)`` runs and fills ``out``: answers to ``answer`` (with a second look),
        call turns to ``calls`` one call at a time or pair by pair, and turns that do not match one to one to
        ``turn_effect`` (:mod:`pivot_envs.verifiers.helpers.whole_turn`)."""
        answers = [i for i, r in enumerate(out) if r is None and expert_stopped(pivots[i])]
        if answers:
            results = yield self._answer, [parsed[i] for i in answers], [pivots[i] for i in answers]
            for i, result in zip(answers, results):
                out[i] = self._second_look(parsed[i], pivots[i], result)
        calls = [i for i, r in enumerate(out) if r is None]
        routes = {i: route(parsed[i], pivots[i]) if self.whole_turn else "one" for i in calls}
        one = [i for i in calls if routes[i] == "one"]
        if one:
            results = yield self._calls, [parsed[i] for i in one], [pivots[i] for i in one]
            for i, result in zip(one, results):
                out[i] = result
        whole = [i for i in calls if routes[i] == "whole"]
        unmatched: dict[int, str] = {}
        paired = [(i, parsed[i], pivots[i]) for i in calls if routes[i] == "pairs"]
        if paired:
            actions, pair_pivots, plans = pair_batch(paired)
            results = yield self._calls, actions, pair_pivots
            for plan in plans:
                verdict, why = pair_verdict(plan, results, self.name)
                if verdict is None:
                    whole.append(plan.item)
                    unmatched[plan.item] = why
                else:
                    out[plan.item] = verdict
        if whole and self._effect is not None:
            results = yield self._effect, [parsed[i] for i in whole], [pivots[i] for i in whole]
            for i, result in zip(whole, results):
                out[i] = result
        for i in whole:
            if out[i] is None:
                out[i] = count_failure(parsed[i], pivots[i], self.name, unmatched.get(i, ""))

    def verify_many(self, actions: Sequence[Any], pivots: Sequence[Pivot] | Pivot) -> list[VerifyResult]:
        parsed, pivot_list, out = self._split(actions, pivots)
        plan = self._plan(parsed, pivot_list, out)
        try:
            child, batch, batch_pivots = next(plan)
            while True:
                child, batch, batch_pivots = plan.send(run_child(child, batch, batch_pivots))
        except StopIteration:
            pass
        return self._complete(out)

    async def averify_many(self, actions: Sequence[Any], pivots: Sequence[Pivot] | Pivot) -> list[VerifyResult]:
        parsed, pivot_list, out = self._split(actions, pivots)
        plan = self._plan(parsed, pivot_list, out)
        try:
            child, batch, batch_pivots = next(plan)
            while True:
                child, batch, batch_pivots = plan.send(await arun_child(child, batch, batch_pivots))
        except StopIteration:
            pass
        return self._complete(out)

    def _complete(self, out: list[VerifyResult | None]) -> list[VerifyResult]:
        """Every item's result; one a child left out is an error, never a dropped or shifted row."""
        return [r if r is not None else VerifyResult.failure(self.name, "a child verifier returned no result for this item")
                for r in out]

    async def averify(self, action: Action, pivot: Pivot) -> VerifyResult:
        return (await self.averify_many([action], [pivot]))[0]


def text_after_calls(action: Action, name: str) -> VerifyResult | None:
    """A call turn whose text goes on after its calls (a stray tag, tool output the model invented, a call cut
    mid-way): the children would score its calls alone. None otherwise. (How many calls a turn may make is the
    children's rule: ``tool_call`` scores extra calls by its config.)"""
    stray = stray_text(action.text)
    if stray:
        return VerifyResult(0.0, False, name, f"text after the tool call ({stray[:60]!r}): a turn ends with its calls")
    return None


def _done_state(state: TaskState | None) -> bool:
    """A state task whose world already holds the expert's final state."""
    return state is not None and state.changes_state and state.done
