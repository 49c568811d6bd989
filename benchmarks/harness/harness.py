"""The harness endpoint's figures: issue 28's capture table (overhead, fidelity, success = replay, rollouts in
flight, a harness killed mid-rollout) and issue 37's (expert actions through a harness per domain, exported rows
replayed, the gain through a third-party harness). Prints the tables; keeps every part's numbers in
benchmarks/harness/results/harness.json (a part run again replaces its own; the others are printed as they were stored).

Parts (``--parts``, default all):

* ``capture`` (issue 28). The policy is the demo's shipped terminal base (a 1.2M-parameter Llama, float32, CPU)
  sampling in-process (the ``hf`` agent); the harness is ``examples/harness_minimal.py``, one real subprocess per
  rollout, on the bundled terminal test tasks; the endpoint is a real HTTP server.

  1. overhead: the same requests (each task's opening, greedy, so both paths generate the same tokens) one at a
     time, straight to the backend (``agent.sample``) and through the endpoint (HTTP ``chat/completions``:
     rendering, sampling, parsing, capture), the two paths alternating which goes first; p50 latency of each;
  2. concurrency: ``--rollouts`` harness runs at once (sampling at temperature 1); the most rollouts open at once,
     runs that ended in an error;
  3. fidelity: every captured token re-scored by the trainer's forward pass (float32), mean |delta log-prob|;
     every episode replayed through the episode env (``replay_rollout``): success and digest equal;
  4. killed: a harness killed (SIGKILL) after its first model call while another rollout runs; the endpoint's
     reaper abandons the killed one (idle ``--idle-timeout`` s), its world is closed, the other finishes.
* ``expert`` (issue 37, items 2 and 3): ``benchmarks/harness/harness_expert.py``.
* ``gain`` (issue 37, item 7): ``benchmarks/harness/harness_gain.py``.

    python benchmarks/harness/harness.py [--parts capture,expert,gain] [--rollouts 32] [--requests 30] [--max-new-tokens 32]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import torch

from pivot_envs.agents.spec import build_agent
from pivot_envs.episodes import EpisodeEnv
from pivot_envs.harness.command import HarnessSpec
from pivot_envs.harness.envs import EpisodeEnvs
from pivot_envs.harness.http import HarnessEndpoint, HarnessServer
from pivot_envs.harness.policy import EnginePolicy
from pivot_envs.harness.replay import replay_rollout
from pivot_envs.harness.rollouts import HarnessRollouts
from pivot_envs.harness.source import HarnessSource
from pivot_envs.trainers.logprobs import completion_logprobs
from pivot_envs.trainers.token_batch import pack
from pivot_envs.types import Pivot

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "experiments" / "base_models" / "terminal"
TASKS = "bundled:terminal:test"
MINIMAL = [sys.executable, str(ROOT / "examples" / "harness_minimal.py"), "{task_file}"]


def make_env() -> EpisodeEnv:
    return EpisodeEnv(tasks=TASKS, domain="terminal", user="none")


def endpoint(agent, idle_timeout_s: float = 600.0) -> HarnessServer:
    rollouts = HarnessRollouts(EnginePolicy(agent), EpisodeEnvs(default=make_env), idle_timeout_s=idle_timeout_s,
                               max_turns=8)
    return HarnessServer(HarnessEndpoint(rollouts)).start()


def overhead(max_new_tokens: int, requests: int) -> dict:
    """p50 latency of the same greedy requests, straight to the agent and through the endpoint."""
    agent = build_agent({"kind": "hf", "model": str(MODEL), "max_new_tokens": max_new_tokens, "temperature": 0})
    env = make_env()
    ids = [t.id for t in env.tasks][:requests]
    env.close()
    direct, through = [], []
    # the backend straight: the agent on a worker thread of its own, as the endpoint's policy runs it (torch's
    # intra-op thread settings are per thread: the same thread setup on both paths)
    with endpoint(agent) as server, httpx.Client(timeout=120) as client, ThreadPoolExecutor(1) as backend:
        for i, task_id in enumerate(ids):
            opened = server.endpoint.open({"task_id": task_id}, server.url)
            pivot = Pivot(id=f"bench@{i}", domain="terminal", context=opened["messages"],
                          expert={"role": "assistant", "content": ""}, tools=opened["tools"])
            for path in (("direct", "endpoint") if i % 2 == 0 else ("endpoint", "direct")):  # no order bias
                start = time.perf_counter()
                if path == "direct":
                    backend.submit(agent.sample, [pivot], 1, seed=0).result()
                    direct.append(time.perf_counter() - start)
                else:
                    answer = client.post(opened["base_url"] + "/chat/completions", json={
                        "model": "policy", "messages": opened["messages"], "tools": opened["tools"]})
                    through.append(time.perf_counter() - start)
                    assert answer.status_code == 200, answer.text
            server.endpoint.rollouts.abandon(opened["rollout_id"], "benchmark request done")
    p50_direct, p50_through = statistics.median(direct), statistics.median(through)
    return {"requests": len(ids), "p50_direct_ms": 1000 * p50_direct, "p50_endpoint_ms": 1000 * p50_through,
            "ratio": p50_through / p50_direct}


def concurrency(rollouts: int, max_new_tokens: int) -> tuple[dict, list[dict], object]:
    """``rollouts`` harness runs at once; the most open at once; their finished results."""
    agent = build_agent({"kind": "hf", "model": str(MODEL), "max_new_tokens": max_new_tokens, "temperature": 1.0,
                         "batch_size": rollouts})
    env = make_env()
    ids = [t.id for t in env.tasks]
    env.close()
    groups = 8
    per = max(1, rollouts // groups)
    most, stop = [0], threading.Event()
    with endpoint(agent) as server:
        registry = server.endpoint.rollouts

        def watch() -> None:
            while not stop.wait(0.05):
                most[0] = max(most[0], registry.stats()["open"])

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        source = HarnessSource(server, HarnessSpec.build(MINIMAL, timeout_s=600))
        start = time.perf_counter()
        outcomes, stats = source.play([{"task_id": t} for t in ids[:groups]], per)
        seconds = time.perf_counter() - start
        stop.set()
        watcher.join()
        source.close()
    flat = [o for g in outcomes for o in g]
    errors = [o.error for o in flat if o.status != "finished" or o.exit_code != 0]
    return ({"runs": len(flat), "most_open_at_once": most[0], "errors": len(errors), "seconds": seconds,
             "calls": stats.calls, "retokenized_calls": stats.retokenized_calls,
             "capture_overhead_ms": stats.capture_overhead_ms, "first_error": errors[0] if errors else None},
            [o.result for o in flat if o.result is not None], agent)


def fidelity(results: list[dict], agent) -> dict:
    """Re-scoring of every captured token; every episode replayed through the episode env."""
    calls = [c for r in results for c in r["calls"]]
    deltas = []
    for start in range(0, len(calls), 16):
        chunk = calls[start:start + 16]
        batch = pack([c["prompt_token_ids"] for c in chunk], [c["completion_token_ids"] for c in chunk],
                     agent.pad_id, "cpu")
        with torch.no_grad():
            logp = completion_logprobs(agent.model.eval(), batch)[0]
        deltas += [abs(float(logp[i, t]) - lp) for i, c in enumerate(chunk) for t, lp in enumerate(c["logprobs"])]
    env = make_env()
    same = 0
    try:
        for r in results:
            replayed = replay_rollout(r, env)
            same += int(replayed.tool_results_equal and (replayed.success, replayed.digest) == (r["success"], r["digest"]))
    finally:
        env.close()
    return {"tokens": len(deltas), "mean_abs_delta": sum(deltas) / len(deltas) if deltas else None,
            "max_abs_delta": max(deltas) if deltas else None, "episodes": len(results), "same_as_replay": same,
            "successes": sum(1 for r in results if r["success"])}


def killed(idle_timeout_s: float, max_new_tokens: int, tmp: Path) -> dict:
    """Kill one harness after its first model call; the reaper abandons it; another rollout is unaffected."""
    agent = build_agent({"kind": "hf", "model": str(MODEL), "max_new_tokens": max_new_tokens})
    env = make_env()
    ids = [t.id for t in env.tasks]
    env.close()
    with endpoint(agent, idle_timeout_s) as server:
        registry = server.endpoint.rollouts
        victim = server.endpoint.open({"task_id": ids[0]}, server.url)
        other = server.endpoint.open({"task_id": ids[1]}, server.url)
        procs = {}
        for opened in (victim, other):
            task = tmp / f"{opened['rollout_id']}.json"
            task.write_text(json.dumps({**opened, "model": "policy"}))
            procs[opened["rollout_id"]] = subprocess.Popen([*MINIMAL[:2], str(task)], stdout=subprocess.DEVNULL,
                                                           stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 120
        while not registry.get(victim["rollout_id"]).calls and time.monotonic() < deadline:
            time.sleep(0.01)
        os.killpg(procs[victim["rollout_id"]].pid, signal.SIGKILL)
        procs[victim["rollout_id"]].wait()
        closed_before = registry.stats()["worlds_closed"]
        other_code = procs[other["rollout_id"]].wait(timeout=300)
        other_result = registry.finish(other["rollout_id"])
        while registry.get(victim["rollout_id"]).status == "open" and time.monotonic() < deadline + 60:
            time.sleep(0.1)
        state = registry.describe(registry.get(victim["rollout_id"]))
        freed = registry.stats()["worlds_closed"] - closed_before
        return {"victim_status": state["status"], "victim_reason": state["reason"], "victim_calls": state["calls"],
                "world_freed": freed >= 1 and registry.get(victim["rollout_id"]).env is None,
                "other_exit": other_code, "other_status": other_result["status"], "other_error": other_result["error"]}


RESULTS = Path(__file__).resolve().parent / "results"
PARTS = ("capture", "expert", "gain")


def capture_part(args: argparse.Namespace) -> dict:
    """Issue 28's figures (see the module docstring)."""
    over = overhead(args.max_new_tokens, args.requests)
    conc, results, agent = concurrency(args.rollouts, args.max_new_tokens)
    fid = fidelity(results, agent)
    kill = killed(args.idle_timeout, args.max_new_tokens, RESULTS)
    for leftover in RESULTS.glob("w*-*.json"):
        leftover.unlink()
    return {"overhead": over, "concurrency": conc, "fidelity": fid, "killed": kill}


