"""What the domain's world says about a case, independent of any verifier.

The labels of :mod:`pivot_envs.redteam` never come from a verifier's comparisons. Where a rule alone cannot tell
whether a case is right, the domain's world does, through its public API (:class:`~pivot_envs.worlds.World`) and
the episode API (:func:`~pivot_envs.episodes.tasks.replay_expert`, the domain's success rules):

* :meth:`Oracle.where`: where the task stands at a pivot: does it change the world, is the world already in the
  expert's final state, which facts of the expert's final answer had a tool returned by then;
* :meth:`Oracle.turn`: the world's digest and the tool results after a turn's calls are executed at the pivot, so
  a maker can keep an attack only where it does something else than the expert's turn (a repeated write that
  appends a second line, not an idempotent ``mkdir -p``);
* :meth:`Oracle.episode`: the episode replayed to its end with the case in the expert's place (the case's turn,
  then the expert's later calls and final answer, or the case's text as the final answer) and judged by the
  domain's success rules;
* :meth:`Oracle.call`: one tool call's result at the pivot (a search's results, a command's output).

World replays are cached per pivot and message, so families that ask the same question run the world once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Sequence

from pivot_envs.episodes.policy import SuccessPolicy
from pivot_envs.episodes.tasks import ExpertOutcome, replay_expert, world_task
from pivot_envs.facts import answer_facts
from pivot_envs.types import Message, Pivot, Trajectory, content_text
from pivot_envs.worlds import ToolResult, World, build_world


@dataclass(frozen=True)
class Where:
    """Where a task stands at a pivot (read off the world).

    Attributes:
        changes_state: the expert's calls change the world (a state task), else an information task.
        done: the world at the pivot already holds the expert's final state.
        final: the expert's final answer (``None``: the trajectory ends with a call).
        final_facts: the facts of that answer (values a tool returned that it repeats).
        pending: those of them no tool had returned before the pivot (the expert found them later).
    """

    changes_state: bool
    done: bool
    final: str | None
    final_facts: tuple[str, ...]
    pending: tuple[str, ...]

    @property
    def bare(self) -> bool:
        """The expert's final answer reports no fact (a bare confirmation)."""
        return not self.final_facts

    @property
    def ready(self) -> bool:
        """A stop here can be right: a state task already done, or an information task whose answer's facts the
        tools had all returned; and nothing the final answer reports is still to be found."""
        if self.pending:
            return False
        return self.done if self.changes_state else bool(self.final_facts)


@dataclass(frozen=True)
class Turn:
    """What a turn's calls did at the pivot: the world's digest after them, their results (normalised as the world
    compares them, and as returned) and whether each was an error."""

    digest: str
    results: tuple[str, ...]
    errors: tuple[bool, ...]
    raw: tuple[str, ...] = ()


