"""``pivot-envs serve`` throughput: NeMo Gym ``/verify`` and ``/verify_batch`` against in-process scoring.

Four in-process bars (one thread, no HTTP), each on the same rows:

* A ``verify_many``: ``verifier.verify_many`` on the same tool-call pivots and actions, built beforehand
  (scoring alone);
* B ``convert + verify``: ``nemo_gym.verify_rows`` on the NeMo Gym rows as dicts (row -> pivot + action,
  then scoring): what a NeMo Gym row costs without HTTP and JSON;
* C ``decode + convert + verify + encode``: ``nemo_gym.verify_rows_text`` on the ``--batch``-row request
  bodies (bytes in, answer bytes out): a ``/verify_batch`` request's work without the HTTP stack;
* D the same one row per body: ``nemo_gym.verify_body_text`` on the ``/verify`` bodies (a ``/verify``
  request's work without the HTTP stack; slower per row than C, which scores ``--batch`` rows per call);

and the HTTP faces against ``pivot-envs serve --workers 2 --verifier tool_call`` on 127.0.0.1:

* ``/verify``: one row per request, ``--clients`` concurrent clients;
* ``/verify_batch``: ``--batch`` rows per request, the same number of clients.

The load generator (``--client asyncio``, the default) keeps ``--clients`` keep-alive connections on one
asyncio loop (uvloop when installed), each sending its next request when its answer is in; the request
bytes are built beforehand and answers are read by httptools' parser: about 0.03 ms of CPU per request, so
that the client, which shares the machine with the server, takes little of it. ``--client requests`` is the
earlier generator (a ``requests.Session`` per client thread; about 0.9 ms per request).

How the target is counted: ``/verify`` rows/s (answers with status 200 per second of wall time) over bar
C's rows/s, so both sides decode the request JSON, convert rows to pivot + action, verify, and encode the
answer; C runs once before the server starts and once after it stops, and the faster run is the
denominator (the stricter ratio). Target: >= 0.5 with 2 workers and 64 clients. C is a single thread,
the server has ``--workers`` processes; both share the machine with the client and with whatever else
runs, so the load average is recorded with every bar. Each face also records the CPU seconds per request
of the server processes and of this client process (Linux). The ratios over A, B and D are reported too.

Rows are NeMo Gym verify bodies built from the bundled ``tool_use`` test pivots that end in a tool call
(~11 kB each, 7 kB of it the tools list); half the responses are the expert call, half have one argument
changed.

    python benchmarks/serving/serve.py [--rows 512] [--clients 64] [--batch 32] [--seconds 6] [--workers 2] [--client asyncio]

Prints a table and writes ``benchmarks/serving/results/serve.json``. The rollout service is measured by
``benchmarks/serving/serve_rollouts.py``.
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
from pivot_envs.serve import nemo_gym
from pivot_envs.sources import resolve_pivots
from pivot_envs.verifiers import build_verifier
from pivot_envs.verifiers.batch import VerifierResolver

ROOT = Path(__file__).resolve().parents[2]
RESULTS = Path(__file__).resolve().parent / "results" / "serve.json"
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


def bench_in_process_rows(bodies: list[dict[str, Any]], batch: int, seconds: float) -> dict[str, Any]:
    """``nemo_gym.verify_rows`` on the rows as dicts, ``batch`` at a time: conversion + scoring."""
    resolver, reader = VerifierResolver("tool_call"), nemo_gym.RowReader()
    chunks = [bodies[i:i + batch] for i in range(0, len(bodies), batch)]
    for chunk in chunks:  # warm (the reader's and the verifier's caches, as a server's after its first rows)
        nemo_gym.verify_rows(chunk, resolver, "tool_use", reader=reader)
    rows, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for chunk in chunks:
            rows += len(nemo_gym.verify_rows(chunk, resolver, "tool_use", reader=reader))
    elapsed = time.perf_counter() - t0
    rewards = [a["reward"] for chunk in chunks for a in nemo_gym.verify_rows(chunk, resolver, "tool_use", reader=reader)]
    return {"rows_per_s": rows / elapsed, "rows": rows, "seconds": elapsed, "mean_reward": statistics.mean(rewards)}


def bench_in_process_text(payloads: list[bytes], rows_per_payload: list[int], seconds: float) -> dict[str, Any]:
    """``nemo_gym.verify_rows_text`` on the ``/verify_batch`` bodies: JSON decode + conversion + scoring + encode."""
    resolver, reader = VerifierResolver("tool_call"), nemo_gym.RowReader()
    for body in payloads:
        nemo_gym.verify_rows_text(body, resolver, "tool_use", reader=reader)
    rows, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for body, n in zip(payloads, rows_per_payload):
            nemo_gym.verify_rows_text(body, resolver, "tool_use", reader=reader)
            rows += n
    elapsed = time.perf_counter() - t0
    rewards = [a["reward"] for body in payloads for a in nemo_gym.verify_rows_text(body, resolver, "tool_use", reader=reader)[0]]
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


def process_tree_cpu(pid: int) -> float | None:
    """CPU seconds (user + system) of process ``pid`` and its descendants, from /proc (None elsewhere)."""
    try:
        tick = os.sysconf("SC_CLK_TCK")
        total, todo = 0.0, [pid]
        while todo:
            p = todo.pop()
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        return total
    except (OSError, ValueError, IndexError):
        return None


def bench_http(url: str, path: str, payloads: list[bytes], rows_per_request: int, clients: int,
               seconds: float, server_pid: int | None = None) -> dict[str, Any]:
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
    t0, client0 = time.perf_counter(), time.process_time()
    server0 = process_tree_cpu(server_pid) if server_pid else None
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(60)
    elapsed = time.perf_counter() - t0
    client_cpu = time.process_time() - client0
    server1 = process_tree_cpu(server_pid) if server_pid else None
    return _http_result(latencies, errors, rows_per_request, elapsed, client_cpu, server0, server1)


class _Connection:
    """One keep-alive HTTP/1.1 connection of the asyncio load generator: a request's bytes are built once,
    the answer is read by httptools' response parser (uvicorn's own parser); no pipelining."""

    def __init__(self) -> None:
        import httptools

        self.parser = httptools.HttpResponseParser(self)
        self.transport: Any = None
        self.waiter: Any = None
        self.body: list[bytes] = []

    # asyncio.Protocol
    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(ConnectionError(f"connection lost: {exc}"))

    def eof_received(self) -> None:
        return None

    def pause_writing(self) -> None:
        return None

    def resume_writing(self) -> None:
        return None

    # httptools callbacks
    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.waiter.set_result((self.parser.get_status_code(), b"".join(self.body)))

    async def request(self, data: bytes) -> tuple[int, bytes]:
        import asyncio

        self.body = []
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(data)
        return await self.waiter


def bench_http_async(url: str, path: str, payloads: list[bytes], rows_per_request: int, clients: int,
                     seconds: float, server_pid: int | None = None) -> dict[str, Any]:
    """``clients`` keep-alive connections on one asyncio loop (uvloop when installed) POST ``payloads``
    round-robin to ``path`` for ``seconds``, each waiting for its answer before the next request."""
    import asyncio

    host, port = url.split("//", 1)[1].split(":")
    raw = [f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
           f"Content-Length: {len(b)}\r\n\r\n".encode() + b for b in payloads]
    latencies: list[list[float]] = [[] for _ in range(clients)]
    errors = [0] * clients
    marks: dict[str, Any] = {}

    async def client(k: int, conn: _Connection, go: Any, stop: Any) -> None:
        i = k
        await go.wait()
        while not stop.is_set():
            data = raw[i % len(raw)]
            i += clients
            t0 = time.perf_counter()
            status, _ = await conn.request(data)
            latencies[k].append(time.perf_counter() - t0)
            if status != 200:
                errors[k] += 1

    async def run() -> None:
        loop = asyncio.get_running_loop()
        conns = [(await loop.create_connection(_Connection, host, int(port)))[1] for _ in range(clients)]
        go, stop = asyncio.Event(), asyncio.Event()
        tasks = [asyncio.create_task(client(k, c, go, stop)) for k, c in enumerate(conns)]
        await asyncio.sleep(0)
        marks["t0"], marks["client0"] = time.perf_counter(), time.process_time()
        marks["server0"] = process_tree_cpu(server_pid) if server_pid else None
        go.set()
        await asyncio.sleep(seconds)
        stop.set()
        await asyncio.gather(*tasks)
        marks["t1"], marks["client1"] = time.perf_counter(), time.process_time()
        marks["server1"] = process_tree_cpu(server_pid) if server_pid else None
        for c in conns:
            c.transport.close()

    try:
        import uvloop

        runner: Any = uvloop.run
    except ImportError:
        runner = asyncio.run
    runner(run())
    return _http_result(latencies, errors, rows_per_request, marks["t1"] - marks["t0"],
                        marks["client1"] - marks["client0"], marks["server0"], marks["server1"])


def _http_result(latencies: list[list[float]], errors: list[int], rows_per_request: int, elapsed: float,
                 client_cpu: float, server0: float | None, server1: float | None) -> dict[str, Any]:
    lat = sorted(x for per in latencies for x in per)
    requests_done = len(lat)
    per_request = 1000 / max(requests_done, 1)
    return {"rows_per_s": requests_done * rows_per_request / elapsed, "requests": requests_done,
            "rows_per_request": rows_per_request, "seconds": elapsed, "errors": sum(errors),
            "p50_ms": 1000 * lat[len(lat) // 2] if lat else None,
            "p99_ms": 1000 * lat[min(len(lat) - 1, int(0.99 * len(lat)))] if lat else None,
            "server_cpu_ms_per_request": (server1 - server0) * per_request if server0 is not None and server1 is not None else None,
            "client_cpu_ms_per_request": client_cpu * per_request, "load_average": list(os.getloadavg())}


BARS = (("in_process", "A in-process verify_many"),
        ("in_process_convert", "B in-process convert+verify"),
        ("in_process_text", "C in-process verify_rows_text"),
        ("in_process_body_text", "D in-process verify_body_text"))
"""The in-process bars (result key, table label), scoring alone first. C is the denominator of the target."""
TARGET_BAR, TARGET_RATIO = "in_process_text", 0.5


def bench_in_process_bodies(payloads: list[bytes], seconds: float) -> dict[str, Any]:
    """``nemo_gym.verify_body_text`` on the ``/verify`` bodies, one at a time: a ``/verify`` request's work."""
    resolver, reader = VerifierResolver("tool_call"), nemo_gym.RowReader()
    for body in payloads:
        nemo_gym.verify_body_text(body, resolver, "tool_use", reader=reader)
    rows, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for body in payloads:
            nemo_gym.verify_body_text(body, resolver, "tool_use", reader=reader)
        rows += len(payloads)
    elapsed = time.perf_counter() - t0
    rewards = [nemo_gym.verify_body_text(body, resolver, "tool_use", reader=reader)[0]["reward"] for body in payloads]
    return {"rows_per_s": rows / elapsed, "rows": rows, "seconds": elapsed, "mean_reward": statistics.mean(rewards)}