def capture_table(report: dict) -> list[str]:
    over, conc, fid, kill = report["overhead"], report["concurrency"], report["fidelity"], report["killed"]
    rows = [
        ("capture overhead: p50 through the endpoint / straight to the backend", "<= 1.05x",
         f"{over['ratio']:.3f}x ({over['p50_endpoint_ms']:.1f} vs {over['p50_direct_ms']:.1f} ms, "
         f"{over['requests']} requests)", over["ratio"] <= 1.05),
        ("re-scoring of captured tokens, float32 CPU: mean |delta log-prob|", "<= 1e-3",
         f"{fid['mean_abs_delta']:.2e} (max {fid['max_abs_delta']:.2e}, {fid['tokens']} tokens)",
         fid["mean_abs_delta"] is not None and fid["mean_abs_delta"] <= 1e-3),
        ("task success through the endpoint = replayed in the world", "every episode",
         f"{fid['same_as_replay']}/{fid['episodes']} ({fid['successes']} successes)",
         fid["same_as_replay"] == fid["episodes"] == conc["runs"]),
        ("rollouts in flight (tiny model, 2 cores)", ">= 32 without an error",
         f"{conc['most_open_at_once']} open at once, {conc['runs']} runs, {conc['errors']} errors, "
         f"{conc['seconds']:.0f} s", conc["most_open_at_once"] >= 32 and conc["errors"] == 0),
        ("a harness killed mid-rollout", "abandoned, world freed, others unaffected",
         f"{kill['victim_status']} after {kill['victim_calls']} call(s), world freed: {kill['world_freed']}, "
         f"other: {kill['other_status']} (exit {kill['other_exit']})",
         kill["victim_status"] == "abandoned" and kill["world_freed"] and kill["other_status"] == "finished"),
    ]
    lines = ["| figure | target | measured | met |", "|---|---|---|---|"]
    lines += [f"| {figure} | {target} | {measured} | {'yes' if met else 'NO'} |" for figure, target, measured, met in rows]
    return lines + [f"\n{conc['calls']} captured calls, {conc['retokenized_calls']} retokenized; mean capture overhead "
                    f"{conc['capture_overhead_ms']:.1f} ms per call"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default=",".join(PARTS), help="comma-separated: " + ", ".join(PARTS))
    parser.add_argument("--rollouts", type=int, default=32)
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--idle-timeout", type=float, default=3.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--work", type=Path, default=ROOT / "runs" / "harness_bench",
                        help="where the expert and gain parts keep their files (models, rows)")
    args = parser.parse_args()
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        parser.error(f"--parts: unknown {unknown}; known: {', '.join(PARTS)}")
    torch.set_num_threads(args.threads)
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / "harness.json"
    stored = json.loads(path.read_text()) if path.exists() else {}
    if "overhead" in stored:  # the issue-28 layout: its part at the top level
        stored = {"capture": {k: stored.pop(k) for k in ("overhead", "concurrency", "fidelity", "killed")}, **stored}
    for part in parts:
        start = time.perf_counter()
        if part == "capture":
            stored["capture"] = capture_part(args)
        elif part == "expert":
            import harness_expert

            stored["expert"] = harness_expert.run(args.work / "expert")
        else:
            import harness_gain

            stored["gain"] = harness_gain.run(args.work / "gain")
        stored.pop("seconds", None)
        stored.setdefault("last_call_seconds", {})[part] = time.perf_counter() - start  # cached stages not counted
        stored.setdefault("machine", {})[part] = {"cpus": os.cpu_count(), "torch_threads": args.threads,
                                                  "load_1m": os.getloadavg()[0]}
        path.write_text(json.dumps(stored, indent=1) + "\n")
    print_tables(stored, parts)
    print(f"\n{path}")


def print_tables(stored: dict, measured: list[str]) -> None:
    for part, title, lines in (("capture", "Capture (issue 28)", lambda r: capture_table(r)),
                               ("expert", "Expert actions through a harness (issue 37)", _expert_lines),
                               ("gain", "Gain through a third-party harness (issue 37)", _gain_lines)):
        if part not in stored:
            continue
        when = "measured now" if part in measured else "stored"
        print(f"\n## {title} ({when})\n")
        print("\n".join(lines(stored[part])))


def _expert_lines(report: dict) -> list[str]:
    import harness_expert

    return harness_expert.table(report)


def _gain_lines(report: dict) -> list[str]:
    import harness_gain

    return harness_gain.table(report)


if __name__ == "__main__":
    main()
