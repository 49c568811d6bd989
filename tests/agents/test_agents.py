"""Agents: spec parsing, the model-free baselines, the local ``hf`` agent and the ``openai`` agent
against a real ``transformers serve`` on 127.0.0.1 (tiny reference model built offline)."""

from __future__ import annotations

import json
from functools import lru_cache

import pytest

from pivot_envs.actions import message_text
from pivot_envs.agents import Agent, AgentSpecError, Completion, agent_kinds, build_agent, parse_agent_spec, register_agent
from pivot_envs.agents.hf import HFAgent  # torch is imported only when one is built
from pivot_envs.env import PivotEnv
from pivot_envs.envs_data import generator
from pivot_envs.pipeline.extract import extract_pivots
from pivot_envs.types import Pivot
from tests.servers import closed_port, control, start_fake_openai, stats


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


# --- prompting ---------------------------------------------------------------------------------


def _tokenizer(template: str | None):
    pytest.importorskip("transformers")
    from pivot_envs.models.tiny import train_tokenizer

    tok = train_tokenizer(["hello world <tool_call> search query"], vocab_size=300)
    tok.chat_template = template
    return tok


def _pivot_with_history() -> Pivot:
    return next(p for p in pivots("search") if any(m["role"] == "tool" for m in p.context) and p.tools)


def test_prompt_without_template_tool_support_declares_tools_and_renders_calls_as_hermes_text():
    from pivot_envs.agents.prompting import pivot_prompt
    from pivot_envs.models.tiny import CHAT_TEMPLATE  # ChatML without tools / tool_calls

    p = _pivot_with_history()
    text = pivot_prompt(_tokenizer(CHAT_TEMPLATE), p)
    assert text.startswith("<|im_start|>system\n") and "<tools>\n" + json.dumps(p.tools[0], ensure_ascii=False) in text
    first_call = next(m for m in p.context if m.get("tool_calls"))
    assert message_text(first_call) in text  # earlier actions as the model should emit them
    assert "<|im_start|>tool\n" in text and text.endswith("<|im_start|>assistant\n")


def test_prompt_falls_back_when_the_template_rejects_the_tool_role():
    from pivot_envs.agents.prompting import pivot_prompt

    strict = (
        "{% for m in messages %}{% if m['role'] not in ['system', 'user', 'assistant'] %}"
        "{{ raise_exception('unknown role ' + m['role']) }}{% endif %}"
        "{{ '[' + m['role'] + '] ' + (m['content'] or '') + '\n' }}{% endfor %}"
        "{% if add_generation_prompt %}[assistant] {% endif %}"
    )
    p = _pivot_with_history()
    text = pivot_prompt(_tokenizer(strict), p)
    assert "[user] <tool_response>\n" in text and "[tool]" not in text
    assert text.endswith("[assistant] ")


def test_prompt_without_any_template_is_chatml_and_truncates_from_the_left():
    from pivot_envs.agents.prompting import PromptConfig, encode_prompt, pivot_prompt

    tok = _tokenizer(None)
    p = _pivot_with_history()
    text = pivot_prompt(tok, p)
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>assistant\n")
    full = encode_prompt(tok, p)
    cut = encode_prompt(tok, p, PromptConfig(max_prompt_tokens=40, truncation="left"))
    assert len(full) > 40 and cut == full[-40:]
    with pytest.raises(ValueError, match="PromptConfig.tools"):
        PromptConfig(tools="everywhere")
    with pytest.raises(ValueError, match="PromptConfig.truncation"):
        PromptConfig(truncation="middle")


def test_keep_task_truncation_keeps_the_question_and_the_latest_turns():
    from pivot_envs.agents.prompting import PromptConfig, encode_prompt, task_prefix_length

    tok = _tokenizer(None)
    p = _pivot_with_history()
    cfg = {"tools": "none"}  # a short task: system prompt and question
    full = encode_prompt(tok, p, PromptConfig(**cfg))
    head = task_prefix_length(tok, p, PromptConfig(**cfg), full)
    question = next(m["content"] for m in p.context if m["role"] == "user")
    assert 0 < head < len(full) // 3 and question in tok.decode(full[:head])
    limit = head * 2 + 3
    cut = encode_prompt(tok, p, PromptConfig(max_prompt_tokens=limit, **cfg))
    assert len(cut) == limit and cut[:head] == full[:head] and cut[head:] == full[len(full) - (limit - head):]
    tight = encode_prompt(tok, p, PromptConfig(max_prompt_tokens=head + 1, **cfg))  # task > half the budget: left cut
    assert tight == full[-(head + 1):]


def test_reference_template_renders_tools_and_past_actions_exactly_as_the_targets():
    from pivot_envs.agents.prompting import chat_messages, pivot_prompt
    from pivot_envs.models.reference import REFERENCE_CHAT_TEMPLATE

    tok = _tokenizer(REFERENCE_CHAT_TEMPLATE)
    for domain in ("search", "swe", "tool_use"):
        for p in pivots(domain, 4):
            for m in p.context:
                if m["role"] == "assistant":
                    rendered = tok.apply_chat_template(chat_messages([m]), tokenize=False)
                    assert rendered == "<|im_start|>assistant\n" + message_text(m) + "<|im_end|>\n"
    p = _pivot_with_history()
    text = pivot_prompt(tok, p)
    assert "\nTools: search(query, top_k); open(doc_id)<|im_end|>" in text


