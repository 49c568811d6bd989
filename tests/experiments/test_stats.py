"""``pivot_envs.experiments.stats``: paired tests checked against numbers worked out by hand."""

from __future__ import annotations

import math

import pytest

from pivot_envs.experiments.stats import drop_missing, mcnemar, paired_bootstrap, pass_at_1

Z95 = 1.959964  # NormalDist().inv_cdf(0.975), to 6 decimals
Z90 = 1.644854  # NormalDist().inv_cdf(0.95)


def _pairs(n10: int, n01: int, n11: int, n00: int) -> tuple[list[bool], list[bool]]:
    """Arm/baseline correctness with the given cell counts (a right b wrong, a wrong b right, both, neither)."""
    a = [True] * n10 + [False] * n01 + [True] * n11 + [False] * n00
    b = [False] * n10 + [True] * n01 + [True] * n11 + [False] * n00
    return a, b


# --- mcnemar ---------------------------------------------------------------


def test_mcnemar_hand_case() -> None:
    # n10=8, n01=2, 30 both right, 10 both wrong: n = 50.
    a, b = _pairs(8, 2, 30, 10)
    r = mcnemar(a, b)
    assert (r["n"], r["a_only"], r["b_only"], r["test"]) == (50, 8, 2, "mcnemar-exact")
    # diff = (38 - 32) / 50 = (8 - 2) / 50 = 0.12
    assert r["diff"] == pytest.approx(0.12)
    # p = 2 * sum_{i<=2} C(10, i) / 2^10 = 2 * (1 + 10 + 45) / 1024 = 112 / 1024 = 0.109375
    assert r["p_value"] == pytest.approx(0.109375, abs=1e-12)
    # half-width = 1.959964 * sqrt(10 - 36/50) / 50 = 1.959964 * sqrt(9.28) / 50
    #            = 1.959964 * 3.046309 / 50 = 5.970659 / 50 = 0.119413
    half = 1.959964 * math.sqrt(10 - 36 / 50) / 50
    assert half == pytest.approx(0.119413, abs=1e-6)
    assert r["ci_low"] == pytest.approx(0.12 - 0.119413, abs=1e-5)  # 0.000587
    assert r["ci_high"] == pytest.approx(0.12 + 0.119413, abs=1e-5)  # 0.239413


def test_mcnemar_alpha_changes_only_the_interval() -> None:
    a, b = _pairs(8, 2, 30, 10)
    r = mcnemar(a, b, alpha=0.10)
    # half-width = 1.644854 * 3.046309 / 50 = 5.010734 / 50 = 0.100215
    assert r["ci_high"] - r["diff"] == pytest.approx(0.100215, abs=1e-5)
    assert r["p_value"] == pytest.approx(0.109375, abs=1e-12)


def test_mcnemar_no_discordant_pairs() -> None:
    a, b = _pairs(0, 0, 3, 2)
    r = mcnemar(a, b)
    # no discordant pairs: p = 1, diff = 0, half-width = z * sqrt(0 - 0) / 5 = 0
    assert (r["a_only"], r["b_only"]) == (0, 0)
    assert r["p_value"] == 1.0
    assert (r["diff"], r["ci_low"], r["ci_high"]) == (0.0, 0.0, 0.0)


def test_mcnemar_all_discordant_one_way() -> None:
    a, b = _pairs(3, 0, 0, 0)
    r = mcnemar(a, b)
    # p = 2 * C(3, 0) / 2^3 = 2 / 8 = 0.25; diff = 3/3 = 1
    assert r["p_value"] == pytest.approx(0.25, abs=1e-12)
    assert r["diff"] == 1.0
    # half-width = z * sqrt(3 - 9/3) / 3 = 0 -> CI [1, 1]
    assert r["ci_low"] == pytest.approx(1.0) and r["ci_high"] == 1.0


def test_mcnemar_balanced_discordance_caps_p_and_clips_ci() -> None:
    a, b = _pairs(5, 5, 0, 0)
    r = mcnemar(a, b)
    # 2 * P[X <= 5], X ~ Bin(10, 1/2) = 2 * 638/1024 > 1 -> capped at 1
    assert r["p_value"] == 1.0
    # diff 0, half-width = 1.959964 * sqrt(10 - 0) / 10 = 1.959964 * 3.162278 / 10 = 0.619795
    assert r["ci_high"] == pytest.approx(0.619795, abs=1e-5)
    assert r["ci_low"] == pytest.approx(-0.619795, abs=1e-5)

    # n = 2, n10 = 1: diff = 0.5, half = 1.959964 * sqrt(1 - 1/2) / 2 = 0.692952
    # -> [-0.192952, 1.192952], the top clipped to 1; p = 2 * C(1,0)/2 = 1
    r = mcnemar([True, True], [False, True])
    assert r["diff"] == 0.5
    assert r["ci_low"] == pytest.approx(-0.192952, abs=1e-5)
    assert r["ci_high"] == 1.0
    assert r["p_value"] == 1.0


def test_mcnemar_errors() -> None:
    with pytest.raises(ValueError, match=r"3 items, b has 2"):
        mcnemar([True, False, True], [True, False])
    with pytest.raises(ValueError, match="empty"):
        mcnemar([], [])
    with pytest.raises(ValueError, match="drop_missing"):
        mcnemar([True, None], [True, False])  # type: ignore[list-item]


# --- paired_bootstrap ------------------------------------------------------


