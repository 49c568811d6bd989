"""A finished harness rollout as the project's trajectory row and as ATIF.

::

    row = trajectory_row(result)          # what `pivot-envs play` writes per episode: reads back as a trajectory
    traj = to_trajectory(result)          # a Trajectory (reward = task success)
    doc = to_atif(result)                 # Harbor's ATIF document (the --output-format atif writer's)
    write_rollouts(results, "out.jsonl")              # JSONL rows: extract -> profile -> filter -> PivotRL
    write_rollouts(results, "out.atif.json", "atif")  # one ATIF file

``result`` is what :meth:`~pivot_envs.harness.rollouts.HarnessRollouts.finish` returns. The
trajectory is the episode the world saw (the opening, then every model call's turn with the tool calls the
harness executed and their results); ``reward`` is task success, so
:func:`pivot_envs.pipeline.extract.extract_pivots` keeps the successful ones as expert trajectories. What
a harness did is in ``meta``: the harness rollout id, the per-call turn rewards, the capture counters
(retokenized calls, tool calls the policy did not make and those the harness did not run).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from pivot_envs.formats.atif import atif_from_trajectory, write_atif
from pivot_envs.types import Trajectory

__all__ = ["to_atif", "to_trajectory", "trajectory_row", "write_rollouts"]

EXPORT_FORMATS = ("row", "atif")


def trajectory_row(result: dict[str, Any]) -> dict[str, Any]:
    """The finished rollout as one JSONL row (the keys of an episode row: ``messages``, ``tools``, ``reward``,
    ``success``...; ``read_trajectories`` reads it back with the rest in ``meta``)."""
    if result.get("status") not in ("finished", "failed"):
        raise ValueError(f"rollout {result.get('rollout_id')} is {result.get('status')!r}: only a finished rollout "
                         "has an episode to export")
    return {
        "id": result["task_id"],
        "task_id": result["task_id"],
        "pivot_id": result.get("pivot_id"),
        "domain": result.get("domain") or "",
        "success": result["success"],
        "reward": result["reward"],
        "turns": len(result["calls"]),
        "tool_calls": len(result["tool_calls"]),
        "tool_errors": sum(1 for t in result["tool_calls"] if t["error"]),
        "truncated": result["truncated"],
        "error": result["error"],
        "digest": result["digest"],
        "reason": result["reason"],
        "turn_rewards": list(result["turn_rewards"]),
        "harness": {"rollout_id": result["rollout_id"], "retokenized_calls": result["retokenized_calls"],
                    "uncaptured_tool_calls": result["uncaptured_tool_calls"],
                    "unexecuted_tool_calls": result["unexecuted_tool_calls"],
                    "user_messages": result.get("user_messages", 0), "cut": result.get("cut"),
                    "process": result.get("harness"),
                    "policy_versions": result["policy_versions"], "capture": result["capture"]},
        "messages": result["messages"],
        "tools": result["tools"],
    }


def to_trajectory(result: dict[str, Any]) -> Trajectory:
    """The finished rollout as a :class:`~pivot_envs.types.Trajectory` (its id: the task's)."""
    row = trajectory_row(result)
    meta = {k: v for k, v in row.items() if k not in ("messages", "tools", "reward")}
    meta["source"] = "pivot-envs/harness"
    return Trajectory(messages=row["messages"], tools=row["tools"], reward=row["reward"], meta=meta)


def to_atif(result: dict[str, Any]) -> dict[str, Any]:
    """The finished rollout as an ATIF document."""
    return atif_from_trajectory(to_trajectory(result))


def write_rollouts(results: Iterable[dict[str, Any]], path: str | Path, fmt: str = "row") -> int:
    """Write finished rollouts: ``row`` (JSONL, one trajectory row each) or ``atif``; the count written."""
    if fmt not in EXPORT_FORMATS:
        raise ValueError(f"unknown export format {fmt!r}; one of {', '.join(EXPORT_FORMATS)}")
    results = list(results)
    if fmt == "atif":
        return write_atif([to_trajectory(r) for r in results], path)
    with open(path, "w", encoding="utf-8") as f:
        for r in results:
            f.write(json.dumps(trajectory_row(r), ensure_ascii=False) + "\n")
    return len(results)
