"""Throughput of the ``exec`` verifier: verified pairs per second with 1 and 2 workers.

A pair is one candidate command checked against the expert's (cached) effects
at a pivot: one sandbox run per pair. Candidates differ from the expert
command (no "identical command" shortcut), half of them equivalent.

Also measured: one sandbox run from the post-setup snapshot (what the
verifier does) against replaying a 6-command setup in every run (the
alternative design), to show what the snapshot saves.

    python benchmarks/verifier_speed/exec_verifier.py [--pairs 200] [--backend bwrap]

Prints a table and writes ``benchmarks/verifier_speed/results/exec.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

from pivot_envs.actions import parse_action
from pivot_envs.types import Fixture, Pivot
from pivot_envs.verifiers.exec import ExecVerifier
from pivot_envs.verifiers.sandbox import SandboxRequest, Seed

RESULTS = Path(__file__).resolve().parent / "results" / "exec.json"

FILES = {
    "access.log": "".join(f"10.0.0.{i % 7} GET /p{i % 5} {200 if i % 4 else 404}\n" for i in range(200)),
    "data/a.csv": "id,v\n" + "".join(f"{i},{i * 3 % 11}\n" for i in range(50)),
    "data/b.csv": "id,v\n" + "".join(f"{i},{i * 5 % 13}\n" for i in range(50)),
    "notes.txt": "alpha\nbeta\ngamma\nbeta\n",
}
SETUP = "\n".join([
    "mkdir -p out archive",
    "cp data/a.csv archive/",
    "sort notes.txt > archive/notes.sorted",
    "export LC_ALL=C",
    "chmod 600 archive/a.csv",
    "ls -R > manifest.txt",
])

CASES = [  # (expert, [candidates]): every candidate differs textually from the expert
    ("grep -c 404 access.log", ["grep 404 access.log | wc -l", "awk '$4==404' access.log | wc -l",
                                "grep -c 200 access.log", "grep -c ' 404' access.log"]),
    ("sort -u notes.txt > out/uniq.txt", ["sort notes.txt | uniq > out/uniq.txt", "sort notes.txt > out/uniq.txt",
                                          "sort -u < notes.txt > out/uniq.txt", "uniq notes.txt > out/uniq.txt"]),
    ("cut -d, -f2 data/a.csv | tail -n +2 | paste -sd+ | bc", ["awk -F, 'NR>1{s+=$2} END{print s}' data/a.csv",
                                                                "tail -n +2 data/a.csv | cut -d, -f2 | paste -sd+ | bc",
                                                                "awk -F, '{s+=$2} END{print s}' data/b.csv",
                                                                "wc -l data/a.csv"]),
    ("rm archive/notes.sorted", ["rm -f archive/notes.sorted", "cd archive && rm notes.sorted",
                                 "rm -r archive", "true"]),
]


def pivots() -> list[Pivot]:
    out = []
    for i, (expert, _) in enumerate(CASES):
        call = {"id": "c", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": expert})}}
        out.append(Pivot(id=f"bench-{i}", domain="terminal", context=[], tools=[],
                         expert={"role": "assistant", "content": None, "tool_calls": [call]},
                         fixture=Fixture(files=FILES, setup=SETUP, workdir="/testbed")))
    return out


def pairs(n: int) -> tuple[list, list[Pivot]]:
    ps = pivots()
    flat = [(ps[i], cand) for i, (_, cands) in enumerate(CASES) for cand in cands]
    actions, batch = [], []
    for k in range(n):
        pivot, cand = flat[k % len(flat)]
        call = {"id": "c", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": cand})}}
        actions.append(parse_action({"role": "assistant", "content": None, "tool_calls": [call]}))
        batch.append(pivot)
    return actions, batch


def throughput(workers: int, n: int, backend: str) -> dict:
    verifier = ExecVerifier(backend=backend, workers=workers)
    actions, batch = pairs(n)
    warm = verifier.verify_many(actions[:len(CASES) * 4], batch[:len(CASES) * 4])  # setup + expert runs cached
    errors = [r.error for r in warm if r.error]
    if errors:
        raise SystemExit(f"verifier errors while warming up: {errors[:3]}")
    before = verifier.stats()
    t0 = time.perf_counter()
    results = verifier.verify_many(actions, batch)
    elapsed = time.perf_counter() - t0
    after = verifier.stats()
    assert after["expert_runs"] == before["expert_runs"] and after["setup_runs"] == before["setup_runs"]
    return {"workers": workers, "pairs": n, "seconds": round(elapsed, 3), "pairs_per_s": round(n / elapsed, 1),
            "passed": sum(r.passed for r in results), "errors": sum(r.error is not None for r in results),
            "sandbox_runs": after["candidate_runs"] - before["candidate_runs"]}


def setup_strategies(backend: str, repeats: int) -> dict:
    """ms per run: command on the snapshot seed vs. setup replayed before the command in every run."""
    verifier = ExecVerifier(backend=backend)
    sandbox = verifier.sandbox()
    fixture = pivots()[0].fixture
    assert fixture is not None
    snapshot = verifier.seed(fixture)  # the verifier's own post-setup seed
    base = Seed.from_fixture_files(fixture.workdir, fixture.files)
    timings: dict[str, list[float]] = {"snapshot": [], "replay": []}
    for _ in range(repeats):
        for name, seed, script in (("snapshot", snapshot, "grep -c 404 access.log"),
                                   ("replay", base, SETUP + "\ngrep -c 404 access.log")):
            t0 = time.perf_counter()
            result = sandbox.run(SandboxRequest(script=script, seed=seed))
            timings[name].append((time.perf_counter() - t0) * 1000)
            assert result.completed and result.stdout.strip() == b"50", result
    return {name: round(statistics.median(v), 1) for name, v in timings.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=200, help="pairs per measurement")
    parser.add_argument("--backend", default="bwrap", choices=["bwrap", "docker", "auto"])
    args = parser.parse_args()
    load_before = os.getloadavg()
    rows = [throughput(w, args.pairs, args.backend) for w in (1, 2)]
    setup = setup_strategies(args.backend, repeats=15)
    print(f"{'workers':>7} {'pairs':>6} {'seconds':>8} {'pairs/s':>8} {'passed':>7} {'errors':>7}")
    for r in rows:
        print(f"{r['workers']:>7} {r['pairs']:>6} {r['seconds']:>8} {r['pairs_per_s']:>8} {r['passed']:>7} {r['errors']:>7}")
    print(f"one run, median ms: snapshot seed {setup['snapshot']}, setup replayed each run {setup['replay']}")
    target = 50.0
    two = rows[1]["pairs_per_s"]
    print(f"target >= {target} pairs/s with 2 workers: {'met' if two >= target else 'NOT met'} ({two}); "
          f"{os.cpu_count()} CPUs, load average before {load_before[0]:.1f}")
    load = os.getloadavg()
    out = {
        "benchmark": "exec_verifier",
        "backend": args.backend,
        "rows": rows,
        "run_ms_median": setup,
        "target_pairs_per_s_2_workers": target,
        "target_met": two >= target,
        "machine": {"cpus": os.cpu_count(), "loadavg_1_5_15_before": [round(x, 2) for x in load_before],
                    "loadavg_1_5_15_after": [round(x, 2) for x in load],
                    "python": platform.python_version(), "platform": platform.platform()},
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
