"""Paired comparisons of the demo's arms against the base model, on the same held-out items.

::

    from pivot_envs.experiments.comparisons import paired_comparisons, turns_to_match

    comparisons = paired_comparisons(runs)          # runs: the arms' run.json contents
    comparisons["pivotrl_vs_base"]                  # {"diff", "ci_low", "ci_high", "p_value", ...}

For every trained arm, ``ARM_vs_base`` holds (each arm's per-item outcomes averaged over its seeds,
the base's likewise, then compared item by item):

* the headline, **task success** (pass@1 at temperature 1 = the mean over ``episode_k`` episodes per
  held-out task; the temperature profiling and training use): paired bootstrap over tasks
  (:func:`pivot_envs.experiments.stats.paired_bootstrap`) — ``diff``, ``ci_low``, ``ci_high``,
  ``p_value`` at the top level;
* ``task_success_greedy``: the same test on greedy episodes;
* ``per_turn``: McNemar's exact test on greedy per-turn correctness (reward >= 0.5) at the test
  pivots, for the first seed both arms share (:func:`pivot_envs.experiments.stats.mcnemar`);
* ``per_turn_mean_at_k``: paired bootstrap on the per-pivot mean@k at temperature 1;
* ``ood``: paired bootstrap on greedy exact match at the OOD probe items.

The same entry compares arm pairs (:data:`PAIRS`: ``pivotrl_vs_sft``, ``pivotrl_vs_no_filter``,
``no_filter_vs_strict_reward``, Table 4's ordering), and ``ood_retention`` tests the paper's OOD claim
(PivotRL's probe drop <= half of SFT's) over the probe items (:func:`ood_retention`); with the ``sft_long`` arm
(SFT trained until it loses OOD ability) ``ood_retention_sft_long`` tests the same claim against it, with
``in_domain`` saying whether the two arms' in-domain gains are matched (:func:`in_domain_match`).

Items whose outcome is missing in either arm (infrastructure errors) are left out and counted.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from pivot_envs.experiments.arms import read_items
from pivot_envs.experiments.stats import bootstrap_mean, drop_missing, mcnemar, paired_bootstrap

HEADLINE = "task success: pass@1 at temperature 1 (mean over the episodes of each held-out task)"


PAIRS = (("pivotrl", "sft"), ("pivotrl", "no_filter"), ("no_filter", "strict_reward"), ("e2e_credit", "e2e"),
         ("sft_pivotrl", "sft"), ("sft_pivotrl", "pivotrl"), ("pivotrl", "sft_long"))
"""Arm-to-arm comparisons beside ``ARM_vs_base``: PivotRL vs SFT, Table 4's ordering, turn-level credit against
plain E2E RL, the SFT -> PivotRL chain against each of its stages, and PivotRL against SFT trained longer."""


def paired_comparisons(runs: Sequence[dict[str, Any]], n_boot: int = 10000) -> dict[str, dict[str, Any]]:
    """``{"ARM_vs_base": {...}, "A_vs_B": {...}, "ood_retention": {...}}`` for the arms with per-item
    outcomes (see the module docstring)."""
    by_arm = _items_by_arm(runs)
    out: dict[str, dict[str, Any]] = {}
    base = by_arm.get("base")
    if base:
        for arm, seeds in by_arm.items():
            if arm != "base":
                out[f"{arm}_vs_base"] = compare(seeds, base, n_boot)
    for a, b in PAIRS:
        if by_arm.get(a) and by_arm.get(b):
            out[f"{a}_vs_{b}"] = compare(by_arm[a], by_arm[b], n_boot)
    for sft_arm, suffix in (("sft", ""), ("sft_long", "_sft_long")):
        if not (base and by_arm.get("pivotrl") and by_arm.get(sft_arm)):
            continue
        for name, kind in (("ood_retention", "probe"), ("ood_task_retention", "ood_task_sampled")):
            retention = ood_retention(by_arm["pivotrl"], by_arm[sft_arm], base, n_boot, kind=kind)
            if retention is not None:
                out[name + suffix] = {**retention, "sft_arm": sft_arm,
                                      "in_domain": in_domain_match(out.get(f"pivotrl_vs_{sft_arm}"))}
    return out


def in_domain_match(pivotrl_vs_sft: dict[str, Any] | None) -> dict[str, Any] | None:
    """Whether an OOD comparison of PivotRL with an SFT arm is at a matched in-domain gain: PivotRL's held-out task
    success at T=1 is not below the SFT arm's (the paired interval of PivotRL - SFT reaches 0 or lies above it).
    An SFT arm that gained clearly more in domain may have paid for it OOD: its drop is then no fair yardstick, and
    the entry says so. ``None`` when the two arms share no held-out task."""
    if not pivotrl_vs_sft or pivotrl_vs_sft.get("diff") is None:
        return None
    matched = pivotrl_vs_sft["ci_high"] >= 0
    return {"pivotrl_minus_sft": pivotrl_vs_sft["diff"], "ci_low": pivotrl_vs_sft["ci_low"],
            "ci_high": pivotrl_vs_sft["ci_high"], "p_value": pivotrl_vs_sft["p_value"], "matched": matched,
            "note": ("PivotRL's in-domain task success is not below the SFT arm's" if matched else
                     "the SFT arm gained more in domain (PivotRL - SFT below 0): the gains are not matched")}


INTERVAL_ITEMS = {"task_success": "task_sampled", "task_success_greedy": "task_greedy", "ood_accuracy": "probe",
                  "ood_task_success": "ood_task_sampled", "ood_task_success_greedy": "ood_task_greedy"}
"""The report's per-arm figures that get a 95 % interval (bootstrap over their items), and the item kind of each."""


