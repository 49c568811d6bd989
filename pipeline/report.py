"""What a profiling run found: reward distribution, zero-variance share, filter survivors, miss rate.

    from pivot_envs.pipeline.report import profile_report, plot_profile

    report = profile_report(profiled_pivots, max_mean=0.75)
    report.zero_var_fraction      # the paper reports 0.71 on its data
    plot_profile(report, "profile.png")   # needs matplotlib (imported lazily)

Figures (over *scored* pivots: profiled with at least one sample the verifier scored):

* ``mean_hist``: counts of per-pivot mean reward in ``bins`` equal bins over [0, 1]
  (the last bin includes 1.0).
* ``zero_var_fraction``: share of pivots with ``var == 0`` (split into all-fail,
  all-pass and constant partial credit): their GRPO groups carry no signal.
* ``survivors``: pivots in D_adv at ``max_mean`` (``var > 0 and mean < max_mean``;
  without ``max_mean`` only ``var > 0``).
* ``sample_miss_rate``: ``P[strict = 0 | functional passed]`` over scored samples
  (per-sample flags stored by the profiler in ``meta["profile_strict"]`` and
  ``meta["profile_passed"]``); NaN when no sample passed.
* ``pivot_miss_rate``: the same quantity estimated from per-pivot means only,
  ``sum n_p max(mean_p - strict_mean_p, 0) / sum n_p mean_p`` (exact when rewards
  are 0/1 and every strict pass is a functional pass); usable on profiles
  written without per-sample flags.
* ``strict_blind``: pivots where the functional verifier passes some sample but
  strict passes none: under the strict reward they would look all-fail
  (zero variance) and the filter would drop them.
* ``accepted_by``: passing samples by what accepted them (``exact``, ``effect``, ``state``,
  ``facts``, ...: :mod:`pivot_envs.verifiers.accepted_by`), over all domains, and ``by_domain``
  the same per domain with the share of accepted samples that were not the expert's exact
  action (``not_exact``); from ``meta["profile_accepted_by"]``.
* ``hack``: the hack monitor's counts summed over the pivots (:mod:`pivot_envs.verifiers.hack_monitor`: accepted
  samples with more calls than the expert, a stop at a call pivot, an answer over 3x the expert's length, per
  ``accepted_by`` category; from ``meta["profile_hack"]``, empty for a profile written before the monitor);
  ``hack_metrics`` their shares over the accepted samples (``to_dict`` carries both).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from pivot_envs.pipeline.filter import is_scored
from pivot_envs.types import Pivot
from pivot_envs.verifiers.hack_monitor import HACKS, HackCounts


@dataclass
class ProfileReport:
    """Summary of profiled pivots (see the module docstring for each figure).

    Attributes:
        pivots: input pivots.
        profiled: pivots with a profile.
        scored: profiled pivots with at least one scored sample.
        unscored: profiled pivots whose samples all hit verifier errors.
        samples: samples drawn (sum of ``k``).
        errors: samples whose verification errored (excluded).
        bins: number of histogram bins over [0, 1].
        mean_hist: per-pivot mean reward counts per bin.
        mean_of_means: average per-pivot mean reward.
        zero_var: scored pivots with ``var == 0``.
        zero_var_all_fail: of which mean 0.
        zero_var_all_pass: of which mean 1.
        max_mean: the ``lambda_diff`` used for ``survivors`` (``None``: only ``var > 0``).
        survivors: pivots that pass the ``adv`` filter.
        functional_passes: scored samples the functional verifier passed.
        strict_misses: of which the strict verifier scored 0.
        pivot_miss_numerator: ``sum n_p max(mean_p - strict_mean_p, 0)``.
        pivot_miss_denominator: ``sum n_p mean_p``.
        strict_blind: pivots with a functional pass but strict mean 0.
        with_functional_pass: pivots with a functional pass.
        accepted_by: passing samples per category of what accepted them.
        by_domain: per domain, ``accepted`` (passing samples), ``not_exact`` (the share of them that were not
            the expert's exact action) and ``accepted_by`` (per category).
        hack: the hack monitor's counts (:meth:`HackCounts.counts`) summed over the pivots that carry them;
            empty when none does.
    """

    pivots: int = 0
    profiled: int = 0
    scored: int = 0
    unscored: int = 0
    samples: int = 0
    errors: int = 0
    bins: int = 10
    mean_hist: list[int] = field(default_factory=list)
    mean_of_means: float = math.nan
    zero_var: int = 0
    zero_var_all_fail: int = 0
    zero_var_all_pass: int = 0
    max_mean: float | None = None
    survivors: int = 0
    functional_passes: int = 0
    strict_misses: int = 0
    pivot_miss_numerator: float = 0.0
    pivot_miss_denominator: float = 0.0
    strict_blind: int = 0
    with_functional_pass: int = 0
    accepted_by: dict[str, int] = field(default_factory=dict)
    by_domain: dict[str, dict[str, Any]] = field(default_factory=dict)
    hack: dict[str, int] = field(default_factory=dict)

    @property
    def zero_var_fraction(self) -> float:
        return self.zero_var / self.scored if self.scored else math.nan

    @property
    def survivor_fraction(self) -> float:
        return self.survivors / self.scored if self.scored else math.nan

    @property
    def sample_miss_rate(self) -> float:
        return self.strict_misses / self.functional_passes if self.functional_passes else math.nan

    @property
    def pivot_miss_rate(self) -> float:
        return self.pivot_miss_numerator / self.pivot_miss_denominator if self.pivot_miss_denominator else math.nan

    @property
    def hack_metrics(self) -> dict[str, Any]:
        """The hack monitor's ``hack/accepted`` and shares (:meth:`HackCounts.metrics`); empty without counts."""
        return HackCounts.from_counts(self.hack).metrics() if self.hack else {}

    def bin_edges(self) -> list[float]:
        return [i / self.bins for i in range(self.bins + 1)]

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for name in ("zero_var_fraction", "survivor_fraction", "sample_miss_rate", "pivot_miss_rate", "hack_metrics"):
            out[name] = getattr(self, name)
        return out

    def rows(self) -> list[tuple[str, str]]:
        """``(label, value)`` rows for printing."""
        pct = lambda x: "-" if math.isnan(x) else f"{x:.1%}"  # noqa: E731
        lam = "" if self.max_mean is None else f" and mean < {self.max_mean:g}"
        return [
            ("pivots (profiled / scored)", f"{self.pivots} ({self.profiled} / {self.scored})"),
            ("unscored: every sample errored", str(self.unscored)),
            ("samples (verifier errors, excluded)", f"{self.samples} ({self.errors})"),
            ("mean of per-pivot mean reward", "-" if math.isnan(self.mean_of_means) else f"{self.mean_of_means:.3f}"),
            ("zero variance", f"{self.zero_var} ({pct(self.zero_var_fraction)})"),
            ("  all fail / all pass / constant partial",
             f"{self.zero_var_all_fail} / {self.zero_var_all_pass} / "
             f"{self.zero_var - self.zero_var_all_fail - self.zero_var_all_pass}"),
            (f"survive filter: var > 0{lam}", f"{self.survivors} ({pct(self.survivor_fraction)})"),
            ("miss rate P[strict=0 | functional=1], per sample",
             f"{pct(self.sample_miss_rate)} ({self.strict_misses}/{self.functional_passes})"),
            ("miss rate from per-pivot means", pct(self.pivot_miss_rate)),
            ("pivots with a functional pass that strict scores all-0",
             f"{self.strict_blind}/{self.with_functional_pass}"),
            *[(f"accepted samples not the expert's exact action ({domain or '-'})", _accepted_row(row))
              for domain, row in sorted(self.by_domain.items())],
            *_hack_rows(self.hack_metrics),
        ]

    def histogram_rows(self) -> list[tuple[str, int]]:
        edges = self.bin_edges()
        return [(f"[{edges[i]:.1f}, {edges[i + 1]:.1f}{']' if i == self.bins - 1 else ')'}", count)
                for i, count in enumerate(self.mean_hist)]


def _accepted_row(row: dict[str, Any]) -> str:
    """``12.5 % of 40 (exact 35, effect 4, state 1)``."""
    parts = ", ".join(f"{k} {v}" for k, v in sorted(row["accepted_by"].items(), key=lambda kv: -kv[1]))
    share = "-" if math.isnan(row["not_exact"]) else f"{row['not_exact']:.1%}"
    return f"{share} of {row['accepted']} ({parts})"


def _hack_rows(metrics: dict[str, Any]) -> list[tuple[str, str]]:
    """The hack monitor's row: ``more calls 2.5%, stop at a call 0.0%, answer > 3x 1.2% (of 40)``."""
    if not metrics or not metrics["hack/accepted"]:
        return []
    names = {"hack/more_calls": "more calls", "hack/stop_at_call": "stop at a call", "hack/long_answer": "answer > 3x"}
    shares = ", ".join(f"{names.get(k, k)} {metrics[k]:.1%}" for k in HACKS)
    return [("hack monitor: shares of the accepted samples", f"{shares} (of {metrics['hack/accepted']})")]


def _count_accepted(rep: ProfileReport, pivot: Pivot) -> None:
    """Add ``pivot``'s passing samples to ``accepted_by`` and ``by_domain``."""
    categories = [c for c in pivot.meta.get("profile_accepted_by") or [] if c is not None]
    if not categories:
        return
    row = rep.by_domain.setdefault(pivot.domain, {"accepted": 0, "not_exact": math.nan, "accepted_by": {}})
    for category in categories:
        rep.accepted_by[category] = rep.accepted_by.get(category, 0) + 1
        row["accepted_by"][category] = row["accepted_by"].get(category, 0) + 1
        row["accepted"] += 1
    row["not_exact"] = 1.0 - row["accepted_by"].get("exact", 0) / row["accepted"]


def _bin(mean: float, bins: int) -> int:
    return min(max(int(math.floor(mean * bins)), 0), bins - 1)


def profile_report(pivots: Sequence[Pivot], max_mean: float | None = None, bins: int = 10) -> ProfileReport:
    """Compute the :class:`ProfileReport` of profiled pivots."""
    rep = ProfileReport(pivots=len(pivots), bins=bins, mean_hist=[0] * bins, max_mean=max_mean)
    means = []
    for p in pivots:
        prof = p.profile
        if prof is None:
            continue
        rep.profiled += 1
        rep.samples += prof.k
        rep.errors += prof.errors
        if not is_scored(p):
            rep.unscored += 1
            continue
        rep.scored += 1
        means.append(prof.mean)
        rep.mean_hist[_bin(prof.mean, bins)] += 1
        if prof.var == 0:
            rep.zero_var += 1
            rep.zero_var_all_fail += prof.mean == 0
            rep.zero_var_all_pass += prof.mean == 1
        elif max_mean is None or prof.mean < max_mean:
            rep.survivors += 1
        _count_accepted(rep, p)
        if p.meta.get("profile_hack") is not None:
            rep.hack = (HackCounts.from_counts(rep.hack) + HackCounts.from_counts(p.meta["profile_hack"])).counts()
        passed = p.meta.get("profile_passed") or []
        strict = p.meta.get("profile_strict") or []
        for ok, s in zip(passed, strict):
            if ok and s is not None:
                rep.functional_passes += 1
                rep.strict_misses += s == 0
        if prof.strict_mean is not None:
            n = len(prof.rewards)
            rep.pivot_miss_numerator += n * max(prof.mean - prof.strict_mean, 0.0)
            rep.pivot_miss_denominator += n * prof.mean
            if any(passed) or (not passed and prof.mean > 0):
                rep.with_functional_pass += 1
                rep.strict_blind += prof.strict_mean == 0
    rep.mean_of_means = sum(means) / len(means) if means else math.nan
    return rep


def plot_profile(report: ProfileReport, path: str | Path, title: str = "pivot profile") -> Path:
    """Write a PNG: histogram of per-pivot mean reward, zero-variance share, and lambda.

    Needs matplotlib (``pip install matplotlib``).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ValueError("plotting needs matplotlib: pip install matplotlib") from None
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    edges = report.bin_edges()
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.bar(edges[:-1], report.mean_hist, width=1 / report.bins, align="edge", color="#4c72b0", edgecolor="white")
    if report.max_mean is not None:
        ax.axvline(report.max_mean, color="#c44e52", linestyle="--", label=f"lambda = {report.max_mean:g}")
        ax.legend(loc="upper right")
    ax.set_xlabel("per-pivot mean reward under the reference policy")
    ax.set_ylabel("pivots")
    zv = "-" if math.isnan(report.zero_var_fraction) else f"{report.zero_var_fraction:.0%}"
    ax.set_title(f"{title}: {report.scored} pivots, zero variance {zv}, survivors {report.survivors}")
    ax.set_xlim(0, 1)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
