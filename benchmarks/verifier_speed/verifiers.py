"""Throughput of the verifiers, and the cost of ``PivotEnv.step`` over a direct verifier call.

Usage::

    python benchmarks/verifier_speed/verifiers.py                 # ~1 minute on CPU
    python benchmarks/verifier_speed/verifiers.py --seconds 0.3   # quicker, noisier
    python benchmarks/verifier_speed/verifiers.py --exec-pairs 0 --no-judge

The core verifiers run single-threaded, pinned to one CPU core where the OS
allows it, on a deterministic synthetic workload (seed 0): tau-bench-like
tools with nested JSON schemas, expert calls, and candidate actions that are
re-spelled equivalents (other key order, numbers as text, whitespace,
explicit defaults), wrong values, other tools, invalid JSON and text replies.
Each figure is the best of ``--repeats`` timed runs (the least disturbed by
other processes) with the median beside it. ``exec`` (pairs/s with 2 workers)
and ``judge`` (against the project's local fake OpenAI server: client overhead
only, no model) run when those verifiers are registered; ``env.step`` when
``pivot_envs.env.PivotEnv`` imports. Writes ``benchmarks/verifier_speed/results/verifiers.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

from pivot_envs.actions import message_text, parse_action
from pivot_envs.types import Action, Fixture, Pivot
from pivot_envs.verifiers import catalog  # noqa: F401  (registers every built-in)
from pivot_envs.verifiers.base import Verifier, build_verifier, verifier_names
from pivot_envs.verifiers.defaults import default_verifier_spec

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(__file__).resolve().parent / "results" / "verifiers.json"
TARGETS = {"tool_call": 30_000, "fuzzy": 100_000, "schema": 20_000}

# --------------------------------------------------------------------------- workload

PASSENGER = {"type": "object", "properties": {
    "first_name": {"type": "string"}, "last_name": {"type": "string"}, "dob": {"type": "string"}},
    "required": ["first_name", "last_name", "dob"]}
TOOLS = [
    {"type": "function", "function": {"name": "get_user_details", "parameters": {
        "type": "object", "properties": {"user_id": {"type": "string"}}, "required": ["user_id"]}}},
    {"type": "function", "function": {"name": "search_direct_flight", "parameters": {
        "type": "object", "properties": {"origin": {"type": "string"}, "destination": {"type": "string"},
                                         "date": {"type": "string"}}, "required": ["origin", "destination", "date"]}}},
    {"type": "function", "function": {"name": "book_reservation", "parameters": {
        "type": "object",
        "properties": {
            "user_id": {"type": "string"}, "origin": {"type": "string"}, "destination": {"type": "string"},
            "flight_type": {"type": "string", "enum": ["one_way", "round_trip"]},
            "cabin": {"type": "string", "enum": ["basic_economy", "economy", "business"], "default": "economy"},
            "flights": {"type": "array", "items": {"type": "object", "properties": {
                "flight_number": {"type": "string"}, "date": {"type": "string"}}}},
            "passengers": {"type": "array", "items": PASSENGER},
            "payment_id": {"type": "string"}, "total_baggages": {"type": "integer"},
            "nonfree_baggages": {"type": "integer", "default": 0},
            "insurance": {"type": "string", "enum": ["yes", "no"]}},
        "required": ["user_id", "origin", "destination", "flight_type", "flights", "passengers", "payment_id",
                     "total_baggages", "insurance"]}}},
    {"type": "function", "function": {"name": "calculate", "parameters": {
        "type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}},
    {"type": "function", "function": {"name": "refund", "parameters": {
        "type": "object", "properties": {"reservation_id": {"type": "string"}, "amount": {"type": "number"},
                                         "reason": {"type": "string"}}, "required": ["reservation_id", "amount"]}}},
]
CITIES = ["JFK", "SFO", "LAX", "ORD", "SEA", "BOS", "MIA", "DEN", "ATL", "PHX"]
NAMES = ["Mia", "Noah", "Ava", "Liam", "Ivan", "Sofia", "Yusuf", "Amelia", "Chen", "Olivia"]
REPLIES = ["Your reservation {r} is confirmed for {d}.", "I have refunded {a} dollars to your card.",
           "The flight from {o} to {t} departs at {h}:00.", "Is there anything else I can help you with?"]


def _expert_args(rng: random.Random, tool: str) -> dict[str, Any]:
    o, t = rng.sample(CITIES, 2)
    date = f"2024-05-{rng.randint(1, 28):02d}"
    user = f"{rng.choice(NAMES).lower()}_{rng.choice(NAMES).lower()}_{rng.randint(1000, 9999)}"
    if tool == "get_user_details":
        return {"user_id": user}
    if tool == "search_direct_flight":
        return {"origin": o, "destination": t, "date": date}
    if tool == "calculate":
        return {"expression": f"{rng.randint(10, 999)} * {rng.randint(2, 9)} - {rng.randint(1, 50)}"}
    if tool == "refund":
        return {"reservation_id": f"R{rng.randint(10000, 99999)}", "amount": round(rng.uniform(10, 900), 2),
                "reason": "flight cancelled by the airline"}
    n = rng.randint(1, 2)
    return {"user_id": user, "origin": o, "destination": t, "flight_type": rng.choice(["one_way", "round_trip"]),
            "cabin": rng.choice(["economy", "business"]),
            "flights": [{"flight_number": f"HAT{rng.randint(1, 299):03d}", "date": date}],
            "passengers": [{"first_name": rng.choice(NAMES), "last_name": rng.choice(NAMES),
                            "dob": f"19{rng.randint(50, 99)}-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}"}
                           for _ in range(n)],
            "payment_id": f"credit_card_{rng.randint(100000, 999999)}", "total_baggages": rng.randint(0, 3),
            "insurance": rng.choice(["yes", "no"])}


def _respell(rng: random.Random, args: dict[str, Any]) -> dict[str, Any]:
    """An equivalent spelling: shuffled keys, integers as text, padded strings, explicit defaults."""
    items = list(args.items())
    rng.shuffle(items)
    out: dict[str, Any] = {}
    for k, v in items:
        if isinstance(v, bool):
            out[k] = v
        elif isinstance(v, int):
            out[k] = str(v) if rng.random() < 0.5 else float(v)
        elif isinstance(v, str) and rng.random() < 0.3:
            out[k] = f" {v} "
        else:
            out[k] = v
    if "payment_id" in args and "nonfree_baggages" not in args:
        out["nonfree_baggages"] = 0
    return out


def _call(name: str, args: Any, i: int = 0) -> dict[str, Any]:
    raw = args if isinstance(args, str) else json.dumps(args)
    return {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": raw}}


def make_workload(n_pivots: int = 200, per_pivot: int = 5, seed: int = 0) -> list[tuple[Action, Pivot, str]]:
    """Deterministic (action, pivot, action text) triples: 1 in 6 pivots is a text turn."""
    rng = random.Random(seed)
    names = [t["function"]["name"] for t in TOOLS]
    out = []
    for p in range(n_pivots):
        context = [{"role": "system", "content": "You are an airline agent."},
                   {"role": "user", "content": f"Request {p}: please help with my booking."}]
        if p % 6 == 5:
            reply = rng.choice(REPLIES).format(r=f"R{p:05d}", d="May 3", a=rng.randint(10, 900), o="JFK", t="SFO",
                                               h=rng.randint(6, 22))
            expert = {"role": "assistant", "content": reply}
            variants = [reply, reply.lower() + "!", "  " + reply, "Sorry, I cannot help with that.",
                        json.dumps({"name": "calculate", "arguments": {"expression": "1+1"}})]
        else:
            tool = rng.choice(names)
            args = _expert_args(rng, tool)
            expert = {"role": "assistant", "content": None, "tool_calls": [_call(tool, args)]}
            wrong = dict(args)
            key = rng.choice(list(wrong))
            wrong[key] = "something else" if isinstance(wrong[key], str) else 12345
            variants = [
                {"role": "assistant", "content": None, "tool_calls": [_call(tool, _respell(rng, args))]},
                {"role": "assistant", "content": None, "tool_calls": [_call(tool, _respell(rng, args))]},
                {"role": "assistant", "content": None, "tool_calls": [_call(tool, wrong)]},
                {"role": "assistant", "content": None,
                 "tool_calls": [_call(rng.choice([n for n in names if n != tool]), args)]},
                {"role": "assistant", "content": None, "tool_calls": [_call(tool, json.dumps(args)[:-3])]},
            ]
        pivot = Pivot(id=f"bench-{p}", domain="tool_use", context=context, expert=expert, tools=TOOLS)
        for variant in variants[:per_pivot]:
            action = parse_action(variant)
            out.append((action, pivot, variant if isinstance(variant, str) else message_text(variant)))
    return out


# --------------------------------------------------------------------------- timing


def pin_one_core() -> int | None:
    """Pin this process to one CPU core (the lowest allowed); returns it, or None where unsupported."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    cpu = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})
    return cpu


