"""Paired comparisons for the demo report: an arm vs the base model on the SAME items.

Every test here is paired: position ``i`` of ``a`` (the arm) and of ``b`` (the
baseline) are the same evaluation item, so the per-item differences carry the
signal and the item-to-item difficulty cancels out.

* :func:`mcnemar` -- per-item correctness (bools): exact McNemar p-value and a
  Wald interval for the difference of the paired proportions.
* :func:`paired_bootstrap` -- per-item scores in [0, 1] (a success, or a mean
  over k samples): percentile bootstrap interval and a bootstrap p-value.
* :func:`bootstrap_mean` -- one arm's mean over items with its percentile bootstrap interval (the
  intervals of the headline plot).
* :func:`pass_at_1` -- temperature-1 pass@1 per item, the mean over its k samples.
* :func:`drop_missing` -- drop the items either side failed to evaluate (an
  error is missing data, not a wrong answer) before testing.

Example::

    >>> from pivot_envs.experiments.stats import drop_missing, mcnemar, paired_bootstrap, pass_at_1
    >>> arm = [True] * 10 + [False] * 2 + [True] * 30 + [False] * 8
    >>> base = [False] * 10 + [True] * 2 + [True] * 30 + [False] * 8
    >>> r = mcnemar(arm, base)
    >>> (r["a_only"], r["b_only"], r["diff"], round(r["p_value"], 4))
    (10, 2, 0.16, 0.0386)
    >>> a, b, dropped = drop_missing(pass_at_1([[1, 0], [1, 1], [None, None]]), [0.0, 0.5, 1.0])
    >>> (a, b, dropped)
    ([0.5, 1.0], [0.0, 0.5], 1)
    >>> paired_bootstrap([1.0] * 20, [0.0] * 20, n_boot=1000)["ci_low"]
    1.0
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Sequence, TypeVar

import numpy as np

__all__ = ["bootstrap_mean", "drop_missing", "mcnemar", "paired_bootstrap", "pass_at_1"]

T = TypeVar("T")
U = TypeVar("U")

_BOOT_CHUNK = 2_000_000
"""At most this many resampled indices are held in memory at once."""


def _check_pair(a: Sequence[Any], b: Sequence[Any], alpha: float) -> int:
    if len(a) != len(b):
        raise ValueError(f"paired samples differ in length: a has {len(a)} items, b has {len(b)}")
    if len(a) == 0:
        raise ValueError("paired samples are empty: nothing to compare")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if any(x is None for x in a) or any(x is None for x in b):
        raise ValueError("paired samples contain None; call drop_missing(a, b) first")
    return len(a)


def _z(alpha: float) -> float:
    return statistics.NormalDist().inv_cdf(1.0 - alpha / 2.0)


def mcnemar(a: Sequence[bool], b: Sequence[bool], alpha: float = 0.05) -> dict[str, Any]:
    """Exact McNemar test and Wald CI for paired correctness of arm ``a`` vs baseline ``b``.

    With ``n`` items, ``n10`` = #(a right, b wrong) (``a_only``) and ``n01`` =
    #(a wrong, b right) (``b_only``):

    * ``diff = (sum(a) - sum(b)) / n = (n10 - n01) / n``
    * ``p_value = min(1, 2 * P[X <= min(n10, n01)])`` with
      ``X ~ Binomial(n10 + n01, 1/2)`` -- the exact two-sided McNemar test, i.e. a
      binomial test on the discordant pairs; ``1.0`` when there are none.
    * ``ci = diff -/+ z * sqrt(n10 + n01 - (n10 - n01)**2 / n) / n``, clipped to
      ``[-1, 1]``, with ``z = NormalDist().inv_cdf(1 - alpha / 2)`` -- the Wald
      interval for a difference of paired proportions.
    """
    n = _check_pair(a, b, alpha)
    n10 = sum(1 for x, y in zip(a, b) if bool(x) and not bool(y))
    n01 = sum(1 for x, y in zip(a, b) if bool(y) and not bool(x))
    m = n10 + n01
    if m == 0:
        p = 1.0
    else:
        tail = sum(math.comb(m, i) for i in range(min(n10, n01) + 1))
        p = min(1.0, 2 * tail / 2**m)  # int / int: correctly rounded, no overflow
    diff = (n10 - n01) / n
    half = _z(alpha) * math.sqrt(max(0.0, m - (n10 - n01) ** 2 / n)) / n
    return {
        "n": n,
        "a_only": n10,
        "b_only": n01,
        "diff": diff,
        "ci_low": max(-1.0, diff - half),
        "ci_high": min(1.0, diff + half),
        "p_value": p,
        "test": "mcnemar-exact",
    }


def paired_bootstrap(
    a: Sequence[float],
    b: Sequence[float],
    n_boot: int = 10000,
    seed: int = 0,
    alpha: float = 0.05,
) -> dict[str, Any]:
    """Paired bootstrap of the mean per-item difference ``d = a - b``.

    * ``diff = mean(d)``
    * CI: the ``alpha/2`` and ``1 - alpha/2`` percentiles of ``mean(d*)`` over
      ``n_boot`` resamples ``d*`` of the items with replacement.
    * ``p_value``: two-sided, under the null by resampling the centred differences
      ``d - mean(d)`` (the same resampled indices): ``(count + 1) / (n_boot + 1)``
      with ``count = #{|mean*| >= |diff|}``.
    * When every ``d`` is 0: ``p = 1.0`` and CI ``[0, 0]``.

    Deterministic for a given ``seed`` (``numpy.random.default_rng``).
    """
    n = _check_pair(a, b, alpha)
    if n_boot < 100:
        raise ValueError(f"n_boot must be at least 100, got {n_boot}")
    xa = np.asarray(a, dtype=np.float64)
    xb = np.asarray(b, dtype=np.float64)
    if not (np.all(np.isfinite(xa)) and np.all(np.isfinite(xb))):
        raise ValueError("paired samples must be finite numbers")
    d = xa - xb
    diff = float(d.mean())
    out: dict[str, Any] = {
        "n": n,
        "mean_a": float(xa.mean()),
        "mean_b": float(xb.mean()),
        "diff": diff,
        "test": "paired-bootstrap",
    }
    if not np.any(d):
        return {**out, "diff": 0.0, "ci_low": 0.0, "ci_high": 0.0, "p_value": 1.0}
    rng = np.random.default_rng(seed)
    centred = d - diff
    boot = np.empty(n_boot)
    null = np.empty(n_boot)
    rows = max(1, _BOOT_CHUNK // n)
    for start in range(0, n_boot, rows):
        stop = min(n_boot, start + rows)
        idx = rng.integers(0, n, size=(stop - start, n))
        boot[start:stop] = d[idx].mean(axis=1)
        null[start:stop] = centred[idx].mean(axis=1)
    low, high = np.quantile(boot, [alpha / 2.0, 1.0 - alpha / 2.0])
    count = int(np.count_nonzero(np.abs(null) >= abs(diff)))
    return {
        **out,
        "ci_low": float(low),
        "ci_high": float(high),
        "p_value": (count + 1) / (n_boot + 1),
    }


def bootstrap_mean(values: Sequence[float], n_boot: int = 10000, seed: int = 0,
                   alpha: float = 0.05) -> dict[str, Any]:
    """The mean of per-item scores in [0, 1] with its percentile bootstrap interval over the items.

    ``{"n", "mean", "ci_low", "ci_high"}``; the interval is ``[mean, mean]`` when every item has the same
    score. Deterministic for a given ``seed``. Missing items (``None``) must be dropped first.
    """
    if len(values) == 0:
        raise ValueError("bootstrap_mean: no values")
    if any(v is None for v in values):
        raise ValueError("bootstrap_mean: values contain None; drop the missing items first")
    if n_boot < 100:
        raise ValueError(f"n_boot must be at least 100, got {n_boot}")
    x = np.asarray(values, dtype=np.float64)
    mean = float(x.mean())
    if np.all(x == x[0]):
        return {"n": len(x), "mean": mean, "ci_low": mean, "ci_high": mean}
    rng = np.random.default_rng(seed)
    boot = np.empty(n_boot)
    rows = max(1, _BOOT_CHUNK // len(x))
    for start in range(0, n_boot, rows):
        stop = min(n_boot, start + rows)
        boot[start:stop] = x[rng.integers(0, len(x), size=(stop - start, len(x)))].mean(axis=1)
    low, high = np.quantile(boot, [alpha / 2.0, 1.0 - alpha / 2.0])
    return {"n": len(x), "mean": mean, "ci_low": float(low), "ci_high": float(high)}


def pass_at_1(samples: Sequence[Sequence[float | None]]) -> list[float | None]:
    """Per item, the mean of its non-None sample scores (temperature-1 pass@1 over k samples).

    An item whose samples are all None (or that has none) gives None.
    """
    result: list[float | None] = []
    for item in samples:
        scores = [float(s) for s in item if s is not None]
        result.append(sum(scores) / len(scores) if scores else None)
    return result


def drop_missing(a: Sequence[T | None], b: Sequence[U | None]) -> tuple[list[T], list[U], int]:
    """Keep the positions where neither ``a`` nor ``b`` is None: ``(a2, b2, dropped)``."""
    if len(a) != len(b):
        raise ValueError(f"paired samples differ in length: a has {len(a)} items, b has {len(b)}")
    kept = [(x, y) for x, y in zip(a, b) if x is not None and y is not None]
    return [x for x, _ in kept], [y for _, y in kept], len(a) - len(kept)
