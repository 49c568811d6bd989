"""Quickstart 3: a few PivotRL (GRPO) steps on a tiny reference model, on CPU, in well under a minute.

    pip install -e ".[train]"
    python examples/quickstart_train.py [OUT_DIR]

1. build a tiny Llama-style policy offline, SFT-warmed on 64 bundled tool_use training pivots (what
   ``pivot-envs model tiny --domain tool_use -o DIR`` does on all of them, with more steps);
2. train it with PivotRL on the same pivots: each step samples ``group_size`` actions at each of
   ``pivots_per_step`` pivots, scores them with the domain's functional verifier, and takes a GRPO
   update on the groups whose rewards differ (all-equal groups carry no signal and are skipped).

The model is far too small and briefly trained to learn much: this shows the moving parts. The full
recipe (profile -> filter -> train -> eval) is examples/train_pivotrl_tiny.yaml and docs/training.md;
``pivot-envs demo`` runs the whole comparison.
"""

import sys
import tempfile
from pathlib import Path

from transformers.utils import logging

from pivot_envs.jsonl import write_jsonl
from pivot_envs.models.reference import build_reference_model, read_report
from pivot_envs.sources import resolve_pivots
from pivot_envs.trainers.pivotrl import PivotRLConfig, train_pivotrl

logging.set_verbosity_error()
logging.disable_progress_bar()

out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="pivot-quickstart-"))
out.mkdir(parents=True, exist_ok=True)
pivots = resolve_pivots("bundled:tool_use:train")[:64]
write_jsonl(out / "pivots.jsonl", [p.to_dict() for p in pivots])

# one torch thread: tiny models train fastest on one, and far slower with several on busy cores
model_dir = build_reference_model("tool_use", out / "model", pivots=pivots, lm_steps=100, steps=120,
                                  max_context_tokens=256, seed=0, num_threads=1)
report = read_report(model_dir)
print(f"tiny model: {report.parameters:,} parameters, SFT loss {report.final_loss:.2f}, {report.seconds:.1f}s")

config = PivotRLConfig(
    model=str(model_dir), output_dir=str(out / "pivotrl"), domain="tool_use", pivots=str(out / "pivots.jsonl"),
    steps=4, pivots_per_step=4, group_size=4, max_new_tokens=48, max_prompt_tokens=256,
    lr=1e-3, lr_schedule="constant", save_every=0, plots=False, num_threads=1, seed=0,
)  # every field: trainers/config.py; the same config as a file: pivot-envs train --config FILE
result = train_pivotrl(config, on_step=lambda row: print(
    f"step {row['step']}: reward {row['reward_mean']:.3f}, groups used {row['used_groups']}/{row['groups']}"))
print(f"{result.steps} steps in {result.seconds:.1f}s; metrics {result.metrics_path}; model {result.final_model_dir}")
assert result.steps == 4 and (result.final_model_dir / "config.json").exists()