def throughput(fn: Callable[[], int], seconds: float, repeats: int) -> tuple[float, float]:
    """(best, median) items per second over ``repeats`` runs of about ``seconds / repeats`` each."""
    rates = []
    fn()  # warm caches (per-pivot expert cache, compiled validators)
    for _ in range(repeats):
        done, start = 0, time.perf_counter()
        while True:
            done += fn()
            elapsed = time.perf_counter() - start
            if elapsed >= seconds / repeats:
                break
        rates.append(done / elapsed)
    return max(rates), statistics.median(rates)


def bench_verify(v: Verifier, work: list[tuple[Action, Pivot, str]], from_text: bool = False) -> Callable[[], int]:
    if from_text:
        def run() -> int:
            for _, pivot, text in work:
                v.safe_verify(text, pivot)
            return len(work)
    else:
        def run() -> int:
            for action, pivot, _ in work:
                v.verify(action, pivot)
            return len(work)
    return run


def row(name: str, unit: str, best: float, median: float, target: float | None = None, note: str = "") -> dict:
    return {"name": name, "unit": unit, "best": round(best, 1), "median": round(median, 1),
            "us_per_item": round(1e6 / best, 2) if best else None, "target": target,
            "meets_target": None if target is None else best >= target, "note": note}


def core_rows(seconds: float, repeats: int) -> list[dict]:
    work = make_workload()
    text_turns = [w for w in work if not w[1].expert.get("tool_calls")]
    call_turns = [w for w in work if w[1].expert.get("tool_calls")]
    cases: list[tuple[str, Any, list, bool, float | None, str]] = [
        ("tool_call", "tool_call", work, False, TARGETS["tool_call"], "mixed turns, parsed actions"),
        ("tool_call (calls only)", "tool_call", call_turns, False, None, "tool-call turns only"),
        ("tool_call (from text)", "tool_call", work, True, None, "includes parse_action of the raw text"),
        ("fuzzy", "fuzzy", work, False, TARGETS["fuzzy"],
         "auto target, mixed turns: 5 in 6 compare the canonical JSON of (large) tool calls"),
        ("fuzzy (content)", {"name": "fuzzy", "target": "content"}, text_turns, False, TARGETS["fuzzy"],
         "text turns (its role in the tool_use and search defaults)"),
        ("fuzzy (argument:user_id)", {"name": "fuzzy", "target": "argument:user_id"}, call_turns, False, None, ""),
        ("schema", "schema", work, False, TARGETS["schema"], "mixed turns"),
        ("schema (calls only)", "schema", call_turns, False, None, "tool-call turns only"),
        ("tool_name (swe)", {"name": "tool_name", "aliases": "swe"}, work, False, None, ""),
        ("strict", "strict", work, False, None, "baseline"),
        ("cascade schema>strict>tool_call",
         {"name": "cascade", "stages": ["schema", {"role": "accept", "verifier": "strict"},
                                        {"role": "decide", "verifier": "tool_call"}]}, work, False, None, ""),
        ("default tool_use", default_verifier_spec("tool_use"), work, False, None, ""),
    ]
    rows = []
    for name, spec, items, from_text, target, note in cases:
        v = build_verifier(spec)
        best, median = throughput(bench_verify(v, items, from_text), seconds, repeats)
        rows.append(row(name, "verifications/s", best, median, target, note))
    return rows


