"""What the harness endpoint keeps of one rollout, and the error it answers a bad request with.

A :class:`HarnessRollout` is one task (or pivot) played by an external harness: its episode env (the world the
harness acts on, the task it is scored on), what it opened with, every model call captured
(:class:`~pivot_envs.harness.capture.CapturedCall`) and every tool call the harness made
(:class:`ToolEvent`), in arrival order. :class:`HarnessError` is a refused request: an HTTP status, the
field that was wrong and why.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from pivot_envs.harness.capture import CapturedCall
from pivot_envs.types import Message

__all__ = ["CUT_TURN_LIMIT", "CUT_USER_ENDED", "HarnessError", "HarnessRollout", "PREFIX", "STATUSES", "ToolEvent",
           "new_rollout_id"]

PREFIX = "/harness/rollouts"
"""Where the endpoint's routes live (:mod:`pivot_envs.harness.http`)."""
STATUSES = ("open", "finished", "abandoned", "failed")
CUT_TURN_LIMIT = "turn_limit"
"""``rollout.cut`` when the harness asked for a model call past the rollout's turn limit (the episode is
truncated, as the episode env truncates it)."""
CUT_USER_ENDED = "user_ended"
"""``rollout.cut`` when the task's user ended the conversation (the episode is over, as in the episode env)."""


class HarnessError(Exception):
    """A request the endpoint refuses: ``status`` is the HTTP status, ``field`` what was wrong."""

    def __init__(self, status: int, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.status, self.field, self.message = status, field, message

    def detail(self) -> dict[str, str]:
        return {"field": self.field, "message": self.message}


@dataclass
class ToolEvent:
    """One tool call the harness made (through MCP), and what it got back.

    ``call_index``/``call_id``: the model call (and its tool call) it matched; ``None``: the harness's own.
    ``user``: a message to the task's user (:mod:`pivot_envs.harness.user`): ``content`` is then the user's
    reply as the tool answered it, ``reply`` the user's own words (``None`` when the user said nothing) and
    ``user_ended`` whether the user ended the conversation.
    """

    seq: int
    name: str
    arguments: Any
    content: str
    error: bool
    call_index: int | None = None
    call_id: str | None = None
    user: bool = False
    reply: str | None = None
    user_ended: bool = False


@dataclass
class HarnessRollout:
    """One rollout: its env (world), what it opened with, the captured calls and the tool events.

    ``tools`` are what the harness was given (the world's tools, plus the user tool for a task with a user);
    ``world_tools`` the world's alone. ``cut``: why the endpoint ended the episode before the harness did
    (:data:`CUT_TURN_LIMIT`, :data:`CUT_USER_ENDED`), ``None`` when the harness ended it. ``harness``: how the
    harness process ended, when its runner reported it (``exit_code``, ``stderr_tail``).
    """

    id: str
    env: Any
    env_key: str
    task_id: str
    pivot_id: str | None
    opening: list[Message]
    tools: list[dict[str, Any]]
    world_tools: list[dict[str, Any]]
    max_turns: int
    user: Any = None
    created: float = field(default_factory=time.monotonic)
    last_active: float = field(default_factory=time.monotonic)
    status: str = "open"
    calls: list[CapturedCall] = field(default_factory=list)
    events: list[ToolEvent] = field(default_factory=list)
    call_seq: list[int] = field(default_factory=list)
    seq: int = 0
    in_flight: int = 0
    truncated: bool = False
    cut: str | None = None
    closing_answers: int = 0
    error: str | None = None
    reason: str | None = None
    harness: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    lock: threading.RLock = field(default_factory=threading.RLock)

    def touch(self) -> None:
        self.last_active = time.monotonic()

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq

    @property
    def ended(self) -> bool:
        """The episode is over for the endpoint (turn limit, or the user ended it): no more model or tool calls
        reach the policy or the world."""
        return self.cut is not None


def new_rollout_id() -> str:
    """A fresh rollout id tagged with this process (``w<pid>-<hex>``, the service's id convention)."""
    return f"w{os.getpid()}-{uuid.uuid4().hex[:24]}"
