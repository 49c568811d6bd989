"""What each change of the real preset's PivotRL bought, and which learning rate, on validation (issue 36, item 3).

Trains one PivotRL run per change undone (:data:`pivot_envs.experiments.ablation.VARIANTS`) in a finished demo's
folder, plays the base, the demo's PivotRL run and every variant on the demo's validation tasks at T=1, and prints
each against the preset and the base (paired bootstrap over the tasks)::

    .venv-vllm/bin/python benchmarks/learning/pivotrl_ablation.py --demo runs/real36 --repeats 4 \\
        --variants no_low_mean,g4_skip,per_step8,full_ft,lr_1e-4,lr_4e-4

``--model smollm2`` starts the real preset's demo in an empty ``--demo`` folder first (only the stages before the
arms: data, warm-up base, profile, filter; about 20 min), so no finished demo is needed::

    .venv-vllm/bin/python benchmarks/learning/pivotrl_ablation.py --demo runs/ablation36 --model smollm2 --variants full_ft

Resumable: trained runs and saved plays are reused (an interrupted call picks up where it stopped). The table goes
to ``--results`` (``table.md`` and ``ablation.json``) as well as to stdout.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from pivot_envs.experiments.ablation import BY_NAME, run_ablation, start_demo, table_lines
from pivot_envs.experiments.demo import real_config
from pivot_envs.experiments.model_source import parse_model

ROOT = Path(__file__).resolve().parents[2]
RESULTS = Path(__file__).resolve().parent / "results" / "pivotrl_ablation"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--demo", required=True, help="a demo's folder (pivot-envs demo --out DIR) with validation tasks")
    ap.add_argument("--model", help="start the real preset's demo of this pretrained model (as `pivot-envs demo "
                    "--model MODEL`) in --demo when it holds none; its arms are not run")
    ap.add_argument("--variants", default=",".join(n for n in BY_NAME if n != "preset"),
                    help=f"comma-separated variants (the preset is always played): {', '.join(BY_NAME)}")
    ap.add_argument("--repeats", type=int, default=4, help="T=1 episodes per validation task")
    ap.add_argument("--results", type=Path, default=RESULTS, help="where table.md and ablation.json are copied")
    args = ap.parse_args(argv)
    names = [n.strip() for n in args.variants.split(",") if n.strip()]
    try:
        if args.model:
            if not parse_model(args.model).pretrained:
                raise ValueError(f"--model {args.model}: the ablation starts the real preset of a pretrained model "
                                 "(smollm2, gguf:FILE, hf:DIR); for the tiny model run `pivot-envs demo --out DIR` "
                                 "first and pass --demo DIR")
            start_demo(args.demo, real_config(model=args.model))
        table = run_ablation(args.demo, names, args.repeats)
    except (ValueError, FileNotFoundError) as err:
        print(f"pivotrl_ablation: {err}", file=sys.stderr)
        return 2
    lines = table_lines(table)
    print("\n".join(lines))
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "table.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    shutil.copy2(Path(args.demo) / "ablation" / "ablation.json", args.results / "ablation.json")
    print(f"copied to {args.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
