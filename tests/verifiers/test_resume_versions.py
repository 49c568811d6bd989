"""A resume under other verifier versions is refused: the profile's checkpoint, a trainer's checkpoint, the demo's
stages; and the demo's run folders are keyed by the verifiers' versions (a bump is a new folder, never a reuse)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from pivot_envs.envs_data import load_pivots
from pivot_envs.pipeline.profile import profile_pivots
from pivot_envs.verifiers.exec import ExecVerifier
from pivot_envs.verifiers.final_turn import FinalTurnVerifier
from pivot_envs.verifiers.strict import StrictVerifier
from pivot_envs.verifiers.tool_call import ToolCallVerifier
from pivot_envs.verifiers.versions import VerifierVersionsChanged


def test_a_profile_checkpoint_of_other_verifier_versions_is_refused(tmp_path, monkeypatch):
    pivots = load_pivots("tool_use", "test")[:4]
    ckpt = tmp_path / "prof.checkpoint"
    first = profile_pivots(pivots, "noisy_expert:0.5", None, k=2, seed=0, batch_pivots=2, checkpoint=ckpt)
    header = json.loads(ckpt.read_text().splitlines()[0])
    versions = header["params"]["verifier_versions"]
    assert versions["final_turn"] == FinalTurnVerifier.version and versions["strict"] == StrictVerifier.version
    again = profile_pivots(pivots, "noisy_expert:0.5", None, k=2, seed=0, batch_pivots=2, checkpoint=ckpt)
    assert [p.to_dict() for p in again] == [p.to_dict() for p in first]  # same versions: resumed (nothing left to do)

    monkeypatch.setattr(ToolCallVerifier, "version", 2)
    with pytest.raises(VerifierVersionsChanged, match=r"prof.checkpoint \(a profile checkpoint\) was scored by other "
                                                      r"verifier code: tool_call 1 -> 2 .*--fresh"):
        profile_pivots(pivots, "noisy_expert:0.5", None, k=2, seed=0, batch_pivots=2, checkpoint=ckpt)
    monkeypatch.undo()
    lines = ckpt.read_text().splitlines()  # a checkpoint written before versions were recorded
    del header["params"]["verifier_versions"]
    ckpt.write_text("\n".join([json.dumps(header)] + lines[1:]) + "\n")
    with pytest.raises(VerifierVersionsChanged, match="records no verifier versions"):
        profile_pivots(pivots, "noisy_expert:0.5", None, k=2, seed=0, batch_pivots=2, checkpoint=ckpt)


def test_a_trainer_checkpoint_of_other_verifier_versions_is_refused(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import torch

    from tests.trainers.test_pivotrl_trainer import build_toy, toy_config
    from pivot_envs.trainers.pivotrl import PivotRLTrainer, train_pivotrl

    toy = build_toy(tmp_path / "toy")
    out = tmp_path / "run"
    train_pivotrl(toy_config(toy, out, steps=1, save_every=1, group_size=2, pivots_per_step=2))
    state = torch.load(out / "checkpoint-000001" / "trainer_state.pt", weights_only=True)
    assert state["verifier_versions"] == {"fuzzy": 1, "strict": 1, "tool_call": 1}
    assert json.loads((out / "checkpoint-000001" / "trainer_state.json").read_text())["verifier_versions"] == \
        state["verifier_versions"]
    PivotRLTrainer(toy_config(toy, out, steps=2, save_every=1, group_size=2, pivots_per_step=2,
                              resume_from="latest"))  # same versions: it resumes
    monkeypatch.setattr(StrictVerifier, "version", 3)
    with pytest.raises(VerifierVersionsChanged, match=r"checkpoint-000001 \(a training checkpoint\) was scored by "
                                                      r"other verifier code: strict 1 -> 3 .*another output_dir"):
        PivotRLTrainer(toy_config(toy, out, steps=2, save_every=1, group_size=2, pivots_per_step=2,
                                  resume_from="latest"))


@pytest.fixture
def smoke_cfg():
    from pivot_envs.experiments.demo import smoke_config

    return dataclasses.replace(smoke_config(), verifier_pivots=1)


def test_a_demo_stage_of_other_verifier_versions_is_refused(tmp_path, smoke_cfg, monkeypatch, bwrap_ok):
    from pivot_envs.experiments.demo import stage_verifiers

    say = lambda message: None  # noqa: E731
    made = stage_verifiers(smoke_cfg, tmp_path, say)
    assert made["verifier_versions"]["exec"] == ExecVerifier.version
    assert {"final_turn", "swe_call", "retrieves"} <= set(made["verifier_versions"])
    assert stage_verifiers(smoke_cfg, tmp_path, say) == json.loads(json.dumps(made))  # same versions: reused
    now = ExecVerifier.version
    monkeypatch.setattr(ExecVerifier, "version", now + 1)
    with pytest.raises(VerifierVersionsChanged, match=rf"verifiers.json \(a stage of the demo\) was scored by other "
                                                      rf"verifier code: exec {now} -> {now + 1} .*fresh --out folder, "
                                                      r"or delete "):
        stage_verifiers(smoke_cfg, tmp_path, say)
    monkeypatch.undo()
    saved = json.loads((tmp_path / "verifiers.json").read_text())
    del saved["verifier_versions"]  # a stage saved before versions were recorded
    (tmp_path / "verifiers.json").write_text(json.dumps(saved))
    with pytest.raises(VerifierVersionsChanged, match="records no verifier versions"):
        stage_verifiers(smoke_cfg, tmp_path, say)


def test_the_demo_profile_checkpoint_of_other_versions_is_refused_not_dropped(tmp_path):
    from pivot_envs.experiments.demo import _fresh_checkpoint

    ckpt = tmp_path / "profile.checkpoint.jsonl"
    assert _fresh_checkpoint(ckpt, "k1", {"exec": 1}) == ckpt
    ckpt.write_text("{}\n")
    _fresh_checkpoint(ckpt, "k1", {"exec": 1})
    assert ckpt.exists()  # the same key and versions: kept, to resume
    _fresh_checkpoint(ckpt, "k2", {"exec": 1})
    assert not ckpt.exists()  # another key (an older base model): removed, as before
    ckpt.write_text("{}\n")
    _fresh_checkpoint(ckpt, "k2", {"exec": 1})
    with pytest.raises(VerifierVersionsChanged, match=r"the demo's interrupted profile\) was scored by other verifier "
                                                      r"code: exec 1 -> 2"):
        _fresh_checkpoint(ckpt, "k3", {"exec": 2})
    assert ckpt.exists()


def test_run_folders_are_keyed_by_the_verifier_versions(tmp_path, monkeypatch):
    from pivot_envs.experiments.arms import ArmSettings, RunSettings, RunSpec
    from pivot_envs.verifiers import verifier_class, verifier_names
    from pivot_envs.verifiers.defaults import default_verifier_spec
    from pivot_envs.verifiers.versions import verifier_versions

    per_arm = ArmSettings(max_new_tokens=8, steps=2, pivots_per_step=2, group_size=2, beta=0.0, eval_k=1)
    settings = RunSettings(root=str(tmp_path), domain="terminal", base_model="b", val_pivots="v", test_pivots="t",
                           max_context_tokens=64, per_arm=per_arm)
    specs = [RunSpec("base", 0), RunSpec("pivotrl", 0, "p.jsonl", 1e-3)]

    def keys() -> list[str]:
        return [s.key(settings) for s in specs] + [s.key(settings, legacy=True) for s in specs]

    before = keys()
    assert keys() == before  # stable
    held = set(verifier_versions(default_verifier_spec("terminal"))) | {"strict"}
    for name in ("strict", "final_turn"):  # the baseline and one the domain's default holds
        monkeypatch.setattr(verifier_class(name), "version", verifier_class(name).version + 1)
        assert all(a != b for a, b in zip(before, keys())), name
        monkeypatch.undo()
    unheld = next(n for n in sorted(verifier_names()) if n not in held)
    monkeypatch.setattr(verifier_class(unheld), "version", 9)
    assert keys() == before  # a verifier the runs do not score with leaves their folders alone
