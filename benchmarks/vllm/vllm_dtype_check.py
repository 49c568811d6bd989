"""Does the bfloat16 engine keep the arms' differences? The same models played in float32 and bfloat16 (issue 36).

Full fine-tuning at 1e-5 moves weights by about one bfloat16 step, so part of an update may not survive into a
bfloat16 evaluation. This plays each model (e.g. the real preset's base and its PivotRL arm) on the same held-out
items in both dtypes, and prints the figure per model and dtype with the arms' difference to the first model in
each dtype (paired bootstrap over the items). Two measures:

* ``--tasks-file``: task success at T=1 (``--repeats`` episodes a task) on a seeded sample of ``--limit`` tasks;
* ``--pivots-file``: per-turn accuracy at the test pivots, greedy and mean@k at T=1 (``--k``); one turn a pivot,
  so every pivot can be played and the paired differences are tighter than on a task sample.

::

    .venv-vllm/bin/python benchmarks/vllm/vllm_dtype_check.py --tasks-file runs/real36/data/test_tasks.jsonl \\
        --limit 60 --repeats 2 runs/real36/base_model runs/real36/runs/pivotrl-s0-KEY/train/final
    .venv-vllm/bin/python benchmarks/vllm/vllm_dtype_check.py --pivots-file runs/real36/data/test.jsonl --k 4 \\
        runs/real36/base_model runs/real36/runs/sft-s0-KEY/train/final runs/real36/runs/pivotrl-s0-KEY/train/final

If the difference is the same in both, the bfloat16 engine keeps it and the arms may be played in bfloat16 (1.3x
as fast on 2 CPU cores for SmolLM2-135M: docs/results.md); if not, play them in float32
(``DemoConfig.engine_dtype``). Each model and dtype runs in a process of its own (a fresh engine).
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

DTYPES = ("float32", "bfloat16")


def _sampling(dtype: str) -> Any:
    """The real preset's sampling settings (:func:`pivot_envs.experiments.demo.sampling`) on vLLM in ``dtype``, with
    the engine's own thread count."""
    from pivot_envs.experiments.demo import real_config, sampling

    preset = sampling(real_config())
    return replace(preset, engine=replace(preset.engine, kind="vllm", dtype=dtype), num_threads=None)


def play(model: str, tasks: str, dtype: str, repeats: int) -> dict[str, dict[str, float]]:
    """Per-task pass@1 at T=1 of ``model`` on ``tasks`` in ``dtype`` (this process)."""
    from pivot_envs.experiments.arms import item_outcomes
    from pivot_envs.experiments.evaluation import play_tasks

    report = play_tasks(model, "terminal", tasks, _sampling(dtype), seed=0, temperature=1.0, repeats=repeats,
                        max_turns=8)
    return {"task success T=1": _known(item_outcomes(report)["task_sampled"])}


def score_pivots(model: str, pivots: str, dtype: str, k: int) -> dict[str, dict[str, float]]:
    """Per-pivot greedy correctness and mean@k at T=1 of ``model`` at ``pivots`` in ``dtype`` (this process)."""
    from pivot_envs.experiments.arms import item_outcomes
    from pivot_envs.experiments.evaluation import pivot_report

    items = item_outcomes(pivot_report(model, pivots, _sampling(dtype), seed=0, k=k, probes=False))
    return {"per-turn greedy": _known(items["pivot_greedy"]), f"per-turn mean@{k}": _known(items["pivot_sampled"])}


