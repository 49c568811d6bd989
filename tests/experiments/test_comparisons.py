"""Arm-to-arm paired comparisons and the claims they answer, against hand-computed numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("numpy")

from pivot_envs.experiments.arms import item_outcomes  # noqa: E402
from pivot_envs.experiments.comparisons import paired_comparisons  # noqa: E402
from pivot_envs.experiments.report import arm_pair_claims  # noqa: E402


def _run(tmp: Path, arm: str, seed: int, **items: dict[str, float | None]) -> dict:
    folder = tmp / f"{arm}-{seed}"
    folder.mkdir()
    full = {"pivot_greedy": {}, "pivot_sampled": {}, "task_greedy": {}, "task_sampled": {}, "probe": {}, **items}
    (folder / "test_items.json").write_text(json.dumps(full))
    return {"arm": arm, "seed": seed, "folder": str(folder), "test": {}}


BASE_PROBES = {"p1": 1.0, "p2": 1.0, "p3": 1.0, "p4": 1.0}


def test_item_outcomes_keeps_probe_rows() -> None:
    report = {"probes": {"rows": [{"id": 7, "correct": True}, {"id": "q", "correct": False}]},
              "per_pivot": [{"id": "a", "greedy_functional": 1.0, "sampled_functional": [1.0, 0.0]}]}
    items = item_outcomes(report)
    assert items["probe"] == {"7": 1.0, "q": 0.0}
    assert items["pivot_greedy"] == {"a": 1.0} and items["pivot_sampled"] == {"a": 0.5}


def test_pivotrl_vs_sft_averages_seeds_then_pairs_tasks(tmp_path: Path) -> None:
    runs = [
        _run(tmp_path, "base", 0, task_sampled={"t1": 0.0, "t2": 0.0, "t3": 0.0}, probe=BASE_PROBES),
        _run(tmp_path, "pivotrl", 0, task_sampled={"t1": 1.0, "t2": 1.0, "t3": 0.0}),
        _run(tmp_path, "pivotrl", 1, task_sampled={"t1": 1.0, "t2": 0.0, "t3": 0.0}),
        _run(tmp_path, "sft", 0, task_sampled={"t1": 0.0, "t2": 0.5, "t3": 0.0}),
    ]
    comp = paired_comparisons(runs, n_boot=200)
    c = comp["pivotrl_vs_sft"]
    # pivotrl per task (mean over seeds): 1, 0.5, 0; sft: 0, 0.5, 0 -> diff 1/3
    assert c["n"] == 3 and c["diff"] == pytest.approx(1 / 3)
    assert c["mean_a"] == pytest.approx(0.5) and c["mean_b"] == pytest.approx(1 / 6)
    assert c["seeds"] == [0, 1]
    assert set(comp) == {"pivotrl_vs_base", "sft_vs_base", "pivotrl_vs_sft"}  # no table-4 arms, no probes for RL


def test_ood_retention_at_the_boundary_and_when_sft_lost_nothing(tmp_path: Path) -> None:
    sft_probes = {"p1": 0.0, "p2": 0.0, "p3": 1.0, "p4": 1.0}       # drop 0.5
    rl_probes = {"p1": 1.0, "p2": 1.0, "p3": 1.0, "p4": 0.0}        # drop 0.25 = half of SFT's
    runs = [_run(tmp_path, "base", 0, probe=BASE_PROBES), _run(tmp_path, "pivotrl", 0, probe=rl_probes),
            _run(tmp_path, "sft", 0, probe=sft_probes)]
    r = paired_comparisons(runs, n_boot=200)["ood_retention"]
    assert r["form"] == "rl - (base + sft) / 2"
    assert r["pivotrl_drop"] == pytest.approx(0.25) and r["sft_drop"] == pytest.approx(0.5)
    assert r["diff"] == pytest.approx(0.0) and r["n"] == 4  # per item: 0.5, 0.5, 0, -1
    claim = arm_pair_claims({"ood_retention": r})[0]
    assert claim["name"] == "ood_retention_paired" and claim["holds"] is True
    assert claim["verdict"] == "within noise"  # the interval straddles 0

    other = tmp_path / "b"
    other.mkdir()
    runs = [_run(other, "base", 0, probe=BASE_PROBES), _run(other, "pivotrl", 0, probe=rl_probes),
            _run(other, "sft", 0, probe=BASE_PROBES)]
    r = paired_comparisons(runs, n_boot=200)["ood_retention"]
    assert r["form"] == "rl - base (SFT lost nothing)" and r["diff"] == pytest.approx(-0.25)
    assert arm_pair_claims({"ood_retention": r})[0]["holds"] is False


def test_ood_retention_against_sft_long_says_whether_the_in_domain_gains_match(tmp_path: Path) -> None:
    tasks = {"t1": 0.0, "t2": 0.0, "t3": 0.0, "t4": 0.0}
    runs = [_run(tmp_path, "base", 0, probe=BASE_PROBES, task_sampled=tasks),
            _run(tmp_path, "pivotrl", 0, probe=BASE_PROBES, task_sampled={**tasks, "t1": 1.0}),
            _run(tmp_path, "sft", 0, probe=BASE_PROBES, task_sampled=tasks),
            # trained longer: lost half the probes and gained every task in domain
            _run(tmp_path, "sft_long", 0, probe={"p1": 0.0, "p2": 0.0, "p3": 1.0, "p4": 1.0},
                 task_sampled={k: 1.0 for k in tasks})]
    comp = paired_comparisons(runs, n_boot=200)
    r = comp["ood_retention_sft_long"]
    assert r["sft_arm"] == "sft_long" and r["sft_drop"] == pytest.approx(0.5) and r["pivotrl_drop"] == 0.0
    assert comp["ood_retention"]["sft_arm"] == "sft" and comp["ood_retention"]["sft_drop"] == 0.0
    # PivotRL gained 1 task of 4, SFT trained longer all 4: its OOD drop bought more in domain, not matched
    match = r["in_domain"]
    assert match["pivotrl_minus_sft"] == pytest.approx(-0.75) and match["ci_high"] < 0 and match["matched"] is False
    claim = {c["name"]: c for c in arm_pair_claims(comp)}["ood_retention_paired_sft_long"]
    assert claim["holds"] is True and "NOT matched" in claim["note"] and claim["numbers"]["sft_arm"] == "sft_long"
    assert "SFT trained longer" in claim["text"]

    other = tmp_path / "b"
    other.mkdir()
    runs[3] = _run(other, "sft_long", 0, probe={"p1": 0.0, "p2": 0.0, "p3": 1.0, "p4": 1.0},
                   task_sampled={**tasks, "t2": 1.0})  # the same in-domain gain as PivotRL's
    match = paired_comparisons(runs, n_boot=200)["ood_retention_sft_long"]["in_domain"]
    assert match["pivotrl_minus_sft"] == 0.0 and match["matched"] is True


def _test(diff: float, low: float, high: float, a: float = 0.5, b: float = 0.4) -> dict:
    return {"diff": diff, "ci_low": low, "ci_high": high, "p_value": 0.5, "n": 10, "mean_a": a, "mean_b": b}


def test_pair_claim_verdicts() -> None:
    claims = {c["name"]: c for c in arm_pair_claims({
        "pivotrl_vs_sft": _test(0.1, 0.02, 0.2),
        "pivotrl_vs_no_filter": _test(0.1, 0.01, 0.2, 0.5, 0.4),
        "no_filter_vs_strict_reward": _test(0.0, 0.0, 0.0, 0.4, 0.4),
    })}
    assert claims["pivotrl_not_below_sft_task_success"]["verdict"] == "reproduced"
    t4 = claims["table4_ordering_task_success"]
    # strict ">" with an interval of [0, 0] on the second link: not reproduced, though the first holds
    assert t4["verdict"] == "not reproduced" and t4["holds"] is False
    assert t4["numbers"]["pivotrl"] == 0.5 and t4["numbers"]["no_filter"] == 0.4
    assert t4["numbers"]["strict_reward"] == 0.4 and t4["interval"] == [[0.01, 0.2], [0.0, 0.0]]
    sft = arm_pair_claims({"pivotrl_vs_sft": _test(-0.05, -0.1, 0.02)})[0]
    assert sft["verdict"] == "within noise" and sft["holds"] is False
    worse = arm_pair_claims({"pivotrl_vs_sft": _test(-0.1, -0.2, -0.01)})[0]
    assert worse["verdict"] == "not reproduced"
    assert arm_pair_claims({}) == []


def test_mean_curve_averages_the_steps_every_seed_has() -> None:
    from pivot_envs.experiments.report import mean_curve

    a = [{"step": 5, "rollout_turns": 100, "task_success": 0.2, "task_success_greedy": 0.0},
         {"step": 10, "rollout_turns": 200, "task_success": 0.4, "task_success_greedy": 1.0}]
    b = [{"step": 5, "rollout_turns": 110, "task_success": 0.0, "task_success_greedy": 0.5}]
    assert mean_curve([a, b]) == [{"step": 5, "seeds": 2, "rollout_turns": 105, "task_success": pytest.approx(0.1),
                                   "task_success_greedy": pytest.approx(0.25)}]
    assert mean_curve([a]) == [{**p, "seeds": 1} for p in a]


def test_truncated_share_reads_the_test_summary_and_text_turns_the_pivot_file(tmp_path: Path) -> None:
    from pivot_envs.experiments.arms import _task_figures
    from pivot_envs.experiments.report import _text_turns, truncated_share

    assert truncated_share({"folder": str(tmp_path)}) is None
    figures = _task_figures({"episodes": 51, "truncated": 17, "success": 0.2}, {"episodes": 102, "truncated": 0})
    run = {"test": figures}
    assert truncated_share(run) == pytest.approx(1 / 3) and truncated_share(run, "episodes_sampled") == 0.0
    assert figures["task_success_greedy"] == 0.2 and figures["tasks"] == 51
    pivots = tmp_path / "p.jsonl"
    pivots.write_text(json.dumps({"expert": {"role": "assistant", "content": "done"}}) + "\n"
                      + json.dumps({"expert": {"role": "assistant", "tool_calls": [{"id": "1"}]}}) + "\n")
    assert _text_turns(str(pivots)) == 1 and _text_turns(None) is None
