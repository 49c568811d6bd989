"""The demo's report: per-arm aggregation over seeds, the paper's claims checked, markdown, JSON and plots.

``report.json``::

    {"arms": {NAME: {"in_domain_accuracy", "ood_accuracy", "rollout_turns", ...}},
     "wall_seconds", "seed", "seeds", "model_params", "claims": [...], "data": {...}, ...}

``in_domain_accuracy`` is the greedy functional accuracy on the test pivots (the
domain's verifier), ``ood_accuracy`` the greedy exact-match accuracy on the fixed
probe set; with several seeds both are means, with ``*_std`` (sample standard
deviation) and ``per_seed`` next to them.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any, Sequence

from pivot_envs.experiments.arm_table import ARM
from pivot_envs.experiments.comparisons import arm_intervals, paired_comparisons, turns_to_match
from pivot_envs.experiments.plots import draw_plots
from pivot_envs.experiments.verifier_demo import DomainSummary, markdown_report
from pivot_envs.experiments.work_time import clock_missed_work, least_wall_seconds, runs_seconds_lines
from pivot_envs.trainers.metrics import read_metrics
from pivot_envs.verifiers.hack_monitor import ACCEPTED, HACKS, HackCounts

CLAIM_MARGIN = 0.10
"""PivotRL must beat Base in-domain by at least this much (10 points)."""


def aggregate_arms(runs: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """One entry per arm from its runs' ``run.json`` (means over seeds, sample std, per-seed rows)."""
    by_arm: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        if "test" in run:
            by_arm.setdefault(run["arm"], []).append(run)
    out: dict[str, dict[str, Any]] = {}
    order = list(ARM)  # the table's order
    for arm in sorted(by_arm, key=lambda a: order.index(a) if a in ARM else len(order)):
        rows = sorted(by_arm[arm], key=lambda r: r["seed"])
        tests = [r["test"] for r in rows]
        trains = [r.get("train") or {} for r in rows]
        entry: dict[str, Any] = {"title": ARM[arm].title if arm in ARM else arm, "seeds": [r["seed"] for r in rows]}
        for name, key in (("in_domain_accuracy", "functional"), ("strict_accuracy", "strict"),
                          ("mean_at_k_functional", "mean_at_k_functional"), ("mean_at_k_strict", "mean_at_k_strict"),
                          ("ood_accuracy", "ood_accuracy"), ("task_success", "task_success"),
                          ("task_success_greedy", "task_success_greedy"), ("ood_task_success", "ood_task_success"),
                          ("ood_task_success_greedy", "ood_task_success_greedy")):
            values = [t[key] for t in tests if t.get(key) is not None]
            entry[name], entry[f"{name}_std"] = mean_std(values)
        entry["per_turn"] = entry["in_domain_accuracy"]  # the real-model report's name (issue 18's contract)
        entry["per_turn_mean_at_k"] = entry["mean_at_k_functional"]
        for name in ("kl_per_token", "kl_per_sample", "entropy_per_token"):
            entry[name] = mean_std([t["divergence"][name] for t in tests
                                    if (t.get("divergence") or {}).get(name) is not None])[0]
        val = [r["val"]["functional"] for r in rows if r.get("val")]
        entry["val_accuracy"], entry["val_accuracy_std"] = mean_std(val)
        val_tasks = [r["val_tasks"]["success"] for r in rows if (r.get("val_tasks") or {}).get("success") is not None]
        entry["val_task_success"] = mean_std(val_tasks)[0]
        entry["rollout_turns"] = _mean_int([r.get("rollout_turns", 0) for r in rows])
        entry["profile_rollouts"] = _mean_int([r.get("profile_rollouts", 0) for r in rows])
        entry["train_rollouts"] = _mean_int([t.get("rollouts", 0) for t in trains])
        entry["steps"] = _mean_int([t.get("steps", 0) for t in trains])
        entry["updates"] = _mean_int([t.get("updates", 0) for t in trains])
        entry["train_seconds"] = _mean_float([t.get("seconds", 0.0) for t in trains])
        entry["eval_seconds"] = _mean_float([t["seconds"] for t in tests])
        if any(t.get("kind") == "rl" for t in trains):
            for key in ("zero_var_frac", "reward_first", "reward_last"):
                entry[key] = mean_std([t[key] for t in trains if t.get(key) is not None])[0]
            entry["reward_by_pass"] = trains[0].get("reward_by_pass")  # the first seed's passes over its pivots
            entry["completion_tokens"] = _mean_int([t.get("completion_tokens", 0) for t in trains])
        if any(t.get("kind") == "sft" for t in trains):
            entry["tokens"] = _mean_int([t.get("tokens", 0) for t in trains])
            entry["loss_tokens"] = _mean_int([t.get("loss_tokens", 0) for t in trains])
            for key in ("loss_first", "loss_last"):
                entry[key] = mean_std([t[key] for t in trains if t.get(key) is not None])[0]
        entry["lr"] = rows[0].get("lr")
        entry["train_pivots_file"] = rows[0].get("pivots")
        entry["tasks"] = tests[0].get("tasks")
        if any(t.get("kind") == "episodes" for t in trains):
            for key in ("tool_calls", "branches", "replayed_steps", "episodes"):
                entry[key] = _mean_int([t.get(key, 0) for t in trains])
        curves = [r["curve"] for r in rows if r.get("curve")]
        if curves:
            entry["curve"] = mean_curve(curves)
        hack = hack_drift([read_metrics(Path(r["folder"]) / "train" / "metrics.jsonl") for r in rows if r.get("folder")])
        if hack is not None:
            entry["hack"] = hack
        for name, key in (("truncated_greedy", "episodes"), ("truncated_sampled", "episodes_sampled")):
            shares = [v for v in (truncated_share(r, key) for r in rows) if v is not None]
            entry[name] = mean_std(shares)[0]
        entry["per_seed"] = [{"seed": r["seed"], "in_domain_accuracy": r["test"]["functional"],
                              "strict_accuracy": r["test"]["strict"], "ood_accuracy": r["test"].get("ood_accuracy"),
                              "task_success": r["test"].get("task_success"),
                              "task_success_greedy": r["test"].get("task_success_greedy"),
                              "val_accuracy": (r.get("val") or {}).get("functional"),
                              "run": Path(r["folder"]).name} for r in rows]
        out[arm] = entry
    return out