class Oracle:
    """World-side answers about the cases of one domain (see the module docstring).

    Args:
        world: the domain's world spec (``None``: no world; every question needing one returns ``None``).
        tasks: the trajectories the pivots were cut from, by id.
        domain: the task domain for :func:`~pivot_envs.episodes.tasks.world_task` (``None``: an MCP task).
        policy: the success policy of :meth:`episode` (``None``: the domain's).
    """

    def __init__(self, world: Any, tasks: dict[str, Trajectory], domain: str | None,
                 policy: SuccessPolicy | None = None) -> None:
        self.world_spec = world
        self.tasks = tasks
        self.domain = domain
        self.policy = policy or SuccessPolicy.for_domain(domain)
        self._world: World | None = None
        self._outcomes: dict[str, ExpertOutcome] = {}
        self._turns: dict[str, Turn] = {}
        self._wheres: dict[str, Where | None] = {}
        self._calls: dict[str, ToolResult | None] = {}
        self._trees: dict[str, dict[str, str | None]] = {}

    # ------------------------------------------------------------------ plumbing

    @property
    def world(self) -> World:
        if self._world is None:
            self._world = build_world(self.world_spec)
        return self._world

    def task(self, pivot: Pivot) -> Trajectory | None:
        """The trajectory ``pivot`` was cut from, or ``None``."""
        return self.tasks.get(str(pivot.meta.get("trajectory_id") or ""))

    def outcome(self, task: Trajectory) -> ExpertOutcome:
        """The expert's outcome on ``task`` (its start and final digests), replayed once."""
        if task.id not in self._outcomes:
            self._outcomes[task.id] = replay_expert(self.world, task, self.domain)
        return self._outcomes[task.id]

    def at_pivot(self, pivot: Pivot, task: Trajectory) -> None:
        """The world in the state at ``pivot`` (the task started, the context's calls replayed)."""
        self.world.at_pivot(world_task(task, self.domain), pivot.context)

    def close(self) -> None:
        if self._world is not None:
            self._world.close()
            self._world = None

    # ------------------------------------------------------------------ questions

    def where(self, pivot: Pivot) -> Where | None:
        """Where the task stands at ``pivot``; ``None`` without a world or a task."""
        if pivot.id in self._wheres:
            return self._wheres[pivot.id]
        task = self.task(pivot)
        where = None
        if task is not None and self.world_spec is not None:
            outcome = self.outcome(task)
            self.at_pivot(pivot, task)
            final, last = _final_answer(task)
            facts = tuple(answer_facts(task.messages[:last], final)) if final else ()
            found = set(answer_facts(pivot.context, final)) if final else set()
            where = Where(changes_state=not outcome.read_only, done=self.world.digest() == outcome.expert_digest,
                          final=final, final_facts=facts, pending=tuple(f for f in facts if f not in found))
        self._wheres[pivot.id] = where
        return where

    def turn(self, pivot: Pivot, message: Message) -> Turn | None:
        """The world after ``message``'s calls are executed at ``pivot`` (``None`` without a world or a task)."""
        task = self.task(pivot)
        if task is None or self.world_spec is None:
            return None
        key = pivot.id + "\0" + json.dumps(message.get("tool_calls") or [], sort_keys=True)
        if key not in self._turns:
            self.at_pivot(pivot, task)
            done = self.world.execute(message)
            self._turns[key] = Turn(self.world.digest(), tuple(self.world.normalize_output(r.content) for _, r in done),
                                    tuple(r.error for _, r in done), tuple(r.content for _, r in done))
        return self._turns[key]

    def same_turn(self, pivot: Pivot, message: Message) -> bool | None:
        """Whether ``message``'s calls leave the world as the expert's turn does and return the same results (as a
        multiset), or ``None`` without a world."""
        mine, expert = self.turn(pivot, message), self.turn(pivot, pivot.expert)
        if mine is None or expert is None:
            return None
        return mine.digest == expert.digest and sorted(mine.results) == sorted(expert.results)

    def changes_other(self, pivot: Pivot, message: Message) -> bool | None:
        """Whether ``message``'s calls leave the world in another state than the expert's turn (``None``: no world)."""
        mine, expert = self.turn(pivot, message), self.turn(pivot, pivot.expert)
        if mine is None or expert is None:
            return None
        return mine.digest != expert.digest

    def call(self, pivot: Pivot, name: str, arguments: dict[str, Any]) -> ToolResult | None:
        """One call's result at ``pivot`` (``None`` without a world or a task)."""
        task = self.task(pivot)
        if task is None or self.world_spec is None:
            return None
        key = pivot.id + "\0" + name + "\0" + json.dumps(arguments, sort_keys=True)
        if key not in self._calls:
            self.at_pivot(pivot, task)
            self._calls[key] = self.world.call(name, arguments)
        return self._calls[key]

    def tree(self, pivot: Pivot) -> dict[str, str | None]:
        """The work tree's regular files at ``pivot`` (path -> text; ``None`` for a binary file), for worlds that
        have one (``files()``: terminal, swe); ``{}`` otherwise."""
        if pivot.id in self._trees:
            return self._trees[pivot.id]
        task = self.task(pivot)
        files = getattr(self.world, "files", None) if task is not None and self.world_spec is not None else None
        if files is None or task is None:
            return {}
        self.at_pivot(pivot, task)
        out: dict[str, str | None] = {}
        for path, data in sorted(files().items()):
            if isinstance(data, str):
                out[path] = data
                continue
            try:
                out[path] = data.decode("utf-8")
            except UnicodeDecodeError:
                out[path] = None
        self._trees[pivot.id] = out
        return out

    def episode(self, pivot: Pivot, message: Message) -> bool | None:
        """Whether the episode succeeds by the domain's success rules with ``message`` in the expert's place at
        ``pivot``: a turn with calls is followed by the expert's later turns (calls executed, then its final
        answer); a text ends the episode as its final answer. ``None`` without a world or a task."""
        task = self.task(pivot)
        if task is None or self.world_spec is None:
            return None
        outcome = self.outcome(task)
        self.at_pivot(pivot, task)
        messages = list(pivot.context)
        later = [message] + (_later_turns(task, pivot) if message.get("tool_calls") else [])
        for turn in later:
            messages.append(turn)
            for call, result in self.world.execute(turn):
                messages.append(result.message(str(call.get("id") or ""), call["function"]["name"]))
        verdict = self.policy.judge(messages, task, world=self.world, digest=self.world.digest(), outcome=outcome,
                                    truncated=False)
        return verdict.success


def _final_answer(task: Trajectory) -> tuple[str | None, int]:
    """The expert's final answer (its last turn, when that made no call) and that turn's index."""
    last = max(i for i, m in enumerate(task.messages) if m.get("role") == "assistant")
    message = task.messages[last]
    return (None if message.get("tool_calls") else content_text(message.get("content"))), last


def _later_turns(task: Trajectory, pivot: Pivot) -> list[Message]:
    """The expert's assistant turns after ``pivot``'s turn (calls and the final answer)."""
    turn = int(pivot.meta.get("turn", -1))
    if turn < 0:
        return []
    return [m for m in task.messages[turn + 1:] if m.get("role") == "assistant"]


def expert_calls(message: Message) -> list[tuple[str, dict[str, Any]]]:
    """``(name, arguments)`` of every call of ``message`` whose arguments are a JSON object."""
    out = []
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        try:
            args = json.loads(fn.get("arguments") or "{}") if isinstance(fn.get("arguments"), str) else fn.get("arguments")
        except json.JSONDecodeError:
            continue
        if isinstance(args, dict):
            out.append((str(fn.get("name", "")), args))
    return out


def tool_outputs(context: Sequence[Message]) -> list[str]:
    """The text of every tool result in ``context``."""
    return [content_text(m.get("content")) for m in context if m.get("role") == "tool"]