# --- the hf agent on a real tiny reference model -------------------------------------------------

SAMPLE_TOKENS = 24


@pytest.fixture(scope="module")
def ref_model(tmp_path_factory):
    """A tiny swe reference policy, SFT-warmed briefly on 200 training pivots (seconds on CPU)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from pivot_envs.envs_data import load_pivots
    from pivot_envs.models.reference import build_reference_model

    train = load_pivots("swe", "train")[:200]
    return build_reference_model("swe", tmp_path_factory.mktemp("ref") / "swe", steps=30, lm_steps=0, pivots=train,
                                 max_context_tokens=192, lr=1e-2, seed=0)


@pytest.fixture(scope="module")
def swe_test_pivots():
    from pivot_envs.envs_data import load_pivots

    return load_pivots("swe", "test")[:6]


def hf_agent(model_dir, **kw):
    settings = {"max_new_tokens": SAMPLE_TOKENS, "num_threads": 1, **kw}
    return build_agent({"kind": "hf", "model": str(model_dir), **settings})


def texts(groups):
    return [[c.text for c in g] for g in groups]


def test_hf_agent_batches_samples_with_token_ids_and_logprobs(ref_model, swe_test_pivots):
    import torch

    agent = hf_agent(ref_model, batch_size=4)
    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)
    groups = agent.sample(swe_test_pivots, 3, seed=5)
    assert torch.equal(torch.rand(3), expected_next)  # sampling never touched the global RNG
    assert [len(g) for g in groups] == [3] * len(swe_test_pivots)
    tok = agent.tokenizer
    for c in (c for g in groups for c in g):
        assert 0 < len(c.token_ids) <= SAMPLE_TOKENS and len(c.logprobs) == len(c.token_ids)
        assert all(lp <= 0.0 for lp in c.logprobs)
        assert tok.decode(c.token_ids, skip_special_tokens=True) == c.text
        if len(c.token_ids) < SAMPLE_TOKENS:
            assert c.token_ids[-1] == tok.eos_token_id  # stopped at the end of its turn
    assert texts(groups) == texts(agent.sample(swe_test_pivots, 3, seed=5))
    assert texts(groups) != texts(agent.sample(swe_test_pivots, 3, seed=6))
    assert len({t for g in texts(groups) for t in g}) > len(swe_test_pivots)  # samples differ within groups
    rebuilt = build_agent(agent.config())
    assert rebuilt.config() == agent.config() and texts(rebuilt.sample(swe_test_pivots, 3, seed=5)) == texts(groups)


def test_hf_agent_logprobs_are_those_of_the_sampling_distribution(ref_model, swe_test_pivots):
    sampled = hf_agent(ref_model, batch_size=3, temperature=0.7).sample(swe_test_pivots[:3], 2, seed=1)
    forward = hf_agent(ref_model, batch_size=3, temperature=0.7, logprobs="forward").sample(swe_test_pivots[:3], 2, seed=1)
    for a, b in zip((c for g in sampled for c in g), (c for g in forward for c in g)):
        assert a.token_ids == b.token_ids
        assert a.logprobs == pytest.approx(b.logprobs, abs=2e-3)
    none = hf_agent(ref_model, logprobs="none").sample(swe_test_pivots[:1], 1, seed=1)
    assert none[0][0].logprobs is None and none[0][0].token_ids


def test_hf_agent_one_by_one_samples_do_not_depend_on_the_batch(ref_model, swe_test_pivots):
    agent = hf_agent(ref_model, one_by_one=True)
    both = agent.sample(swe_test_pivots[:2], 2, seed=3)
    alone = agent.sample(swe_test_pivots[1:2], 2, seed=3)
    assert texts(both)[1] == texts(alone)[0]
    greedy = hf_agent(ref_model, temperature=0).sample(swe_test_pivots[:2], 3)
    assert all(len(set(g)) == 1 for g in texts(greedy))  # greedy: the same sequence n times


def test_hf_agent_uses_a_live_model_without_copying_it(ref_model, swe_test_pivots):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(ref_model)
    model.train()
    agent = HFAgent(model, AutoTokenizer.from_pretrained(ref_model), temperature=0, max_new_tokens=8)
    assert agent.model is model
    before = texts(agent.sample(swe_test_pivots[:2], 1))
    assert model.training  # the caller's mode is restored
    with torch.no_grad():
        model.lm_head.weight.mul_(-1.0)  # (tied to the embeddings) the agent sees the live change
    assert texts(agent.sample(swe_test_pivots[:2], 1)) != before
    with pytest.raises(ValueError, match="tokenizer="):
        HFAgent(model)


def test_hf_agent_bad_model_folder_is_a_clear_error(tmp_path):
    with pytest.raises(OSError, match="cannot load a causal LM from"):
        build_agent(f"hf:{tmp_path / 'missing'}")


# --- the openai agent against real servers on 127.0.0.1 -------------------------------------------


HERMES_REPLY = '<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call>'


@pytest.fixture(scope="module")
def serve(ref_model, transformers_server):
    """The session's ``transformers serve`` (tests/conftest.py); requests name ``ref_model``."""
    return transformers_server


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    server = start_fake_openai(tmp_path_factory.mktemp("fake") / "fake.log")
    yield server
    server.stop()


