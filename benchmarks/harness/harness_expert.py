"""Expert actions through a harness (issue 37, items 2 and 3): task success per domain and harness, against
``play --agent replay --user scripted``; and the exported rows replayed with ``pivot-envs play --agent replay:FILE``.

Used by ``benchmarks/harness/harness.py --parts expert``. Each domain's tasks are played three ways with the expert's own
actions (the ``replay`` policy) and the scripted user:

* ``play``: the episode env's own loop (``run_episodes``, what ``pivot-envs play --agent replay`` runs);
* ``examples/harness_minimal.py`` and ``examples/harness_openai_agents.py`` (the OpenAI Agents SDK), one real
  subprocess per task against a harness endpoint on 127.0.0.1; the user is reached through the rollout's
  ``send_message_to_user`` tool.

Then every rollout of the minimal harness is exported (``write_rollouts``: rows whose id is the task's) and replayed
by the real ``pivot-envs play --agent replay:ROWS.jsonl --task-id ...``: the share of rows that replay, and of
verdicts equal to the harness's.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from pivot_envs.agents.spec import build_agent
from pivot_envs.episodes import EpisodeEnv, episode_starts, run_episodes
from pivot_envs.formats.tau2_tasks import default_tasks_path, read_tau2_tasks
from pivot_envs.harness.command import HarnessSpec
from pivot_envs.harness.export import write_rollouts
from pivot_envs.harness.source import local_harness_source

ROOT = Path(__file__).resolve().parents[2]
HARNESSES = {
    "harness_minimal.py": [sys.executable, str(ROOT / "examples" / "harness_minimal.py"), "{task_file}", "30"],
    "openai-agents": [sys.executable, str(ROOT / "examples" / "harness_openai_agents.py"), "{task_file}",
                      "--max-turns", "30"],
}
SDK_ENV = {"OPENAI_AGENTS_DISABLE_TRACING": "1"}


def domains() -> dict[str, tuple[Callable[[], EpisodeEnv], str, list[str]]]:
    """Per domain: the env factory (scripted user), the ``play`` arguments that make the same env, its task ids."""
    airline = read_tau2_tasks(default_tasks_path("airline"), domain="airline")

    def tool_use() -> EpisodeEnv:
        return EpisodeEnv(tasks="bundled:tool_use:test", domain="tool_use", user="scripted", max_turns=30)

    def tau2() -> EpisodeEnv:
        return EpisodeEnv(tasks=airline, world="tau2-airline", user="scripted", max_turns=30)

    out = {}
    for name, make, play_args in (("tool_use", tool_use, "--env pivot/ToolUse-Episode-v0"),
                                  ("tau2-airline", tau2, "--env pivot/Episode-v0 --world tau2-airline "
                                                         "--tasks tau2:airline")):
        env = make()
        try:
            out[name] = (make, play_args, [t.id for t in env.tasks])
        finally:
            env.close()
    return out


def through_play(make_env: Callable[[], EpisodeEnv]) -> dict[str, Any]:
    """``play --agent replay --user scripted``: the episode env's own loop."""
    env = make_env()
    starts = episode_starts(env)
    env.close()
    start = time.perf_counter()
    rows = run_episodes(make_env, starts, build_agent("replay"), batch_size=8, workers=2)
    return {"episodes": len(rows), "successes": sum(1 for r in rows if r["success"]),
            "errors": sum(1 for r in rows if r["error"]), "seconds": time.perf_counter() - start}


def through_harness(make_env: Callable[[], EpisodeEnv], ids: list[str], command: list[str]) -> tuple[dict, list]:
    """The expert's actions through one harness: counts, and the finished results."""
    spec = HarnessSpec.build(command, timeout_s=300, env=SDK_ENV)
    source = local_harness_source(build_agent("replay"), make_env, spec, version=lambda: 0, max_turns=30,
                                  score_turns=False, concurrency=4)
    start = time.perf_counter()
    try:
        groups, stats = source.play([{"task_id": t} for t in ids], 1)
    finally:
        source.close()
    results = [o.result for g in groups for o in g if o.result is not None]
    failures = [o for g in groups for o in g if o.status != "finished" or o.harness_failed]
    return ({"episodes": stats.runs, "successes": sum(1 for r in results if r["success"]),
             "user_messages": stats.user_messages, "harness_failures": stats.harness_failures,
             "errors": len(failures), "first_error": failures[0].error if failures else None,
             "calls": stats.calls, "seconds": time.perf_counter() - start}, results)


def replayed_rows(results: list[dict], play_args: str, folder: Path) -> dict[str, Any]:
    """Export ``results`` and replay them with the real ``pivot-envs play --agent replay:FILE``."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = folder / "harness_rows.jsonl"
    write_rollouts(results, rows, "row")
    out = folder / "replayed.jsonl"
    out.unlink(missing_ok=True)
    command = [str(Path(sys.executable).with_name("pivot-envs")), "play", *play_args.split(), "--agent",
               f"replay:{rows}", "--user", "scripted", "--max-turns", "30", "-o", str(out)]
    for r in results:
        command += ["--task-id", r["task_id"]]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        return {"rows": len(results), "replayed": 0, "equal": 0, "error": done.stderr[-500:]}
    played = {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}
    equal = sum(1 for r in results if r["task_id"] in played and played[r["task_id"]]["success"] == r["success"]
                and played[r["task_id"]]["error"] is None)
    return {"rows": len(results), "replayed": sum(1 for r in results if r["task_id"] in played), "equal": equal,
            "error": None}


def run(folder: Path) -> dict[str, Any]:
    """Every domain through ``play`` and each harness, and the minimal harness's rows replayed."""
    folder.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {}
    for name, (make_env, play_args, ids) in domains().items():
        entry: dict[str, Any] = {"tasks": len(ids), "play": through_play(make_env)}
        for harness, command in HARNESSES.items():
            entry[harness], results = through_harness(make_env, ids, command)
            if harness == "harness_minimal.py":
                entry["export_replay"] = replayed_rows(results, play_args, folder / name)
        report[name] = entry
        print(f"{name}: " + json.dumps({k: v.get("successes", v) for k, v in entry.items() if isinstance(v, dict)}),
              flush=True)
    return report


def table(report: dict[str, Any]) -> list[str]:
    """Markdown rows: per domain, success through play and through each harness; the export replay."""
    lines = ["| domain | tasks | `play --agent replay --user scripted` | harness_minimal.py | openai-agents | "
             "messages to the user | exported rows replayed with `replay:FILE` (verdicts equal) |",
             "|---|---|---|---|---|---|---|"]
    for name, e in report.items():
        rep = e["export_replay"]
        lines.append(f"| {name} | {e['tasks']} | {e['play']['successes']}/{e['play']['episodes']} | "
                     f"{_cell(e['harness_minimal.py'])} | {_cell(e['openai-agents'])} | "
                     f"{e['harness_minimal.py']['user_messages']} / {e['openai-agents']['user_messages']} | "
                     f"{rep['replayed']}/{rep['rows']} ({rep['equal']} equal)" + (f" {rep['error']}" if rep["error"]
                                                                                   else "") + " |")
    return lines


def _cell(e: dict[str, Any]) -> str:
    errors = f", {e['errors']} errors ({e['first_error']})" if e["errors"] else ""
    return f"{e['successes']}/{e['episodes']}{errors}"
