"""Task success against rollout turns: PivotRL vs end-to-end RL (and ARPO), at the quick demo's scale.

The paper's efficiency claim (Figure 1) compares PivotRL with E2E RL on one axis: held-out task success
after the same number of rollout turns (model calls; PivotRL's profiling included). This runs the quick
demo's pipeline (``pivot_envs.experiments.demo``) with the arms ``base``, ``pivotrl``, ``e2e`` and
``arpo`` and task success measured at every ``--curve-every`` steps, in ``--out`` (a folder holding a
finished quick demo is reused: its data, base model and profile are not redone).

    python benchmarks/learning/e2e_vs_pivotrl.py --out runs/demo [--steps 8] [--curve-every 2]

Prints the curves and the claim, writes ``benchmarks/learning/results/e2e_vs_pivotrl.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "e2e_vs_pivotrl.json"


def main() -> None:
    from pivot_envs.experiments.demo import quick_config, run_pipeline
    from pivot_envs.experiments.report import curve_lines

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="runs/demo")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--curve-every", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    cfg = quick_config(args.seed)
    cfg = dataclasses.replace(cfg, arms=("base", "pivotrl", "e2e", "arpo"),
                              per_arm=dataclasses.replace(cfg.per_arm, steps=args.steps, curve_every=args.curve_every,
                                                          curve_tasks=None))
    t0 = time.perf_counter()
    report = run_pipeline(cfg, args.out)
    claim = next(c for c in report["claims"] if c["name"] == "rollout_turns_vs_e2e")
    curves = {name: arm.get("curve") for name, arm in report["arms"].items() if arm.get("curve")}
    base = report["arms"]["base"]
    print("\n".join(curve_lines(report)))
    verdict = claim.get("verdict") or {True: "reproduced", False: "not reproduced", None: "not measured"}[claim["holds"]]
    print(f"\n{verdict}: {claim['text']} {claim['numbers']} {claim.get('note', '')}")
    comps = {k: {x: v.get(x) for x in ("diff", "ci_low", "ci_high", "p_value", "n")}
             for k, v in report["comparisons"].items() if "_vs_" in k and v.get("diff") is not None}
    for name, c in comps.items():
        print(f"{name}: task success diff {c['diff']:+.3f} [{c['ci_low']:+.3f}, {c['ci_high']:+.3f}] p={c['p_value']:.3g}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({
        "command": f"python benchmarks/learning/e2e_vs_pivotrl.py --out DIR --steps {args.steps} --curve-every {args.curve_every}",
        "machine": {"python": platform.python_version(), "cpu": platform.processor() or platform.machine()},
        "seconds_this_call": round(time.perf_counter() - t0, 1),
        "stage_seconds": report["stage_seconds"], "wall_seconds_all_calls": report["wall_seconds"], "base": {k: base[k] for k in ("task_success", "task_success_greedy")},
        "curves": curves, "claim": claim, "comparisons": comps,
        "arms": {n: {k: a.get(k) for k in ("task_success", "task_success_greedy", "in_domain_accuracy",
                                           "rollout_turns", "tool_calls", "branches", "episodes")}
                 for n, a in report["arms"].items()},
    }, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