def hack_drift(runs: Sequence[Sequence[dict[str, Any]]]) -> dict[str, Any] | None:
    """The hack monitor's figures of an arm's training (:mod:`pivot_envs.verifiers.hack_monitor`) from its seeds'
    metrics rows: ``all`` steps, ``early`` (each seed's first third of the steps) and ``late`` (its last third),
    each the metrics of the summed counts (so a drift toward a hack shows as early -> late). ``None`` when no row
    carries the monitor (SFT, runs written before it)."""
    parts = {"all": HackCounts(), "early": HackCounts(), "late": HackCounts()}
    found = False
    for rows in runs:
        counts = [c for c in (HackCounts.from_metrics(r) for r in rows) if c is not None]
        if not counts:
            continue
        found = True
        third = max(1, len(counts) // 3)
        parts["all"] = sum(counts, parts["all"])
        parts["early"] = sum(counts[:third], parts["early"])
        parts["late"] = sum(counts[-third:], parts["late"])
    return {name: c.metrics() for name, c in parts.items()} if found else None


def _text_turns(path: str | None) -> int | None:
    """How many pivots of a pivot file have a text reply (no tool call) as the expert action."""
    if not path or not Path(path).exists():
        return None
    with open(path, encoding="utf-8") as f:
        return sum(1 for line in f if line.strip() and not (json.loads(line).get("expert") or {}).get("tool_calls"))


def truncated_share(run: dict[str, Any], key: str = "episodes") -> float | None:
    """Share of a run's held-out episodes cut at ``max_turns`` (the agent never stopped), from its ``test``
    summary (``key``: ``episodes`` greedy, ``episodes_sampled`` at T=1); ``None`` without one."""
    test = run.get("test") or {}
    return test.get("truncated_greedy" if key == "episodes" else "truncated_sampled")


def mean_curve(curves: Sequence[Sequence[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The seeds' curves of task success against rollout turns averaged step by step (steps every seed has);
    ``seeds`` says how many curves each point averages."""
    steps = sorted(set.intersection(*({int(p["step"]) for p in c} for c in curves)))
    out = []
    for step in steps:
        points = [next(p for p in c if int(p["step"]) == step) for c in curves]
        entry: dict[str, Any] = {"step": step, "seeds": len(points),
                                 "rollout_turns": _mean_int([p["rollout_turns"] for p in points])}
        for key in ("task_success", "task_success_greedy"):
            values = [p[key] for p in points if p.get(key) is not None]
            if values:
                entry[key] = sum(values) / len(values)
        out.append(entry)
    return out


T_95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26, 10: 2.23}
"""Two-sided 95 % Student t quantiles by degrees of freedom (1.96 beyond 10)."""


def paired_claims(arms: dict[str, dict[str, Any]], comparisons: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The claims the paired tests answer: PivotRL vs Base on held-out task success (the paper's in-domain
    metric), and the rollout turns PivotRL needs to match E2E RL's task success (Figure 1: >= 4x fewer)."""
    claims = []
    c = comparisons.get("pivotrl_vs_base") or {}
    if c.get("diff") is None:
        claims.append(_claim("pivotrl_beats_base_task_success", "PivotRL task success > Base (paired, held-out tasks)",
                             None, {}))
    else:
        verdict = "reproduced" if c["ci_low"] > 0 else "not reproduced" if c["ci_high"] <= 0 else "within noise"
        claims.append({**_claim("pivotrl_beats_base_task_success",
                                "PivotRL task success > Base (pass@1 at T=1, paired bootstrap over held-out tasks)",
                                c["diff"] > 0, {"base": c.get("mean_b"), "pivotrl": c.get("mean_a"), "diff": c["diff"],
                                                "p_value": c["p_value"], "tasks": c.get("n")}),
                       "verdict": verdict, "interval": [c["ci_low"], c["ci_high"]],
                       "interval_kind": "of the paired difference (bootstrap over tasks)"})
    claims += arm_pair_claims(comparisons)
    curves = {a: arms[a]["curve"] for a in ("pivotrl", "e2e") if arms.get(a, {}).get("curve")}
    base = arms.get("base", {}).get("task_success")
    match = turns_to_match(curves, base)
    if not match.get("measured"):
        claims.append(_claim("rollout_turns_vs_e2e", "PivotRL reaches E2E RL's task success with >= 4x fewer rollout "
                             "turns", None, {}, "needs the curves of pivotrl and e2e (demo --full)"))
    elif base is not None and match["target"] <= base:
        claims.append(_claim("rollout_turns_vs_e2e", "PivotRL reaches E2E RL's task success with >= 4x fewer rollout "
                             "turns", None, {"target": match["target"], "base": base, "e2e_turns": match["e2e_turns"],
                                             "pivotrl_best": match["pivotrl_best"]},
                             "E2E RL never rose above the base's task success: there is no level to reach"))
    else:
        holds = bool(match["reached"] and match["ratio"] is not None and match["ratio"] >= 4)
        claims.append({**_claim("rollout_turns_vs_e2e", "PivotRL reaches E2E RL's task success with >= 4x fewer "
                                "rollout turns", holds,
                                {"target": match["target"], "e2e_turns": match["e2e_turns"],
                                 "pivotrl_turns": match["pivotrl_turns"], "ratio": match["ratio"],
                                 "pivotrl_best": match["pivotrl_best"]},
                                "" if match["reached"] else "PivotRL's curve never reached E2E RL's best task success"),
                       "verdict": "reproduced" if holds else "not reproduced"})
    return claims


def arm_pair_claims(comparisons: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """PivotRL vs SFT and Table 4's ordering on held-out task success, and the OOD retention claim over the
    probe items, each from a paired bootstrap (``comparisons``: :func:`~pivot_envs.experiments.comparisons.
    paired_comparisons`). Claims whose arms did not run are left out (the per-turn versions below say
    "not measured")."""
    claims = []
    c = comparisons.get("pivotrl_vs_sft")
    if c and c.get("diff") is not None:
        claim = _paired_claim("pivotrl_not_below_sft_task_success", "PivotRL task success >= SFT (pass@1 at "
                              "T=1, paired bootstrap over held-out tasks)", [c], ("pivotrl", "sft"), strict=False)
        if _unmoved([comparisons.get("pivotrl_vs_base"), comparisons.get("sft_vs_base")]):
            claim.update(verdict=NOT_TESTABLE, holds=None,
                         note="neither arm changed any held-out task's outcome from the base's")
        claims.append(claim)
    for suffix, sft in (("", "SFT"), ("_sft_long", "SFT trained longer")):
        for key, name, items in (("ood_retention", "ood_retention_paired", "the probe items"),
                                 ("ood_task_retention", "ood_task_retention_paired", "the OOD domain's tasks, T=1")):
            r = comparisons.get(key + suffix)
            if r:
                claims.append(_retention_claim(r, name + suffix, f"OOD drop of PivotRL <= half the OOD drop of {sft} "
                                                                 f"(paired over {items})"))
    pair = [comparisons.get("pivotrl_vs_no_filter"), comparisons.get("no_filter_vs_strict_reward")]
    if all(p and p.get("diff") is not None for p in pair):
        claims.append(_paired_claim("table4_ordering_task_success", "Table 4 ordering on task success: PivotRL > "
                                    "- pivot filtering > - functional reward (paired bootstrap over held-out tasks)",
                                    pair, ("pivotrl", "no_filter", "strict_reward"), strict=True))
    return claims


NOT_TESTABLE = "not testable"
"""The verdict of a claim whose compared quantity did not move (e.g. the OOD claim when SFT lost nothing: there is
no drop to halve). It is never printed as "reproduced"."""


def _retention_claim(r: dict[str, Any], name: str, text: str) -> dict[str, Any]:
    """The paired OOD claim from :func:`~pivot_envs.experiments.comparisons.ood_retention`'s test: "not testable"
    when SFT lost nothing on these items (there is no SFT drop for PivotRL's to be half of)."""
    numbers = {k: r[k] for k in ("base", "pivotrl", "sft", "pivotrl_drop", "sft_drop", "diff", "p_value", "n")}
    numbers["sft_arm"] = r.get("sft_arm", "sft")
    if r["sft_drop"] <= 0 and r["pivotrl_drop"] <= 0:
        return {**_claim(name, text, None, numbers, f"no arm lost OOD ability (base {_fmt(r['base'])}, SFT "
                                                    f"{_fmt(r['sft'])}, PivotRL {_fmt(r['pivotrl'])}): there is no "
                                                    "SFT drop to halve"),
                "verdict": NOT_TESTABLE, "interval": [r["ci_low"], r["ci_high"]],
                "interval_kind": "of PivotRL - base (bootstrap)"}
    claim = _paired_claim(name, text, [r], None, strict=False, floor=True)
    claim["numbers"] = numbers
    sft_test = r.get("sft_vs_base") or {}
    noisy = r["sft_drop"] > 0 and sft_test.get("ci_high") is not None and sft_test["ci_high"] >= 0
    claim["note"] = (f"tested: {r['form']} >= 0" + ("; SFT lost nothing, PivotRL lost "
                                                    f"{r['pivotrl_drop']:.3f}" if r["sft_drop"] <= 0 else "")
                     + (f"; SFT's own drop is within noise (SFT - base [{sft_test['ci_low']:+.3f}, "
                        f"{sft_test['ci_high']:+.3f}])" if noisy else "")
                     + _match_note(r.get("in_domain")))
    return claim


def _match_note(match: dict[str, Any] | None) -> str:
    """The in-domain match of a retention claim (:func:`~pivot_envs.experiments.comparisons.in_domain_match`)."""
    if not match:
        return ""
    return (f"; in domain PivotRL - SFT {match['pivotrl_minus_sft']:+.3f} [{match['ci_low']:+.3f}, "
            f"{match['ci_high']:+.3f}]: {'matched' if match['matched'] else 'NOT matched'} ({match['note']})")


def _unmoved(tests: Sequence[dict[str, Any] | None]) -> bool:
    """Whether every paired test against the base shows no change at all (the same outcome on every item)."""
    return all(t is not None and t.get("diff") == 0 and t.get("ci_low") == 0 and t.get("ci_high") == 0 for t in tests)


def _paired_claim(name: str, text: str, tests: list[dict[str, Any]], arms: tuple[str, ...] | None,
                  strict: bool, floor: bool = False) -> dict[str, Any]:
    """A claim ``diff > 0`` (``strict``) or ``diff >= 0`` for every paired test in ``tests``.

    ``reproduced``: every interval lies above 0 (``floor``: at or above 0); ``not reproduced``: some interval
    lies below 0 (strict: at or below 0); otherwise ``within noise``. ``numbers`` keep the arm means
    (``arms`` names them in chain order: the first test's mean_a, mean_b, then the next test's mean_b)."""
    verdicts = []
    for t in tests:
        if (t["ci_low"] >= 0 if floor else t["ci_low"] > 0):
            verdicts.append("reproduced")
        elif t["ci_high"] < 0 or (strict and t["ci_high"] <= 0):
            verdicts.append("not reproduced")
        else:
            verdicts.append("within noise")
    order = ["not reproduced", "within noise", "reproduced"]
    numbers: dict[str, Any] = {}
    if arms:
        means = [tests[0].get("mean_a")] + [t.get("mean_b") for t in tests]
        numbers = dict(zip(arms, means))
    numbers["diff"] = [t["diff"] for t in tests] if len(tests) > 1 else tests[0]["diff"]
    numbers["p_value"] = [t["p_value"] for t in tests] if len(tests) > 1 else tests[0]["p_value"]
    holds = all(t["diff"] > 0 if strict else t["diff"] >= 0 for t in tests)
    intervals = [[t["ci_low"], t["ci_high"]] for t in tests]
    return {**_claim(name, text, holds, numbers), "verdict": min(verdicts, key=order.index),
            "interval": intervals[0] if len(intervals) == 1 else intervals,
            "interval_kind": "of the paired difference (bootstrap)"}


def check_claims(arms: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The paper's claims at this scale, each with a verdict that accounts for the seed spread.

    Every claim is ``sum_a c_a * mean_a >= threshold`` over arm means (Table 4's ordering is two such
    comparisons). ``verdict`` is ``reproduced`` when the whole 95 % interval of the left side clears the
    threshold, ``not reproduced`` when the whole interval misses it, ``within noise`` when the interval
    contains it, ``not measured`` when an arm is missing. ``holds`` keeps the comparison of means alone
    (True/False/None); ``interval`` is the interval of ``sum_a c_a * mean_a - threshold``.
    """
    def acc(arm: str, key: str = "in_domain_accuracy") -> float | None:
        value = arms.get(arm, {}).get(key)
        return None if value is None or (isinstance(value, float) and math.isnan(value)) else value

    noise = _SeedNoise(arms)
    claims = []
    base, rl, sft = acc("base"), acc("pivotrl"), acc("sft")
    claims.append(noise.claim("pivotrl_beats_base",
                              f"PivotRL per-turn accuracy >= Base + {CLAIM_MARGIN * 100:.0f} points (spread over seeds)",
                              [({"pivotrl": 1, "base": -1}, CLAIM_MARGIN)], "in_domain_accuracy",
                              {"base": base, "pivotrl": rl}))
    claims.append(noise.claim("pivotrl_not_below_sft", "PivotRL per-turn accuracy >= SFT (spread over seeds)",
                              [({"pivotrl": 1, "sft": -1}, 0.0)], "in_domain_accuracy", {"sft": sft, "pivotrl": rl}))
    b_ood, rl_ood, sft_ood = acc("base", "ood_accuracy"), acc("pivotrl", "ood_accuracy"), acc("sft", "ood_accuracy")
    measured = None not in (b_ood, rl_ood, sft_ood)
    sft_drop = b_ood - sft_ood if measured else None  # type: ignore[operator]
    ood_text = "OOD drop of PivotRL <= half the OOD drop of SFT (spread over seeds)"
    ood_numbers = {"base": b_ood, "pivotrl": rl_ood, "sft": sft_ood,
                   "pivotrl_drop": b_ood - rl_ood if measured else None,  # type: ignore[operator]
                   "sft_drop": sft_drop}
    if measured and sft_drop <= 0 and ood_numbers["pivotrl_drop"] <= 0:  # type: ignore[operator]
        claims.append({**_claim("ood_drop_at_most_half_of_sft", ood_text, None, ood_numbers,
                                f"no arm lost OOD accuracy (base {_fmt(b_ood)}, SFT {_fmt(sft_ood)}, PivotRL "
                                f"{_fmt(rl_ood)}): there is no SFT drop to halve"), "verdict": NOT_TESTABLE,
                       "interval": None})
    elif measured and sft_drop <= 0:  # type: ignore[operator]
        # SFT lost nothing, PivotRL lost something: the claim fails unless PivotRL's loss is noise (rl - base >= 0)
        claims.append(noise.claim("ood_drop_at_most_half_of_sft", ood_text, [({"pivotrl": 1, "base": -1}, 0.0)],
                                  "ood_accuracy", ood_numbers, "SFT lost no OOD accuracy, PivotRL lost some",
                                  strict=False))
    else:  # rl_drop <= sft_drop / 2  <=>  rl - base/2 - sft/2 >= 0
        claims.append(noise.claim("ood_drop_at_most_half_of_sft", ood_text,
                                  [({"pivotrl": 1, "base": -0.5, "sft": -0.5}, 0.0)], "ood_accuracy", ood_numbers,
                                  strict=False))
    nf, st = acc("no_filter"), acc("strict_reward")
    claims.append(noise.claim("table4_ordering", "Table 4 ordering on per-turn accuracy: PivotRL > - pivot filtering > "
                              "- functional reward (spread over seeds)",
                              [({"pivotrl": 1, "no_filter": -1}, 0.0), ({"no_filter": 1, "strict_reward": -1}, 0.0)],
                              "in_domain_accuracy", {"pivotrl": rl, "no_filter": nf, "strict_reward": st}, strict=True))
    return claims


class _SeedNoise:
    """Standard errors of arm means from the spread over seeds.

    An arm run with one seed borrows the largest sample standard deviation among the arms run with
    several seeds (its own spread is unmeasured); with no multi-seed arm there is no interval and the
    verdict follows the means, marked ``one seed``. The interval covers seed-to-seed variation only,
    not the sampling error of the finite test set.
    """

    def __init__(self, arms: dict[str, dict[str, Any]]):
        self.arms = arms

    def _values(self, arm: str, key: str) -> list[float]:
        return [float(r[key]) for r in self.arms.get(arm, {}).get("per_seed", []) if r.get(key) is not None]

    def _borrowed(self, key: str) -> tuple[float, int] | None:
        """The largest sample std among multi-seed arms, with its degrees of freedom."""
        spreads = [(statistics.stdev(v), len(v) - 1) for v in (self._values(a, key) for a in self.arms) if len(v) > 1]
        return max(spreads) if spreads else None

    def claim(self, name: str, text: str, comparisons: list[tuple[dict[str, float], float]], key: str,
              numbers: dict[str, Any], note: str = "", strict: bool = False) -> dict[str, Any]:
        verdicts, intervals = [], []
        holds: bool | None = True
        for coefs, threshold in comparisons:
            means = {a: self.arms.get(a, {}).get(key) for a in coefs}
            if any(m is None or (isinstance(m, float) and math.isnan(m)) for m in means.values()):
                return {**_claim(name, text, None, numbers, note), "verdict": "not measured", "interval": None}
        if (not strict and all(t == 0 for _, t in comparisons)
                and self._unmoved([a for coefs, _ in comparisons for a in coefs], key)):
            return {**_claim(name, text, None, numbers, (note + "; " if note else "") +
                             "no arm's figure moved from the base's"), "verdict": NOT_TESTABLE, "interval": None}
        for coefs, threshold in comparisons:
            means = {a: self.arms.get(a, {}).get(key) for a in coefs}
            margin = sum(c * means[a] for a, c in coefs.items()) - threshold
            ok = margin > 1e-12 if strict else margin >= -1e-12
            holds = holds and ok
            half = self._half_width(coefs, key)
            if half is None:
                verdicts.append("reproduced (one seed)" if ok else "not reproduced (one seed)")
                intervals.append(None)
                continue
            low, high = margin - half, margin + half
            intervals.append([low, high])
            if (low > 1e-12 if strict else low >= -1e-12):
                verdicts.append("reproduced")
            elif high < -1e-12 or (strict and high <= 1e-12):
                verdicts.append("not reproduced")
            else:
                verdicts.append("within noise")
        order = ["not reproduced", "not reproduced (one seed)", "within noise", "reproduced (one seed)", "reproduced"]
        verdict = min(verdicts, key=order.index)
        return {**_claim(name, text, holds, numbers, note), "verdict": verdict,
                "interval": intervals[0] if len(intervals) == 1 else intervals}

    def _unmoved(self, arms: Sequence[str], key: str) -> bool:
        """Whether every arm of a comparison has exactly the base's figure at every seed (a ">=" claim over
        figures that did not move says nothing: not testable)."""
        base = self._values("base", key) or ([self.arms["base"][key]] if self.arms.get("base", {}).get(key) is not None
                                             else [])
        if not base or any(a != "base" and a not in self.arms for a in arms):
            return False
        for arm in set(arms) - {"base"}:
            values = self._values(arm, key) or [self.arms[arm][key]]
            if any(abs(v - b) > 1e-12 for v in values for b in base):
                return False
        return True

    def _half_width(self, coefs: dict[str, float], key: str) -> float | None:
        borrowed = self._borrowed(key)
        variance, dofs = 0.0, []
        for arm, c in coefs.items():
            values = self._values(arm, key)
            if len(values) > 1:
                std = statistics.stdev(values)
                dofs.append(len(values) - 1)
            elif borrowed is not None:
                std, dof = borrowed
                dofs.append(dof)
            else:
                return None
            variance += (c * std) ** 2 / max(len(values), 1)
        if not dofs:
            return None
        return T_95.get(min(dofs), 1.96) * math.sqrt(variance)


def diagnose(report: dict[str, Any]) -> list[str]:
    """Observations computed from the numbers, to read the claims by (no judgement beyond the arithmetic)."""
    notes = []
    arms, p, st = report["arms"], report["profile"], report["settings"]
    kept = report["filters"].get(f"adv_lambda{report['selection']['lambda']:g}", {}).get("kept")
    visits = st["steps"] * st["pivots_per_step"]
    small = kept is not None and 0 < kept < visits / 4
    notes.append(f"The base model's K = {p['k']} samples were all wrong at {p['all_wrong_frac']:.0%} of the "
                 f"{p['candidates']} candidates and mixed at {p['mixed_frac']:.0%} "
                 f"(mean reward {p['mean_reward']:.3f}); D_adv kept {kept} of them."
                 + (f" Each D_adv pivot is visited about {visits / kept:.0f} times in {st['steps']} steps of "
                    f"{st['pivots_per_step']} pivots, which favours memorising those states over learning a skill "
                    "that transfers to the test pivots." if small else ""))
    for name in ("pivotrl", "sft_pivotrl", "no_filter", "strict_reward", "pvpo"):
        a, base = arms.get(name), arms.get("base")
        if not a or not base or a.get("reward_first") is None:
            continue
        delta = a["in_domain_accuracy"] - base["in_domain_accuracy"]
        passes = a.get("reward_by_pass") or []
        per_pass = f" (per pass over its pivots: {', '.join(f'{m:.3f}' for m in passes)})" if len(passes) > 1 else ""
        notes.append(f"{name}: the training reward on its own pivots went from {a['reward_first']:.3f} to "
                     f"{a['reward_last']:.3f}{per_pass} (zero-variance groups {a['zero_var_frac']:.0%} of the steps' groups, "
                     f"{a['updates']} of {a['steps']} steps updated the model); test accuracy changed by {delta:+.3f} "
                     f"and OOD accuracy by {a['ood_accuracy'] - base['ood_accuracy']:+.3f}.")
    if "sft" in arms and "base" in arms:
        a, base = arms["sft"], arms["base"]
        notes.append(f"sft: test accuracy changed by {a['in_domain_accuracy'] - base['in_domain_accuracy']:+.3f} and "
                     f"OOD accuracy by {a['ood_accuracy'] - base['ood_accuracy']:+.3f}"
                     + (f"; its loss went from {a['loss_first']:.3f} to {a['loss_last']:.3f}"
                        if a.get("loss_first") else "")
                     + ".")
    for name, a in arms.items():
        if a.get("beats_base_on_val") is False:
            metric = (report.get("selection") or {}).get("metric") or "validation per-turn accuracy"
            notes.append(f"{name} did not beat the base on validation ({metric}: {_fmt(a.get('val_score'))} vs "
                         f"{_fmt(a.get('base_val_score'))}): selecting on validation with the base as a candidate "
                         "(lr = 0) keeps the base; its test figures are shown for the record.")
    base = arms.get("base")
    if base is not None and base.get("truncated_greedy") is not None:
        cut = {n: a["truncated_greedy"] for n, a in arms.items() if n != "base" and a.get("truncated_greedy") is not None}
        longer = [f"{n} {v:.0%}" for n, v in cut.items() if v > base["truncated_greedy"]]
        if longer:
            notes.append(f"Held-out episodes cut at the turn limit (the agent never stopped; greedy): base "
                         f"{base['truncated_greedy']:.0%}, then {', '.join(longer)}.")
    stops = report.get("data", {}).get("candidates_text_turns")
    if stops == 0:
        notes.append("No candidate pivot is a text turn (the domain's extraction skips turns without a tool call), so "
                     "no pivot arm is ever trained on the decision to stop and answer, which task success needs.")
    if base is not None and base.get("task_success") is not None and not 0.25 <= base["task_success"] <= 0.65:
        notes.append(f"Base task success is {base['task_success']:.3f} at T=1 ({_fmt(base.get('task_success_greedy'))} "
                     "greedy): outside the 0.25-0.65 band where RL has the most room.")
    if base is not None and base.get("strict_accuracy") is not None:
        notes.append(f"Base accuracy is {base['in_domain_accuracy']:.3f} greedy and "
                     f"{_fmt(base.get('mean_at_k_functional'))} mean@k at temperature 1; DESIGN.md asks for a base "
                     "at 0.3-0.6 so that groups are mixed."
                     if base["in_domain_accuracy"] < 0.3 else
                     f"Base accuracy is {base['in_domain_accuracy']:.3f} greedy.")
    return notes


def mark_validation_verdicts(arms: dict[str, Any], selection: dict[str, Any]) -> None:
    """``beats_base_on_val``, ``val_score`` and ``base_val_score`` of each trained arm the selection judged, by the
    selection's own metric (validation task success where it chose by it: per-turn accuracy can rank an arm above
    the base where task success does not). Fixed settings (no selection) judge no arm."""
    verdicts, base_val = selection.get("beats_base") or {}, selection.get("base_val")
    best: dict[str, float] = {}
    for trial in selection.get("trials", []):
        if trial.get("score") is not None:
            best[trial["arm"]] = max(best.get(trial["arm"], trial["score"]), trial["score"])
    for name, a in arms.items():
        if name != "base" and name in verdicts:
            a["beats_base_on_val"], a["val_score"], a["base_val_score"] = verdicts[name], best.get(name), base_val


def build_report(cfg: Any, *, runs: Sequence[dict[str, Any]], data: dict[str, Any], base: dict[str, Any],
                 profile: dict[str, Any], filters: dict[str, Any], selection: dict[str, Any],
                 verifiers: dict[str, Any] | None, stage_seconds: dict[str, float],
                 wall_seconds: float) -> dict[str, Any]:
    """The ``report.json`` content."""
    arms = aggregate_arms(runs)
    for name, figures in arm_intervals(runs).items():
        for figure, ci in figures.items():
            arms[name][f"{figure}_ci"] = [ci["ci_low"], ci["ci_high"]]
    comparisons = paired_comparisons(runs)
    base_report = base["report"]
    pretrained = base.get("kind") == "pretrained"
    report = {
        "arms": arms,
        "comparisons": comparisons,
        "claims": paired_claims(arms, comparisons) + check_claims(arms),
        "wall_seconds": round(wall_seconds, 1),
        "seed": cfg.seed,
        "seeds": [cfg.seed + i for i in range(cfg.seeds)],
        "model_params": base_report["parameters"],
        "domain": cfg.domain,
        "data": {**data["sizes"], "candidates_text_turns": _text_turns(data["files"].get("candidates"))},
        "base_model": {**{k: base_report.get(k) for k in ("parameters", "vocab_size", "base_pivots", "probe_items",
                                                          "steps", "tokens", "seconds", "recipe", "best_step")},
                       "prebuilt": bool(base.get("prebuilt")), "command": base.get("command"), "key": base.get("key"),
                       "kind": base.get("kind", "tiny"), "warmup": base.get("warmup")},
        "model": ({k: base_report.get(k) for k in ("name", "spec", "parameters", "source", "fingerprint")}
                  if pretrained else {"name": "tiny", "spec": "tiny", "parameters": base_report["parameters"]}),
        "engine": getattr(cfg, "engine", "hf"),
        "ood": ({"domain": cfg.ood_domain, "tasks": data["sizes"].get("ood_tasks"), "episode_k": cfg.per_arm.ood_episode_k,
                 "probes": cfg.per_arm.probe_set} if getattr(cfg, "ood_domain", None) else {"probes": cfg.per_arm.probe_set}),
        "timings": {**{f"{k}_s": v for k, v in stage_seconds.items()}, "total_s": round(wall_seconds, 1)},
        "profile": {**profile["stats"], "seconds": profile.get("seconds")},
        "filters": filters,
        "selection": selection,
        "stage_seconds": stage_seconds,
        "settings": {**{k: v for k, v in cfg.to_dict().items() if k not in ("base", "per_arm")},
                     **cfg.to_dict()["per_arm"]},  # one flat table, as before the arms' settings were nested
        "verifiers": verifiers["domains"] if verifiers else None,
    }
    mark_validation_verdicts(arms, selection)
    report["observations"] = diagnose(report)
    return report


def write_report(report: dict[str, Any], out: str | Path) -> list[Path]:
    """Write ``report.json``, ``report.md`` and the plots into ``out``; returns the written paths."""
    out = Path(out)
    plots = draw_plots(report, out)
    report["plots"] = [str(p.relative_to(out)) for p in plots]
    (out / "report.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    (out / "report.md").write_text(markdown(report), encoding="utf-8")
    return [out / "report.json", out / "report.md", *plots]


# --------------------------------------------------------------------------- text


def table_rows(report: dict[str, Any], titles: bool = True) -> list[list[str]]:
    """Rows of the results table (header first): one per arm (its title, or its short name)."""
    ood_tasks = any(a.get("ood_task_success") is not None for a in report["arms"].values())
    header = (["arm", "task success (T=1 pass@1)", "task success (greedy)", "per-turn (greedy)", "strict", "mean@k",
               "OOD probes"] + (["OOD task success (T=1)", "OOD task success (greedy)"] if ood_tasks else [])
              + ["KL to base (nats/token)", "entropy (nats/token)", "rollout turns", "zero-var groups", "train s",
                 "eval s"])
    rows = [header]
    for name, a in report["arms"].items():
        rows.append([
            a["title"] if titles else name, _pm(a.get("task_success"), a.get("task_success_std")),
            _pm(a.get("task_success_greedy"), a.get("task_success_greedy_std")),
            _pm(a["in_domain_accuracy"], a.get("in_domain_accuracy_std")),
            _pm(a["strict_accuracy"], a.get("strict_accuracy_std")), _pm(a.get("mean_at_k_functional"), None),
            _pm(a["ood_accuracy"], a.get("ood_accuracy_std"))]
            + ([_pm(a.get("ood_task_success"), a.get("ood_task_success_std")),
                _pm(a.get("ood_task_success_greedy"), a.get("ood_task_success_greedy_std"))] if ood_tasks else [])
            + [_fixed(a.get("kl_per_token"), 4), _fixed(a.get("entropy_per_token"), 3),
               f"{a['rollout_turns']:,}", "-" if a.get("zero_var_frac") is None else f"{a['zero_var_frac']:.2f}",
               f"{a['train_seconds']:.0f}", f"{a['eval_seconds']:.0f}"])
    return drop_empty_columns(rows)


def _fixed(value: float | None, places: int) -> str:
    return "-" if value is None else f"{value:.{places}f}"


def drop_empty_columns(rows: list[list[str]]) -> list[list[str]]:
    """``rows`` (header first) without the columns that no arm has a figure in (``-`` everywhere: mean@k where no
    sample was drawn at the pivots)."""
    keep = [j for j in range(len(rows[0])) if j == 0 or any(row[j] not in ("-", "") for row in rows[1:])]
    return [[row[j] for j in keep] for row in rows]


def interval_lines(report: dict[str, Any]) -> list[str]:
    """Each arm's headline figures with their 95 % intervals (bootstrap over the items; the headline plot's bars)."""
    figures = [("task_success", "task success T=1"), ("task_success_greedy", "greedy"),
               ("ood_task_success", "OOD task success T=1"), ("ood_accuracy", "OOD probes")]
    shown = [(k, t) for k, t in figures if any(a.get(f"{k}_ci") for a in report["arms"].values())]
    if not shown:
        return []
    lines = ["", "With 95 % intervals (bootstrap over the held-out items, each arm's seeds averaged per item):", "",
             "| arm | " + " | ".join(t for _, t in shown) + " |", "|---|" + "---|" * len(shown)]
    for name, a in report["arms"].items():
        cells = []
        for k, _ in shown:
            ci = a.get(f"{k}_ci")
            cells.append("-" if a.get(k) is None else f"{a[k]:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def console_tables(report: dict[str, Any]) -> list[tuple[str, list[list[str]]]]:
    """The printed summary as two narrow tables (``(title, rows)``, header first), each readable at 80 columns:
    task success on the held-out tasks (in-domain and, where measured, OOD), then per-turn accuracy, the OOD
    probes and the cost. Figures over several seeds read ``mean±std``."""
    arms = report["arms"]
    ood_tasks = any(a.get("ood_task_success") is not None for a in arms.values())
    first = [["arm", "T=1", "greedy"] + (["OOD T=1"] if ood_tasks else []) + ["cut %"]]
    second = [["arm", "per-turn", "mean@k", "OOD probes", "turns", "train s"]]
    for name, a in arms.items():
        cut = a.get("truncated_greedy")
        first.append([name, _pm_short(a.get("task_success"), a.get("task_success_std")),
                      _pm_short(a.get("task_success_greedy"), a.get("task_success_greedy_std"))]
                     + ([_pm_short(a.get("ood_task_success"), a.get("ood_task_success_std"))] if ood_tasks else [])
                     + ["-" if cut is None else f"{100 * cut:.0f}"])
        second.append([name, _pm_short(a.get("in_domain_accuracy"), a.get("in_domain_accuracy_std")),
                       _pm_short(a.get("mean_at_k_functional"), None),
                       _pm_short(a.get("ood_accuracy"), a.get("ood_accuracy_std")), f"{a['rollout_turns']:,}",
                       f"{a['train_seconds']:.0f}"])
    return [("task success on the held-out tasks (T=1 pass@1, greedy; cut % = greedy episodes cut at the turn "
             "limit)", drop_empty_columns(first)),
            ("per-turn accuracy (greedy), OOD probes, rollout turns, training seconds", drop_empty_columns(second))]


def markdown(report: dict[str, Any]) -> str:
    """The human-readable report."""
    r = report
    seeds = ", ".join(str(s) for s in r["seeds"])
    lines = [
        f"# pivot-envs demo: PivotRL at small scale ({r['domain']}, {(r.get('model') or {}).get('name', 'tiny')})",
        "",
        f"Seeds {seeds} (main arms; the other arms use seed {r['seed']}). "
        f"Base model: {(r.get('model') or {}).get('name', 'tiny')}, {r['model_params']:,} parameters; rollout engine "
        f"`{r.get('engine', 'hf')}`. "
        f"Data: {r['data']['base']} base pivots, {r['data']['candidates']} candidates (D_cand), "
        f"{r['data']['val']} validation and {r['data']['test']} test pivots. "
        f"Wall time {r['wall_seconds'] / 60:.1f} min "
        "(summed over the stages; a resumed demo counts every call)"
        + (f"; the work behind it took at least {least_wall_seconds(r) / 60:.1f} min by the runs' own clocks (the "
           "stage clock missed earlier calls: see the wall time per stage)." if clock_missed_work(r) else "."),
        "",
        "## Results (held-out tasks and test pivots; mean ± sample std over seeds)",
        "",
    ]
    rows = table_rows(r)
    lines.append("| " + " | ".join(rows[0]) + " |")
    lines.append("|" + "---|" * len(rows[0]))
    lines += ["| " + " | ".join(row) + " |" for row in rows[1:]]
    lines += interval_lines(r)
    k = r["settings"].get("eval_k")
    ek = r["settings"].get("episode_k")
    tasks = next((a.get("tasks") for a in r["arms"].values() if a.get("tasks")), None)
    lines += [
        "",
        f"task success = held-out tasks ({tasks or '-'}) played to the end in the domain's world by the model alone "
        f"(at most {r['settings'].get('max_turns')} turns), success = the expert's final state; T=1 pass@1 = mean "
        f"over {ek} episodes per task at temperature 1 (the temperature profiling and training use: the "
        "objective), greedy beside it. "
        f"per-turn = greedy accuracy under the domain's functional verifier; strict = greedy exact match; "
        f"mean@k = mean functional reward of {k} samples at temperature 1; OOD = greedy exact match on the "
        + ("the few-shot probe questions (8 families) the pretrained model partly answers before any training; "
           if r.get("ood", {}).get("probes") == "few_shot" else
           "200 fixed probe questions (arithmetic and key-value lookup) the base model learned; ")
        + (f"OOD task success = {r['ood'].get('tasks')} held-out tasks of the {r['ood']['domain']} domain (which the "
           f"arms never train on) played to the end, T=1 pass@1 over {r['ood'].get('episode_k')} episode(s) and "
           "greedy; " if r.get("ood", {}).get("domain") else "")
        + "rollout turns = "
        "actions sampled (profiling + training); zero-var groups = share of training groups whose G rewards "
        "were all equal (no GRPO signal).",
        "",
        "## Paired comparisons (same held-out items)",
        "",
    ]
    lines += comparison_lines(r.get("comparisons") or {})
    lines += curve_lines(r)
    lines += [
        "",
        "## The paper's claims at this scale",
        "",
    ]
    lines += claim_lines(r["claims"])
    lines += ["", "Observations (computed from the numbers below):", ""] + [f"- {n}" for n in r.get("observations", [])]
    p = r["profile"]
    lines += [
        "",
        "## Profiling and the filter",
        "",
        f"K = {p['k']} samples of the base model at each of {p['candidates']} candidates ({p['rollouts']:,} rollouts, "
        f"{_fmt(p.get('seconds'))} s): mean reward {p['mean_reward']:.3f} (strict {p['strict_mean_reward']:.3f}); "
        f"zero-variance groups {p['zero_var_frac']:.2f} (all wrong {p['all_wrong_frac']:.2f}, all right "
        f"{p['all_right_frac']:.2f}); mixed {p['mixed_frac']:.2f}. Histogram of the per-turn mean reward "
        f"(eighths): {p['mean_histogram']}.",
        *_accepted_lines(p),
        "",
        "| pivot set | kept | zero-variance | too easy | topped up |",
        "|---|---|---|---|---|",
    ]
    for name, a in r["filters"].items():
        zero = a.get("zero_var_in_sample", "-") if name.startswith("random") else a.get("zero_var", "-")
        lines.append(f"| {name} | {a.get('train_pivots', a.get('kept'))} | {zero} | "
                     f"{a.get('too_easy', '-')} | {a.get('topped_up', 0) or '-'} |")
    lines += hack_lines(r)
    sel = r["selection"]
    lines += ["", "## Hyper-parameters", "",
              f"Chosen {'on the validation split' if sel['trials'] else '(fixed, no search in this mode)'}: "
              f"PivotRL lr {sel['rl_lr']:g}, SFT lr {sel['sft_lr']:g}, lambda {sel['lambda']:g}. "
              f"Every trained arm: {r['settings']['steps']} optimiser steps of "
              f"{r['settings']['pivots_per_step']} pivots "
              f"(RL: G = {r['settings']['group_size']}, beta = {r['settings']['beta']:g}"
              f"{_lora_words(r['settings'].get('rl_lora_r'))})."]
    if sel["trials"]:
        lines += ["", f"Selection metric: {sel.get('metric') or 'validation per-turn accuracy'}; the base (lr = 0) "
                  f"scored {_fmt(sel.get('base_val'))}.", "",
                  "| trial | lr | setting | validation task success (T=1) | validation per-turn | validation strict |",
                  "|---|---|---|---|---|---|"]
        for t in sel["trials"]:
            lines.append(f"| {t['arm']} | {t['lr']:g} | {t['label']} | {_fmt(t.get('val_task_success'))} | "
                         f"{t['val_functional']:.3f} | {t['val_strict']:.3f} |")
    lines += ["", "## Per arm", "",
              "| arm | lr | seeds | steps (updates) | train rollouts | tokens | val | per seed (in-domain / OOD) |",
              "|---|---|---|---|---|---|---|---|"]
    for name, a in r["arms"].items():
        tokens = (f"{a['completion_tokens']:,} sampled" if a.get("completion_tokens") is not None else
                  f"{a['tokens']:,} ({a['loss_tokens']:,} in loss)" if a.get("tokens") is not None else "-")
        per = "; ".join(f"s{s['seed']}: {_fmt(s['in_domain_accuracy'])} / {_fmt(s['ood_accuracy'])}"
                        for s in a["per_seed"])
        lines.append(f"| {name} | {_fmt(a.get('lr'))} | {len(a['seeds'])} | {a['steps']} ({a['updates']}) | "
                     f"{a['train_rollouts']:,} | {tokens} | {_fmt(a.get('val_accuracy'))} | {per} |")
    b = r["base_model"]
    if b.get("kind") == "pretrained":
        lines += pretrained_base_lines(r)
    else:
        lines += tiny_base_lines(r)
    lines += ["", "## Wall time per stage", "",
              ", ".join(f"{k} {v:.0f} s" for k, v in r["stage_seconds"].items())
              + (f" (machine: {r['machine'].get('cpus')} CPUs, {r['machine'].get('device')}, load average at the end "
                 f"of the call that wrote this report {_fmt(r['machine'].get('load_avg_at_end'))})"
                 if r.get("machine") else "")]
    lines += runs_seconds_lines(r)
    if r.get("command"):
        lines += ["", f"Command: `{r['command']}`"]
    if r.get("plots"):
        lines += ["", "## Plots", ""] + [f"![{p}]({p})" for p in r["plots"]]
    if r.get("verifiers"):
        summaries = [DomainSummary(**v) for v in r["verifiers"].values()]
        text = markdown_report(summaries, sum(s.seconds for s in summaries), r["seed"])
        lines += ["", "## Verifier summary", ""] + text.splitlines()[3:]
    return "\n".join(lines) + "\n"


def pretrained_base_lines(r: dict[str, Any]) -> list[str]:
    """The report's base-model section for a pretrained model: where it came from, and its warm-up."""
    b, m = r["base_model"], r.get("model") or {}
    w = b.get("warmup")
    lines = ["", "## Base model", "", f"{m.get('name')} ({m.get('parameters') or 0:,} parameters; `--model "
             f"{m.get('spec')}`, weights fingerprint {m.get('fingerprint')})."]
    if not w:
        return lines + ["", "No warm-up: the arms start from the model as it is."]
    rec = w["recipe"]
    checks = ", ".join(f"step {c['step']}: {c['success']:.3f}" for c in w.get("checks", []))
    lines += ["", f"Warm-up (LoRA rank {rec['lora_r']}, alpha {rec['lora_alpha']}, every linear layer; lr {rec['lr']:g}; "
              f"{rec['batch']} trajectories a step) on {w.get('trajectories')} generated trajectories (never a task of the "
              f"arms' pivots, the held-out or the validation tasks), {w.get('tokens', {}).get('pool', 0):,} tokens a pass. "
              f"Band checks (T=1 task success on {rec['check_tasks']} validation tasks): {checks}. Kept step "
              f"{w.get('chosen_step')}: {_fmt(w.get('chosen_success'))}, "
              f"{'inside' if w.get('in_band') else 'OUTSIDE'} the band {rec['band_low']:g}-{rec['band_high']:g}. "
              f"{_fmt(w.get('train_seconds'))} s of training ({_fmt(w.get('tokens_per_s'))} tokens/s), "
              f"{_fmt(w.get('seconds'))} s with the checks.",
              "",
              (f"How it was made: prebuilt (shipped with the package), by `{b['command']}` (key {b['key']}, which this "
               "run's model, recipe and data match)." if b.get("prebuilt") else
               f"How it was made: by this run (`{b.get('command') or 'pivot-envs demo'}`), adapter {w.get('adapter')}.")]
    return lines


def tiny_base_lines(r: dict[str, Any]) -> list[str]:
    """The report's base-model section for the tiny model trained from scratch."""
    b = r["base_model"]
    rec = b["recipe"]
    return [
        "", "## Base model", "",
        f"{b['parameters']:,} parameters (Llama-style, {rec['n_layers']} layers, width {rec['hidden_size']}, "
        f"{rec['n_heads']} heads, vocabulary {b['vocab_size']}), prompt window {rec['max_context_tokens']} tokens "
        f"(prompts keep the system message, the question and the latest tokens). Trained {b['steps']} steps in {b['seconds']:.0f} s on a mixture: each step one "
        f"batch of {rec['domain_batch']} expert turns of its {b['base_pivots']} domain pivots (loss on the action, and "
        f"weight {rec['prompt_loss_weight']:g} on the prompt) and one batch of {rec['probe_batch']} probe questions "
        f"({b['probe_items']} items); lr {rec['lr']:g}"
        + (f", early-stopped on validation at step {b['best_step']}. " if b.get("best_step") and b["best_step"] < b["steps"]
           else ". ")
        + ("Its domain pivots are the base part of the training trajectories *and* the candidates' trajectories "
           "(the 'fewer steps on the same data' recipe: the arms train on turns the base model saw, but only "
           f"{b['steps'] * rec['domain_batch'] / max(1, b['base_pivots']):.1f} times each on average); validation and "
           "test trajectories are unseen."
           if r["settings"].get("base_sees_candidates") else
           "Its domain pivots come from trajectories the arms never train on."),
        "",
        (f"How it was made: prebuilt (shipped with the package), by `{b['command']}` (deterministic; key {b['key']}, "
         "which this run's recipe and data split match)." if b.get("prebuilt") else
         f"How it was made: trained by this run (`{b.get('command') or 'pivot-envs demo'}`)."),
    ]


def verdict_of(claim: dict[str, Any]) -> str:
    """A claim's verdict (``reproduced``, ``not reproduced``, ``within noise``, ``not testable``, ``not measured``...)."""
    return claim.get("verdict") or {True: "reproduced", False: "not reproduced", None: "not measured"}[claim["holds"]]


def claim_lines(claims: Sequence[dict[str, Any]]) -> list[str]:
    """The claims as markdown bullets: the verdict, the numbers, the interval and the note."""
    lines = []
    for c in claims:
        mark = verdict_of(c)
        nums = ", ".join(f"{k} {_fmt(v)}" for k, v in c["numbers"].items() if v is not None)
        interval = _interval_text(c.get("interval"), c.get("interval_kind", "of the margin over seeds"))
        lines.append(f"- **{mark.upper() if mark.startswith('not rep') else mark}**: {c['text']} ({nums})"
                     f"{interval}{'. ' + c['note'] if c.get('note') else ''}")
    return lines


def comparison_lines(comparisons: dict[str, dict[str, Any]]) -> list[str]:
    """The paired tests as a markdown table (diff with its 95 % interval and p-value per metric)."""
    pairs = {name: c for name, c in comparisons.items() if "_vs_" in name}
    if not pairs:
        return ["(no per-item outcomes: nothing to pair)"]
    lines = ["| A vs B | task success T=1 (tasks) | task success greedy | per-turn greedy (McNemar) | "
             "per-turn mean@k | OOD probes |", "|---|---|---|---|---|---|"]

    def cell(c: dict[str, Any] | None) -> str:
        if not c or c.get("diff") is None:
            return "-"
        n = f", n={c['n']}" if c.get("n") is not None else ""
        return f"{c['diff']:+.3f} [{c['ci_low']:+.3f}, {c['ci_high']:+.3f}], p={c['p_value']:.3g}{n}"

    for name, c in pairs.items():
        a, _, b = name.partition("_vs_")
        lines.append(f"| {a} vs {b} | {cell(c)} | {cell(c.get('task_success_greedy'))} | "
                     f"{cell(c.get('per_turn'))} | {cell(c.get('per_turn_mean_at_k'))} | {cell(c.get('ood'))} |")
    lines += ["", "diff = A - B; [95 % interval]; task success: paired bootstrap over held-out tasks "
              "(each task's pass@1 averaged over the arm's seeds); per-turn: McNemar's exact test on greedy "
              "correctness at the test pivots (first shared seed), mean@k: paired bootstrap over pivots; OOD: "
              "paired bootstrap over the probe items (greedy exact match)."]
    return lines


def curve_lines(report: dict[str, Any]) -> list[str]:
    """Figure 1's points as a table: held-out task success against cumulative rollout turns (profiling
    included for the pivot arms), the base at 0 turns; nothing when no arm has a curve."""
    arms = report["arms"]
    with_curve = {n: a["curve"] for n, a in arms.items() if a.get("curve")}
    if not with_curve:
        return []
    base = arms.get("base", {})
    lines = ["", "## Task success along training (Figure 1)", "",
             "| arm | step | rollout turns | task success T=1 | greedy | seeds averaged |", "|---|---|---|---|---|---|",
             f"| base | 0 | 0 | {_fmt(base.get('task_success'))} | {_fmt(base.get('task_success_greedy'))} | "
             f"{len(base.get('seeds') or [])} |"]
    for name, points in with_curve.items():
        for p in points:
            lines.append(f"| {name} | {p['step']} | {p['rollout_turns']:,} | {_fmt(p.get('task_success'))} | "
                         f"{_fmt(p.get('task_success_greedy'))} | {p.get('seeds', 1)} |")
    return lines


# --------------------------------------------------------------------------- helpers


def mean_std(values: Sequence[float]) -> tuple[float | None, float | None]:
    """Mean and sample standard deviation (``None`` std for fewer than two values; ``(None, None)`` for none)."""
    values = [float(v) for v in values]
    if not values:
        return None, None
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None)


def _interval_text(interval: Any, kind: str = "of the margin over seeds") -> str:
    """``; 95 % interval of the margin [-0.021, +0.039]`` (one per comparison), or nothing."""
    if not interval or all(p is None for p in interval):
        return ""
    single = len(interval) == 2 and all(isinstance(x, (int, float)) for x in interval)
    parts = [interval] if single else interval
    shown = ", ".join("n/a" if p is None else f"[{p[0]:+.3f}, {p[1]:+.3f}]" for p in parts)
    return f"; 95 % interval {kind} {shown}"


def _claim(name: str, text: str, holds: bool | None, numbers: dict[str, Any], note: str = "") -> dict[str, Any]:
    return {"name": name, "text": text, "holds": holds, "numbers": numbers, "note": note}


def _mean_int(values: Sequence[float]) -> int:
    return int(round(statistics.fmean(values))) if values else 0


def _mean_float(values: Sequence[float]) -> float:
    return round(statistics.fmean(values), 2) if values else 0.0


def _pm_short(value: float | None, std: float | None) -> str:
    """``0.355±0.020`` (or ``0.355`` with one seed, ``-`` when not measured): a figure for a narrow column."""
    if value is None:
        return "-"
    return f"{value:.3f}" + (f"±{std:.3f}" if std is not None else "")


def _pm(value: float | None, std: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" + (f" ± {std:.3f}" if std is not None else "")


def _lora_words(rank: int | None) -> str:
    """How the RL arms were trained: LoRA (its rank and alpha) or full fine-tuning."""
    return f"; LoRA rank {rank}, alpha {2 * rank}, every linear layer" if rank else "; full fine-tuning"


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if value == int(value):
            return f"{value:g}"
        return f"{value:.3g}" if abs(value) < 1e-3 else f"{value:.3f}".rstrip("0").rstrip(".")
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    return str(value)


def hack_lines(report: dict[str, Any]) -> list[str]:
    """The hack monitor's table: per arm, the shares of its accepted training samples (PivotRL: first-round samples;
    episodes: judged turns) that make more calls than the expert, stop at a call pivot, answer at > 3x the expert's
    length, or were not the expert's exact action, early -> late in training; the profile stage's base samples
    first. Nothing when no figure was recorded."""
    rows = []
    base = (report.get("profile") or {}).get("hack")
    if base and base.get(ACCEPTED):
        rows.append(["profile (base model)", f"{base[ACCEPTED]:,}", *(_share(base.get(k)) for k in HACKS),
                     _share(_not_exact(base)), _top_categories(base)])
    for name, a in report["arms"].items():
        hack = a.get("hack")
        if not hack:
            continue
        early, late, every = hack["early"], hack["late"], hack["all"]
        rows.append([name, f"{every[ACCEPTED]:,}",
                     *(_drift(early.get(k), late.get(k)) for k in HACKS),
                     _drift(_not_exact(early), _not_exact(late)), _top_categories(every)])
    if not rows:
        return []
    return ["", "## Hack monitor (accepted samples unlike the expert's action)", "",
            "Shares of the accepted samples (passed, no verifier error; the episode arms: the turns the env judged on "
            "the expert's path, none without turn credit) that make more tool calls than the expert, make no call "
            "where the expert made one, answer with text > 3x the expert's answer in characters, or were not the "
            "expert's exact action; early -> late = the first -> the last third of each seed's training steps.", "",
            "| arm | accepted | more calls | stop at a call | long answer | not exact | accepted by (all steps) |",
            "|---|---|---|---|---|---|---|", *("| " + " | ".join(row) + " |" for row in rows)]


def _drift(early: float | None, late: float | None) -> str:
    """``2.0% -> 7.5%`` (``-`` where neither third accepted a sample)."""
    return "-" if early is None and late is None else f"{_share(early)} -> {_share(late)}"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _not_exact(metrics: dict[str, Any]) -> float | None:
    exact = metrics.get("accepted_by/exact")
    return None if exact is None else 1.0 - exact


def _top_categories(metrics: dict[str, Any]) -> str:
    """``exact 80%, arguments 15%, ...``: the categories that accepted some samples, most first."""
    shares = [(k.split("/", 1)[1].replace("_", " "), v) for k, v in metrics.items() if k.startswith("accepted_by/") and v]
    return ", ".join(f"{k} {v:.0%}" for k, v in sorted(shares, key=lambda kv: -kv[1])) or "-"


def _accepted_lines(profile: dict[str, Any]) -> list[str]:
    """How functional the reward was: per domain, the share of accepted samples that were not the expert's exact
    action, and what accepted them (a report written before issue 35 has no such record: no lines)."""
    rows = profile.get("accepted_by_domain") or {}
    if not rows:
        return []
    lines = ["", "| domain | accepted samples | not the expert's exact action | accepted by |", "|---|---|---|---|"]
    for domain, row in sorted(rows.items()):
        by = ", ".join(f"{k} {v}" for k, v in sorted(row["accepted_by"].items(), key=lambda kv: -kv[1]))
        lines.append(f"| {domain or '-'} | {row['accepted']} | {row['not_exact']:.1%} | {by} |")
    return lines