def openai_agent(model, urls, **kw):
    settings = {"max_new_tokens": SAMPLE_TOKENS, "timeout_s": 60.0, "backoff_s": 0.05, **kw}
    return build_agent({"kind": "openai", "model": str(model), "base_urls": urls, **settings})


def test_openai_agent_on_transformers_serve_matches_the_local_model(ref_model, serve, swe_test_pivots):
    """transformers serve ignores n: the agent notices and asks one by one; greedy text equals the hf agent's."""
    short = swe_test_pivots[:3]
    agent = openai_agent(ref_model, [serve.base_url], temperature=0.0, tool_calls_as_text=True)
    groups = agent.sample(short, 2, seed=0)
    assert [len(g) for g in groups] == [2, 2, 2]
    assert agent.n_supported is False and agent.requests == 3 + 3 * 1  # one n-request per pivot, then the missing ones
    local = hf_agent(ref_model, temperature=0, batch_size=1, max_prompt_tokens=4096).sample(short, 1)
    assert [g[0].text for g in groups] == [g[0].text for g in local]
    assert all(c.logprobs is None and c.token_ids is None for g in groups for c in g)  # serve gives none
    again = agent.sample(short, 2, seed=0)  # now known: n separate requests straight away
    assert agent.requests == 6 + 6 and texts(again) == texts(groups)


def test_openai_agent_round_robins_and_parses_hermes_text(ref_model, serve, fake, swe_test_pivots):
    control(fake, reply=HERMES_REPLY)
    agent = openai_agent(ref_model, f"{serve.base_url},{fake.base_url}", use_n=False, max_concurrency=4)
    groups = agent.sample(swe_test_pivots[:4], 2, seed=0)
    assert stats(fake)["requests"] == 4  # every other of the 8 requests
    from_fake = [c for g in groups for c in g if c.text == HERMES_REPLY]
    assert len(from_fake) == 4
    assert all(c.action.tool_calls[0]["function"]["name"] == "submit" for c in from_fake)
    # the same server twice is a valid pool too
    twice = openai_agent(ref_model, [serve.base_url, serve.base_url], use_n=False).sample(swe_test_pivots[:2], 1)
    assert [len(g) for g in twice] == [1, 1]


def test_openai_agent_retries_failures_on_the_next_url(fake, serve, ref_model, swe_test_pivots):
    control(fake, status=503)
    agent = openai_agent(ref_model, [fake.base_url, serve.base_url], use_n=False, max_retries=1)
    groups = agent.sample(swe_test_pivots[:3], 1, seed=0)
    assert all(g[0].text != HERMES_REPLY for g in groups)  # every answer came from serve
    # round-robin: requests 1 and 3 start on the failing URL, where the client tries twice (max_retries=1)
    # before they fail over to serve; agent.requests counts every HTTP request, the client's retries included
    assert stats(fake)["requests"] == 2 * 2 and agent.requests == 2 * 2 + 3


def test_openai_agent_dead_url_gives_a_clear_error(swe_test_pivots):
    dead = f"http://127.0.0.1:{closed_port()}/v1"
    agent = openai_agent("tiny", dead, max_retries=1)
    with pytest.raises(RuntimeError, match=r"no answer from http://127\.0\.0\.1:\d+/v1 .* after 2 attempts .*APIConnectionError"):
        agent.sample(swe_test_pivots[:1], 1)


def test_openai_agent_limits_concurrency_and_times_out(fake, swe_test_pivots):
    control(fake, reply=HERMES_REPLY, gate=2, gate_timeout_s=2.0, delay_s=0.05)
    agent = openai_agent("tiny", fake.base_url, max_concurrency=2)
    groups = agent.sample(swe_test_pivots[:4], 2)  # 4 n-requests (1 choice each) + 4 singles
    assert all(c.text == HERMES_REPLY for g in groups for c in g)
    assert stats(fake)["max_in_flight"] == 2
    control(fake, hang=True)
    slow = openai_agent("tiny", fake.base_url, timeout_s=0.5, max_retries=0)
    with pytest.raises(RuntimeError, match="APITimeoutError"):
        slow.sample(swe_test_pivots[:1], 1)
    control(fake)


def test_openai_agent_4xx_fails_at_once_with_the_server_message(fake, swe_test_pivots):
    control(fake, status=400)
    agent = openai_agent("tiny", fake.base_url, max_retries=3)
    with pytest.raises(RuntimeError, match="rejected the request for model 'tiny'.*injected failure"):
        agent.sample(swe_test_pivots[:1], 1)
    assert stats(fake)["requests"] == 2  # with logprobs, then without: no retries of a 4xx
    control(fake)
