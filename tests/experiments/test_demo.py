"""``pivot-envs demo``: the pipeline end to end at a tiny setting, resuming, and the report's aggregation."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from typer.testing import CliRunner  # noqa: E402

from pivot_envs.experiments.demo import DemoConfig, profile_stats, smoke_config, split_by_trajectory  # noqa: E402
from pivot_envs.experiments.arm_table import ARM_NAMES  # noqa: E402
from pivot_envs.experiments.arms import rl_summary  # noqa: E402
from pivot_envs.experiments.report import aggregate_arms, check_claims, mean_std, table_rows  # noqa: E402
from pivot_envs.types import Pivot, Profile  # noqa: E402

STAGES = {"verifier summary", "data", "base model", "profile", "filter", "select", "arms"}


def test_smoke_demo_runs_every_stage_and_resumes(tmp_path):
    from pivot_envs.cli import app

    out = tmp_path / "demo"
    result = CliRunner().invoke(app, ["demo", "--smoke", "--out", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())

    # the schema the README promises
    assert set(report["arms"]) == set(ARM_NAMES)
    for name, arm in report["arms"].items():
        for key in ("in_domain_accuracy", "ood_accuracy", "rollout_turns", "strict_accuracy", "train_seconds"):
            assert key in arm, (name, key)
        assert 0.0 <= arm["in_domain_accuracy"] <= 1.0 and 0.0 <= arm["ood_accuracy"] <= 1.0
    assert report["seed"] == 0 and report["model_params"] > 1000 and report["wall_seconds"] > 0
    assert set(report["stage_seconds"]) == STAGES
    # the runs' own clocks fit inside the stages that ran them (one worker, nothing resumed)
    ran = report["stage_seconds"]["select"] + report["stage_seconds"]["arms"]
    assert 0 < report["timings"]["runs_s"] <= ran + 1
    assert {c["name"] for c in report["claims"]} == {"pivotrl_beats_base", "pivotrl_not_below_sft",
                                                     "ood_drop_at_most_half_of_sft", "table4_ordering",
                                                     "pivotrl_beats_base_task_success", "rollout_turns_vs_e2e",
                                                     "pivotrl_not_below_sft_task_success", "ood_retention_paired",
                                                     "ood_retention_paired_sft_long", "table4_ordering_task_success"}
    # task success on held-out tasks beside per-turn accuracy, and the paired test against the base
    for name, arm in report["arms"].items():
        assert 0.0 <= arm["task_success"] <= 1.0 and 0.0 <= arm["task_success_greedy"] <= 1.0, name
        assert arm["tasks"] == 3, name
    comp = report["comparisons"]["pivotrl_vs_base"]
    assert {"diff", "ci_low", "ci_high", "p_value"} <= set(comp) and comp["ci_low"] <= comp["diff"] <= comp["ci_high"]
    assert comp["n"] == 3 and 0.0 <= comp["p_value"] <= 1.0 and comp["per_turn"]["test"] == "mcnemar-exact"
    assert set(report["comparisons"]) == ({f"{a}_vs_base" for a in ARM_NAMES if a != "base"}
                                          | {"ood_retention", "ood_retention_sft_long"}
                                          | {"pivotrl_vs_sft", "pivotrl_vs_no_filter", "no_filter_vs_strict_reward",
                                             "e2e_credit_vs_e2e", "sft_pivotrl_vs_sft", "sft_pivotrl_vs_pivotrl",
                                             "pivotrl_vs_sft_long"})
    retention = report["comparisons"]["ood_retention"]
    assert retention["n"] == 200 and retention["ci_low"] <= retention["diff"] <= retention["ci_high"]
    # the episode arms train on whole tasks and count their rollout turns and tool calls
    for name in ("e2e", "e2e_credit", "arpo"):
        arm = report["arms"][name]
        assert arm["rollout_turns"] == arm["train_rollouts"] > 0 and arm["episodes"] > 0, name
    # Figure 1: task success along training against cumulative rollout turns (profiling included)
    curve = report["arms"]["pivotrl"]["curve"]
    assert [p["step"] for p in curve] == [1, 2] and curve[0]["rollout_turns"] > report["profile"]["rollouts"]
    assert [p["step"] for p in report["arms"]["e2e"]["curve"]] == [1, 2]
    assert [p["step"] for p in report["arms"]["e2e_credit"]["curve"]] == [1, 2]
    # e2e_credit differs from e2e only by its turn credit: its episodes score their turns, e2e's do not
    for name, scored in (("e2e_credit", True), ("e2e", False)):
        metrics = out / "runs" / report["arms"][name]["per_seed"][0]["run"] / "train" / "metrics.jsonl"
        rows = [json.loads(line) for line in metrics.read_text().splitlines()]
        assert all((r["scored_turns"] > 0) == scored for r in rows), name
    assert (out / "turns.png").exists()

    # every stage left its output
    cfg = smoke_config()
    assert (out / "base_model" / "model.safetensors").exists() and (out / "base_model" / "base_model.json").exists()
    assert report["data"]["test"] == cfg.max_test and report["data"]["candidates"] == cfg.max_candidates
    assert report["profile"]["rollouts"] == cfg.max_candidates * cfg.profile_k
    assert set(report["verifiers"]) == {"tool_use", "terminal", "swe", "search"}
    trained = [a for a in ARM_NAMES if a != "base"]
    for name in trained:
        arm = report["arms"][name]
        assert arm["steps"] == (cfg.sft_long_steps if name == "sft_long" else cfg.per_arm.steps), name  # the same but sft_long
        run = out / "runs" / arm["per_seed"][0]["run"]
        assert (run / "train" / "final" / "model.safetensors").exists() and (run / "test.json").exists()
    # SFT -> PivotRL trains from the SFT run's final model; every arm's KL to the base is measured (0 for the base)
    chained_run = out / "runs" / report["arms"]["sft_pivotrl"]["per_seed"][0]["run"]
    chained = json.loads((chained_run / "train" / "final" / "pivotrl_config.json").read_text())
    assert chained["model"] == str(out / "runs" / report["arms"]["sft"]["per_seed"][0]["run"] / "train" / "final")
    assert report["arms"]["base"]["kl_per_token"] == 0.0
    assert all(a["kl_per_token"] is not None and a["entropy_per_token"] > 0 for a in report["arms"].values())
    assert report["arms"]["pivotrl"]["reward_first"] is not None  # per pass over D_adv (one pass: 2 steps here)
    assert report["filters"][f"adv_lambda{report['selection']['lambda']:g}"]["duplicates"] >= 0
    assert report["arms"]["base"]["rollout_turns"] == 0 and report["arms"]["sft"]["rollout_turns"] == 0
    # PivotRL pays for profiling; the random-subset ablations do not
    rl = report["arms"]["pivotrl"]
    assert rl["rollout_turns"] == rl["train_rollouts"] + report["profile"]["rollouts"]
    first_round = cfg.per_arm.steps * cfg.per_arm.pivots_per_step * cfg.per_arm.group_size  # flat groups were sampled again (resample)
    assert first_round <= rl["train_rollouts"] <= first_round * (1 + cfg.per_arm.max_resample)
    assert report["arms"]["no_filter"]["rollout_turns"] == report["arms"]["no_filter"]["train_rollouts"]
    # selection ran on the validation tasks (task success at T=1, the held-out metric) and its seed-0 winner is
    # the pivotrl row, whose validation task success the report keeps
    selection = report["selection"]
    assert selection["trials"] and selection["metric"].startswith("validation task success")
    assert all(t["val_task_success"] is not None and t["score"] == t["val_task_success"] for t in selection["trials"])
    assert rl["per_seed"][0]["run"] in {t["run"] for t in selection["trials"]}
    assert rl["val_task_success"] is not None and report["data"]["val_tasks"] == cfg.val_tasks
    md = (out / "report.md").read_text()
    assert "## Results" in md and "## Verifier summary" in md and "| search |" in md
    assert "## Task success along training" in md and "| e2e | 2 |" in md and "| pivotrl vs sft |" in md
    assert (out / "accuracy.png").exists() and (out / "training.png").exists()
    # the hack monitor: per RL arm from its training metrics (early -> late), and the profile stage's samples
    assert "hack/accepted" in report["profile"]["hack"] and "## Hack monitor" in md and "| pivotrl |" in md
    assert set(report["arms"]["pivotrl"]["hack"]) == {"all", "early", "late"} and "hack" not in report["arms"]["sft"]
    assert "pivotrl" in result.output and "report.md" in result.output

    # resuming: nothing is redone, the numbers are the same
    stamp = (out / "base_model" / "model.safetensors").stat().st_mtime_ns
    again = CliRunner().invoke(app, ["demo", "--smoke", "--out", str(out)])
    assert again.exit_code == 0, again.output
    assert "done before" in again.output
    assert (out / "base_model" / "model.safetensors").stat().st_mtime_ns == stamp
    second = json.loads((out / "report.json").read_text())
    assert {k: v["in_domain_accuracy"] for k, v in second["arms"].items()} == \
        {k: v["in_domain_accuracy"] for k, v in report["arms"].items()}
    assert second["invocation_seconds"] < report["wall_seconds"]


def test_two_workers_run_each_part_of_a_run_as_its_own_job_with_the_numbers_of_one_worker(tmp_path):
    """The parts of a run (training, the test pivots, the held-out tasks greedy and at T=1) are separate
    jobs; two workers give the report one worker gives, with every held-out task's outcome paired."""
    from pivot_envs.experiments.demo import run_pipeline

    cfg = smoke_config()
    cfg = dataclasses.replace(cfg, arms=("base", "sft", "pivotrl"), rl_lr_grid=(1e-3,), lambda_grid=(1.0,),
                              per_arm=dataclasses.replace(cfg.per_arm, divergence_pivots=0),
                              verifier_pivots=0)  # the every-stage smoke run measures them
    out = tmp_path / "demo"
    reports = {}
    for workers in (2, 1):
        # workers only change how the runs are done: the one-worker pass keeps the stages before them (data, base,
        # profile, filter) and does every run again
        shutil.rmtree(out / "runs", ignore_errors=True)
        reports[workers] = run_pipeline(dataclasses.replace(cfg, workers=workers), out, log=lambda _: None)
        for arm in ("base", "sft", "pivotrl"):
            folder = out / "runs" / reports[workers]["arms"][arm]["per_seed"][0]["run"]
            parts = sorted(p.stem for p in (folder / "parts").glob("*.json"))
            assert {"test", "tasks", "tasks_sampled"} <= set(parts), (arm, parts)
            assert ("train" in parts) == (arm != "base"), (arm, parts)
    two, one = reports[2], reports[1]
    for arm in ("base", "sft", "pivotrl"):
        for key in ("task_success", "task_success_greedy", "in_domain_accuracy", "ood_accuracy", "tasks"):
            assert two["arms"][arm][key] == one["arms"][arm][key], (arm, key)
    comp = two["comparisons"]["pivotrl_vs_base"]
    assert comp["n"] == two["arms"]["base"]["tasks"] == 3 and comp == one["comparisons"]["pivotrl_vs_base"]


