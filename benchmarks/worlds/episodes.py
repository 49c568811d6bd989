"""Episodes and worlds: throughput per built-in world, world_exec speed, and the cost of a step.

* episodes/s and tool calls/s with the ``replay`` agent over the bundled test tasks of each
  domain, ``run_episodes`` with 2 workers (world calls on 2 threads), scripted user;
* ``world_exec`` verifications/s on tool-call pivots of each domain (expert outcome cached per
  pivot, so each verification is one replay of the context plus the candidate's calls);
* step overhead: the median time of ``EpisodeEnv.step`` on recorded tool-call actions over the median
  time of the same calls made on a second world directly, in the same states (target <= 1.2x; the
  ratio of the totals is printed beside it).

    python benchmarks/worlds/episodes.py [--domains tool_use,terminal,swe,search] [--pivots 40]

Prints a table and writes ``benchmarks/worlds/results/episodes.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

from pivot_envs import parse_action
from pivot_envs.episodes import EpisodeEnv, episode_starts, run_episodes
from pivot_envs.sources import resolve_pivots
from pivot_envs.verifiers import build_verifier
from pivot_envs.worlds import build_world

RESULTS = Path(__file__).resolve().parent / "results" / "episodes.json"
DOMAINS = ("tool_use", "terminal", "swe", "search")


def episode_throughput(domain: str) -> dict[str, Any]:
    def make() -> EpisodeEnv:
        return EpisodeEnv(domain=domain, split="test")

    starts = episode_starts(make())
    began = time.perf_counter()
    rows = run_episodes(make, starts, "replay", batch_size=16, workers=2)
    seconds = time.perf_counter() - began
    calls = sum(r["tool_calls"] for r in rows)
    return {"episodes": len(rows), "success": sum(bool(r["success"]) for r in rows) / len(rows),
            "errors": sum(r["error"] is not None for r in rows), "seconds": seconds,
            "episodes_per_s": len(rows) / seconds, "tool_calls": calls, "tool_calls_per_s": calls / seconds}


def world_exec_speed(domain: str, n: int) -> dict[str, Any]:
    pivots = [p for p in resolve_pivots(f"bundled:{domain}:test") if p.expert.get("tool_calls")][:n]
    verifier = build_verifier("world_exec")
    for p in pivots:  # expert outcomes cached first: what is timed is the candidate's side
        verifier(parse_action(p.expert), p)
    candidates = [(parse_action(a), p) for p in pivots for a in p.meta.get("alternatives", []) if a.get("tool_calls")]
    candidates = candidates or [(parse_action(p.expert), p) for p in pivots]
    began = time.perf_counter()
    passed = sum(verifier(a, p).passed for a, p in candidates)
    seconds = time.perf_counter() - began
    verifier.close()
    return {"verifications": len(candidates), "passed": passed, "seconds": seconds,
            "verifications_per_s": len(candidates) / seconds}


def step_overhead(domain: str, max_steps: int = 120) -> dict[str, Any]:
    """Median time of env.step on recorded tool-call turns vs the same calls on a world directly."""
    env = EpisodeEnv(domain=domain, split="test")
    world = build_world(env.unwrapped.domain.world)
    step_times: list[float] = []
    raw_times: list[float] = []
    for start in episode_starts(env)[:20]:
        env.reset(options=start.options())
        task = env.unwrapped.task
        from pivot_envs.episodes import world_task

        world.start(world_task(task, domain))
        while len(step_times) < max_steps:
            action = env.unwrapped.recorded_action()
            if action is None or not action.get("tool_calls"):
                break
            t0 = time.perf_counter()
            for call in action["tool_calls"]:
                world.call(call["function"]["name"], call["function"]["arguments"])
            raw_times.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            _, _, terminated, truncated, _ = env.step(action)
            step_times.append(time.perf_counter() - t0)
            if terminated or truncated:
                break
    env.close()
    world.close()
    step, raw = sum(step_times), sum(raw_times)
    return {"steps": len(step_times), "step_ms": step / len(step_times) * 1e3, "raw_call_ms": raw / len(raw_times) * 1e3,
            "ratio_total": step / raw, "median_step_ms": statistics.median(step_times) * 1e3,
            "median_raw_call_ms": statistics.median(raw_times) * 1e3,
            "ratio": statistics.median(step_times) / statistics.median(raw_times)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--domains", default=",".join(DOMAINS))
    parser.add_argument("--pivots", type=int, default=40, help="tool-call pivots per domain for world_exec")
    args = parser.parse_args()
    out: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version()}, "domains": {}}
    for domain in args.domains.split(","):
        out["domains"][domain] = {"episodes": episode_throughput(domain), "world_exec": world_exec_speed(domain, args.pivots),
                                  "step": step_overhead(domain)}
        print(f"{domain}: done", flush=True)
    print(f"\n{'domain':10} {'episodes':>8} {'success':>7} {'ep/s':>7} {'calls/s':>8} {'world_exec/s':>12} "
          f"{'step ms':>8} {'raw ms':>8} {'step/raw':>8} {'(totals)':>8}")
    for domain, r in out["domains"].items():
        e, w, s = r["episodes"], r["world_exec"], r["step"]
        print(f"{domain:10} {e['episodes']:>8} {e['success']:>7.3f} {e['episodes_per_s']:>7.1f} {e['tool_calls_per_s']:>8.1f} "
              f"{w['verifications_per_s']:>12.1f} {s['median_step_ms']:>8.3f} {s['median_raw_call_ms']:>8.3f} "
              f"{s['ratio']:>8.2f} {s['ratio_total']:>8.2f}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
