"""Where a task stands at a pivot, read off the world: has the expert's work already been done?

A task **changes state** when the expert's tool calls leave the world with another digest than the task's
start (a file written, a booking made); otherwise it is an *information* task (the expert looked things up and
told the user). At a pivot of a state task, the task is **done** when the world's digest there (the start plus
the context's calls) already equals the digest after every call of the expert's: the expert's later calls
(the checks it made after its last write) change nothing the success rule compares. Stopping there loses
nothing of the task's state (:mod:`pivot_envs.verifiers.final_turn`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from pivot_envs.types import Message
from pivot_envs.worlds.base import World, WorldTask, context_calls


@dataclass(frozen=True)
class TaskState:
    """A task's state at a pivot: ``changes_state`` (the expert's calls change the world's digest) and ``done``
    (the digest at the pivot is already the expert's final one)."""

    changes_state: bool
    done: bool


def task_state(world: World, task: WorldTask, context: Sequence[Message], rest: Sequence[Message]) -> TaskState:
    """The :class:`TaskState` at the pivot whose ``context`` is given, in ``world`` (started afresh): the start's
    digest, the pivot's (the context's calls replayed) and the final one (``rest``, the expert's assistant turns
    from the pivot's on, executed). Raises :class:`~pivot_envs.worlds.WorldError` when the world fails."""
    world.start(task)
    start = world.digest()
    for name, arguments in context_calls(context):
        world.call(name, arguments)
    now = world.digest()
    for message in rest:
        world.execute(message)
    final = world.digest()
    return TaskState(changes_state=final != start, done=now == final)
