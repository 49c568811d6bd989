"""Does the bfloat16 engine keep the arms' differences? The same models played in float32 and bfloat16 (issue 36).

Full fine-tuning at 1e-5 moves weights by about one bfloat16 step, so part of an update may not survive into a
bfloat16 evaluation. This plays each model (e.g. the real preset's base and its PivotRL arm) on the same held-out
tasks at T=1 in both dtypes, and prints task success per model and dtype with the arms' difference to the first
model in each dtype (paired bootstrap over tasks):

    .venv-vllm/bin/python benchmarks/vllm_dtype_check.py --tasks-file runs/real36/data/test_tasks.jsonl \\
        --limit 60 --repeats 2 runs/real36/base_model runs/real36/runs/pivotrl-s0-KEY/train/final

If the difference is the same in both, the bfloat16 engine keeps it and the arms may be played in bfloat16 (about
twice as fast on a CPU); if not, play them in float32 (``DemoConfig.engine_dtype``). Each model and dtype runs in a
process of its own (a fresh engine).
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

DTYPES = ("float32", "bfloat16")


def play(model: str, tasks: str, dtype: str, repeats: int) -> dict[str, float]:
    """Per-task pass@1 at T=1 of ``model`` on ``tasks`` in ``dtype`` (this process)."""
    from pivot_envs.experiments.arms import item_outcomes
    from pivot_envs.experiments.engines import EngineSettings
    from pivot_envs.experiments.evaluation import Sampling, play_tasks

    engine = EngineSettings(kind="vllm", dtype=dtype, kv_cache_gib=2.0, max_model_len=1120, tools="none")
    sampling = Sampling(engine=engine, max_new_tokens=96, max_prompt_tokens=1024, batch_size=32, num_threads=None)
    report = play_tasks(model, "terminal", tasks, sampling, seed=0, temperature=1.0, repeats=repeats, max_turns=8)
    return {k: v for k, v in item_outcomes(report)["task_sampled"].items() if v is not None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+", help="model folders; the first is the reference of the differences")
    ap.add_argument("--tasks-file", required=True, help="held-out tasks (a trajectory JSONL)")
    ap.add_argument("--limit", type=int, default=60, help="tasks played (a seeded sample)")
    ap.add_argument("--repeats", type=int, default=2, help="T=1 episodes per task")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)  # internal: one model and dtype
    args = ap.parse_args(argv)
    if args.one:
        model, dtype, tasks = json.loads(args.one)
        print(json.dumps(play(model, tasks, dtype, args.repeats)))
        return 0
    from pivot_envs.experiments.stats import paired_bootstrap

    lines = Path(args.tasks_file).read_text(encoding="utf-8").splitlines()
    chosen = random.Random(0).sample(lines, min(args.limit, len(lines)))
    tasks = Path(tempfile.mkdtemp(prefix="dtype_check_")) / "tasks.jsonl"
    tasks.write_text("\n".join(chosen) + "\n", encoding="utf-8")
    outcomes: dict[tuple[str, str], dict[str, float]] = {}
    for model in args.models:
        for dtype in DTYPES:
            out = subprocess.run([sys.executable, __file__, *args.models, "--tasks-file", args.tasks_file,
                                  "--repeats", str(args.repeats), "--one", json.dumps([model, dtype, str(tasks)])],
                                 check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
            outcomes[(model, dtype)] = json.loads(out)
    print(f"| model | {' | '.join(DTYPES)} | " + " | ".join(f"- first model ({d})" for d in DTYPES) + " |")
    print("|---|" + "---|" * (2 * len(DTYPES)))
    ref = args.models[0]
    for model in args.models:
        cells = [f"{sum(outcomes[(model, d)].values()) / max(1, len(outcomes[(model, d)])):.3f}" for d in DTYPES]
        for d in DTYPES:
            if model == ref:
                cells.append("-")
                continue
            ids = sorted(set(outcomes[(model, d)]) & set(outcomes[(ref, d)]))
            test = paired_bootstrap([outcomes[(model, d)][i] for i in ids], [outcomes[(ref, d)][i] for i in ids])
            cells.append(f"{test['diff']:+.3f} [{test['ci_low']:+.3f}, {test['ci_high']:+.3f}]")
        print(f"| {Path(model).name if Path(model).name != 'final' else Path(model).parents[1].name} | "
              + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