def _timed(fn: Any, *args: Any) -> dict[str, Any]:
    out = fn(*args)
    out["load_average"] = list(os.getloadavg())
    return out


def bench_verify(args: argparse.Namespace) -> dict[str, Any]:
    bodies, pivots, actions = workload(args.rows)
    out: dict[str, Any] = {"rows": args.rows, "clients": args.clients, "batch": args.batch, "workers": args.workers,
                           "client": args.client, "load_average_start": list(os.getloadavg())}
    single = [json.dumps(b).encode() for b in bodies]
    batches = [json.dumps(bodies[i:i + args.batch]).encode() for i in range(0, len(bodies), args.batch)]
    sizes = [len(bodies[i:i + args.batch]) for i in range(0, len(bodies), args.batch)]
    out["bytes_per_row"] = sum(map(len, single)) / len(single)
    out["in_process"] = _timed(bench_in_process, pivots, actions, args.seconds)
    out["in_process_convert"] = _timed(bench_in_process_rows, bodies, args.batch, args.seconds)
    text_before = _timed(bench_in_process_text, batches, sizes, args.seconds)
    out["in_process_body_text"] = _timed(bench_in_process_bodies, single, args.seconds)
    http = bench_http_async if args.client == "asyncio" else bench_http
    proc, url = start_server(args.workers)
    try:
        check = requests.post(url + "/verify_batch", json=bodies[:64]).json()
        out["http_mean_reward_check"] = statistics.mean(r["reward"] for r in check)
        http(url, "/verify", single[:64], 1, args.clients, 1.0)  # warm both workers
        out["verify"] = http(url, "/verify", single, 1, args.clients, args.seconds, proc.pid)
        out["verify_batch"] = http(url, "/verify_batch", batches, args.batch, args.clients, args.seconds, proc.pid)
        out["server_metrics_one_worker"] = requests.get(url + "/metrics", params={"format": "json"}).json()["routes"]
    finally:
        proc.terminate()
        proc.wait(30)
    text_after = _timed(bench_in_process_text, batches, sizes, args.seconds)
    # the denominator: bar C measured before and after the HTTP faces, the faster of the two (the stricter ratio)
    out["in_process_text"] = max(text_before, text_after, key=lambda r: r["rows_per_s"])
    out["in_process_text_runs"] = [text_before, text_after]
    out["load_average_end"] = list(os.getloadavg())
    out["target"] = {"bar": TARGET_BAR, "ratio": TARGET_RATIO, "counting": (
        "rows/s over HTTP (rows answered with status 200 per second of wall time, server and client on this "
        "machine) / rows/s of nemo_gym.verify_rows_text on the same rows as --batch-row request bodies in one "
        "thread (bytes in: JSON decode, row -> pivot + action, verify, answer encode), the faster of a run "
        "before and one after the HTTP faces")}
    base = out["in_process"]["rows_per_s"]
    for face in ("verify", "verify_batch"):
        r = out[face]
        r["fraction_of_in_process"] = r["rows_per_s"] / base
        r["fraction_of_in_process_convert"] = r["rows_per_s"] / out["in_process_convert"]["rows_per_s"]
        r["fraction_of_in_process_text"] = r["rows_per_s"] / out["in_process_text"]["rows_per_s"]
        r["fraction_of_in_process_body_text"] = r["rows_per_s"] / out["in_process_body_text"]["rows_per_s"]
        r["meets_target"] = r["fraction_of_in_process_text"] >= TARGET_RATIO
    return out


