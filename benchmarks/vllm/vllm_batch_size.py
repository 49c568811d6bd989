"""Does a play's outcome depend on the batch size it was played at? The same tasks, seed and model played at
several batch sizes on each engine, greedily and at T=1: task success and the share of episodes whose
transcript equals the one played at the first batch size.

The ``hf`` engine samples every row from its own generator and computes in float32, so its plays should not
move with the batch (issue 29). vLLM on a CPU has no batch-invariant kernels (vLLM's ``VLLM_BATCH_INVARIANT``
needs a GPU), so a token's logits change in their last bits with the batch around it, and at T=1 one flipped
token sends an episode elsewhere. This measures how far::

    .venv-vllm/bin/python benchmarks/vllm/vllm_batch_size.py                         # the shipped tiny base
    .venv-vllm/bin/python benchmarks/vllm/vllm_batch_size.py --model runs/real_model/base_model --tools none \\
        --window 1024 --engines vllm --dtypes bfloat16 --batches 32,64 --limit 96 --out /tmp/smollm2.json

It prints a table and writes ``benchmarks/vllm/results/vllm_batch_size.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from pivot_envs.experiments.engines import EngineSettings  # noqa: E402
from pivot_envs.experiments.evaluation import Sampling, play_tasks  # noqa: E402


def play(args: argparse.Namespace, engine: str, dtype: str, batch: int, temperature: float) -> list[dict[str, Any]]:
    """The rows of one play of the tasks (``details``), sorted by episode id."""
    settings = EngineSettings(kind=engine, dtype=dtype, kv_cache_gib=2.0, max_model_len=max(512, args.window + args.max_new_tokens),
                              tools=args.tools)
    sampling = Sampling(engine=settings, max_new_tokens=args.max_new_tokens, max_prompt_tokens=args.window,
                        batch_size=batch, num_threads=2)
    report = play_tasks(args.model, args.domain, args.tasks, sampling, seed=args.seed, temperature=temperature,
                        repeats=1, max_turns=args.max_turns, limit=args.limit)
    rows = report["episodes_sampled_rows" if temperature > 0 else "episode_rows"]
    return sorted(rows, key=lambda r: str(r["id"]))


def transcript(row: dict[str, Any]) -> str:
    return json.dumps(row.get("messages"), sort_keys=True)


def measure(args: argparse.Namespace, save: Any) -> list[dict[str, Any]]:
    """Every play's row; ``save(table)`` after each one, so a stopped run keeps what it measured."""
    table: list[dict[str, Any]] = []
    for engine in args.engines.split(","):
        for dtype in (args.dtypes.split(",") if engine == "vllm" else ["float32"]):
            for temperature in (0.0, 1.0):
                first: dict[str, str] | None = None
                for batch in (int(b) for b in args.batches.split(",")):
                    began = time.perf_counter()
                    rows = play(args, engine, dtype, batch, temperature)
                    seconds = time.perf_counter() - began
                    played = {str(r["id"]): transcript(r) for r in rows}
                    first = first or played
                    same = sum(played.get(k) == v for k, v in first.items()) / len(first)
                    success = sum(bool(r.get("success")) for r in rows) / len(rows)
                    table.append({"engine": engine, "dtype": dtype, "temperature": temperature, "batch": batch,
                                  "episodes": len(rows), "success": round(success, 4),
                                  "same_as_first_batch": round(same, 4), "seconds": round(seconds, 1)})
                    print(_line(table[-1]), flush=True)
                    save(table)
    return table


def _line(r: dict[str, Any]) -> str:
    return (f"| {r['engine']} | {r['dtype']} | {'greedy' if r['temperature'] == 0 else 'T=1'} | {r['batch']} | "
            f"{r['episodes']} | {r['success']:.3f} | {r['same_as_first_batch']:.0%} | {r['seconds']:.0f} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(ROOT / "experiments" / "base_models" / "terminal"))
    parser.add_argument("--domain", default="terminal")
    parser.add_argument("--tasks", default="bundled:terminal:test")
    parser.add_argument("--tools", default="auto", help="where tool specs go in the prompt (auto, none)")
    parser.add_argument("--window", type=int, default=256, help="prompt window in tokens")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--max-turns", type=int, default=8)
    parser.add_argument("--limit", type=int, default=48, help="tasks played")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batches", default="1,8,32", help="batch sizes; the first is the reference")
    parser.add_argument("--engines", default="hf,vllm")
    parser.add_argument("--dtypes", default="float32,bfloat16", help="the vLLM engine's dtypes")
    parser.add_argument("--out", type=Path,
                        default=Path(__file__).resolve().parent / "results" / "vllm_batch_size.json")
    args = parser.parse_args(argv)
    print("| engine | dtype | sampling | batch | episodes | task success | transcripts as at the first batch | s |")
    print("|---|---|---|---|---|---|---|---|")
    model = Path(args.model).resolve()
    shown = str(model.relative_to(ROOT)) if model.is_relative_to(ROOT) else args.model
    args.out.parent.mkdir(parents=True, exist_ok=True)

    def save(table: list[dict[str, Any]]) -> None:
        args.out.write_text(json.dumps({"command": " ".join(["python", *sys.argv]), "model": shown,
                                        "tasks": args.tasks, "limit": args.limit, "seed": args.seed, "rows": table},
                                       indent=1) + "\n", encoding="utf-8")

    measure(args, save)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
