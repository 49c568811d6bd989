"""``pivot-envs serve`` throughput: NeMo Gym ``/verify`` and ``/verify_batch`` against in-process scoring.

* in-process: ``verifier.verify_many`` on the same tool-call pivots and actions (the bar);
* ``/verify``: one row per request, ``--clients`` concurrent clients (threads, keep-alive sessions);
* ``/verify_batch``: ``--batch`` rows per request, the same number of clients;

against ``pivot-envs serve --workers 2 --verifier tool_call`` on 127.0.0.1. Rows are NeMo Gym verify
bodies built from the bundled ``tool_use`` test pivots that end in a tool call; half the responses are
the expert call, half have one argument changed. Throughput is rows/s; latency is per request.
Target: the HTTP faces >= 50 % of in-process rows/s.

    python benchmarks/serve.py [--rows 512] [--clients 64] [--batch 32] [--seconds 6] [--workers 2]

Prints a table and writes ``benchmarks/results/serve.json``. The rollout service is measured by
``benchmarks/serve_rollouts.py``.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import requests

from pivot_envs import parse_action
from pivot_envs.formats.nemo_gym import plain_row_from_pivot
from pivot_envs.sources import resolve_pivots
from pivot_envs.verifiers import build_verifier

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "serve.json"
sys.path.insert(0, str(ROOT))
from tests.servers import free_port  # noqa: E402


# --------------------------------------------------------------------------- workload
def workload(n: int) -> tuple[list[dict[str, Any]], list[Any], list[Any]]:
    """(NeMo Gym verify bodies, pivots, parsed actions): the same n rows in both forms."""
    pivots = [p for p in resolve_pivots(None, domain="tool_use", split="test") if p.expert.get("tool_calls")]
    bodies, chosen, actions = [], [], []
    for i in range(n):
        pivot = pivots[i % len(pivots)]
        row = plain_row_from_pivot(pivot)
        expected = row["expected_action"]
        calls = copy.deepcopy(expected["calls"] if expected["type"] == "function_call_batch" else [expected])
        if i % 2:
            args = json.loads(calls[0]["arguments"] or "{}")
            if args:
                key = next(iter(args))
                args[key] = "changed-value" if isinstance(args[key], str) else 424242
                calls[0]["arguments"] = json.dumps(args)
        output = [{"id": f"fc_{k}", "type": "function_call", "call_id": f"call_{k}", "status": "completed",
                   "name": c["name"], "arguments": c["arguments"]} for k, c in enumerate(calls)]
        body = {"responses_create_params": row["responses_create_params"], "expected_action": expected,
                "response": {"id": f"resp_{i}", "object": "response", "output": output}}
        bodies.append(body)
        chosen.append(pivot)
        actions.append(parse_action({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"call_{k}", "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for k, c in enumerate(calls)]}))
    return bodies, chosen, actions


# --------------------------------------------------------------------------- in-process
def bench_in_process(pivots: list[Any], actions: list[Any], seconds: float) -> dict[str, Any]:
    verifier = build_verifier("tool_call")
    verifier.verify_many(actions[:8], pivots[:8])  # warm
    rows, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        results = verifier.verify_many(actions, pivots)
        rows += len(results)
    elapsed = time.perf_counter() - t0
    rewards = [r.reward for r in verifier.verify_many(actions, pivots)]
    return {"rows_per_s": rows / elapsed, "rows": rows, "seconds": elapsed, "mean_reward": statistics.mean(rewards)}


# --------------------------------------------------------------------------- HTTP
def start_server(workers: int) -> tuple[subprocess.Popen, str]:
    port = free_port()
    cmd = [sys.executable, "-c", "from pivot_envs.cli import main; main()", "serve", "--port", str(port),
           "--workers", str(workers), "--domain", "tool_use", "--verifier", "tool_call", "--log-level", "warning"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"pivot-envs serve exited with {proc.returncode}")
        try:
            if requests.get(url + "/health", timeout=1).status_code == 200:
                return proc, url
        except requests.ConnectionError:
            time.sleep(0.2)
    proc.terminate()
    raise RuntimeError("pivot-envs serve did not start in 60 s")


def bench_http(url: str, path: str, payloads: list[bytes], rows_per_request: int, clients: int,
               seconds: float) -> dict[str, Any]:
    """``clients`` threads POST ``payloads`` round-robin to ``path`` for ``seconds``."""
    latencies: list[list[float]] = [[] for _ in range(clients)]
    errors = [0] * clients
    stop = threading.Event()
    start = threading.Barrier(clients + 1)

    def client(k: int) -> None:
        session = requests.Session()
        i = k
        start.wait()
        while not stop.is_set():
            body = payloads[i % len(payloads)]
            i += clients
            t0 = time.perf_counter()
            r = session.post(url + path, data=body, headers={"content-type": "application/json"})
            latencies[k].append(time.perf_counter() - t0)
            if r.status_code != 200:
                errors[k] += 1

    threads = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(clients)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(60)
    elapsed = time.perf_counter() - t0
    lat = sorted(x for per in latencies for x in per)
    requests_done = len(lat)
    return {"rows_per_s": requests_done * rows_per_request / elapsed, "requests": requests_done,
            "rows_per_request": rows_per_request, "seconds": elapsed, "errors": sum(errors),
            "p50_ms": 1000 * lat[len(lat) // 2] if lat else None,
            "p99_ms": 1000 * lat[min(len(lat) - 1, int(0.99 * len(lat)))] if lat else None}


def bench_verify(args: argparse.Namespace) -> dict[str, Any]:
    bodies, pivots, actions = workload(args.rows)
    out: dict[str, Any] = {"rows": args.rows, "clients": args.clients, "batch": args.batch, "workers": args.workers}
    out["in_process"] = bench_in_process(pivots, actions, args.seconds)
    proc, url = start_server(args.workers)
    try:
        check = requests.post(url + "/verify_batch", json=bodies[:64]).json()
        out["http_mean_reward_check"] = statistics.mean(r["reward"] for r in check)
        single = [json.dumps(b).encode() for b in bodies]
        batches = [json.dumps(bodies[i:i + args.batch]).encode() for i in range(0, len(bodies), args.batch)]
        bench_http(url, "/verify", single[:64], 1, args.clients, 1.0)  # warm both workers
        out["verify"] = bench_http(url, "/verify", single, 1, args.clients, args.seconds)
        out["verify_batch"] = bench_http(url, "/verify_batch", batches, args.batch, args.clients, args.seconds)
        out["server_metrics_one_worker"] = requests.get(url + "/metrics", params={"format": "json"}).json()["routes"]
    finally:
        proc.terminate()
        proc.wait(30)
    base = out["in_process"]["rows_per_s"]
    for face in ("verify", "verify_batch"):
        out[face]["fraction_of_in_process"] = out[face]["rows_per_s"] / base
        out[face]["meets_50pct_target"] = out[face]["rows_per_s"] >= 0.5 * base
    return out


# --------------------------------------------------------------------------- main
def print_table(v: dict[str, Any]) -> None:
    base = v["in_process"]["rows_per_s"]
    print(f"\nserve throughput: {v['rows']} tool_call rows, {v['clients']} clients, {v['workers']} uvicorn workers, "
          f"batch {v['batch']}")
    print(f"{'face':<28}{'rows/s':>10}{'vs in-process':>15}{'p50 ms':>10}{'p99 ms':>10}{'errors':>8}")
    print(f"{'in-process verify_many':<28}{base:>10.0f}{'1.00':>15}{'-':>10}{'-':>10}{'-':>8}")
    for face, label in (("verify", "POST /verify (1 row)"), ("verify_batch", f"POST /verify_batch ({v['batch']} rows)")):
        r = v[face]
        print(f"{label:<28}{r['rows_per_s']:>10.0f}{r['fraction_of_in_process']:>15.2f}{r['p50_ms']:>10.1f}"
              f"{r['p99_ms']:>10.1f}{r['errors']:>8}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=512)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    out: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
                           "verify": bench_verify(args)}
    print_table(out["verify"])
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
