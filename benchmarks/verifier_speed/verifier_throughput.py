"""Verifier throughput on the red team's terminal rows (issue 48): ``pivot-envs verify`` over the cases of
``benchmarks/rewards/reward_hacks.py`` at a fixed draw of terminal pivots, scored by the domain's default verifier of the code
that runs it. The extra sandbox runs of the new rules (an output typed in is run again on an emptied tree; a turn's
calls run together) must not sink the demo: target at least 0.7x the rows per second before.

    python benchmarks/verifier_speed/verifier_throughput.py --export rows.jsonl --limit 60       # the rows (this code's families)
    python benchmarks/verifier_speed/verifier_throughput.py --rows rows.jsonl                     # time this install's pivot-envs
    python benchmarks/verifier_speed/verifier_throughput.py --rows rows.jsonl --pivot-envs OLD/bin/pivot-envs   # another install

Each row carries its pivot (context, tools, fixture, meta) and domain, so each install scores it with its own
default verifier. The table: rows, seconds (the best of ``--repeats`` runs of the whole command, a fresh process each:
start-up included), rows per second.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pivot_envs.redteam.run import build_cases
from pivot_envs.redteam.setup import domain_setup



def export(path: Path, limit: int, seed: int) -> int:
    setup = domain_setup("terminal", limit=limit, seed=seed)
    cases, _ = build_cases(setup, progress=True)
    with path.open("w", encoding="utf-8") as out:
        for i, case in enumerate(cases):
            p = case.pivot
            row = {"id": f"{p.id}/{case.family}/{i}", "domain": p.domain, "expected": p.expert, "action": case.action,
                   "tools": p.tools, "context": p.context, "meta": p.meta,
                   "fixture": p.fixture.to_dict() if p.fixture is not None else None}
            out.write(json.dumps(row) + "\n")
    return len(cases)


def time_verify(pivot_envs: str, rows: Path, repeats: int) -> tuple[float, int, int]:
    """The best wall time of ``pivot-envs verify`` over ``rows``, and the rows passed and errored in the last run."""
    best = float("inf")
    passed = errors = 0
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.jsonl"
        for _ in range(repeats):
            t0 = time.perf_counter()
            subprocess.run([pivot_envs, "verify", "-i", str(rows), "-o", str(out)], check=True,
                           stdout=subprocess.DEVNULL, cwd=tmp)
            best = min(best, time.perf_counter() - t0)
        results = [json.loads(line) for line in out.read_text().splitlines()]
        passed = sum(bool(r.get("passed")) for r in results)
        errors = sum(bool(r.get("error")) for r in results)
    return best, passed, errors


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--export", type=Path, help="write the rows here and stop")
    ap.add_argument("--limit", type=int, default=60, help="terminal pivots of the export (default %(default)s)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rows", type=Path, help="the rows to time")
    ap.add_argument("--pivot-envs", default=shutil.which("pivot-envs") or "pivot-envs",
                    help="the pivot-envs command of the install to time (default: this one)")
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args(argv)
    if args.export:
        n = export(args.export, args.limit, args.seed)
        print(f"wrote {n} rows to {args.export}", file=sys.stderr)
        return 0
    if not args.rows:
        ap.error("give --export FILE or --rows FILE")
    n = sum(1 for _ in args.rows.open())
    seconds, passed, errors = time_verify(args.pivot_envs, args.rows, args.repeats)
    print("| install | rows | passed | errors | seconds | rows/s |\n|---|---|---|---|---|---|")
    print(f"| {args.pivot_envs} | {n} | {passed} | {errors} | {seconds:.1f} | {n / seconds:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

