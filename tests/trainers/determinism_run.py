"""One training run in a process of its own, for ``tests/trainers/test_determinism.py``::

    python tests/trainers/determinism_run.py pivotrl|e2e CONFIG.json [--stop-after STEP]

Pins torch to one thread before anything else runs (the trainer's ``num_threads`` pins its loop too), trains with
the config of the JSON file and, with ``--stop-after``, stops the process after that step's row is logged (exit 3),
as a killed run would stop: the next run resumes from the last checkpoint.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

torch.set_num_threads(1)

STOPPED = 3
"""Exit status of a run stopped by ``--stop-after``."""


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("trainer", choices=("pivotrl", "e2e"))
    parser.add_argument("config")
    parser.add_argument("--stop-after", type=int, default=0)
    args = parser.parse_args()
    config = json.loads(Path(args.config).read_text(encoding="utf-8"))
    if args.trainer == "pivotrl":
        from pivot_envs.trainers.pivotrl import train_pivotrl as train
    else:
        from pivot_envs.trainers.episode_rl import train_episode_rl as train

    def on_step(row: dict) -> None:
        if args.stop_after and row["step"] == args.stop_after:
            sys.stdout.flush()
            os._exit(STOPPED)  # no clean-up, no final model: as a killed run

    train(config, on_step=on_step)
    return 0


if __name__ == "__main__":
    sys.exit(main())