def _known(outcomes: dict[str, Any]) -> dict[str, float]:
    return {key: float(v) for key, v in outcomes.items() if v is not None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+", help="model folders; the first is the reference of the differences")
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--tasks-file", help="held-out tasks (a trajectory JSONL): task success at T=1")
    what.add_argument("--pivots-file", help="test pivots (a pivot JSONL): per-turn greedy and mean@k")
    ap.add_argument("--limit", type=int, default=60, help="tasks played (a seeded sample; tasks only)")
    ap.add_argument("--repeats", type=int, default=2, help="T=1 episodes per task")
    ap.add_argument("--k", type=int, default=4, help="T=1 samples per pivot (pivots only)")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)  # internal: one model and dtype
    args = ap.parse_args(argv)
    if args.one:
        model, dtype, items = json.loads(args.one)
        out = (score_pivots(model, items, dtype, args.k) if args.pivots_file
               else play(model, items, dtype, args.repeats))
        print(json.dumps(out))
        return 0
    items = args.pivots_file or _task_sample(args.tasks_file, args.limit)
    flags = (["--pivots-file", args.pivots_file, "--k", str(args.k)] if args.pivots_file
             else ["--tasks-file", args.tasks_file, "--repeats", str(args.repeats)])
    outcomes: dict[tuple[str, str], dict[str, dict[str, float]]] = {}
    for model in args.models:
        for dtype in DTYPES:
            began = time.perf_counter()
            done = subprocess.run([sys.executable, __file__, *args.models, *flags,
                                   "--one", json.dumps([model, dtype, str(items)])], capture_output=True, text=True)
            if done.returncode != 0:
                sys.stderr.write(done.stderr[-4000:])
                raise SystemExit(f"vllm_dtype_check: {model} in {dtype} failed (exit {done.returncode}); its "
                                 "stderr is above")
            outcomes[(model, dtype)] = json.loads(done.stdout.strip().splitlines()[-1])
            empty = [measure for measure, scored in outcomes[(model, dtype)].items() if not scored]
            if empty:
                raise SystemExit(f"vllm_dtype_check: {model} in {dtype} scored no item for {', '.join(empty)} (every "
                                 "play failed or was unscored); nothing to compare")
            print(f"{_name(model)} {dtype}: {time.perf_counter() - began:.0f} s", file=sys.stderr, flush=True)
    _print_table(args.models, outcomes)
    return 0


def _task_sample(tasks_file: str, limit: int) -> Path:
    """A seeded sample of ``limit`` tasks of ``tasks_file``, written to a temporary file."""
    lines = Path(tasks_file).read_text(encoding="utf-8").splitlines()
    chosen = random.Random(0).sample(lines, min(limit, len(lines)))
    tasks = Path(tempfile.mkdtemp(prefix="dtype_check_")) / "tasks.jsonl"
    tasks.write_text("\n".join(chosen) + "\n", encoding="utf-8")
    return tasks


def _print_table(models: list[str], outcomes: dict[tuple[str, str], dict[str, dict[str, float]]]) -> None:
    """One row per model and measure: the figure in each dtype and the difference to the first model."""
    from pivot_envs.experiments.stats import paired_bootstrap

    ref = models[0]
    print(f"| model | measure | {' | '.join(DTYPES)} | " + " | ".join(f"- {_name(ref)} ({d})" for d in DTYPES) + " |")
    print("|---|---|" + "---|" * (2 * len(DTYPES)))
    for model in models:
        for measure in outcomes[(model, DTYPES[0])]:
            per = {d: outcomes[(model, d)][measure] for d in DTYPES}
            cells = [f"{sum(v.values()) / max(1, len(v)):.3f} (n={len(v)})" for v in per.values()]
            for d in DTYPES:
                if model == ref:
                    cells.append("-")
                    continue
                base = outcomes[(ref, d)][measure]
                ids = sorted(set(per[d]) & set(base))
                test = paired_bootstrap([per[d][i] for i in ids], [base[i] for i in ids])
                cells.append(f"{test['diff']:+.3f} [{test['ci_low']:+.3f}, {test['ci_high']:+.3f}]")
            print(f"| {_name(model)} | {measure} | " + " | ".join(cells) + " |", flush=True)


def _name(model: str) -> str:
    return Path(model).name if Path(model).name != "final" else Path(model).parents[1].name


if __name__ == "__main__":
    raise SystemExit(main())
