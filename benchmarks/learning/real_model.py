"""The real-model experiment (issues 18 and 27): ``pivot-envs demo --model smollm2``, its report committed.

The experiment is the demo's own pipeline on a pretrained model (``experiments/``: data, the warmed-up base,
profile, filter, selection on validation task success, Base / SFT / PivotRL, the report); this script only runs
it and copies its report where the repository keeps it::

    .venv-vllm/bin/python benchmarks/learning/real_model.py                      # runs/real_model; hours on 2 cores, resumable
    .venv-vllm/bin/python benchmarks/learning/real_model.py --out runs/rm2 --engine hf --seed 1
    .venv-vllm/bin/python benchmarks/learning/real_model.py --results benchmarks/learning/results/real_model_lora \
        --rl-lora-r 16 --rl-lr 2e-4 --sft-lr 1e-5                      # any other demo option passes through

It runs ``pivot-envs demo --model smollm2 --out OUT [--engine E] [--seed S]`` with the ``pivot-envs`` of this
interpreter's environment (``.venv-vllm`` for vLLM rollouts: docs/vllm.md), then copies ``report.json``,
``report.md`` and the plots to ``benchmarks/learning/results/real_model/`` (``--results``). ``report.json`` carries the
command that made it (``command``), issue 18's contract (``model.parameters``, ``arms.{base,sft,pivotrl}.
{task_success, per_turn, ood_accuracy, rollout_turns}``, ``comparisons.pivotrl_vs_{base,sft}.{task_success,
per_turn}.{diff, ci_low, ci_high, p_value}``) and issue 27's (``arms.*.task_success_greedy``,
``arms.*.ood_task_success``, ``timings.total_s``).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = Path(__file__).resolve().parent / "results" / "real_model"
COPIED = ("report.json", "report.md", "accuracy.png", "per_turn.png", "training.png")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/real_model", help="the demo's folder (resumes an interrupted run)")
    parser.add_argument("--results", type=Path, default=RESULTS, help="where the report is copied")
    parser.add_argument("--engine", default=None, help="vllm, hf or auto (the demo's default: auto)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--model", default="smollm2", help="the demo's --model (default smollm2)")
    args, demo_options = parser.parse_known_args(argv)
    command = [str(Path(sys.executable).parent / "pivot-envs"), "demo", "--model", args.model, "--out", args.out,
               *demo_options]
    if args.engine:
        command += ["--engine", args.engine]
    if args.seed is not None:
        command += ["--seed", str(args.seed)]
    done = subprocess.run(command, cwd=ROOT)
    if done.returncode != 0:
        return done.returncode
    out = ROOT / args.out if not Path(args.out).is_absolute() else Path(args.out)
    args.results.mkdir(parents=True, exist_ok=True)
    for name in COPIED:
        if (out / name).exists():
            shutil.copy2(out / name, args.results / name)
    print(f"copied the report of {out} to {args.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
