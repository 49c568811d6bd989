"""Rollouts as a service vs calling the backends directly, and a backend killed mid-run.

Two real ``transformers serve`` backends on 127.0.0.1 serve a tiny untrained model (built offline).
The same chat requests (bundled tool_use test pivots, rendered as the openai agent renders them)
are sent (1) directly with ``AsyncOpenAI`` round-robin over both backends at the same concurrency,
then scored with ``verify_batch``, and (2) through the rollout service over HTTP (POST /rollouts,
poll GET /rollouts/{id}). (3) repeats (2) with one backend killed once the job is running: every
sample must still come back. Prints a table; writes benchmarks/serving/results/serve_rollouts.json.

    python benchmarks/serving/serve_rollouts.py [--pivots 12] [--n 4] [--max-tokens 24] [--repeats 3]
"""

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.servers import start_transformers_serve  # noqa: E402
from tests.serve.test_rollouts import call, running  # noqa: E402

from pivot_envs.agents.openai_agent import OpenAIAgent, parse_choice  # noqa: E402
from pivot_envs.serve.rollouts import RolloutService  # noqa: E402
from pivot_envs.sources import resolve_pivots  # noqa: E402
from pivot_envs.verifiers.batch import VerifierResolver, verify_batch  # noqa: E402


def direct(urls, model, pivots, n, max_tokens, concurrency):
    from openai import AsyncOpenAI

    agent = OpenAIAgent(model, "http://unused/v1", temperature=1.0, max_new_tokens=max_tokens)
    bodies = [(p, agent.request_body(p)) for p in pivots for _ in range(n)]

    async def main():
        clients = [AsyncOpenAI(base_url=u, api_key="EMPTY", max_retries=0, timeout=120) for u in urls]
        sem = asyncio.Semaphore(concurrency)

        async def one(k, body):
            async with sem:
                resp = await clients[k % len(clients)].chat.completions.create(**body, logprobs=True)
            return parse_choice(resp.choices[0])

        try:
            return await asyncio.gather(*(one(k, b) for k, (_, b) in enumerate(bodies)))
        finally:
            for c in clients:
                await c.close()

    start = time.perf_counter()
    completions = asyncio.run(main())
    results = verify_batch([c.action for c in completions], [p for p, _ in bodies], VerifierResolver().for_pivot)
    return time.perf_counter() - start, len(results)


def through_service(root, model, ids, n, max_tokens, on_running=None):
    start = time.perf_counter()
    code, made = call("POST", f"{root}/rollouts", {"pivot_ids": ids, "domain": "tool_use", "split": "test", "n": n,
                                                   "model": model, "sampling": {"temperature": 1.0, "max_tokens": max_tokens}})
    assert code == 200, made
    fired = False
    while True:
        view = call("GET", f"{root}/rollouts/{made['id']}")[1]
        if on_running and not fired and view["attempts"] >= 2:
            on_running()
            fired = True
        if view["status"] in ("done", "failed", "cancelled"):
            return time.perf_counter() - start, view
        time.sleep(0.02)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pivots", type=int, default=12)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "serve_rollouts.json"))
    args = parser.parse_args()

    from pivot_envs.models.reference import build_reference_model

    tmp = Path(tempfile.mkdtemp(prefix="serve_rollouts_"))
    model = str(build_reference_model("tool_use", tmp / "tiny", steps=0, lm_steps=0, vocab_size=512))
    with ThreadPoolExecutor(2) as pool:
        servers = list(pool.map(lambda k: start_transformers_serve(tmp / f"serve{k}.log", force_model=model), range(2)))
    try:
        urls = [s.base_url for s in servers]
        pivots = resolve_pivots(None, domain="tool_use", split="test")[: args.pivots]
        ids = [p.id for p in pivots]
        total = len(ids) * args.n
        direct(urls, model, pivots[:2], 1, args.max_tokens, args.concurrency)  # warm-up: model load, first requests
        rows = {"direct": [], "service": []}
        service = RolloutService(tmp / "state", backends=urls, run_workers=args.concurrency)
        with running(service) as root:
            through_service(root, model, ids[:2], 1, args.max_tokens)  # warm-up
            for _ in range(args.repeats):  # interleaved, so drift hits both alike
                rows["direct"].append(direct(urls, model, pivots, args.n, args.max_tokens, args.concurrency)[0])
                seconds, view = through_service(root, model, ids, args.n, args.max_tokens)
                assert view["status"] == "done", view
                rows["service"].append(seconds)
            killed_s, killed = through_service(root, model, ids, args.n, args.max_tokens, on_running=lambda: servers[1].proc.kill())
        entries = [e for g in killed["results"] for e in g]
        ok = sum(1 for e in entries if e and e["text"] is not None and e["error"] is None)
        med = {k: statistics.median(v) for k, v in rows.items()}
        overhead = med["service"] / med["direct"] - 1
        report = {
            "backends": 2, "pivots": len(ids), "n": args.n, "samples": total, "max_tokens": args.max_tokens,
            "concurrency": args.concurrency, "repeats": args.repeats,
            "direct_s": rows["direct"], "service_s": rows["service"],
            "direct_median_s": round(med["direct"], 3), "service_median_s": round(med["service"], 3),
            "overhead": round(overhead, 4), "overhead_target": 0.10, "overhead_ok": overhead <= 0.10,
            "killed_run": {"status": killed["status"], "seconds": round(killed_s, 3), "samples": total, "completed": ok,
                           "lost": total - ok, "retries": killed["retries"], "attempts": killed["attempts"]},
        }
        print(f"{'run':<28}{'samples':>8}{'seconds':>10}{'samples/s':>11}")
        print(f"{'direct (2 backends)':<28}{total:>8}{med['direct']:>10.2f}{total / med['direct']:>11.1f}")
        print(f"{'service (2 backends)':<28}{total:>8}{med['service']:>10.2f}{total / med['service']:>11.1f}")
        print(f"{'service, 1 killed mid-run':<28}{ok:>8}{killed_s:>10.2f}{ok / killed_s:>11.1f}")
        print(f"overhead {overhead:+.1%} (target <= 10%); killed run: {ok}/{total} samples, {killed['retries']} retried, "
              f"status {killed['status']}")
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    finally:
        for s in servers:
            s.stop()


if __name__ == "__main__":
    main()
