"""Agents: spec parsing, the model-free baselines, the local ``hf`` agent and the ``openai`` agent
against a real ``transformers serve`` on 127.0.0.1 (tiny reference model built offline)."""

from __future__ import annotations

import json
from functools import lru_cache

import pytest

from pivot_envs.actions import message_text
from pivot_envs.agents import Agent, AgentSpecError, Completion, agent_kinds, build_agent, parse_agent_spec, register_agent
from pivot_envs.env import PivotEnv
from pivot_envs.envs_data import generator
from pivot_envs.extract import extract_pivots
from pivot_envs.types import Pivot


@lru_cache(maxsize=8)
def _pivots(domain: str, episodes: int = 10) -> tuple[Pivot, ...]:
    pivots, _ = extract_pivots(generator(domain).generate(episodes, 0), domain)
    return tuple(pivots)


def pivots(domain: str, episodes: int = 10) -> list[Pivot]:
    return list(_pivots(domain, episodes))


def rewards(domain: str, pivot_list: list[Pivot], groups: list[list[Completion]]) -> list[list[float]]:
    env = PivotEnv(pivot_list, domain=domain)
    out = []
    for p, group in zip(pivot_list, groups):
        env.reset(options={"pivot_id": p.id})
        out.append([r for r, _ in env.step_many([c.action.message for c in group])])
    return out


# --- specs -------------------------------------------------------------------------------------


def test_spec_strings_parse_to_config_dicts():
    assert parse_agent_spec("hf:/models/tiny") == {"kind": "hf", "model": "/models/tiny"}
    assert parse_agent_spec("openai:Qwen/Qwen3-8B@http://a:8000/v1,https://b/v1") == {
        "kind": "openai", "model": "Qwen/Qwen3-8B", "base_urls": ["http://a:8000/v1", "https://b/v1"]}
    assert parse_agent_spec("openai:gpt-4o-mini") == {"kind": "openai", "model": "gpt-4o-mini"}
    assert parse_agent_spec("vllm:Qwen/Qwen3-8B") == {"kind": "vllm", "model": "Qwen/Qwen3-8B"}
    assert parse_agent_spec("replay") == {"kind": "replay"}
    assert parse_agent_spec("noisy_expert") == {"kind": "noisy_expert"}
    assert parse_agent_spec("noisy_expert:0.25") == {"kind": "noisy_expert", "p": 0.25}
    assert parse_agent_spec('{"kind": "noisy_expert", "p": 1}') == {"kind": "noisy_expert", "p": 1}
    assert set(agent_kinds()) >= {"hf", "openai", "vllm", "replay", "noisy_expert"}


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("hf", "hf needs a model"),
        ("hf:", "hf needs a model"),
        ("openai:m@ftp://host", "http(s)://"),
        ("openai:m@http://ok/v1,nope", "not an http(s):// base URL: 'nope'"),
        ("noisy_expert:1.5", "P must be in [0, 1]"),
        ("noisy_expert:half", "P must be a number"),
        ("replay:3", "replay takes no argument"),
        ("gpt4", "unknown agent kind 'gpt4'"),
        ("", "non-empty"),
        ("{not json", "invalid JSON"),
        ('{"kind": "replay", "temperature": 1}', "unexpected keyword argument 'temperature'"),
        ('{"model": "x"}', "missing 'kind'"),
    ],
)
def test_bad_specs_name_the_spec_and_list_the_valid_forms(spec, problem):
    with pytest.raises(AgentSpecError) as err:
        build_agent(spec)
    text = str(err.value)
    assert repr(spec) in text and problem in text
    for form in ("hf:MODEL_DIR", "openai:MODEL@BASE_URL", "vllm:MODEL", "replay", "noisy_expert[:P]"):
        assert form in text


