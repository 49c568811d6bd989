"""The demo's plots (matplotlib, written beside ``report.md``; none when matplotlib is missing).

* ``accuracy.png``, the headline and the first plot of the report: **task success per arm with its 95 %
  interval** (bootstrap over the held-out tasks), in-domain at T=1 and greedy, and out of domain (the OOD
  domain's task success where the run measured it, and the OOD probes);
* ``per_turn.png``: per-turn accuracy at the test pivots and OOD probe accuracy per arm (mean ± std over seeds);
* ``training.png``: the RL arms' training reward and zero-variance share per step;
* ``turns.png``: held-out task success against rollout turns (the paper's Figure 1), when curves were measured.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from pivot_envs.trainers.metrics import read_metrics

HEADLINE = "accuracy.png"
"""The headline plot's file: task success per arm with its interval."""

IN_DOMAIN_BARS = (("task_success", "T=1 pass@1"), ("task_success_greedy", "greedy"))
"""In-domain bars of the headline plot: report field and label."""

OOD_BARS = (("ood_task_success", "OOD tasks, T=1"), ("ood_task_success_greedy", "OOD tasks, greedy"),
            ("ood_accuracy", "OOD probes"))
"""Out-of-domain bars of the headline plot (those no arm measured are left out)."""


def draw_plots(report: dict[str, Any], out: Path) -> list[Path]:
    """Every plot the report's numbers allow, the headline first; returns the written paths."""
    try:
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    paths = []
    for draw in (headline_plot, per_turn_plot, training_plot, turns_plot):
        path = draw(report, out, plt)
        if path is not None:
            paths.append(path)
    return paths


def bar_series(arms: dict[str, dict[str, Any]], bars: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    """One series per bar kind some arm measured: ``{"label", "values", "low", "high"}`` (the interval's
    distances below and above each value, 0 where an arm has no interval; ``None`` values are not drawn)."""
    series = []
    for key, label in bars:
        values = [arms[n].get(key) for n in arms]
        if all(v is None for v in values):
            continue
        cis = [arms[n].get(f"{key}_ci") for n in arms]
        low = [0.0 if v is None or ci is None else max(0.0, v - ci[0]) for v, ci in zip(values, cis)]
        high = [0.0 if v is None or ci is None else max(0.0, ci[1] - v) for v, ci in zip(values, cis)]
        series.append({"label": label, "values": values, "low": low, "high": high})
    return series


def headline_plot(report: dict[str, Any], out: Path, plt: Any) -> Path | None:
    """``accuracy.png``: task success per arm with its 95 % interval, in-domain (T=1, greedy) and OOD."""
    arms = report["arms"]
    panels = [(f"in domain ({report['domain']})", bar_series(arms, IN_DOMAIN_BARS))]
    ood = bar_series(arms, OOD_BARS)
    if ood:
        where = report.get("ood", {}).get("domain")
        panels.append((f"out of domain{f' ({where} tasks; probes)' if where else ' (probes)'}", ood))
    panels = [(title, series) for title, series in panels if series]
    if not panels:
        return None
    names = list(arms)
    fig, axes = plt.subplots(1, len(panels), figsize=(max(5.0, 1.1 * len(names) + 2.5) * len(panels), 3.8),
                             squeeze=False)
    for ax, (title, series) in zip(axes[0], panels):
        width = 0.8 / len(series)
        for i, s in enumerate(series):
            xs = [j - 0.4 + width * (i + 0.5) for j in range(len(names))]
            drawn = [(x, v, lo, hi) for x, v, lo, hi in zip(xs, s["values"], s["low"], s["high"]) if v is not None]
            ax.bar([d[0] for d in drawn], [d[1] for d in drawn], width=width, label=s["label"],
                   yerr=[[d[2] for d in drawn], [d[3] for d in drawn]], capsize=3)
        ax.set_xticks(range(len(names)), names, rotation=30 if len(names) > 4 else 0)
        ax.set_ylim(0, 1)
        ax.set_ylabel("task success" if "in domain" in title else "success / accuracy")
        ax.set_title(title)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"pivot-envs demo: task success per arm (95 % interval, bootstrap over items)", fontsize=10)
    return _save(fig, out / HEADLINE, plt)


def per_turn_plot(report: dict[str, Any], out: Path, plt: Any) -> Path | None:
    """``per_turn.png``: per-turn accuracy (functional, greedy) and OOD probe accuracy, mean ± std over seeds."""
    arms = report["arms"]
    if not arms:
        return None
    names = list(arms)
    fig, ax = plt.subplots(figsize=(1.4 * len(names) + 3, 3.6))
    for offset, key, label in ((-0.2, "in_domain_accuracy", "per-turn (functional, greedy)"),
                               (0.2, "ood_accuracy", "OOD probes")):
        vals = [arms[n].get(key) or 0.0 for n in names]
        errs = [arms[n].get(f"{key}_std") or 0.0 for n in names]
        ax.bar([i + offset for i in range(len(names))], vals, width=0.4, yerr=errs, capsize=3, label=label)
    ax.set_xticks(range(len(names)), names)
    ax.set_ylim(0, 1)
    ax.set_ylabel("accuracy")
    ax.legend()
    ax.set_title(f"per-turn accuracy and OOD probes ({report['domain']})")
    return _save(fig, out / "per_turn.png", plt)


def training_plot(report: dict[str, Any], out: Path, plt: Any) -> Path | None:
    """``training.png``: reward of the sampled groups and the zero-variance share per step (RL arms, first seed)."""
    curves = _metrics_rows(report, out)
    if not curves:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for name, rows in curves.items():
        steps = [r["step"] for r in rows]
        axes[0].plot(steps, [r.get("reward_mean") for r in rows], label=name)
        axes[1].plot(steps, [r.get("zero_var_frac") for r in rows], label=name)
    axes[0].set_title("functional reward of the sampled groups")
    axes[1].set_title("zero-variance groups")
    for ax in axes:
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[0].legend()
    return _save(fig, out / "training.png", plt)


def turns_plot(report: dict[str, Any], out: Path, plt: Any) -> Path | None:
    """``turns.png``: held-out task success against cumulative rollout turns (the base at 0 turns)."""
    arms = report["arms"]
    with_curve = {n: a["curve"] for n, a in arms.items() if a.get("curve")}
    if not with_curve:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    base = arms.get("base", {}).get("task_success")
    for name, points in with_curve.items():
        pts = ([(0, base)] if base is not None else []) + [(p["rollout_turns"], p.get("task_success")) for p in points]
        ax.plot([t for t, _ in pts], [v for _, v in pts], marker="o", label=name)
    ax.set_xlabel("cumulative rollout turns (model calls; profiling included)")
    ax.set_ylabel("held-out task success (T=1 pass@1)")
    ax.set_title("task success vs rollout turns (the paper's Figure 1)")
    ax.grid(alpha=0.3)
    ax.legend()
    return _save(fig, out / "turns.png", plt)


def _metrics_rows(report: dict[str, Any], out: Path) -> dict[str, list[dict[str, Any]]]:
    """Metrics rows of the first seed of every RL arm (read from the run folders)."""
    curves = {}
    for name, arm in report["arms"].items():
        if arm.get("zero_var_frac") is None or not arm["per_seed"]:
            continue
        path = out / "runs" / arm["per_seed"][0]["run"] / "train" / "metrics.jsonl"
        if path.exists():
            curves[name] = read_metrics(path)
    return curves


def _save(fig: Any, path: Path, plt: Any) -> Path:
    """Lay out, write and close one figure; returns its path."""
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