# --------------------------------------------------------------------------- env.step


def env_rows(repeats: int) -> tuple[list[dict], str | None]:
    """``env.step(text)`` against a direct ``safe_verify(text, pivot)`` of the same verifier, interleaved
    action by action so that machine noise hits both alike; best of ``repeats`` passes."""
    try:
        from pivot_envs.env import PivotEnv
    except ImportError as exc:
        return [], f"env.step not measured: pivot_envs.env.PivotEnv does not import yet ({exc})"
    work = make_workload(n_pivots=120, per_pivot=5)
    pivots = list({id(p): p for _, p, _ in work}.values())
    env = PivotEnv(pivots=pivots, domain="tool_use", verifier="tool_call")
    verifier = build_verifier("tool_call")
    by_pivot: dict[str, list[str]] = {}
    for _, p, text in work:
        by_pivot.setdefault(p.id, []).append(text)
    n = len(work)
    best = {"step": float("inf"), "direct": float("inf"), "step_many": float("inf"), "verify_many": float("inf")}
    for _ in range(repeats + 1):  # the first pass warms caches
        took = dict.fromkeys(best, 0.0)
        for pid, texts in by_pivot.items():
            pivot = env.pivot_by_id(pid)
            env.reset(options={"pivot_id": pid})
            for text in texts:
                t0 = time.perf_counter()
                env.step(text)
                t1 = time.perf_counter()
                verifier.safe_verify(text, pivot)
                t2 = time.perf_counter()
                took["step"] += t1 - t0
                took["direct"] += t2 - t1
            t0 = time.perf_counter()
            env.step_many(texts)
            t1 = time.perf_counter()
            verifier.verify_many(texts, pivot)
            t2 = time.perf_counter()
            took["step_many"] += t1 - t0
            took["verify_many"] += t2 - t1
        best = {k: min(best[k], took[k] / n) for k in best}
    us = {k: v * 1e6 for k, v in best.items()}
    note = (f"env.step {us['step']:.1f} us vs direct safe_verify(text) {us['direct']:.1f} us: "
            f"+{us['step'] - us['direct']:.1f} us/step (the strict reward for info, the observation, the info dict); "
            f"step_many {us['step_many']:.1f} us/action vs verify_many {us['verify_many']:.1f} us/action")
    return [
        row("env.step (tool_call)", "steps/s", 1 / best["step"], 1 / best["step"], None, "after reset(pivot_id)"),
        row("direct safe_verify(text) (tool_call)", "verifications/s", 1 / best["direct"], 1 / best["direct"], None,
            "same actions, interleaved with the steps"),
        row("env.step_many (tool_call, G=5)", "actions/s", 1 / best["step_many"], 1 / best["step_many"], None, ""),
        row("direct verify_many(texts) (G=5)", "actions/s", 1 / best["verify_many"], 1 / best["verify_many"], None,
            ""),
    ], note