def test_split_by_trajectory_keeps_trajectories_whole_and_is_seeded():
    pivots = [Pivot(id=f"p{t}-{i}", domain="search", context=[], expert={"role": "assistant", "content": "x"},
                    meta={"trajectory_id": f"t{t}"}) for t in range(20) for i in range(3)]
    parts = split_by_trajectory(pivots, 0.4, 0.25, seed=1)
    owner = {}
    for name, part in parts.items():
        for p in part:
            assert owner.setdefault(p.meta["trajectory_id"], name) == name
    assert [len({p.meta["trajectory_id"] for p in parts[n]}) for n in ("base", "val", "candidates")] == [8, 3, 9]
    assert sum(len(p) for p in parts.values()) == 60
    assert split_by_trajectory(pivots, 0.4, 0.25, seed=1) == parts
    assert split_by_trajectory(pivots, 0.4, 0.25, seed=2)["base"] != parts["base"]


def test_profile_stats_counts_zero_variance_groups():
    def pivot(rewards):
        m = sum(rewards) / len(rewards)
        var = sum((r - m) ** 2 for r in rewards) / len(rewards)
        return Pivot(id=str(rewards), domain="search", context=[], expert={"role": "assistant", "content": "x"},
                     profile=Profile(k=4, rewards=rewards, mean=m, var=var, strict_mean=0.0))

    stats = profile_stats([pivot([0, 0, 0, 0]), pivot([1, 1, 1, 1]), pivot([0, 1, 0, 0]), pivot([1, 1, 0, 1])], 4)
    assert stats["zero_var_frac"] == 0.5 and stats["all_wrong_frac"] == 0.25 and stats["all_right_frac"] == 0.25
    assert stats["mixed_frac"] == 0.5 and stats["rollouts"] == 16 and stats["mean_reward"] == 0.5
    assert stats["mean_histogram"] == [1, 0, 1, 0, 0, 0, 1, 1]


