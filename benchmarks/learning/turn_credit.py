"""Turn-level credit against plain E2E RL, at the quick demo's scale (issue 20, part 3).

Runs the quick demo's pipeline (``pivot_envs.experiments.demo``) with the arms ``base``, ``e2e`` and
``e2e_credit``: the same tasks, steps, seed and learning rate, the only difference being
``turn_credit`` (:data:`pivot_envs.experiments.arm_table.TURN_CREDIT`): each turn's advantage gains
``w * (r_t - rbar)``, ``r_t`` the env's ``turn_reward`` (the domain verifier's score of an action taken on
the expert's path). Task success on the held-out tasks along training, and the paired test
``e2e_credit_vs_e2e`` (paired bootstrap over tasks). A folder holding a finished quick demo is reused
(its data, base model and profile are not redone).

    python benchmarks/learning/turn_credit.py --out runs/demo [--steps 8] [--curve-every 4] [--seeds 1]

Prints the table and writes ``benchmarks/learning/results/turn_credit.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "turn_credit.json"
ARMS = ("base", "e2e", "e2e_credit")
KEYS = ("task_success", "task_success_greedy", "in_domain_accuracy", "rollout_turns", "tool_calls", "episodes")


def main() -> None:
    from pivot_envs.experiments.arm_table import TURN_CREDIT
    from pivot_envs.experiments.demo import quick_config, run_pipeline

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="runs/demo")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--curve-every", type=int, default=4)
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    cfg = quick_config(args.seed)
    cfg = dataclasses.replace(cfg, arms=ARMS, seeds=args.seeds,
                              per_arm=dataclasses.replace(cfg.per_arm, steps=args.steps, curve_every=args.curve_every,
                                                          curve_tasks=None))
    t0 = time.perf_counter()
    report = run_pipeline(cfg, args.out)
    arms = {n: {k: report["arms"][n].get(k) for k in KEYS} for n in ARMS}
    curves = {n: report["arms"][n].get("curve") for n in ARMS if report["arms"][n].get("curve")}
    comps = {k: {x: v.get(x) for x in ("diff", "ci_low", "ci_high", "p_value", "n")}
             for k, v in report["comparisons"].items() if k in ("e2e_vs_base", "e2e_credit_vs_base", "e2e_credit_vs_e2e")}
    print(f"turn_credit w = {TURN_CREDIT}, {args.steps} steps, {args.seeds} seed(s)")
    print("| arm | task success T=1 | greedy | per-turn | rollout turns |\n|---|---|---|---|---|")
    for n, a in arms.items():
        print(f"| {n} | {a['task_success']:.3f} | {a['task_success_greedy']:.3f} | {a['in_domain_accuracy']:.3f} | "
              f"{a['rollout_turns']} |")
    for name, c in comps.items():
        if c.get("diff") is not None:
            print(f"{name}: task success {c['diff']:+.3f} [{c['ci_low']:+.3f}, {c['ci_high']:+.3f}] p={c['p_value']:.3g}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({
        "command": f"python benchmarks/learning/turn_credit.py --out DIR --steps {args.steps} --curve-every {args.curve_every} "
                   f"--seeds {args.seeds}",
        "turn_credit": TURN_CREDIT,
        "machine": {"python": platform.python_version(), "cpu": platform.processor() or platform.machine()},
        "seconds_this_call": round(time.perf_counter() - t0, 1), "stage_seconds": report["stage_seconds"],
        "arms": arms, "curves": curves, "comparisons": comps,
    }, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
