"""OpenAI chat JSONL: one trajectory per line.

A row is ``{"messages": [...], "tools": [...], "reward": number, "meta": {...},
"fixture": {...}}``; only ``messages`` is required. Any other top-level key
(``id``, ``task_id``, ...) is kept in ``meta`` (an explicit ``meta`` entry of
the same name wins). The writer emits :meth:`Trajectory.to_dict`, so
Trajectory -> JSONL -> Trajectory is lossless.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from pivot_envs.formats.validate import RowError, check_alternatives, check_messages, check_reward, check_tools, require_dict
from pivot_envs.jsonl import ReadReport, read_rows, write_jsonl
from pivot_envs.types import Fixture, Trajectory

KNOWN_KEYS = ("messages", "tools", "reward", "meta", "fixture")
"""Top-level keys with a place in :class:`Trajectory`; others go into ``meta``."""


def trajectory_from_row(row: Any) -> Trajectory:
    """Validate one OpenAI chat row and build a Trajectory (raises :class:`RowError`)."""
    row = require_dict(row, "<row>", "a JSON object with a 'messages' list")
    if "messages" not in row:
        raise RowError("messages", "missing required field", 'each row needs "messages": [{"role": ..., "content": ...}, ...]')
    messages = check_messages(row["messages"])
    tools = check_tools(row.get("tools") or [])
    reward = check_reward(row.get("reward"))
    meta = dict(require_dict(row.get("meta") or {}, "meta"))
    for key, value in row.items():
        if key not in KNOWN_KEYS:
            meta.setdefault(key, value)
    if meta.get("alternatives") is not None:
        check_alternatives(meta["alternatives"], "meta.alternatives" if "alternatives" in (row.get("meta") or {}) else "alternatives")
    return Trajectory(messages=messages, tools=tools, reward=reward, meta=meta, fixture=fixture_from(row.get("fixture")))


def fixture_from(data: Any, field_name: str = "fixture") -> Fixture | None:
    """:meth:`Fixture.from_dict` with its errors naming the field."""
    try:
        return Fixture.from_dict(data)
    except ValueError as exc:
        raise RowError(field_name, str(exc)) from None


def read_openai(path: str | Path, *, skip_bad: bool = False, report: ReadReport | None = None) -> list[Trajectory]:
    """Read an OpenAI chat JSONL file (``.gz`` allowed)."""
    return read_rows(path, trajectory_from_row, skip_bad=skip_bad, report=report)


def write_openai(trajectories: Iterable[Trajectory], path: str | Path) -> int:
    """Write trajectories as OpenAI chat JSONL (``.gz`` compresses); returns the count."""
    return write_jsonl(path, (t.to_dict() for t in trajectories))
