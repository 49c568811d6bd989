"""The PivotRL ablation on validation (``benchmarks/learning/pivotrl_ablation.py``, issue 36 item 3): one run per change
undone beside the demo's own PivotRL run, every model played on the demo's validation tasks and paired by task."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[2]


def _benchmark():
    spec = importlib.util.spec_from_file_location("pivotrl_ablation",
                                                  ROOT / "benchmarks" / "learning" / "pivotrl_ablation.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory):
    from pivot_envs.experiments.demo import run_pipeline, smoke_config

    out = tmp_path_factory.mktemp("ablation") / "demo"
    cfg = smoke_config()
    cfg = dataclasses.replace(cfg, arms=("base", "pivotrl"), rl_lr=1e-3, rl_lr_grid=(), sft_lr_grid=(),
                              lambda_grid=(), verifier_pivots=0, max_test_tasks=1,
                              per_arm=dataclasses.replace(cfg.per_arm, curve_every=0, divergence_pivots=0, eval_k=0))
    run_pipeline(cfg, out, log=lambda _: None)
    return out


@pytest.mark.slow
def test_each_variant_is_one_change_from_the_demos_own_pivotrl_run_and_pairs_on_validation(demo_dir, tmp_path):
    from pivot_envs.experiments.ablation import run_ablation, table_lines

    report = json.loads((demo_dir / "report.json").read_text())
    demo_run = demo_dir / "runs" / report["arms"]["pivotrl"]["per_seed"][0]["run"]
    demo_trained = (demo_run / "parts" / "train.json").stat().st_mtime_ns
    table = run_ablation(demo_dir, ["g4_skip", "no_low_mean"], repeats=2, say=lambda _: None, n_boot=200)
    rows = table["variants"]
    # the preset is the demo's PivotRL run, read back, not trained again
    assert rows["preset"]["run"] == demo_run.name
    assert (demo_run / "parts" / "train.json").stat().st_mtime_ns == demo_trained
    # each variant changed exactly what it says, in a run of its own
    assert rows["g4_skip"]["group_size"] == 4 and rows["g4_skip"]["zero_variance"] == "skip"
    assert rows["preset"]["group_size"] == 2 and rows["preset"]["zero_variance"] == "resample"
    no_low_mean = rows["no_low_mean"]
    assert no_low_mean["group_size"] == 2 and no_low_mean["train_pivots"] >= rows["preset"]["train_pivots"]
    assert len({r["run"] for r in rows.values()}) == 3
    for name, g in (("g4_skip", 4), ("preset", 2)):  # the trainer sampled G per group, again only with resample
        metrics = demo_dir / "runs" / rows[name]["run"] / "train" / "metrics.jsonl"
        steps = [json.loads(line) for line in metrics.read_text().splitlines()]
        assert steps and all(r["rollout_turns"] == (r["groups"] + (r.get("resampled_groups") or 0)) * g
                             for r in steps), name
        assert name != "g4_skip" or not any(r.get("resampled_groups") for r in steps)
    # every model played the same validation tasks; each comparison pairs them task by task
    assert table["tasks"] == 3 and table["repeats"] == 2
    for name, row in rows.items():
        assert row["vs_base"]["n"] == 3
        assert row["vs_base"]["diff"] == pytest.approx(row["val_success"] - table["base_val_success"]), name
        assert (row["vs_preset"] is None) == (name == "preset")
    assert rows["g4_skip"]["vs_preset"]["diff"] == pytest.approx(rows["g4_skip"]["val_success"]
                                                                  - rows["preset"]["val_success"])
    assert len(table_lines(table)) == 4 + 3
    # a second call reads everything back: nothing trained or played again
    saved = {f: f.stat().st_mtime_ns for f in demo_dir.glob("runs/*/parts/train.json")}
    saved.update({f: f.stat().st_mtime_ns for f in (demo_dir / "ablation").glob("val_*.json")})
    assert len(saved) == 3 + 4  # three trained runs; the base, the preset and two variants played
    again: list[str] = []
    assert run_ablation(demo_dir, ["g4_skip", "no_low_mean"], repeats=2, say=again.append, n_boot=200) == table
    assert not any("playing" in s for s in again), again
    assert {f: f.stat().st_mtime_ns for f in saved} == saved
    # a model trained again is played again (its saved play no longer matches the model's files)
    weights = next(f for f in (demo_dir / "runs" / rows["g4_skip"]["run"] / "train" / "final").iterdir()
                   if f.suffix == ".safetensors")
    weights.touch()
    replayed: list[str] = []
    run_ablation(demo_dir, ["g4_skip"], repeats=2, say=replayed.append, n_boot=200)
    assert [s for s in replayed if "playing" in s] == ["  playing the validation tasks with g4_skip (2 episodes a task "
                                                      "at T=1) ..."]
    # the CLI copies the table where the repository keeps it
    results = tmp_path / "results"
    assert _benchmark().main(["--demo", str(demo_dir), "--variants", "g4_skip,no_low_mean", "--repeats", "2",
                              "--results", str(results)]) == 0
    assert (results / "table.md").read_text().count("\n| ") == 4
    assert json.loads((results / "ablation.json").read_text())["variants"].keys() == rows.keys()


def test_bad_input_names_the_fix(tmp_path, capsys):
    from pivot_envs.experiments.ablation import run_ablation

    assert _benchmark().main(["--demo", str(tmp_path / "nowhere")]) == 2
    assert "demo_config.json: no demo here; run `pivot-envs demo --out" in capsys.readouterr().err
    with pytest.raises(ValueError, match="unknown variant 'g8'; variants: preset, no_low_mean"):
        run_ablation(tmp_path, ["g8"], repeats=1)
    with pytest.raises(ValueError, match="repeats 0"):
        run_ablation(tmp_path, ["g4_skip"], repeats=0)


def test_an_empty_folder_becomes_a_demo_without_its_arms_and_another_demos_folder_is_refused(tmp_path, capsys):
    """``--model`` starts a demo for the ablation alone: its config is written, the stages before the arms run
    when the ablation loads it, and no arm is trained or played; a folder holding another demo is never reused."""
    from pivot_envs.experiments.ablation import load_demo, start_demo
    from pivot_envs.experiments.demo import smoke_config

    cfg = dataclasses.replace(smoke_config(), engine="hf")
    folder = tmp_path / "demo"
    path = start_demo(folder, cfg)
    assert json.loads(path.read_text())["per_arm"]["steps"] == cfg.per_arm.steps
    assert start_demo(folder, cfg) == path  # the same demo: kept as it is
    _, settings, sets = load_demo(folder, say=lambda _: None)
    assert settings.val_tasks and sets["adv"] and Path(sets["profile"]["file"]).exists()
    assert not (folder / "runs").exists() and not (folder / "report.json").exists()
    with pytest.raises(ValueError, match="demo_config.json: another demo's config is here; pass an empty --demo"):
        start_demo(folder, dataclasses.replace(cfg, per_arm=dataclasses.replace(cfg.per_arm, steps=cfg.per_arm.steps + 1)))
    assert _benchmark().main(["--demo", str(tmp_path / "other"), "--model", "tiny"]) == 2
    assert "for the tiny model run `pivot-envs demo --out DIR` first" in capsys.readouterr().err
    assert not (tmp_path / "other").exists()


def test_a_play_whose_every_episode_errored_is_an_error_not_a_zero():
    """Validation plays with no scored task (every episode an infrastructure error) stop the comparison: the
    benchmark then exits 2 with the message, never a table of 0.000."""
    from pivot_envs.experiments.ablation import compare_plays

    plays = {"preset": {"tasks": {"t1": 1.0, "t2": 0.0}}, "g4_skip": {"tasks": {"t1": None, "t2": None}}}
    with pytest.raises(ValueError, match="the validation plays of g4_skip and preset share no scored task"):
        compare_plays(plays, "preset", n_boot=200)
    plays["g4_skip"]["tasks"]["t2"] = 1.0  # one scored task: compared over it alone
    assert compare_plays(plays, "preset", n_boot=200)["g4_skip"]["n"] == 1
