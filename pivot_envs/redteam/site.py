"""What a family's maker sees at one pivot: the pivot, its task, the other tasks' actions, and the oracle."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from pivot_envs.redteam.oracle import Oracle, Where, expert_calls
from pivot_envs.types import Message, Pivot, Trajectory, content_text, stable_hash


def call(name: str, arguments: dict[str, Any] | str, call_id: str = "call_rt1") -> dict[str, Any]:
    """One OpenAI-format tool call."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


def calls_message(calls: list[dict[str, Any]], content: str | None = None) -> Message:
    """An assistant turn making ``calls`` (ids renumbered so that each is distinct)."""
    numbered = [{**c, "id": f"call_rt{i + 1}"} for i, c in enumerate(calls)]
    return {"role": "assistant", "content": content, "tool_calls": numbered}


def one_call(name: str, arguments: dict[str, Any] | str) -> Message:
    """An assistant turn making one call."""
    return calls_message([call(name, arguments)])


def text(content: str) -> Message:
    """An assistant turn that stops with ``content``."""
    return {"role": "assistant", "content": content}


@dataclass
class Others:
    """What the domain's other tasks did: their calls and final answers (for "another task's action")."""

    calls: dict[str, list[tuple[str, dict[str, Any]]]] = field(default_factory=dict)
    answers: dict[str, str] = field(default_factory=dict)

    def calls_besides(self, task_id: str) -> list[tuple[str, dict[str, Any]]]:
        return [c for tid, calls in sorted(self.calls.items()) if tid != task_id for c in calls]

    def answers_besides(self, task_id: str) -> list[str]:
        return [a for tid, a in sorted(self.answers.items()) if tid != task_id and a]


@dataclass
class Site:
    """One pivot as a maker sees it.

    Attributes:
        pivot: the pivot.
        oracle: world-side answers (:class:`~pivot_envs.redteam.oracle.Oracle`).
        others: the other tasks' calls and answers.
        tools: the names of the pivot's tools.
    """

    pivot: Pivot
    oracle: Oracle
    others: Others
    tools: set[str]

    @cached_property
    def rng(self) -> random.Random:
        """A generator seeded by the pivot's id alone (the same cases on every run, in any order)."""
        return random.Random(int(stable_hash("redteam", self.pivot.id), 16) % (2**63))

    @property
    def task_id(self) -> str:
        return str(self.pivot.meta.get("trajectory_id") or "")

    @cached_property
    def task(self) -> Trajectory | None:
        return self.oracle.task(self.pivot)

    @cached_property
    def where(self) -> Where | None:
        return self.oracle.where(self.pivot)

    @cached_property
    def calls(self) -> list[tuple[str, dict[str, Any]]]:
        """The expert's calls at the pivot, parsed."""
        return expert_calls(self.pivot.expert)

    @property
    def expert_text(self) -> str:
        return content_text(self.pivot.expert.get("content")).strip()

    def expert_with(self, *extra: dict[str, Any], before: bool = False) -> Message:
        """The expert's turn with ``extra`` calls after (or before) its own."""
        own = list(self.pivot.expert.get("tool_calls") or [])
        return calls_message(list(extra) + own if before else own + list(extra))

    def shell_command(self) -> str | None:
        """The expert's command, where its turn is one shell call (``bash``-style, a ``command`` argument)."""
        if len(self.calls) == 1 and isinstance(self.calls[0][1].get("command"), str):
            return self.calls[0][1]["command"]
        return None