def test_rl_summary_totals():
    rows = [{"step": 1, "groups": 8, "resampled_groups": 0, "completion_len_mean": 10.0, "zero_var_frac": 0.5,
             "reward_mean": 0.25, "updated": True, "used_samples": 32},
            {"step": 2, "groups": 8, "resampled_groups": 2, "completion_len_mean": 20.0, "zero_var_frac": 0.25,
             "reward_mean": 0.75, "updated": False, "used_samples": 0}]
    s = rl_summary(rows, group_size=4, seconds=3.0)
    assert s["rollouts"] == (8 + 8 + 2) * 4 and s["completion_tokens"] == 8 * 4 * 10 + 8 * 4 * 20
    assert s["updates"] == 1 and s["zero_var_frac"] == 0.375 and s["reward_first"] == 0.25 and s["reward_last"] == 0.75
    # per pass over the pivots (every pivot seen once), not per step: a step's reward depends on the pivots it drew
    steps = [{"step": i + 1, "groups": 8, "reward_mean": r} for i, r in enumerate([0.1, 0.3, 0.5, 0.7, 0.9])]
    passes = rl_summary(steps, group_size=4, seconds=1.0, pass_steps=2)
    assert passes["reward_by_pass"] == [0.2, 0.6, 0.9] and passes["reward_first"] == 0.2 and passes["reward_last"] == 0.9


def _run(arm, seed, functional, ood, strict=0.0, rollouts=0):
    return {"arm": arm, "seed": seed, "folder": f"/x/{arm}-s{seed}", "lr": 1e-3, "pivots": "p.jsonl",
            "rollout_turns": rollouts, "profile_rollouts": 0,
            "train": {"kind": "sft", "steps": 5, "updates": 5, "rollouts": 0, "seconds": 2.0, "tokens": 100,
                      "loss_tokens": 40},
            "test": {"functional": functional, "strict": strict, "mean_at_k_functional": functional / 2,
                     "mean_at_k_strict": 0.0, "ood_accuracy": ood, "seconds": 1.0}}


