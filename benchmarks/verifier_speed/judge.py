"""Concurrency and throughput of the ``judge`` verifier against a local OpenAI-compatible server.

Usage::

    python benchmarks/verifier_speed/judge.py              # ~30 s on CPU
    python benchmarks/verifier_speed/judge.py --delay-ms 200 --requests 512

The server is the project's controllable chat-completions server
(``tests/servers.py``) in a subprocess on 127.0.0.1: it answers a valid
verdict after ``--delay-ms`` (a stand-in for model latency) and counts the
requests it has in flight at once. For each ``max_concurrency`` the table shows
the most requests the server saw in flight (the judge's real concurrency),
requests/s, and the ideal ``max_concurrency / delay``. The ``0 ms`` row measures
the judge's own per-request cost (prompt, HTTP client, parsing); the ``cache``
row, verdicts read back from the on-disk cache. No model runs: these figures
are the judge's overhead, not a model's speed. Writes
``benchmarks/verifier_speed/results/judge.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from pivot_envs.actions import parse_action  # noqa: E402
from pivot_envs.types import Pivot  # noqa: E402
from pivot_envs.verifiers.judge import JudgeVerifier  # noqa: E402
from tests.servers import control, start_fake_openai, stats  # noqa: E402

TOOLS = [{"type": "function", "function": {"name": "read_file", "description": "Read a text file.",
          "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}]


def workload(n: int) -> tuple[list, list[Pivot]]:
    """``n`` distinct (action, pivot) pairs: a read_file expert call and a re-spelled candidate."""
    actions, pivots = [], []
    for i in range(n):
        expert = {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c0", "type": "function", "function": {"name": "read_file", "arguments": json.dumps({"path": f"/srv/f{i}.txt"})}}]}
        context = [{"role": "user", "content": f"Show me /srv/f{i}.txt please."}]
        pivots.append(Pivot(id=f"b{i}", domain="tool_use", context=context, expert=expert, tools=TOOLS))
        actions.append(parse_action(f'<tool_call>{{"name": "read_file", "arguments": {{"path": "/srv/./f{i}.txt"}}}}</tool_call>'))
    return actions, pivots


def measure(server: Any, mode: str, concurrency: int, n: int, delay_ms: float, cache_dir: str | None) -> dict[str, Any]:
    control(server, delay_s=delay_ms / 1000.0)
    judge = JudgeVerifier(model="bench", base_url=server.base_url, max_concurrency=concurrency, timeout_s=60.0,
                          max_retries=0, cache=cache_dir is not None, cache_dir=cache_dir)
    actions, pivots = workload(n)
    start = time.perf_counter()
    if mode == "sync":
        results = judge.verify_many(actions, pivots)
    else:
        async def run() -> list:
            try:
                return await judge.averify_many(actions, pivots)
            finally:
                await judge.aclose()

        results = asyncio.run(run())
    seconds = time.perf_counter() - start
    seen = stats(server)
    return {
        "mode": mode,
        "max_concurrency": concurrency,
        "requests": n,
        "delay_ms": delay_ms,
        "seconds": round(seconds, 3),
        "requests_per_s": round(n / seconds, 1),
        "ideal_requests_per_s": round(concurrency / (delay_ms / 1000.0), 1) if delay_ms else None,
        "server_requests": seen["requests"],
        "max_in_flight": seen["max_in_flight"],
        "errors": sum(r.error is not None for r in results),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delay-ms", type=float, default=100.0, help="server latency per request")
    parser.add_argument("--requests", type=int, default=256, help="requests per row (rows at concurrency 1 use 16)")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "judge.json")
    args = parser.parse_args()

    rows = []
    server = start_fake_openai()
    try:
        measure(server, "sync", 8, 16, 0.0, None)  # warm-up: imports, first connections
        for mode, concurrency in [("sync", 1), ("sync", 8), ("sync", 32), ("async", 32), ("sync", 64)]:
            n = 16 if concurrency == 1 else args.requests
            rows.append(measure(server, mode, concurrency, n, args.delay_ms, None))
        rows.append(measure(server, "sync", 32, args.requests, 0.0, None))
        with tempfile.TemporaryDirectory() as cache_dir:
            measure(server, "sync", 32, args.requests, 0.0, cache_dir)  # fill the cache
            cached = measure(server, "sync", 32, args.requests, 0.0, cache_dir)
            cached["mode"] = "sync, cache hits"
            rows.append(cached)
    finally:
        server.stop()

    head = f"{'mode':<17}{'max_conc':>9}{'requests':>9}{'delay ms':>9}{'in flight':>10}{'req/s':>9}{'ideal':>9}{'errors':>7}"
    print(head)
    print("-" * len(head))
    for r in rows:
        ideal = "-" if r["ideal_requests_per_s"] is None else f"{r['ideal_requests_per_s']:.0f}"
        print(f"{r['mode']:<17}{r['max_concurrency']:>9}{r['requests']:>9}{r['delay_ms']:>9.0f}"
              f"{r['max_in_flight']:>10}{r['requests_per_s']:>9.1f}{ideal:>9}{r['errors']:>7}")
    result = {
        "benchmark": "judge",
        "server": "tests/servers.py fake chat-completions server (subprocess, 127.0.0.1)",
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