# --------------------------------------------------------------------------- exec and judge


def exec_rows(pairs: int, workers: int = 2) -> tuple[list[dict], str | None]:
    if pairs <= 0:
        return [], "exec not measured (--exec-pairs 0)"
    cls = type(build_verifier("exec"))
    fields = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
    knob = next((k for k in ("workers", "max_workers", "n_workers", "concurrency", "max_concurrency") if k in fields),
                None)
    spec: dict[str, Any] = {"name": "exec"}
    if knob:
        spec[knob] = workers
    bash = {"type": "function", "function": {"name": "bash", "parameters": {
        "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}
    fixture = Fixture(files={"notes.txt": "alpha\nbeta\ngamma\n", "src/app.py": "print('hi')\n"}, workdir="/workspace")
    commands = [("cat notes.txt", "cat ./notes.txt"), ("wc -l < notes.txt", "cat notes.txt | wc -l"),
                ("ls src", "ls ./src"), ("grep -n beta notes.txt", "grep -n 'beta' notes.txt")]
    actions, pivots = [], []
    for i in range(pairs):
        expert_cmd, cand = commands[i % len(commands)]
        expert = {"role": "assistant", "content": None, "tool_calls": [_call("bash", {"command": expert_cmd})]}
        pivots.append(Pivot(id=f"exec-{i}", domain="terminal", context=[], expert=expert, tools=[bash],
                            fixture=fixture))
        actions.append(parse_action({"role": "assistant", "content": None,
                                     "tool_calls": [_call("bash", {"command": cand})]}))
    try:
        v = build_verifier(spec)
        v.verify_many(actions[:2], pivots[:2])  # warm-up (sandbox probe, images)
        start = time.perf_counter()
        results = v.verify_many(actions, pivots)
        elapsed = time.perf_counter() - start
    except Exception as exc:  # noqa: BLE001 - report, do not crash the other figures
        return [], f"exec not measured: {type(exc).__name__}: {exc}"
    errors = sum(r.error is not None for r in results)
    passed = sum(r.passed for r in results)
    note = f"exec: {pairs} pairs, {knob or 'no worker knob'}={workers if knob else '-'}, {passed} passed, {errors} errors"
    return [row("exec", "pairs/s", pairs / elapsed, pairs / elapsed, None, note)], None


def judge_rows(pairs: int) -> tuple[list[dict], str | None]:
    if pairs <= 0:
        return [], "judge not measured (--no-judge)"
    sys.path.insert(0, str(ROOT))
    try:
        from tests.servers import start_fake_openai
    except ImportError as exc:
        return [], f"judge not measured: tests/servers.py (the fake OpenAI server) does not import ({exc})"
    work = make_workload(n_pivots=pairs, per_pivot=1, seed=1)
    server = start_fake_openai()
    try:
        v = build_verifier({"name": "judge", "model": "fake", "base_url": server.base_url,
                            "api_key": "unused", "cache": False})
        start = time.perf_counter()
        results = asyncio.run(v.averify_many([w[0] for w in work], [w[1] for w in work]))
        elapsed = time.perf_counter() - start
    except Exception as exc:  # noqa: BLE001
        return [], f"judge not measured: {type(exc).__name__}: {exc}"
    finally:
        server.stop()
    errors = sum(r.error is not None for r in results)
    note = f"judge: {len(work)} pairs against the local fake server (no model: client overhead only), {errors} errors"
    return [row("judge (fake server)", "pairs/s", len(work) / elapsed, len(work) / elapsed, None, note)], None


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=1.5, help="timed seconds per core figure (split in repeats)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per figure; the best is reported")
    parser.add_argument("--exec-pairs", type=int, default=24, help="pairs for the exec figure (0: skip)")
    parser.add_argument("--judge-pairs", type=int, default=200, help="pairs for the judge figure")
    parser.add_argument("--no-judge", action="store_true", help="skip the judge figure")
    parser.add_argument("--out", type=Path, default=OUT, help="where to write the JSON results")
    args = parser.parse_args(argv)

    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    notes: list[str] = []
    cpu = pin_one_core()
    rows = core_rows(args.seconds, args.repeats)
    env, note = env_rows(args.repeats)
    rows += env
    notes += [note] if note else []
    if allowed is not None:
        os.sched_setaffinity(0, set(allowed))  # exec uses worker processes
    for extra, note in (exec_rows(args.exec_pairs), judge_rows(0 if args.no_judge else args.judge_pairs)):
        rows += extra
        notes += [note] if note else []
        notes += [r["note"] for r in extra if r["note"]]

    result = {
        "benchmark": "verifiers",
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "pinned_cpu": cpu,
        "seconds_per_figure": args.seconds,
        "repeats": args.repeats,
        "verifiers_registered": verifier_names(),
        "rows": rows,
        "notes": notes,
    }
    print(f"{'figure':38s} {'best':>12s} {'median':>12s} {'us/item':>9s}  target")
    for r in rows:
        target = "" if r["target"] is None else f">= {r['target']:,} {'ok' if r['meets_target'] else 'MISSED'}"
        print(f"{r['name']:38s} {r['best']:>12,.0f} {r['median']:>12,.0f} {r['us_per_item']:>9.2f}  {target}"
              f"  [{r['unit']}]")
    for note in notes:
        print("note:", note)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return result


if __name__ == "__main__":
    main()