def test_third_party_kinds_register_and_build_from_spec_and_config():
    @register_agent("constant_test")
    class Constant(Agent):
        kind = "constant_test"

        def __init__(self, text: str = "hi"):
            self.text = text

        def sample(self, pivot_list, n, *, seed=None):
            from pivot_envs.actions import parse_action

            return [[Completion(self.text, parse_action(self.text)) for _ in range(n)] for _ in pivot_list]

        def config(self):
            return {"kind": self.kind, "text": self.text}

    agent = build_agent("constant_test:hello")
    assert agent.sample(pivots("tool_use")[:2], 3)[1][2].text == "hello"
    assert build_agent(agent.config()).text == "hello"
    assert "constant_test" in agent_kinds()
    assert build_agent(agent) is agent


def test_vllm_spec_gives_a_clear_import_error_without_vllm():
    try:
        import vllm  # noqa: F401
    except ImportError:
        pass
    else:  # pragma: no cover - only where the extra is installed
        pytest.skip("vllm is installed here")
    with pytest.raises(ImportError, match=r'pip install "pivot-envs\[vllm\]"'):
        build_agent("vllm:some/model")


# --- baselines ---------------------------------------------------------------------------------


def test_replay_returns_the_expert_n_times_and_always_passes():
    pl = pivots("tool_use")[:12]
    groups = build_agent("replay").sample(pl, 3, seed=7)
    assert [len(g) for g in groups] == [3] * len(pl)
    for p, g in zip(pl, groups):
        assert all(c.text == message_text(p.expert) and c.token_ids is None for c in g)
    assert all(r == [1.0, 1.0, 1.0] for r in rewards("tool_use", pl, groups))
    groups[0][0].action.message["content"] = "mutated"  # completions never alias the pivot
    assert pl[0].expert.get("content") != "mutated"


@pytest.mark.parametrize("domain", ["tool_use", "swe"])
def test_noisy_expert_perturbs_with_probability_p(domain):
    pl = pivots(domain, 20)[:40]
    clean = build_agent("noisy_expert:0").sample(pl, 4, seed=0)
    noisy = build_agent("noisy_expert:1").sample(pl, 4, seed=0)
    alternatives = {p.id: [message_text(p.expert)] + [message_text(a) for a in p.meta.get("alternatives", [])] for p in pl}
    assert all(c.text in alternatives[p.id] for p, g in zip(pl, clean) for c in g)
    assert any(c.text != message_text(p.expert) for p, g in zip(pl, clean) for c in g)  # alternatives are drawn
    assert all(c.text not in alternatives[p.id] for p, g in zip(pl, noisy) for c in g)
    half = build_agent("noisy_expert:0.5").sample(pl, 8, seed=3)
    perturbed = sum(c.text not in alternatives[p.id] for p, g in zip(pl, half) for c in g) / (8 * len(pl))
    assert 0.4 < perturbed < 0.6
    mean_noisy = sum(map(sum, rewards(domain, pl, noisy))) / (4 * len(pl))
    assert mean_noisy < 0.8  # a perturbation mostly changes what the action does


def test_noisy_expert_is_deterministic_per_seed_pivot_and_index():
    pl = pivots("search")[:10]
    agent = build_agent("noisy_expert:0.5")
    full = agent.sample(pl, 6, seed=11)
    assert [[c.text for c in g] for g in full] == [[c.text for c in g] for g in agent.sample(pl, 6, seed=11)]
    # the same (seed, pivot, index) gives the same sample whatever the batch around it
    alone = agent.sample([pl[7]], 4, seed=11)[0]
    assert [c.text for c in alone] == [c.text for c in full[7][:4]]
    reversed_batch = agent.sample(pl[::-1], 6, seed=11)
    assert [[c.text for c in g] for g in reversed_batch[::-1]] == [[c.text for c in g] for g in full]
    other = agent.sample(pl, 6, seed=12)
    assert [[c.text for c in g] for g in other] != [[c.text for c in g] for g in full]
    assert build_agent(agent.config()).sample(pl, 6, seed=11)[3][5].text == full[3][5].text
    assert agent.sample(pl, 2)[0][0].text == agent.sample(pl, 2, seed=0)[0][0].text  # seed=None: the agent's seed


def test_baselines_reject_bad_n():
    with pytest.raises(ValueError, match="n \\(samples per pivot\\)"):
        build_agent("replay").sample(pivots("tool_use")[:1], 0)