def test_aggregate_means_and_sample_std_over_seeds():
    arms = aggregate_arms([_run("sft", 1, 0.5, 0.2), _run("sft", 0, 0.3, 0.4), _run("base", 0, 0.1, 0.9)])
    assert list(arms) == ["base", "sft"]
    sft = arms["sft"]
    assert sft["seeds"] == [0, 1] and math.isclose(sft["in_domain_accuracy"], 0.4)
    assert math.isclose(sft["in_domain_accuracy_std"], math.sqrt(0.02))
    assert math.isclose(sft["ood_accuracy"], 0.3) and arms["base"]["in_domain_accuracy_std"] is None
    assert [s["seed"] for s in sft["per_seed"]] == [0, 1] and sft["tokens"] == 100
    rows = table_rows({"arms": arms}, titles=False)
    per_turn = rows[0].index("per-turn (greedy)")
    assert rows[0][0] == "arm" and rows[2][0] == "sft" and rows[2][per_turn] == "0.400 ± 0.141"
    assert "task success (T=1 pass@1)" not in rows[0] and "KL to base (nats/token)" not in rows[0]  # empty: dropped
    assert mean_std([]) == (None, None)


def test_claims_against_hand_numbers():
    arms = {"base": {"in_domain_accuracy": 0.30, "ood_accuracy": 0.80},
            "sft": {"in_domain_accuracy": 0.45, "ood_accuracy": 0.40},
            "pivotrl": {"in_domain_accuracy": 0.50, "ood_accuracy": 0.70},
            "no_filter": {"in_domain_accuracy": 0.42}, "strict_reward": {"in_domain_accuracy": 0.31}}
    claims = {c["name"]: c for c in check_claims(arms)}
    assert all(c["holds"] is True for c in claims.values())
    assert claims["ood_drop_at_most_half_of_sft"]["numbers"]["sft_drop"] == pytest.approx(0.4)

    arms["pivotrl"] = {"in_domain_accuracy": 0.39, "ood_accuracy": 0.55}  # +9 points, drop 0.25 > 0.2
    claims = {c["name"]: c for c in check_claims(arms)}
    assert claims["pivotrl_beats_base"]["holds"] is False and claims["pivotrl_not_below_sft"]["holds"] is False
    assert claims["ood_drop_at_most_half_of_sft"]["holds"] is False and claims["table4_ordering"]["holds"] is False

    arms["sft"]["ood_accuracy"] = 0.85  # SFT lost nothing, PivotRL lost 0.25: the claim fails
    ood = {c["name"]: c for c in check_claims(arms)}["ood_drop_at_most_half_of_sft"]
    assert ood["holds"] is False and ood["verdict"] == "not reproduced (one seed)"
    arms["pivotrl"]["ood_accuracy"] = 0.82  # and PivotRL lost nothing either: nothing to halve, not testable
    ood = {c["name"]: c for c in check_claims(arms)}["ood_drop_at_most_half_of_sft"]
    assert ood["holds"] is None and ood["verdict"] == "not testable" and "no SFT drop" in ood["note"]
    quick = {c["name"]: c["holds"] for c in check_claims({k: arms[k] for k in ("base", "pivotrl")})}
    assert quick == {"pivotrl_beats_base": False, "pivotrl_not_below_sft": None,
                     "ood_drop_at_most_half_of_sft": None, "table4_ordering": None}


def _seeded(key_values: dict[str, list[float]]) -> dict[str, dict]:
    arms = {}
    for arm, values in key_values.items():
        arms[arm] = {"in_domain_accuracy": sum(values) / len(values),
                     "per_seed": [{"seed": i, "in_domain_accuracy": v} for i, v in enumerate(values)]}
    return arms


def test_claim_inside_the_seed_spread_is_within_noise_with_its_interval():
    # PivotRL beats SFT on the means (0.353 vs 0.344) but the seeds overlap: not "reproduced"
    arms = _seeded({"sft": [0.36, 0.32, 0.3533], "pivotrl": [0.3533, 0.3667, 0.34]})
    claim = {c["name"]: c for c in check_claims(arms)}["pivotrl_not_below_sft"]
    assert claim["holds"] is True and claim["verdict"] == "within noise"
    # by hand: margin 0.0089; se = sqrt(0.0214**2/3 + 0.0133**2/3) = 0.01457; t(2 dof) = 4.30
    low, high = claim["interval"]
    assert low == pytest.approx(0.0089 - 4.30 * 0.01457, abs=2e-3) and high == pytest.approx(0.0089 + 4.30 * 0.01457, abs=2e-3)
    # far apart with a tight spread: reproduced; far below: not reproduced
    arms = _seeded({"sft": [0.30, 0.31, 0.29], "pivotrl": [0.50, 0.51, 0.49]})
    assert {c["name"]: c for c in check_claims(arms)}["pivotrl_not_below_sft"]["verdict"] == "reproduced"
    arms = _seeded({"sft": [0.50, 0.51, 0.49], "pivotrl": [0.30, 0.31, 0.29]})
    assert {c["name"]: c for c in check_claims(arms)}["pivotrl_not_below_sft"]["verdict"] == "not reproduced"
    # one seed everywhere: the verdict follows the means and says so
    arms = _seeded({"sft": [0.30], "pivotrl": [0.50]})
    claim = {c["name"]: c for c in check_claims(arms)}["pivotrl_not_below_sft"]
    assert claim["verdict"] == "reproduced (one seed)" and claim["interval"] is None


def test_config_rejects_unknown_arms_and_orphan_ablations():
    with pytest.raises(ValueError, match="unknown arm 'dpo'"):
        DemoConfig(arms=("base", "dpo"))
    with pytest.raises(ValueError, match="ablations of pivotrl"):
        DemoConfig(arms=("base", "no_filter"))


