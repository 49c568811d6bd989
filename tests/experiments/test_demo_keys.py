"""The demo's keys are byte-stable: the base key that finds the shipped quick-demo base, the run folders' keys, the
arms each preset plans and the trainer configs each arm hands its trainer. Pinned before the demo's settings were
restructured (issue 50: one declaration per knob, arms as records), so a refactor that moves a key fails here."""

from __future__ import annotations

import dataclasses

import pytest

from pivot_envs.types import stable_hash

PINNED = {
    "full": ("cab03a89c54b7ebf", "2755d73ec84ee7d3", "1c8e76bef931614b"),
    "quick": ("cab03a89c54b7ebf", "9ca290ea56cf07bc", "b695b20a7e7ab08a"),
    "real_hf": ("a7ebad1e7727ad0b", "313656768f19cbb9", "ec3acce3edc16a66"),
    "real_vllm": ("a7ebad1e7727ad0b", "68a6f52cf688f1a4", "770c76f9ec425d46"),
    "smoke": ("c22307141cb9fb66", "e2515a52243e8165", "fe0f9ede786b2cd6"),
    "smoke_pretrained": ("a7ebad1e7727ad0b", "b50190bea6e6f7d0", "3d47f0e22ae28371"),
}
"""preset -> (base key, digest of the planned runs and their folder keys, digest of every arm's trainer config)."""


def _presets() -> dict:
    from pivot_envs.experiments import demo

    return {"quick": demo.quick_config(), "full": demo.full_config(), "smoke": demo.smoke_config(),
            "real_hf": dataclasses.replace(demo.real_config(engine="hf"), prebuilt_warmup=None),
            "real_vllm": dataclasses.replace(demo.real_config(engine="vllm"), prebuilt_warmup=None),
            "smoke_pretrained": demo.smoke_pretrained_config()}


def _settings(cfg, root: str):
    from pivot_envs.experiments import demo

    files = {"val": f"{root}/data/val.jsonl", "test": f"{root}/data/test.jsonl",
             "test_tasks": f"{root}/data/test_tasks.jsonl", "val_tasks": f"{root}/data/val_tasks.jsonl",
             "ood_tasks": f"{root}/data/ood_tasks.jsonl" if cfg.ood_domain else None}
    base = {"dir": f"{root}/base_model", "key": demo.base_key(cfg)}
    return demo.run_settings(cfg, demo.Path(root), {"files": files}, base)


def _planned(cfg, settings, monkeypatch) -> list:
    """The runs stage_arms plans for ``cfg`` (nothing is run: run_many and execute_run are recorded)."""
    from pivot_envs.experiments import demo

    monkeypatch.setattr(demo, "run_many", lambda specs, settings, workers: [])
    monkeypatch.setattr(demo, "execute_run", lambda spec, settings: spec)
    root = settings.root
    sets = {"adv": {f"{cfg.lambda_diff:g}": f"{root}/data/adv.jsonl"},
            "random": {f"{cfg.lambda_diff:g}": f"{root}/data/random.jsonl"}, "pvpo": f"{root}/data/pvpo.jsonl",
            "train_tasks": f"{root}/data/train_tasks.jsonl", "profile": {"stats": {"rollouts": 1234}}}
    selection = {"lambda": cfg.lambda_diff, "rl_lr": cfg.rl_lr, "sft_lr": cfg.sft_lr, "metric": "m"}
    return demo.stage_arms(cfg, settings, sets, selection, lambda m: None)


def _trainer_config(spec, settings, monkeypatch) -> dict:
    """The config an arm's training hands its trainer (the SFT one captured where train_sft would take it)."""
    from pivot_envs.experiments import arms

    out = arms.Path(settings.root) / "runs" / spec.key(settings) / "train"
    if spec.arm in ("sft", "sft_long"):
        captured = {}

        def capture(cfg, on_step=None):
            captured.update(cfg.to_dict())
            raise StopIteration

        monkeypatch.setattr(arms, "train_sft", capture)
        with pytest.raises(StopIteration):
            arms._train_sft(spec, settings, out)
        return captured
    if spec.arm in ("e2e", "e2e_credit", "arpo"):
        return arms.episode_config(spec, settings, out)
    return arms.rl_config(spec, settings, out)


def figures(name: str, monkeypatch) -> tuple[str, str, str]:
    from pivot_envs.experiments import arms, demo, engines

    monkeypatch.setattr(engines, "vllm_available", lambda: True)
    monkeypatch.setattr(arms, "domain_verifier_fingerprint", lambda domain: f"verifiers-of-{domain}")
    cfg = dataclasses.replace(_presets()[name], threads=1)
    cfg = dataclasses.replace(cfg, engine=engines.resolve_engine(cfg.engine))
    settings = _settings(cfg, "/runs/demo")
    specs = _planned(cfg, settings, monkeypatch)
    runs = [(dataclasses.asdict(s), s.key(settings), s.key(settings, legacy=True)) for s in specs]
    configs = [_trainer_config(s, settings, monkeypatch) for s in specs if s.arm != "base"]
    return demo.base_key(cfg), stable_hash(runs), stable_hash(configs)


@pytest.mark.parametrize("name", sorted(PINNED))
def test_the_demo_keys_and_trainer_configs_did_not_move(name, monkeypatch):
    assert figures(name, monkeypatch) == PINNED[name]


def test_the_pinned_quick_base_key_is_the_shipped_bases():
    import json
    from pathlib import Path

    from pivot_envs.experiments.demo import SHIPPED_BASE

    assert json.loads((Path(SHIPPED_BASE) / "demo_stage.json").read_text())["key"] == PINNED["quick"][0]