# --------------------------------------------------------------------------- main
def http_stack() -> dict[str, str | None]:
    """Versions of what the server runs on (uvicorn picks httptools and uvloop when they are installed)."""
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {}
    for name in ("uvicorn", "httptools", "uvloop", "fastapi", "starlette"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def print_table(v: dict[str, Any]) -> None:
    print(f"\nserve throughput: {v['rows']} tool_call rows (~{v['bytes_per_row'] / 1000:.0f} kB each), {v['clients']} "
          f"clients ({v['client']}), {v['workers']} uvicorn workers, batch {v['batch']}")
    print("ratios: rows/s over each in-process bar (one thread): A verify_many alone, B rows -> pivot + action + "
          "verify_many, C B plus JSON decode/encode (--batch rows per body; the target's bar), D C one row per body")
    print(f"{'face':<32}{'rows/s':>9}{'/A':>7}{'/B':>7}{'/C':>7}{'/D':>7}{'p50 ms':>9}{'p99 ms':>9}{'errors':>7}"
          f"{'srv cpu ms/req':>16}{'cli cpu ms/req':>16}{'load 1m':>9}")
    bars = [v[key]["rows_per_s"] for key, _ in BARS]
    for (key, label), rate in zip(BARS, bars):
        ratios = "".join(f"{rate / bar:>7.2f}" for bar in bars)
        print(f"{label:<32}{rate:>9.0f}{ratios}{'-':>9}{'-':>9}{'-':>7}{'-':>16}{'-':>16}"
              f"{v[key]['load_average'][0]:>9.2f}")
    for face, label in (("verify", "POST /verify (1 row)"), ("verify_batch", f"POST /verify_batch ({v['batch']} rows)")):
        r = v[face]
        ratios = "".join(f"{r['rows_per_s'] / bar:>7.2f}" for bar in bars)
        server = "-" if r.get("server_cpu_ms_per_request") is None else f"{r['server_cpu_ms_per_request']:.2f}"
        print(f"{label:<32}{r['rows_per_s']:>9.0f}{ratios}{r['p50_ms']:>9.1f}{r['p99_ms']:>9.1f}{r['errors']:>7}"
              f"{server:>16}{r['client_cpu_ms_per_request']:>16.2f}{r['load_average'][0]:>9.2f}")
    runs = ", ".join(f"{x['rows_per_s']:.0f}" for x in v["in_process_text_runs"])
    print(f"target: /verify >= {TARGET_RATIO}x bar C (C runs before/after the HTTP faces: {runs} rows/s; the faster "
          f"is used): /verify {v['verify']['fraction_of_in_process_text']:.2f}x "
          f"({'met' if v['verify']['meets_target'] else 'MISSED'}); load average at start "
          f"{', '.join(f'{x:.2f}' for x in v['load_average_start'])}, at end {', '.join(f'{x:.2f}' for x in v['load_average_end'])}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=512)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--client", choices=("asyncio", "requests"), default="asyncio",
                        help="load generator: asyncio connections (uvloop + httptools when installed), or requests threads")
    args = parser.parse_args()
    out: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                       "http_stack": http_stack()},
                           "verify": bench_verify(args)}
    print_table(out["verify"])
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