def arm_intervals(runs: Sequence[dict[str, Any]], n_boot: int = 10000) -> dict[str, dict[str, dict[str, Any]]]:
    """``{arm: {figure: {"n", "mean", "ci_low", "ci_high"}}}``: each arm's held-out figures of
    :data:`INTERVAL_ITEMS` (per item averaged over the arm's seeds) with a percentile bootstrap interval over
    the items; figures an arm did not measure are left out."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for arm, seeds in _items_by_arm(runs).items():
        for figure, kind in INTERVAL_ITEMS.items():
            values = [v for v in _averaged(seeds, kind).values() if v is not None]
            if values:
                out.setdefault(arm, {})[figure] = bootstrap_mean(values, n_boot=n_boot, seed=0)
    return out


def _items_by_arm(runs: Sequence[dict[str, Any]]) -> dict[str, dict[int, dict[str, Any]]]:
    """Every run's per-item test outcomes, by arm and seed."""
    by_arm: dict[str, dict[int, dict[str, Any]]] = {}
    for run in runs:
        if "test" not in run:
            continue
        items = read_items(run, "test")
        if items is not None:
            by_arm.setdefault(run["arm"], {})[int(run["seed"])] = items
    return by_arm


def compare(arm: dict[int, dict[str, Any]], other: dict[int, dict[str, Any]], n_boot: int = 10000) -> dict[str, Any]:
    """One arm against another on the same items (each arm's outcomes averaged over its seeds): task success
    at T=1 at the top level, then greedy task success, per-turn McNemar (first shared seed), per-turn mean@k
    and the OOD probes (paired bootstrap over probe items)."""
    entry: dict[str, Any] = {"metric": HEADLINE, "seeds": sorted(arm)}
    tasks = _bootstrap(_averaged(arm, "task_sampled"), _averaged(other, "task_sampled"), n_boot)
    if tasks is not None:
        entry.update({k: tasks[k] for k in ("diff", "ci_low", "ci_high", "p_value", "n", "mean_a", "mean_b")})
        entry["dropped"] = tasks["dropped"]
        entry["test"] = tasks["test"]
    entry["task_success"] = tasks  # the same test under its name (the real-model report's contract)
    entry["task_success_greedy"] = _bootstrap(_averaged(arm, "task_greedy"), _averaged(other, "task_greedy"), n_boot)
    shared = sorted(set(arm) & set(other))
    if shared:
        s = shared[0]
        a, b = _aligned(arm[s]["pivot_greedy"], other[s]["pivot_greedy"])
        a2, b2, dropped = drop_missing(a, b)
        entry["per_turn"] = ({**mcnemar([x >= 0.5 for x in a2], [x >= 0.5 for x in b2]), "seed": s,
                              "dropped": dropped} if a2 else None)
    entry["per_turn_mean_at_k"] = _bootstrap(_averaged(arm, "pivot_sampled"), _averaged(other, "pivot_sampled"), n_boot)
    entry["ood"] = _bootstrap(_averaged(arm, "probe"), _averaged(other, "probe"), n_boot)
    for name, kind in (("ood_task_success", "ood_task_sampled"), ("ood_task_success_greedy", "ood_task_greedy")):
        if any(items.get(kind) for items in arm.values()):
            entry[name] = _bootstrap(_averaged(arm, kind), _averaged(other, kind), n_boot)
    return entry


