"""tau-bench trajectories (sierra-research/tau-bench ``historical_trajectories``).

A row is ``{"task_id", "trial", "reward", "messages"}`` (older dumps call the
messages ``traj``): OpenAI chat messages whose tool messages carry ``name``,
and no tool specs. The reader:

* keeps the messages verbatim (after validation);
* sets ``meta = {"source": "tau-bench", "task_id", "trial", "id":
  "tau-bench/<task_id>/<trial>", "tools_inferred": True}`` plus any other
  keys of the row (e.g. ``info``);
* rebuilds the tool specs from the calls seen in the *whole file* (see
  :mod:`pivot_envs.formats.infer_tools`: names and argument types only, no
  ``required`` claims), so every trajectory of a file shares one tool list. A
  row that does carry ``tools`` keeps its own and gets ``tools_inferred: False``.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from pivot_envs.formats.infer_tools import infer_tools
from pivot_envs.formats.validate import RowError, check_alternatives, check_messages, check_reward, check_tools, require_dict
from pivot_envs.jsonl import ReadReport, read_rows
from pivot_envs.types import Trajectory

SOURCE = "tau-bench"


def trajectory_from_tau_row(row: Any) -> Trajectory:
    """One tau-bench row -> Trajectory (tools left empty unless the row has them)."""
    row = require_dict(row, "<row>", "a JSON object {task_id, trial, reward, messages}")
    key = "messages" if "messages" in row else "traj" if "traj" in row else None
    if key is None:
        raise RowError("messages", "missing required field", 'a tau-bench row needs "messages" (or "traj")')
    if "task_id" not in row:
        raise RowError("task_id", "missing required field", "a tau-bench row needs the task_id it was run on")
    messages = check_messages(row[key], key)
    reward = check_reward(row.get("reward"))
    task_id, trial = row["task_id"], row.get("trial")
    meta: dict[str, Any] = {
        "source": SOURCE,
        "task_id": task_id,
        "trial": trial,
        "id": f"{SOURCE}/{task_id}" if trial is None else f"{SOURCE}/{task_id}/{trial}",
        "tools_inferred": "tools" not in row,
    }
    for k, v in row.items():
        if k not in (key, "reward", "task_id", "trial", "tools"):
            meta.setdefault(k, v)
    if meta.get("alternatives") is not None:
        check_alternatives(meta["alternatives"], "alternatives")
    tools = check_tools(row.get("tools") or [])
    return Trajectory(messages=messages, tools=tools, reward=reward, meta=meta)


def read_tau_bench(path: str | Path, *, skip_bad: bool = False, report: ReadReport | None = None) -> list[Trajectory]:
    """Read a tau-bench JSONL file; tool specs are inferred from the file's tool calls."""
    trajectories = read_rows(path, trajectory_from_tau_row, skip_bad=skip_bad, report=report)
    inferred = infer_tools(t.messages for t in trajectories if t.meta.get("tools_inferred"))
    for traj in trajectories:
        if traj.meta.get("tools_inferred"):
            traj.tools = copy.deepcopy(inferred)
    return trajectories