def test_bootstrap_identical_arrays() -> None:
    a = [1.0, 0.0, 0.5, 1.0]
    r = paired_bootstrap(a, list(a))
    # every d = 0 -> diff 0, CI [0, 0], p 1
    assert (r["diff"], r["ci_low"], r["ci_high"], r["p_value"]) == (0.0, 0.0, 0.0, 1.0)
    assert (r["n"], r["mean_a"], r["mean_b"], r["test"]) == (4, 0.625, 0.625, "paired-bootstrap")


def test_bootstrap_constant_shift() -> None:
    r = paired_bootstrap([1.0] * 30, [0.0] * 30, n_boot=10000)
    # every d = 1: each resampled mean is 1 -> CI [1, 1]; the centred d are all 0,
    # so no null mean reaches |diff| = 1: count = 0, p = (0 + 1) / (10000 + 1) = 1/10001
    assert (r["diff"], r["ci_low"], r["ci_high"]) == (1.0, 1.0, 1.0)
    assert r["p_value"] == pytest.approx(1 / 10001)
    assert paired_bootstrap([1.0] * 30, [0.0] * 30, n_boot=100)["p_value"] == pytest.approx(1 / 101)


def _mixed(reps: int) -> tuple[list[float], list[float]]:
    # d = [1, 0, 0, 1] repeated: mean(d) = 0.5, plug-in sd(d) = 0.5
    return [1.0, 1.0, 0.0, 1.0] * reps, [0.0, 1.0, 0.0, 0.0] * reps


def test_bootstrap_mixed_case() -> None:
    a, b = _mixed(25)  # n = 100
    r = paired_bootstrap(a, b, seed=7)
    assert r == paired_bootstrap(a, b, seed=7)  # deterministic given the seed
    # mean_a = 3/4, mean_b = 1/4, diff = 0.5
    assert (r["n"], r["mean_a"], r["mean_b"], r["diff"]) == (100, 0.75, 0.25, 0.5)
    assert r["ci_low"] < r["diff"] < r["ci_high"]
    # expected width ~ 2 * 1.959964 * 0.5 / sqrt(100) = 0.196
    assert 0.17 < r["ci_high"] - r["ci_low"] < 0.22
    # a null mean of the centred +-0.5 values reaches 0.5 only if all 100 draws are +0.5
    # (probability 2^-100): count = 0, p = 1/10001
    assert r["p_value"] == pytest.approx(1 / 10001)

    a4, b4 = _mixed(100)  # n = 400: the width should halve (sqrt(400/100) = 2)
    r4 = paired_bootstrap(a4, b4, seed=7)
    ratio = (r["ci_high"] - r["ci_low"]) / (r4["ci_high"] - r4["ci_low"])
    assert 1.6 < ratio < 2.4


def test_bootstrap_zero_mean_but_nonzero_differences() -> None:
    # d = [1, -1] repeated: diff = 0 but not every d is 0; every |mean*| >= 0,
    # so count = n_boot and p = (n_boot + 1) / (n_boot + 1) = 1
    r = paired_bootstrap([1.0, 0.0] * 20, [0.0, 1.0] * 20, n_boot=1000)
    assert r["diff"] == 0.0
    assert r["p_value"] == 1.0
    assert r["ci_low"] < 0.0 < r["ci_high"]


def test_bootstrap_errors() -> None:
    with pytest.raises(ValueError, match=r"3 items, b has 2"):
        paired_bootstrap([1.0, 0.0, 1.0], [1.0, 0.0])
    with pytest.raises(ValueError, match="empty"):
        paired_bootstrap([], [])
    with pytest.raises(ValueError, match="n_boot"):
        paired_bootstrap([1.0], [0.0], n_boot=99)


# --- pass_at_1 / drop_missing ----------------------------------------------


def test_pass_at_1() -> None:
    samples = [[1, 0, 1, 1], [None, 0.5, None], [None, None], [], [0, 0]]
    # (1+0+1+1)/4 = 0.75; only 0.5 counts; all None -> None; no samples -> None; 0
    assert pass_at_1(samples) == [0.75, 0.5, None, None, 0.0]


def test_drop_missing() -> None:
    a = [1.0, None, 0.0, 1.0, None]
    b = [0.0, 1.0, None, 1.0, None]
    # positions 1, 2, 4 have a None on some side -> kept 0 and 3, dropped 3
    assert drop_missing(a, b) == ([1.0, 1.0], [0.0, 1.0], 3)
    assert drop_missing([], []) == ([], [], 0)
    with pytest.raises(ValueError, match=r"2 items, b has 1"):
        drop_missing([1.0, 0.0], [1.0])


def test_pass_at_1_then_drop_then_bootstrap() -> None:
    arm = pass_at_1([[1, 1], [1, 0], [None, None], [0, 1]])  # [1.0, 0.5, None, 0.5]
    base = pass_at_1([[0, 0], [0, 1], [1, 1], [None]])  # [0.0, 0.5, 1.0, None]
    a, b, dropped = drop_missing(arm, base)
    assert (a, b, dropped) == ([1.0, 0.5], [0.0, 0.5], 2)
    # d = [1, 0]: diff = 0.5, mean_a = 0.75, mean_b = 0.25
    r = paired_bootstrap(a, b, n_boot=200)
    assert (r["diff"], r["mean_a"], r["mean_b"]) == (0.5, 0.75, 0.25)
    assert 0.0 <= r["ci_low"] <= 0.5 <= r["ci_high"] <= 1.0