def ood_retention(rl: dict[int, dict[str, Any]], sft: dict[int, dict[str, Any]], base: dict[int, dict[str, Any]],
                  n_boot: int = 10000, kind: str = "probe") -> dict[str, Any] | None:
    """The paper's OOD claim, PivotRL's drop <= half of SFT's, paired over the OOD items of ``kind``
    (``probe``: the probe items; ``ood_task_sampled``: the OOD domain's tasks at T=1).

    ``drop_rl <= drop_sft / 2`` is ``rl - (base + sft) / 2 >= 0``: per item ``a = rl``,
    ``b = (base + sft) / 2`` (each averaged over the arm's seeds), bootstrapped like any pair. When SFT
    lost nothing (``sft_drop <= 0``) there is no drop to halve and the test compares ``rl`` with ``base``: the claim
    then fails if PivotRL lost something, and is not ``testable`` when it did not either (nothing moved).
    """
    r, s, b = _averaged(rl, kind), _averaged(sft, kind), _averaged(base, kind)
    keys = sorted(k for k in set(r) & set(s) & set(b) if None not in (r[k], s[k], b[k]))
    if not keys:
        return None
    mean = {name: sum(v[k] for k in keys) / len(keys) for name, v in (("rl", r), ("sft", s), ("base", b))}
    sft_drop, rl_drop = mean["base"] - mean["sft"], mean["base"] - mean["rl"]
    half = sft_drop > 0
    other = {k: (b[k] + s[k]) / 2 if half else b[k] for k in keys}
    test = _bootstrap({k: r[k] for k in keys}, other, n_boot)
    if test is None:
        return None
    sft_test = _bootstrap({k: s[k] for k in keys}, {k: b[k] for k in keys}, n_boot)
    return {**{k: test[k] for k in ("diff", "ci_low", "ci_high", "p_value", "n")}, "base": mean["base"],
            "pivotrl": mean["rl"], "sft": mean["sft"], "pivotrl_drop": rl_drop, "sft_drop": sft_drop,
            "sft_vs_base": {k: sft_test[k] for k in ("diff", "ci_low", "ci_high", "p_value")} if sft_test else None,
            "testable": half or rl_drop > 0, "items": kind,
            "form": "rl - (base + sft) / 2" if half else "rl - base (SFT lost nothing)"}


def turns_to_match(curves: dict[str, list[dict[str, Any]]], base_success: float | None,
                   key: str = "task_success") -> dict[str, Any]:
    """Rollout turns PivotRL and E2E RL need to reach the same task success (the paper's 4x claim).

    ``curves[arm]`` are points ``{"rollout_turns", key}`` (profiling included; the base model is the
    point at 0 turns). The target is E2E RL's best success on its curve; ``ratio`` = E2E's turns to its
    target / PivotRL's turns to reach it (``None`` when PivotRL never does: ``reached`` is False).
    """
    def points(arm: str) -> list[tuple[int, float]]:
        pts = [(0, base_success)] if base_success is not None else []
        pts += [(int(p["rollout_turns"]), p[key]) for p in curves.get(arm, []) if p.get(key) is not None]
        return sorted((t, v) for t, v in pts if v is not None and not math.isnan(v))

    if not curves.get("pivotrl") or not curves.get("e2e"):
        return {"measured": False}
    rl, e2e = points("pivotrl"), points("e2e")
    target = max(v for _, v in e2e)
    e2e_turns = min(t for t, v in e2e if v >= target)
    reached = [t for t, v in rl if v >= target]
    rl_turns = min(reached) if reached else None
    return {"measured": True, "target": target, "e2e_turns": e2e_turns, "pivotrl_turns": rl_turns,
            "reached": rl_turns is not None,
            "ratio": (e2e_turns / rl_turns) if rl_turns else None,
            "pivotrl_best": max(v for _, v in rl), "metric": key}


def _averaged(by_seed: dict[int, dict[str, Any]], key: str) -> dict[str, float | None]:
    """Per item, the mean over seeds of its outcome (``None`` when it is missing in every seed)."""
    values: dict[str, list[float]] = {}
    seen: set[str] = set()
    for items in by_seed.values():
        for item, v in (items.get(key) or {}).items():
            seen.add(item)
            if v is not None:
                values.setdefault(item, []).append(float(v))
    return {item: (sum(values[item]) / len(values[item]) if item in values else None) for item in sorted(seen)}


def _aligned(a: dict[str, Any], b: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    keys = sorted(set(a) & set(b))
    return [a[k] for k in keys], [b[k] for k in keys]


def _bootstrap(a: dict[str, Any], b: dict[str, Any], n_boot: int) -> dict[str, Any] | None:
    x, y = _aligned(a, b)
    x2, y2, dropped = drop_missing(x, y)
    if not x2:
        return None
    return {**paired_bootstrap(x2, y2, n_boot=n_boot, seed=0), "dropped": dropped}
