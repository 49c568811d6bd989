"""The PivotRL trainer on a real tiny model: config, schedule, sampling, log-probs, scoring, training, resume.

The toy task: every pivot's expert action is the same short tool call ``ping()``. The tiny
Llama-style model is SFT-warmed on ``alpha() / beta() / gamma() / ping()`` in equal parts, so it
emits well-formed calls and picks ``ping`` about a quarter of the time: groups are mixed, and
GRPO with the ``tool_call`` verifier should push the rate up.
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from pivot_envs.agents.base import Completion  # noqa: E402
from pivot_envs.agents.prompting import action_target, encode_prompt  # noqa: E402
from pivot_envs.trainers.advantage import group_advantages  # noqa: E402
from pivot_envs.config import parse_override  # noqa: E402
from pivot_envs.trainers.config import ConfigError  # noqa: E402
from pivot_envs.trainers.logprobs import completion_logprobs  # noqa: E402
from pivot_envs.trainers.metrics import TIMING_KEYS, read_metrics  # noqa: E402
from pivot_envs.trainers.pivotrl import PivotRLConfig, PivotRLTrainer, train_pivotrl  # noqa: E402
from pivot_envs.trainers.sampling import PivotSampler, build_sampler, sample_groups  # noqa: E402
from pivot_envs.trainers.schedule import build_scheduler  # noqa: E402
from pivot_envs.trainers.scoring import score_groups  # noqa: E402
from pivot_envs.trainers.token_batch import pack  # noqa: E402
from pivot_envs.types import Pivot, Profile  # noqa: E402
from pivot_envs.verifiers import build_verifier  # noqa: E402

NAMES = ("alpha", "beta", "gamma", "ping")
USERS = ("please call alpha", "please call beta", "please call gamma", "please call delta")
CLOSED_JUDGE = {"name": "judge", "model": "m", "base_url": "http://127.0.0.1:1/v1", "max_retries": 0, "cache": False}


# ---------------------------------------------------------------------- the toy task


def call(name: str) -> dict:
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": "c0", "type": "function", "function": {"name": name, "arguments": "{}"}}]}


def toy_pivots(expert: str = "ping", profile_mean: float | None = None) -> list[Pivot]:
    out = []
    for i, text in enumerate(USERS):
        profile = None
        if profile_mean is not None:
            rewards = [1.0] * round(4 * profile_mean) + [0.0] * (4 - round(4 * profile_mean))
            profile = Profile(k=4, rewards=rewards, mean=profile_mean, var=profile_mean * (1 - profile_mean))
        out.append(Pivot(id=f"toy-{i}", domain="tool_use", context=[{"role": "user", "content": text}],
                         expert=call(expert), profile=profile))
    return out


def write_pivots(path: Path, pivots: list[Pivot]) -> Path:
    path.write_text("".join(json.dumps(p.to_dict()) + "\n" for p in pivots), encoding="utf-8")
    return path


def build_toy(root: Path) -> tuple[Path, Path]:
    """A tiny SFT-warmed model (~31K parameters) and the pivot file of the toy task."""
    from pivot_envs.models.tiny import build_tiny_model, train_lm

    texts = [action_target(call(n)) for n in NAMES] + list(USERS) + ["<|im_start|>user\n<|im_start|>assistant\n"]
    model = build_tiny_model(root / "model", texts, vocab_size=1000, hidden_size=32, n_layers=2, n_heads=2,
                             max_positions=256, seed=0)
    examples = [([{"role": "user", "content": u}], action_target(call(n))) for u in USERS for n in NAMES]
    train_lm(model, examples, steps=80, lr=1e-2, batch_size=8, seed=0)
    return model, write_pivots(root / "pivots.jsonl", toy_pivots())


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> tuple[Path, Path]:
    return build_toy(tmp_path_factory.mktemp("toy"))


def toy_config(toy, out: Path, **overrides) -> PivotRLConfig:
    model, pivots = toy
    settings = dict(model=str(model), pivots=str(pivots), output_dir=str(out), domain="tool_use", verifier="tool_call",
                    steps=3, pivots_per_step=4, group_size=8, max_new_tokens=32, lr=3e-3, lr_schedule="constant",
                    num_threads=1, save_every=0, plots=False, device="cpu")
    settings.update(overrides)
    return PivotRLConfig(**settings)


def load_policy(model_dir: Path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32), AutoTokenizer.from_pretrained(model_dir)


def weights(model_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(Path(model_dir) / "model.safetensors"))


def comparable(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in rows]


# ---------------------------------------------------------------------- config


def test_config_from_dict_coerces_strings_and_round_trips():
    cfg = PivotRLConfig.from_dict({"model": "m", "lr": "1e-4", "steps": "20", "bf16": "false", "betas": "[0.9, 0.95]",
                                   "report_to": "tensorboard", "max_prompt_tokens": "null",
                                   "verifier": '{"name": "fuzzy", "threshold": 90}', "lora_target_modules": "all-linear"})
    assert (cfg.lr, cfg.steps, cfg.bf16, cfg.betas, cfg.report_to) == (1e-4, 20, False, (0.9, 0.95), ["tensorboard"])
    assert cfg.max_prompt_tokens is None and cfg.verifier == {"name": "fuzzy", "threshold": 90}
    assert cfg.lora_target_modules == "all-linear"
    again = PivotRLConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert again == cfg
    # --set values are read as YAML (pivot_envs.config), then coerced to the field's type
    overrides = dict(parse_override(o) for o in ("lr=2e-5", "lora_target_modules=[q_proj]", "domain=terminal"))
    cfg = PivotRLConfig.from_dict(overrides)
    assert (cfg.lr, cfg.lora_target_modules, cfg.domain) == (2e-5, ["q_proj"], "terminal")


def test_config_errors_name_the_key_and_the_fix(tmp_path):
    with pytest.raises(ConfigError) as err:
        PivotRLConfig.from_dict({"model": "m", "learning_rate": 1e-3})
    text = str(err.value)
    assert "'learning_rate'" in text and "valid keys:" in text and "group_size" in text and "pvpo_inject_expert" in text
    with pytest.raises(ConfigError, match="did you mean 'group_size'"):
        PivotRLConfig.from_dict({"grop_size": 8})
    with pytest.raises(ConfigError, match=r"group_size = 1 is invalid: it must be >= 2"):
        PivotRLConfig(group_size=1)
    with pytest.raises(ConfigError, match="temperature == 1 and top_p == 1"):
        PivotRLConfig(old_logprobs="sampler", temperature=0.7)
    with pytest.raises(ConfigError, match="advantage = 'ppo' is invalid: it must be one of grpo, dr_grpo, pvpo"):
        PivotRLConfig(advantage="ppo")
    with pytest.raises(ConfigError, match=r"no tensor_parallel_size > 1: the in-process engine .* serve it"):
        PivotRLConfig(rollout_engine="vllm", vllm_engine={"tensor_parallel_size": 2})
    assert PivotRLConfig(vllm_engine={"tensor_parallel_size": 1, "max_model_len": 512}).vllm_engine["max_model_len"] == 512
    with pytest.raises(ConfigError, match=r"steps: expected int, got 'ten'"):
        PivotRLConfig.from_dict({"steps": "ten"})
    bad = tmp_path / "rl.json"
    bad.write_text('{"model": "m", "steps": 5,}')
    with pytest.raises(ConfigError, match=r"rl\.json:1: not valid JSON"):
        PivotRLConfig.from_file(bad)
    good = tmp_path / "rl.toml"
    good.write_text('model = "m"\nsteps = 5\nadvantage = "dr_grpo"\n')
    cfg = PivotRLConfig.from_file(good, overrides=["steps=7", "beta=0.01"])
    assert (cfg.steps, cfg.advantage, cfg.beta) == (7, "dr_grpo", 0.01)
    with pytest.raises(ConfigError, match=r"--set stepz=1: unknown key 'stepz' \(did you mean 'steps'\?\)"):
        PivotRLConfig.from_file(good, overrides=["stepz=1"])
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        PivotRLConfig.from_file(good, overrides=["steps"])


# ---------------------------------------------------------------------- schedule and pivot sampler


def test_lr_schedule_by_hand():
    def f(i, **kw):  # the factor of update i (transformers' warm-up: i / warmup, the first update at 0)
        opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
        return build_scheduler(opt, warmup_steps=2, total_steps=10, **kw).lr_lambdas[0](i)

    assert [f(0), f(1), f(2)] == pytest.approx([0.0, 0.5, 1.0])
    assert f(6) == pytest.approx(0.5)  # halfway through the 8 decay updates: 0.5 * (1 + cos(pi / 2))
    assert f(9) == pytest.approx(0.5 * (1 + math.cos(math.pi * 7 / 8)))
    assert f(6, min_lr_ratio=0.2) == pytest.approx(0.2 + 0.8 * 0.5)
    assert [f(1, schedule="constant"), f(7, schedule="constant")] == [0.5, 1.0]
    with pytest.raises(ValueError, match="'cosine' or 'constant'"):
        f(0, schedule="linear")
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    sched = build_scheduler(opt, warmup_steps=2, total_steps=10)
    seen = []
    for _ in range(4):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert seen == pytest.approx([0.0, 0.05, 0.1, 0.1 * 0.5 * (1 + math.cos(math.pi / 8))])
    again = build_scheduler(torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=0.1), warmup_steps=2,
                            total_steps=10)
    again.load_state_dict(sched.state_dict())  # what a resumed run does: the next rate is the uninterrupted one
    assert again.get_last_lr() == sched.get_last_lr() and again.last_epoch == 4


def test_pivot_sampler_epochs_resume_and_deactivation():
    ids = [f"p{i}" for i in range(5)]
    a = PivotSampler(ids, seed=3)
    first = a.draw(5)
    assert sorted(first) == ids  # an epoch is a permutation
    a.draw(2)
    state = a.state_dict()
    b = PivotSampler(ids, seed=3)
    b.load_state_dict(state)
    assert b.draw(7) == a.draw(7)  # crosses into epoch 2 identically
    assert PivotSampler(ids, seed=4).draw(5) != first
    assert b.deactivate(["p1", "p2", "nope"]) == ["p1", "p2"]
    assert not {"p1", "p2"} & set(b.draw(20))
    assert b.deactivate(["p0", "p3", "p4"]) == []  # never leaves the pool empty
    with pytest.raises(ValueError, match="same pivot file"):
        PivotSampler(ids[:4], seed=3).load_state_dict(state)


# ---------------------------------------------------------------------- sampling, log-probs, scoring


def test_sampling_returns_group_size_completions_with_token_ids_from_the_live_policy(toy):
    model, tok = load_policy(toy[0])
    model.train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    cfg = toy_config(toy, Path("unused"), max_new_tokens=24)
    agent = build_sampler(model, tok, cfg)
    assert agent.model is model  # the live weights, not a copy
    pivots = toy_pivots()[:3]
    groups = sample_groups(agent, pivots, group_size=5, seed=11)
    assert [len(g.completions) for g in groups] == [5, 5, 5]
    for g, p in zip(groups, pivots):
        assert g.pivot is p and g.prompt_ids == encode_prompt(tok, p, agent.prompt_config)
        for c in g.completions:
            assert c.token_ids and len(c.token_ids) <= 24
            assert tok.decode(c.token_ids, skip_special_tokens=True) == c.text
    again = sample_groups(agent, pivots, group_size=5, seed=11)
    assert [[c.token_ids for c in g.completions] for g in again] == [[c.token_ids for c in g.completions] for g in groups]
    assert model.training  # the agent restored train mode
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_logprobs_match_a_manual_unpadded_computation(toy):
    model, tok = load_policy(toy[0])
    prompts = [[5, 17, 40, 3], [8, 9], [30, 31, 32, 33, 34, 35]]
    completions = [[11, 12, 13], [14], [15, 16, 17, 18, 19]]
    batch = pack(prompts, completions, pad_id=tok.pad_token_id)
    logp, entropy = completion_logprobs(model, batch, with_entropy=True)
    assert logp.shape == (3, 5) and logp.requires_grad
    assert batch.completion_mask.tolist() == [[1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 1]]
    with torch.no_grad():
        for i, (p, c) in enumerate(zip(prompts, completions)):
            logits = model(input_ids=torch.tensor([p + c])).logits[0]
            dist = torch.log_softmax(logits[len(p) - 1 : len(p) + len(c) - 1].float(), dim=-1)
            manual = dist.gather(-1, torch.tensor(c)[:, None]).squeeze(-1)
            assert torch.allclose(logp[i, : len(c)], manual, atol=1e-5), (i, logp[i], manual)
            manual_entropy = -(dist.exp() * dist).sum(-1)
            assert torch.allclose(entropy[i, : len(c)], manual_entropy, atol=1e-5)
    hot = completion_logprobs(model, batch, temperature=2.0)[0]
    assert not torch.allclose(hot, logp)
    (logp * batch.completion_mask).sum().backward()
    assert model.model.embed_tokens.weight.grad is not None


def test_scoring_masks_verifier_errors_and_counts_them(toy):
    model, tok = load_policy(toy[0])
    agent = build_sampler(model, tok, toy_config(toy, Path("unused")))
    pivots = toy_pivots()[:2]
    groups = sample_groups(agent, pivots, group_size=4, seed=0)
    groups[0].completions[0] = Completion(text=action_target(call("ping")), action=groups[0].completions[0].action,
                                          token_ids=[1])
    # a judge at a closed port: every sample errors, none is scored
    down = score_groups(build_verifier(CLOSED_JUDGE), groups)
    assert [s.masked for s in down] == [4, 4] and not any(v for s in down for v in s.valid)
    assert all("127.0.0.1:1" in e for s in down for e in s.errors) and all(s.scored_rewards == [] for s in down)
    # tool_call accepts early, else the (down) judge decides: passes are scored, the rest is masked
    cascade = build_verifier({"name": "cascade", "stages": [{"role": "accept", "verifier": "tool_call"},
                                                            {"role": "decide", "verifier": CLOSED_JUDGE}]})
    mixed = score_groups(cascade, groups, strict_verifier=build_verifier("strict"))
    first = mixed[0]
    assert first.valid[0] and first.rewards[0] == 1.0 and first.strict[0] == 1.0
    for s in mixed:
        for ok, r, e in zip(s.valid, s.rewards, s.errors):
            assert (ok and r == 1.0 and e is None) or (not ok and r == 0.0 and e)
    adv = group_advantages(first.rewards, first.valid)
    assert all(a == 0 for a, ok in zip(adv.tolist(), first.valid) if not ok)


def test_training_with_a_down_verifier_masks_everything_and_never_updates(toy, tmp_path):
    cfg = toy_config(toy, tmp_path / "run", steps=1, verifier=CLOSED_JUDGE, strict_verifier=None)
    trainer = PivotRLTrainer(cfg)
    before = {k: v.clone() for k, v in trainer.policy.state_dict().items()}
    result = trainer.train()
    row = result.last_metrics
    assert row["masked"] == 32 and row["unscored_groups"] == 4 and row["reward_mean"] is None
    assert row["updated"] is False and row["loss"] is None and row["used_samples"] == 0
    assert all(torch.equal(before[k], v) for k, v in trainer.policy.state_dict().items())


# ---------------------------------------------------------------------- the loop


@pytest.mark.slow
def test_training_raises_the_mean_reward(toy, tmp_path):
    cfg = toy_config(toy, tmp_path / "run", steps=40, lr=3e-3, plots=True, save_every=0)
    result = train_pivotrl(cfg)
    rows = read_metrics(result.metrics_path)
    assert [r["step"] for r in rows] == list(range(1, 41))
    start = sum(r["reward_mean"] for r in rows[:5]) / 5
    end = sum(r["reward_mean"] for r in rows[-5:]) / 5
    assert start < 0.45 and end > start + 0.3, (start, end)
    for key in ("reward_std", "zero_var_frac", "masked", "clip_fraction", "entropy", "tokens_per_s", "loss", "lr",
                "grad_norm", "sample_s", "score_s", "update_s", "strict_reward_mean", "miss_rate"):
        assert key in rows[-1]
    assert rows[0]["kl"] is None  # beta = 0: no reference model
    # throughput: the update's tokens hold the prompts too, so they outnumber the sampled ones it trains on
    for r in rows:
        assert r["sample_tokens_per_s"] > 0
        if r["updated"]:
            assert r["train_tokens"] > r["used_samples"] and r["train_tokens_per_s"] > 0
        else:
            assert r["train_tokens"] == 0
    # the rollout engine's columns: hf samples on the live weights, so every update is there at once
    assert {r["rollout_engine"] for r in rows} == {"hf"} and {r["weight_sync_s"] for r in rows} == {0.0}
    updates = [0] + [sum(r["updated"] for r in rows[: i + 1]) for i in range(len(rows) - 1)]
    assert [r["policy_version"] for r in rows] == updates and rows[0]["logprob_mismatch"] is None
    assert rows[0]["lr"] == pytest.approx(3e-3) and rows[0]["entropy"] > 0 and rows[0]["clip_fraction"] == 0.0
    assert result.plot_path is not None and result.plot_path.stat().st_size > 1000
    assert (result.final_model_dir / "model.safetensors").exists()
    assert json.loads((result.final_model_dir / "pivotrl_config.json").read_text())["steps"] == 40


@pytest.mark.parametrize("agg", ["sample", "token"])
def test_gradient_accumulation_gives_the_full_batch_gradient(toy, tmp_path, agg):
    grads, losses = [], []
    for accum in (1, 3):  # 32 rows in 3 uneven micro-batches vs one batch: the same samples (same seed)
        trainer = PivotRLTrainer(toy_config(toy, tmp_path / str(accum), steps=1, beta=0.05, loss_agg=agg,
                                            grad_accum_steps=accum))
        losses.append(trainer.train().last_metrics["loss"])
        grads.append([p.grad.clone() for p in trainer.policy.parameters()])  # left by the (only) update
    assert losses[0] == pytest.approx(losses[1], rel=1e-5, abs=1e-8)
    for g1, g3 in zip(*grads):
        assert torch.allclose(g1, g3, rtol=1e-4, atol=1e-8)
    assert any(g.abs().max() > 1e-4 for g in grads[0])


def test_old_logprobs_recomputed_or_from_the_sampler_equal_the_policy_at_sampling_time(toy, tmp_path):
    for mode in ("recompute", "sampler"):
        row = train_pivotrl(toy_config(toy, tmp_path / mode, steps=1, old_logprobs=mode)).last_metrics
        # one update: pi_theta == pi_old, every ratio is 1 (the sampler's scores agree with the forward pass)
        assert row["ratio_mean"] == pytest.approx(1.0, abs=1e-4) and row["clip_fraction"] == 0.0


def test_zero_variance_groups_are_skipped_or_resampled(toy, tmp_path):
    model, _ = toy
    hopeless = write_pivots(tmp_path / "zeta.jsonl", toy_pivots(expert="zeta"))  # the model never calls zeta
    skip = PivotRLTrainer(toy_config(toy, tmp_path / "skip", steps=2, pivots=str(hopeless)))
    before = {k: v.clone() for k, v in skip.policy.state_dict().items()}
    rows = read_metrics(skip.train().metrics_path)
    assert [r["zero_var_frac"] for r in rows] == [1.0, 1.0] and [r["skipped_groups"] for r in rows] == [4, 4]
    assert not any(r["updated"] for r in rows)
    assert all(torch.equal(before[k], v) for k, v in skip.policy.state_dict().items())
    again = train_pivotrl(toy_config(toy, tmp_path / "again", steps=1, pivots=str(hopeless), zero_variance="resample",
                                     max_resample=2)).last_metrics
    assert again["resampled_groups"] == 8 and again["completion_len_mean"] > 0
    assert again["tokens_per_s"] > 0


def test_pvpo_injects_the_expert_into_all_zero_groups_and_drops_solved_pivots(toy, tmp_path):
    pivots = toy_pivots(expert="zeta", profile_mean=0.25)
    pivots[3].profile = Profile(k=4, rewards=[1.0] * 4, mean=1.0, var=0.0)  # solved: leaves the pool
    path = write_pivots(tmp_path / "zeta.jsonl", pivots)
    cfg = toy_config(toy, tmp_path / "pvpo", steps=2, pivots=str(path), pivots_per_step=3, advantage="pvpo",
                     pvpo_inject_expert=True, log_samples=True, pvpo_refresh_every=1)
    result = train_pivotrl(cfg)
    rows = read_metrics(result.metrics_path)
    assert [r["injected"] for r in rows] == [3, 3] and all(r["updated"] for r in rows)
    assert rows[0]["active_pivots"] == 3 and rows[0]["pvpo_refreshed"] == 3
    samples = [json.loads(line) for line in result.samples_path.read_text().splitlines()]
    assert {s["pivot_id"] for s in samples} == {"toy-0", "toy-1", "toy-2"}
    injected = [s for s in samples if s["injected"]]
    assert len(injected) == 6 and all(s["reward"] == 1.0 and "zeta" in s["text"] for s in injected)
    unprofiled = write_pivots(tmp_path / "raw.jsonl", toy_pivots())
    with pytest.raises(ConfigError, match="unprofiled.*pivot-envs profile"):
        PivotRLTrainer(toy_config(toy, tmp_path / "raw", pivots=str(unprofiled), advantage="pvpo"))


def test_pvpo_profiles_unprofiled_pivots_with_the_policy_when_asked(toy, tmp_path):
    cfg = toy_config(toy, tmp_path / "profile", steps=2, pivots_per_step=2, advantage="pvpo",
                     pvpo_refresh_source="profile", pvpo_refresh_every=2, zero_variance="keep")
    trainer = PivotRLTrainer(cfg)
    trainer.train()
    rows = read_metrics(trainer.metrics_path)
    assert [r["pvpo_refreshed"] for r in rows] == [0, 4]  # profiled at the start, then again at step 2
    assert set(trainer.values.values) == {p.id for p in toy_pivots()}
    assert all(0.0 <= v <= 1.0 for v in trainer.values.values.values())


def test_report_to_tensorboard_writes_events_or_names_the_missing_package(toy, tmp_path):
    cfg = toy_config(toy, tmp_path / "tb", steps=1, report_to=["tensorboard"])
    if importlib.util.find_spec("tensorboard") is None:
        with pytest.raises(ImportError, match="pip install tensorboard"):
            train_pivotrl(cfg)
        return
    train_pivotrl(cfg)
    assert list((tmp_path / "tb" / "tensorboard").glob("events.out.tfevents.*"))


def test_an_existing_run_is_not_overwritten_by_accident(toy, tmp_path):
    train_pivotrl(toy_config(toy, tmp_path / "run", steps=1))
    with pytest.raises(ConfigError, match="already holds a run.*resume_from='latest'"):
        PivotRLTrainer(toy_config(toy, tmp_path / "run", steps=1))
    with pytest.raises(FileNotFoundError, match="no complete checkpoint"):
        PivotRLTrainer(toy_config(toy, tmp_path / "run", steps=1, resume_from="latest"))


class Interrupt(Exception):
    pass


RESUME_CASES = {
    "grpo-kl-ppo-epochs": dict(beta=0.05, num_iterations=2, grad_accum_steps=2, warmup_steps=2, lr_schedule="cosine",
                               zero_variance="resample"),
    "pvpo-running-refresh": dict(advantage="pvpo", pvpo_refresh_every=2, pvpo_inject_expert=True, zero_variance="keep"),
    "lora-kl": dict(lora_r=4, lora_alpha=8, beta=0.1, lr=1e-2, gradient_checkpointing=True),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(RESUME_CASES))
def test_resume_after_an_interruption_is_exact(toy, tmp_path, case):
    if case.startswith("lora"):
        pytest.importorskip("peft")
    settings = dict(RESUME_CASES[case], steps=6, pivots_per_step=2, group_size=4, log_samples=True)
    if case.startswith("pvpo"):
        settings["pivots"] = str(write_pivots(tmp_path / "profiled.jsonl", toy_pivots(profile_mean=0.25)))
    straight = train_pivotrl(toy_config(toy, tmp_path / "straight", **settings))

    def stop_at_4(row):
        if row["step"] == 4:  # after the checkpoint of step 3 and one more step: that step is redone
            raise Interrupt

    with pytest.raises(Interrupt):
        train_pivotrl(toy_config(toy, tmp_path / "cut", save_every=3, **settings), on_step=stop_at_4)
    resumed = train_pivotrl(toy_config(toy, tmp_path / "cut", save_every=3, resume_from="latest", **settings))
    assert resumed.steps == 6
    a, b = weights(straight.final_model_dir), weights(resumed.final_model_dir)
    assert a.keys() == b.keys()
    assert not all(torch.equal(a[k], weights(toy[0])[k]) for k in a)  # it trained
    assert all(torch.allclose(a[k], b[k], rtol=0, atol=1e-7) for k in a), case
    assert comparable(read_metrics(straight.metrics_path)) == comparable(read_metrics(resumed.metrics_path))
    assert straight.samples_path.read_text() == resumed.samples_path.read_text()
    assert [p.name for p in resumed.checkpoints] == ["checkpoint-000003", "checkpoint-000006"]
    assert {f.name for f in resumed.checkpoints[-1].iterdir()} >= {"model", "trainer_state.pt", "rng_rank0.pt"}
