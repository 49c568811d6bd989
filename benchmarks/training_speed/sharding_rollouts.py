"""What ``sharding: fsdp`` costs against DDP in the bundled trainer, rollouts included: the toy model of the tests,
two processes under ``torchrun -m pivot_envs.cli train`` on gloo (CPU), the same config and seed on both layouts.

::

    python benchmarks/training_speed/sharding_rollouts.py [--steps 5] [--out benchmarks/training_speed/results/sharding_rollouts.json]

Prints the medians over steps 2.. (step 1 warms up) of sampling throughput (``sample_tokens_per_s``), update and
step seconds (rank 0's wall clock), and whether both layouts sampled the same tokens (``completion_len_mean`` and
``reward_mean`` equal at every step). Under FSDP every decoded token gathers each decoder layer from all ranks,
and every rank decodes until the longest is done (``synced_gpus``); on a tiny model the gathers dominate, so the
ratio here is an upper bound of what real model sizes on NCCL would show (not measured: no GPU here).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.trainers.test_pivotrl_trainer import build_toy, toy_config  # noqa: E402
from tests.trainers.test_sharding import torchrun  # noqa: E402

from pivot_envs.trainers.metrics import read_metrics  # noqa: E402

KEYS = ("sample_tokens_per_s", "update_s", "step_s")


def train(config: dict, path: Path) -> list[dict]:
    """One run of ``config`` on 2 processes (the tests' launcher: ``torchrun -m pivot_envs.cli train``); its
    metrics rows."""
    torchrun(config, path)
    return read_metrics(Path(config["output_dir"]) / "metrics.jsonl")


def medians(rows: list[dict]) -> dict[str, float]:
    later = rows[1:] or rows
    return {k: statistics.median(float(r[k]) for r in later) for k in KEYS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON here too")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        toy = build_toy(work / "toy")
        common = dict(steps=args.steps, pivots_per_step=4, group_size=8, save_every=0)
        rows = {layout: train(toy_config(toy, work / layout, sharding=layout, **common).to_dict(), work / f"{layout}.json")
                for layout in ("none", "fsdp")}
    same = all(d["completion_len_mean"] == f["completion_len_mean"] and d["reward_mean"] == f["reward_mean"]
               for d, f in zip(rows["none"], rows["fsdp"]))
    ddp, fsdp = medians(rows["none"]), medians(rows["fsdp"])
    params = {layout: (rows[layout][0]["params_local"], rows[layout][0]["params_total"]) for layout in rows}
    print(f"toy model, 2 processes (gloo), {args.steps} steps of 4 pivots x 8 samples a rank; medians of steps 2-{args.steps}")
    print("| figure | DDP | FSDP | FSDP / DDP |")
    print("|---|---|---|---|")
    for key in KEYS:
        print(f"| {key} | {ddp[key]:.3f} | {fsdp[key]:.3f} | {fsdp[key] / ddp[key]:.2f} |")
    print(f"| params_local / params_total | {params['none'][0]:,} / {params['none'][1]:,} | "
          f"{params['fsdp'][0]:,} / {params['fsdp'][1]:,} | |")
    print(f"same sampled tokens at every step: {same}")
    if args.out:
        args.out.write_text(json.dumps({"steps": args.steps, "ddp": ddp, "fsdp": fsdp, "params": params,
                                        "same_tokens": same, "load_avg": os.getloadavg()}, indent=1) + "\n")


if __name__ == "__main__":
    main()