def test_base_model_keeps_the_weights_with_the_lowest_validation_loss(tmp_path):
    """Early stopping: the validation action loss is measured every ``eval_every`` steps and the best
    check's weights are the ones saved (a learning rate that blows up late makes the last step worse)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pivot_envs.envs_data import load_pivots
    from pivot_envs.experiments.base_model import BaseRecipe, build_base_model, read_base_report
    from pivot_envs.trainers.lm_loop import collate, target_nll_sum
    from pivot_envs.trainers.sft import encode_example

    train, val = load_pivots("terminal", "train")[:24], load_pivots("terminal", "test")[:6]
    recipe = BaseRecipe(hidden_size=32, n_layers=1, n_heads=2, vocab_size=400, max_context_tokens=96, steps=6,
                        domain_batch=4, probe_batch=4, probe_items=50, warmup_steps=1, eval_every=2, lr=3e-3)
    report = build_base_model("terminal", train, tmp_path / "m", recipe, seed=0, val_pivots=val)
    assert [s for s, _ in report.val_losses] == [2, 4, 6]
    best_step, best_loss = min(report.val_losses, key=lambda x: x[1])
    assert report.best_step == best_step and read_base_report(tmp_path / "m").best_step == best_step
    # the saved weights are the best check's: their validation loss is the recorded minimum
    tok = AutoTokenizer.from_pretrained(tmp_path / "m")
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "m").eval()
    rows = [encode_example(tok, p, max_prompt_tokens=96, max_action_tokens=256) for p in val]
    ids, mask, labels = collate(rows, tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id)
    with torch.no_grad():
        loss = float(target_nll_sum(model, ids, mask, labels)) / sum(len(t) for _, t in rows)
    assert loss == pytest.approx(best_loss, abs=1e-3)


def test_only_the_curve_seed_gets_a_curve_and_its_checkpoints():
    from pivot_envs.experiments.arms import ArmSettings, RunSettings, RunSpec, _curve_checkpoints, wants_curve

    per_arm = ArmSettings(max_new_tokens=8, steps=12, pivots_per_step=4, group_size=2, beta=0.0, eval_k=1,
                          curve_every=6)
    settings = RunSettings(root="r", domain="terminal", base_model="m", val_pivots="v", test_pivots="t",
                           max_context_tokens=64, per_arm=per_arm, test_tasks="tasks.jsonl", curve_seed=0)
    first, second = RunSpec("pivotrl", 0, evals=("val", "test")), RunSpec("pivotrl", 1, evals=("val", "test"))
    assert wants_curve(first, settings) and not wants_curve(second, settings)
    assert _curve_checkpoints(first, settings) == 6 and _curve_checkpoints(second, settings) == 0
    selection = RunSpec("pivotrl", 0, evals=("val",))  # its training is reused by the arm: it saves checkpoints
    assert not wants_curve(selection, settings) and _curve_checkpoints(selection, settings) == 6
    assert not wants_curve(RunSpec("sft", 0, evals=("test",)), settings)
    every_seed = dataclasses.replace(settings, curve_seed=None)
    assert wants_curve(second, every_seed) and _curve_checkpoints(second, every_seed) == 6


def test_a_prebuilt_base_is_used_only_when_its_recipe_and_split_match(tmp_path):
    from pivot_envs.experiments.demo import BUILD_BASE_COMMAND, build_shipped_base, stage_base, stage_data

    logs: list[str] = []
    cfg = smoke_config()
    built = build_shipped_base(tmp_path / "shipped", cfg, log=logs.append)
    assert built["command"] == BUILD_BASE_COMMAND and not (tmp_path / ".shipped-build").exists()
    stamp = (tmp_path / "shipped" / "model.safetensors").stat().st_mtime_ns

    same = dataclasses.replace(cfg, prebuilt_base=str(tmp_path / "shipped"), max_test=3)  # the arms' data may differ
    data = stage_data(same, tmp_path / "run", logs.append)
    used = stage_base(same, tmp_path / "run", data, logs.append)
    assert used["prebuilt"] is True and used["dir"] == str(tmp_path / "shipped") and used["key"] == built["key"]
    assert not (tmp_path / "run" / "base_model").exists()
    assert (tmp_path / "shipped" / "model.safetensors").stat().st_mtime_ns == stamp

    other = dataclasses.replace(same, base=dataclasses.replace(cfg.base, steps=cfg.base.steps + 1))
    trained = stage_base(other, tmp_path / "run", stage_data(other, tmp_path / "run", logs.append), logs.append)
    assert trained["prebuilt"] is False and trained["dir"] == str(tmp_path / "run" / "base_model")
    assert any("built with other settings" in line for line in logs)


@pytest.mark.parametrize("preset", ["quick", "full"])
def test_both_presets_use_the_shipped_base_instead_of_training_one(preset):
    from pathlib import Path

    from pivot_envs.experiments import demo

    cfg = demo.quick_config() if preset == "quick" else demo.full_config()
    assert cfg.prebuilt_base == demo.SHIPPED_BASE
    found = demo._built_base(Path(demo.SHIPPED_BASE), demo.base_key(cfg))
    assert found is not None, f"{preset}: the shipped base was built with another recipe or split; rebuild it with " \
                              f"{demo.BUILD_BASE_COMMAND}"
    assert found["command"] == demo.BUILD_BASE_COMMAND and found["report"]["steps"] == cfg.base.steps


def test_warmup_task_keys_are_read_back_only_for_the_same_pools(tmp_path):
    from pivot_envs.experiments.warmup import WarmupReport, read_warmup_requests, write_warmup

    pools = {"terminal": "aaaa", "search": "bbbb"}
    write_warmup(tmp_path, WarmupReport(key="k", command="c", recipe={}), ["k2", "k1", "k1"], pools)
    assert read_warmup_requests(tmp_path, pools) == {"k1", "k2"}
    assert read_warmup_requests(tmp_path, {"terminal": "aaaa"}) is None  # another pool set: generate it
    assert read_warmup_requests(tmp_path, {**pools, "search": "cccc"}) is None
    assert read_warmup_requests(tmp_path / "missing", pools) is None


def test_held_out_tasks_grow_with_generated_tasks_the_base_never_saw(tmp_path):
    from pivot_envs.experiments.demo import extra_test_tasks, generate_extra, request_key, seen_requests

    cfg = dataclasses.replace(smoke_config(), extra_test_tasks=12, extra_trajectories=30)
    seen = seen_requests(cfg, tmp_path, print)
    extra = {request_key(t) for t in generate_extra(cfg, tmp_path, print)}
    assert extra <= seen and len(seen) > len(extra)  # the base's generated trajectories and the bundled ones
    tasks = extra_test_tasks(cfg, seen)
    assert len(tasks) == 12 and len({t.id for t in tasks}) == 12 and all(t.reward == 1.0 for t in tasks)
    assert not seen & {request_key(t) for t in tasks}
    assert [t.id for t in extra_test_tasks(cfg, seen)] == [t.id for t in tasks]  # deterministic
    some = {request_key(t) for t in tasks[:3]}
    assert not some & {request_key(t) for t in extra_test_tasks(cfg, seen | some)}


# --------------------------------------------------------------------------- issue 29: what the demo prints


def _figures(name: str, task: float, ood: float, seeds: int = 3) -> dict:
    """An aggregated arm entry with every figure the summary prints (several seeds: the ``±`` figures)."""
    return {"title": name, "seeds": list(range(seeds)), "task_success": task, "task_success_std": 0.0123,
            "task_success_greedy": task + 0.2, "task_success_greedy_std": 0.0234, "in_domain_accuracy": 0.851,
            "in_domain_accuracy_std": 0.0111, "strict_accuracy": 0.5, "mean_at_k_functional": 0.784,
            "ood_accuracy": ood, "ood_accuracy_std": 0.0071, "ood_task_success": 0.412, "ood_task_success_std": 0.031,
            "rollout_turns": 14608, "train_seconds": 1234.0, "eval_seconds": 321.0, "truncated_greedy": 0.07,
            "per_seed": [{"seed": s, "in_domain_accuracy": 0.851, "ood_accuracy": ood} for s in range(seeds)]}


def _summary_report(claims: list[dict]) -> dict:
    arms = {name: _figures(name, 0.355 + 0.01 * i, 0.710) for i, name in enumerate(ARM_NAMES)}
    comp = {"diff": 0.045, "ci_low": -0.0001, "ci_high": 0.09, "p_value": 0.057, "n": 201,
            "per_turn": {"diff": 0.01, "ci_low": -0.02, "ci_high": 0.04, "p_value": 0.45, "n": 291}}
    return {"domain": "terminal", "seeds": [0, 1, 2], "model_params": 1_183_488, "wall_seconds": 4746.0, "arms": arms,
            "comparisons": {"pivotrl_vs_base": comp}, "claims": claims}


def _print(report: dict, width: int = 80) -> str:
    import io
    from pathlib import Path

    from rich.console import Console

    from pivot_envs.cli.demo_cmd import print_summary

    buffer = io.StringIO()
    print_summary(report, Path("runs/demo"), Console(file=buffer, width=width, color_system=None))
    return buffer.getvalue()


def test_an_ood_claim_where_no_arm_dropped_is_not_testable_in_the_json_the_markdown_and_the_print():
    """OOD 0.710 for base, SFT and PivotRL (the quick demo's case): "PivotRL's drop <= half of SFT's" has no SFT
    drop to halve. It is "not testable" (never "reproduced") by the spread over seeds and by the paired test."""
    from pivot_envs.experiments.comparisons import ood_retention
    from pivot_envs.experiments.report import arm_pair_claims, claim_lines

    same = {0: {"probe": {f"q{i}": float(i % 3 == 0) for i in range(200)}}}
    paired = ood_retention(same, same, same, n_boot=200)
    assert paired["testable"] is False and paired["sft_drop"] == 0 and paired["diff"] == 0
    assert paired["form"] == "rl - base (SFT lost nothing)"
    claims = arm_pair_claims({"ood_retention": paired})
    arms = {a: {"in_domain_accuracy": 0.85, "ood_accuracy": 0.710} for a in ("base", "sft", "pivotrl")}
    claims += check_claims(arms)
    ood = [c for c in claims if c["name"] in ("ood_retention_paired", "ood_drop_at_most_half_of_sft")]
    assert len(ood) == 2
    for claim in ood:
        assert claim["verdict"] == "not testable" and claim["holds"] is None, claim
        assert "no SFT drop" in claim["note"]
    json.dumps(claims)  # report.json carries the verdict as it is
    md = "\n".join(claim_lines(ood))
    assert md.count("**not testable**") == 2 and "reproduced" not in md
    printed = _print(_summary_report(ood))
    assert printed.count("not testable: OOD drop of PivotRL") == 2
    assert "reproduced: OOD drop" not in printed
    # a ">= 0" claim over figures that did not move from the base's is not testable either
    assert {c["name"]: c for c in check_claims(arms)}["pivotrl_not_below_sft"]["verdict"] == "not testable"
    # once SFT drops, the claim is tested again: PivotRL kept everything, SFT lost a third
    sft = {0: {"probe": {f"q{i}": float(i % 3 == 0 and i % 2 == 0) for i in range(200)}}}
    tested = arm_pair_claims({"ood_retention": ood_retention(same, sft, same, n_boot=200)})[0]
    assert tested["verdict"] == "reproduced" and tested["numbers"]["sft_drop"] > 0


def test_the_printed_summary_is_readable_at_80_columns():
    """Every figure and header of the closing tables shows in full in an 80-column terminal (no "…"): the nine
    arms of --full with mean ± std over seeds, OOD task success and five-digit rollout turns."""
    claims = check_claims({a: {"in_domain_accuracy": 0.85, "ood_accuracy": 0.71} for a in ("base", "sft", "pivotrl")})
    text = _print(_summary_report(claims))
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 80
    for header in ("T=1", "greedy", "OOD T=1", "cut %", "per-turn", "mean@k", "OOD probes", "turns", "train s"):
        assert f" {header} " in text, header
    for name in ARM_NAMES:
        assert f" {name} " in text, name
    assert "0.355±0.012" in text and "14,608" in text and "0.412±0.031" in text


def test_selection_takes_the_rate_with_the_best_validation_task_success_not_per_turn_accuracy():
    from pivot_envs.experiments.arms import RunSpec
    from pivot_envs.experiments.demo import _best, val_score

    trials = [(RunSpec("pivotrl", 0, "p", 1e-4), {"val": {"functional": 0.825}, "val_tasks": {"success": 0.30}}),
              (RunSpec("pivotrl", 0, "p", 3e-4), {"val": {"functional": 0.775}, "val_tasks": {"success": 0.41}}),
              (RunSpec("pivotrl", 0, "p", 1e-3), {"val": {"functional": 0.700}, "val_tasks": {"success": 0.41}})]
    assert _best(trials, val_score(by_tasks=True)).lr == 3e-4  # ties: the first in grid order
    assert _best(trials, val_score(by_tasks=False)).lr == 1e-4  # what the full run chose before
    with pytest.raises(ValueError, match="no validation task success"):
        val_score(by_tasks=True)({"folder": "x", "val": {"functional": 0.5}})


def test_the_report_says_an_arm_beat_the_base_on_validation_only_by_the_selection_metric():
    """The real-model run: PivotRL's validation per-turn accuracy 0.844 is above the base's 0.828, but the selection
    chose by validation task success, where it tied the base (0.40 vs 0.40). The report must say it did not beat
    the base, by that metric."""
    from pivot_envs.experiments.report import mark_validation_verdicts

    arms = {"base": {"val_accuracy": 0.828}, "pivotrl": {"val_accuracy": 0.844}, "sft": {"val_accuracy": 0.812}}
    selection = {"metric": "validation task success", "base_val": 0.40, "beats_base": {"pivotrl": False, "sft": False},
                 "trials": [{"arm": "pivotrl", "score": 0.40}, {"arm": "pivotrl", "score": 0.16},
                            {"arm": "sft", "score": 0.39}, {"arm": "sft", "score": 0.32}]}
    mark_validation_verdicts(arms, selection)
    assert arms["pivotrl"]["beats_base_on_val"] is False and arms["pivotrl"]["val_score"] == 0.40
    assert arms["sft"]["beats_base_on_val"] is False and arms["sft"]["val_score"] == 0.39
    assert arms["pivotrl"]["base_val_score"] == 0.40 and "beats_base_on_val" not in arms["base"]
    fixed = {"base": {"val_accuracy": 0.75}, "sft": {"val_accuracy": 0.75}}  # the quick demo: no grid, no selection
    mark_validation_verdicts(fixed, {"metric": None, "trials": []})
    assert "beats_base_on_val" not in fixed["sft"]  # nothing was selected, so nothing "keeps the base"


def test_validation_tasks_are_generated_apart_from_every_held_out_and_base_task(tmp_path):
    from pivot_envs.experiments.demo import stage_data
    from pivot_envs.experiments.task_keys import request_key
    from pivot_envs.formats import read_trajectories

    cfg = dataclasses.replace(smoke_config(), val_tasks=6, extra_test_tasks=4, extra_trajectories=20)
    data = stage_data(cfg, tmp_path, print)
    val = read_trajectories(data["files"]["val_tasks"])
    test = read_trajectories(data["files"]["test_tasks"])
    assert len(val) == 6 == data["sizes"]["val_tasks"] and all(t.reward == 1.0 for t in val)
    keys = {request_key(t) for t in val}
    assert len(keys) == 6 and not keys & {request_key(t) for t in test}
    extra = read_trajectories(tmp_path / "data" / "extra_trajectories.jsonl")
    assert not keys & {request_key(t) for t in extra}


def test_asking_for_more_candidates_than_the_split_holds_says_so(tmp_path):
    from pivot_envs.experiments.demo import stage_data

    said: list[str] = []
    data = stage_data(dataclasses.replace(smoke_config(), max_candidates=100_000), tmp_path, said.append)
    held = data["sizes"]["candidates"]
    assert 0 < held < 100_000
    assert any(f"holds {held} pivots, fewer than the 100000 asked (--candidates)" in line for line in said), said


# --------------------------------------------------------------------------- issue 27: a pretrained model


def test_warmup_band_decision():
    from pivot_envs.experiments.warmup import WarmupRecipe, band_decision

    recipe = WarmupRecipe(band_low=0.25, band_high=0.65, margin=0.05)
    assert band_decision([0.0, 0.12], recipe) is None  # below: go on
    assert band_decision([0.0, 0.12, 0.31], recipe) == 2  # inside the band and its margin: stop here
    assert band_decision([0.0, 0.28], recipe) is None  # inside the band, not its margin: one more check
    assert band_decision([0.28, 0.70], recipe) == 0  # overshoot: the nearer of the last two to the centre 0.45
    assert band_decision([0.20, 0.64], recipe) == 1


def test_a_trajectory_trains_as_one_sequence_whose_targets_are_its_pivots_actions():
    """The warm-up's packed sequences teach exactly what per-pivot SFT teaches: every pivot's prompt (as the
    arms render it) is the sequence up to its action, and the action + end of turn is the target there."""
    from transformers import AutoTokenizer

    from pivot_envs.envs_data import load_trajectories
    from pivot_envs.experiments.demo import SHIPPED_BASE
    from pivot_envs.experiments.warmup import packed_sequences, step_order
    from pivot_envs.pipeline.extract import ExtractOptions, extract_pivots
    from pivot_envs.trainers.sft import encode_example

    tok = AutoTokenizer.from_pretrained(SHIPPED_BASE)
    trajs = load_trajectories("terminal", "train")[:3]
    seqs = packed_sequences(tok, trajs, "terminal", tools="none", max_tokens=4096)
    pivots, _ = extract_pivots(trajs, "terminal", ExtractOptions())
    assert len(seqs) == 3 and sum(len(spans) for _, spans in seqs) == len(pivots)
    rows = [encode_example(tok, p, max_prompt_tokens=4096, max_action_tokens=256, tools="none") for p in pivots]
    pairs = {(tuple(ids[:a]), tuple(ids[a:b])) for ids, spans in seqs for a, b in spans}
    assert pairs == {(tuple(p), tuple(t)) for p, t in rows}
    # a short window cuts later prompts: they start sequences of their own, each still its pivot's prompt
    short = packed_sequences(tok, trajs, "terminal", tools="none", max_tokens=160)
    cut = [encode_example(tok, p, max_prompt_tokens=160, max_action_tokens=256, tools="none") for p in pivots]
    assert len(short) > 3 and {(tuple(ids[:a]), tuple(ids[a:b])) for ids, spans in short for a, b in spans} == \
        {(tuple(p), tuple(t)) for p, t in cut}
    # the data order is a pure function of (seed, step): a resumed warm-up sees the same batches
    assert step_order(10, 0, 3, 4) == step_order(10, 0, 3, 4) and sorted(sum((step_order(10, 0, s, 5)
                                                                              for s in range(2)), [])) == list(range(10))


def test_model_argument_forms_and_errors(tmp_path):
    from pivot_envs.experiments.demo import SHIPPED_BASE
    from pivot_envs.experiments.model_source import parse_model

    assert parse_model("tiny").kind == "tiny" and not parse_model("").pretrained
    hf = parse_model(f"hf:{SHIPPED_BASE}")
    assert hf.pretrained and hf.folder == SHIPPED_BASE and hf.name == "terminal"
    with pytest.raises(ValueError, match="not a transformers model folder"):
        parse_model(f"hf:{tmp_path}")
    with pytest.raises(ValueError, match="no GGUF file"):
        parse_model(f"gguf:{tmp_path / 'x.gguf'}")
    with pytest.raises(ValueError, match="use tiny, smollm2, gguf:FILE or hf:DIR"):
        parse_model("llama")


def test_training_progress_counts_the_runs_own_steps(capsys):
    """An arm that trains longer than the others (``sft_long``) says ``step 64/64``, not ``64/16``."""
    from pivot_envs.experiments.arms import _progress

    on_step = _progress(Path("runs/sft_long-s0-abc/train"), 64, lambda row: "loss 0.1")
    for step in range(1, 65):
        on_step({"step": step, "step_s": 1.0})
    lines = capsys.readouterr().err.splitlines()
    assert [line.split("] ")[1].split(":")[0] for line in lines] == [f"step {s}/64" for s in (12, 24, 36, 48, 60)]
