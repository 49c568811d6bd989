"""TRL adapter, checked with a real ``trl.GRPOTrainer`` (no mock of TRL):

* pivots: ``to_dataset`` + ``make_reward_func`` train a tiny offline model that was first taught
  the expert actions, so its samples pass and fail; the rewards TRL logs are the verifier's;
* episodes: ``environment_factory=episode_environment_factory(...)`` with ``episode_dataset`` and
  ``make_episode_reward_func``: TRL resets our envs with the rows' tasks, runs the model's tool
  calls in our world, and logs the task success our envs computed (re-judged by replaying);
* the real pretrained SmolLM2-135M-Instruct (slow) trains one step with the verifier reward.
"""

from __future__ import annotations

import inspect
import json
import math

import pytest

pytest.importorskip("torch")
pytest.importorskip("datasets")
trl = pytest.importorskip("trl")

from pivot_envs.actions import message_text  # noqa: E402
from pivot_envs.integrations.trl import (  # noqa: E402
    episode_dataset,
    episode_environment_factory,
    make_episode_reward_func,
    make_reward_func,
    to_dataset,
)
from pivot_envs.sources import resolve_pivots  # noqa: E402
from pivot_envs.types import Pivot  # noqa: E402


def _pivots() -> list[Pivot]:
    """Four short first-turn pivots of the bundled search domain."""
    return [p for p in resolve_pivots("bundled:search:train") if len(p.context) <= 2][:4]


def _config(tmp_path, **overrides):
    """A CPU GRPOConfig for tests: logs every step, saves nothing."""
    from trl import GRPOConfig

    kwargs = dict(
        output_dir=str(tmp_path / "out"), use_cpu=True, bf16=False, fp16=False, use_vllm=False,
        gradient_checkpointing=False, dataloader_num_workers=0, report_to="none", disable_tqdm=True,
        gradient_accumulation_steps=1, temperature=1.0, top_k=0, beta=0.0, lr_scheduler_type="constant",
        logging_steps=1, save_strategy="no", seed=0,
    )
    kwargs.update(overrides)
    return GRPOConfig(**kwargs)


def _train(trainer) -> None:
    """``trainer.train()`` on one CPU thread, without the printer callback."""
    import torch
    from transformers import PrinterCallback

    trainer.remove_callback(PrinterCallback)
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        trainer.train()
    finally:
        torch.set_num_threads(previous)


def _logged(trainer, key: str) -> list[dict]:
    return [row for row in trainer.state.log_history if key in row]


# --- pivots: to_dataset + make_reward_func ---------------------------------------------------------


def test_to_dataset_columns_round_trip():
    pivots = _pivots()
    ds = to_dataset(pivots)
    assert set(ds.column_names) == {"prompt", "tools", "pivot_id", "domain", "pivot"}
    row = ds[0]
    assert all(set(m) == {"role", "content"} for m in row["prompt"])
    assert "<tools>" in row["prompt"][0]["content"]  # GRPOTrainer has no per-row tools: they ride in the prompt
    assert json.loads(row["tools"]) == pivots[0].tools
    assert Pivot.from_dict(json.loads(row["pivot"])).to_dict() == pivots[0].to_dict()


def test_reward_is_the_verifiers_and_an_error_is_none(monkeypatch):
    from pivot_envs.verifiers.batch import VerifierResolver

    pivots = _pivots()
    ds = to_dataset(pivots)
    reward = make_reward_func()
    completions = [[{"role": "assistant", "content": message_text(p.expert)}] for p in pivots] + ["no idea"]
    rows = [ds[i] for i in range(len(pivots))] + [ds[0]]
    out = reward(prompts=[r["prompt"] for r in rows], completions=completions,
                 **{k: [r[k] for r in rows] for k in ("pivot", "pivot_id", "tools", "domain")})
    assert out == [1.0] * len(pivots) + [0.0]

    verifier = VerifierResolver().for_pivot(pivots[0])

    def boom(self, actions, pivots):
        raise RuntimeError("judge offline")

    monkeypatch.setattr(type(verifier), "verify_many", boom)
    out = reward(prompts=[rows[0]["prompt"]], completions=["x"], pivot=[rows[0]["pivot"]])
    assert out == [None] and "judge offline" in reward.calls[-1]["errors"][0]


@pytest.fixture(scope="module")
def taught_model(tmp_path_factory):
    """A tiny model taught the four pivots' expert actions (plain next-token training on prompt +
    expert text): sampled at temperature 1, some of its actions pass the verifier and some fail."""
    from pivot_envs.models.tiny import build_tiny_model, train_lm

    pivots = _pivots()
    ds = to_dataset(pivots)
    texts = [m["content"] for row in ds for m in row["prompt"]] + [message_text(p.expert) for p in pivots]
    texts.append("<|im_start|>user\n<|im_start|>assistant\n<|im_end|>")
    model = build_tiny_model(tmp_path_factory.mktemp("trl") / "model", texts, vocab_size=400, hidden_size=32,
                             n_layers=1, n_heads=2, max_positions=4096, seed=0)
    train_lm(model, [(row["prompt"], message_text(p.expert)) for row, p in zip(ds, pivots)], steps=180, lr=1e-2,
             batch_size=4, seed=0)
    return model


def test_grpo_trainer_trains_with_the_verifier_reward(taught_model, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOTrainer

    from pivot_envs.integrations._common import score

    pivots = _pivots()
    dataset = to_dataset(pivots)
    reward = make_reward_func()
    tokenizer = AutoTokenizer.from_pretrained(taught_model)
    model = AutoModelForCausalLM.from_pretrained(taught_model, dtype=torch.float32)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    steps, group = 3, 4
    config = _config(tmp_path, per_device_train_batch_size=group, generation_batch_size=group, num_generations=group,
                     max_steps=steps, max_completion_length=128, learning_rate=1e-3)
    trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=config, train_dataset=dataset,
                          processing_class=tokenizer)
    _train(trainer)

    assert len(reward.calls) == steps
    logged = _logged(trainer, "rewards/pivot_verifier/mean")
    assert len(logged) == steps
    by_id = {p.id: p for p in pivots}
    for call, row in zip(reward.calls, logged):
        # TRL's completions were conversational; the same completions re-scored by verify_batch
        assert all(isinstance(c, list) and c[0]["role"] == "assistant" for c in call["completions"])
        again = score([c[0]["content"] for c in call["completions"]], [by_id[i] for i in call["pivot_ids"]])
        assert call["rewards"] == [None if r.error else float(r.reward) for r in again]
        assert None not in call["rewards"] and len(set(call["pivot_ids"])) == 1  # one pivot, its 4 samples
        assert math.isclose(row["rewards/pivot_verifier/mean"], sum(call["rewards"]) / group, abs_tol=1e-6)
    rewards = [r for call in reward.calls for r in call["rewards"]]
    assert 1.0 in rewards and 0.0 in rewards  # the taught model passes some samples and fails others
    # a group with mixed rewards has non-zero advantages: the weights moved
    assert any(not torch.equal(before[k], v) for k, v in trainer.model.state_dict().items())


# --- episodes: environment_factory ---------------------------------------------------------------

EPISODE_TASKS = ("search-0-3", "search-0-10")
"""Two short search tasks: one search, then the answer (a country; the larger of two towns)."""


def _episode_tasks():
    from pivot_envs.episode_env import resolve_tasks

    by_id = {t.id: t for t in resolve_tasks(None, domain="search", split="train")}
    return [by_id[i] for i in EPISODE_TASKS]


def _tool_schema_matches(method, spec) -> None:
    """What TRL renders for an environment method (``get_json_schema``) is the world tool's spec."""
    from transformers.utils import get_json_schema

    got = get_json_schema(method)["function"]
    want = spec.get("function", spec)
    assert got["name"] == want["name"] and got["description"] == want["description"]
    gp, wp = got["parameters"], want["parameters"]
    assert set(gp.get("required", [])) == set(wp.get("required", []))
    assert set(gp["properties"]) == set(wp["properties"])
    for name, prop in wp["properties"].items():
        mine = gp["properties"][name]
        assert mine["type"] == prop["type"] and mine["description"].startswith(prop["description"])
        assert mine.get("enum") == prop.get("enum")
        if "default" in prop:
            assert f"Default: {json.dumps(prop['default'])}." in mine["description"]


def test_episode_environment_meets_trls_environment_contract():
    """The shape GRPOTrainer reads (trl 1.16 ``_generate_and_score_completions``): a zero-argument
    factory, ``reset(**row)``, public methods as tools, no ``get_reward`` (the answer never
    reaches the env), rows with ``prompt`` and ``task_id``."""
    tasks = _episode_tasks()
    factory = episode_environment_factory(tasks, domain="search")
    dataset = episode_dataset(tasks, domain="search")
    assert dataset.column_names == ["prompt", "task_id"] and dataset["task_id"] == list(EPISODE_TASKS)
    env = factory()
    public = sorted(n for n, _ in inspect.getmembers(type(env), predicate=inspect.isfunction) if not n.startswith("_"))
    assert public == ["open", "reset", "search"] and not hasattr(env, "get_reward")
    specs = {s["function"]["name"]: s for s in tasks[0].tools}
    for name in ("open", "search"):
        _tool_schema_matches(getattr(env, name), specs[name])

    row = dataset[1]
    assert env.reset(**row) is None  # None: TRL keeps the dataset's prompt
    assert env.env.task.id == "search-0-10"
    assert row["prompt"] == [{"role": m["role"], "content": m["content"]} for m in env.env.messages]
    assert "<tools>" not in row["prompt"][0]["content"]  # TRL renders the env's methods with the chat template
    result = env.search(query="Elmoby population")  # TRL calls f(**arguments)
    assert result == env.env.messages[-1]["content"] and env.env.messages[-1]["role"] == "tool"
    assert json.loads(result)[0]["title"] == "Elmoby"
    reward = make_episode_reward_func()
    final = [{"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {
        "name": "search", "arguments": {"query": "Elmoby population"}}}]},
             {"role": "tool", "name": "search", "content": result},
             {"role": "assistant", "content": "The answer is Berob Falls."}]
    assert reward(prompts=[row["prompt"]], completions=[final], environments=[env], task_id=[row["task_id"]]) == [1.0]
    assert env.env.done and reward.calls[-1]["episodes"][0]["tool_calls"] == 1
    with pytest.raises(RuntimeError, match="episode is over"):
        env.search(query="too late")
    with pytest.raises(ValueError, match="task_id or pivot_id"):
        env.reset(prompt=row["prompt"])


@pytest.fixture(scope="module")
def episode_model(tmp_path_factory):
    """A tiny model with a tool-calling chat template (TRL's Qwen2.5 template: TRL requires one that
    renders tool calls and parses them back), taught on the two episode tasks: from the start it
    calls the expert's search, answers right or answers wrong (one third each); after the search
    result it answers right. Sampled at temperature 1, episodes pass and fail, some through our world."""
    from transformers import AutoTokenizer
    from trl.chat_template_utils import qwen2_5_chat_template

    from pivot_envs.models.tiny import build_tiny_model, train_lm

    tasks = _episode_tasks()
    factory = episode_environment_factory(tasks, domain="search")
    dataset = episode_dataset(tasks, domain="search")
    env = factory()
    tools = [getattr(env, name) for name in sorted(factory.tool_names)]  # what TRL renders (getmembers order)
    texts = [m.get("content") or "" for t in tasks for m in t.messages]
    texts += [json.dumps(c["function"]) for t in tasks for m in t.messages for c in m.get("tool_calls") or []]
    texts += [json.dumps(s) for s in tasks[0].tools] + [qwen2_5_chat_template]
    model_dir = build_tiny_model(tmp_path_factory.mktemp("trl_episode") / "model", texts, vocab_size=1024,
                                 hidden_size=32, n_layers=1, n_heads=2, max_positions=4096, seed=0)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.chat_template = qwen2_5_chat_template
    tokenizer.save_pretrained(model_dir)

    def render(messages, **kw):
        return tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, **kw)

    examples = []
    for row, task, other in zip(dataset, tasks, reversed(tasks)):
        call = json.loads(json.dumps(task.messages[2]))  # the expert's search, arguments as a dict (as TRL parses)
        for c in call["tool_calls"]:
            c["function"]["arguments"] = json.loads(c["function"]["arguments"])
        prompt = render(row["prompt"], add_generation_prompt=True)
        call_text = render(row["prompt"] + [call])[len(prompt):].removesuffix("<|im_end|>\n")
        answer = f"The answer is {task.meta['answer']}."
        wrong = f"The answer is {other.meta['answer']}."
        result = {"role": "tool", "name": "search", "content": task.messages[3]["content"]}
        after = render(row["prompt"] + [call, result], add_generation_prompt=True)
        examples += [(prompt, call_text), (prompt, call_text), (prompt, answer), (prompt, wrong), (after, answer)]
    train_lm(model_dir, examples, steps=160, lr=1e-2, batch_size=4, seed=0)
    return model_dir


def test_grpo_trainer_plays_episodes_with_environment_factory(episode_model, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOTrainer

    from pivot_envs.episode_env import EpisodeEnv

    tasks = _episode_tasks()
    factory = episode_environment_factory(tasks, domain="search")
    dataset = episode_dataset(tasks, domain="search")
    reward = make_episode_reward_func()
    tokenizer = AutoTokenizer.from_pretrained(episode_model)
    model = AutoModelForCausalLM.from_pretrained(episode_model, dtype=torch.float32)
    steps, group = 2, 4
    config = _config(tmp_path, per_device_train_batch_size=2 * group, generation_batch_size=2 * group,
                     num_generations=group, max_steps=steps, max_completion_length=384, learning_rate=1e-3,
                     max_tool_calling_iterations=2)
    trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=config, train_dataset=dataset,
                          processing_class=tokenizer, environment_factory=factory)
    _train(trainer)

    assert len(reward.calls) == steps
    assert all(isinstance(e, factory) for e in trainer.environments) and len(trainer.environments) == 2 * group
    logged = _logged(trainer, "rewards/episode_success/mean")
    assert len(logged) == steps
    rows = {r["task_id"]: r for r in dataset}
    tool_calls = 0
    for call, log in zip(reward.calls, logged):
        n = len(call["completions"])
        assert n == 2 * group and sorted(set(call["task_ids"])) == sorted(EPISODE_TASKS)
        assert call["task_ids"] == call["row_task_ids"]  # each env was reset with its rollout's row
        calls_here = 0
        for prompt, completion, task_id, episode, r in zip(call["prompts"], call["completions"], call["task_ids"],
                                                          call["episodes"], call["rewards"]):
            assert prompt == rows[task_id]["prompt"] == episode["messages"][:2]  # the env started at the prompt
            # the tool calls TRL parsed ran in our world: same calls, and TRL's tool messages are its results
            trl_calls = [(c["function"]["name"], c["function"]["arguments"])
                         for m in completion if m["role"] == "assistant" for c in m.get("tool_calls") or []]
            trl_results = [m["content"] for m in completion if m["role"] == "tool"]
            ours = [m for m in episode["messages"][2:] if m["role"] == "assistant" and m.get("tool_calls")]
            assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for m in ours
                    for c in m["tool_calls"]] == trl_calls[: len(trl_results)]
            assert [m["content"] for m in episode["messages"][2:] if m["role"] == "tool"] == trl_results
            assert episode["tool_calls"] == len(trl_results)
            calls_here += episode["tool_calls"]
            # the episode's final answer is the completion's last assistant text
            final = [m for m in completion if m["role"] == "assistant"][-1]["content"]
            assert episode["messages"][-1] == {"role": "assistant", "content": final}
            # the reward is task success, re-judged by replaying the episode in a fresh env
            replay = EpisodeEnv(tasks, domain="search", user="none")
            replay.reset(options={"task_id": task_id})
            for message in episode["messages"][2:]:
                if message["role"] == "assistant":
                    replay.step(message)
            assert replay.done and [m["content"] for m in replay.messages if m["role"] == "tool"] == trl_results
            assert r == (1.0 if replay.success else 0.0) == (1.0 if episode["success"] else 0.0)
        tool_calls += calls_here
        assert math.isclose(log["rewards/episode_success/mean"], sum(call["rewards"]) / n, abs_tol=1e-6)
        assert math.isclose(log["tools/call_frequency"], calls_here / n, abs_tol=1e-6)
    rewards = [r for call in reward.calls for r in call["rewards"]]
    assert tool_calls > 0  # the model called tools, and they ran in our world
    assert 1.0 in rewards and 0.0 in rewards


# --- the real pretrained model -------------------------------------------------------------------


@pytest.mark.slow
def test_smollm2_trains_one_grpo_step_with_the_verifier_reward(smollm2_dir, tmp_path):
    """SmolLM2-135M-Instruct, one GRPO step on two short search pivots (two samples each): TRL
    logs the verifier's rewards, and the same completions re-scored give them again. The prompts are
    the pivots' plain messages (``prompt_mode="messages"``: the search system prompt names its tools
    in words): ~80 tokens instead of ~410 with the Hermes tools block, which keeps the CPU step short."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOTrainer

    from pivot_envs.integrations._common import score

    pivots = sorted(_pivots(), key=lambda p: len(message_text(p.expert)))[:2]
    dataset = to_dataset(pivots, prompt_mode="messages")
    reward = make_reward_func()
    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    model = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32)
    config = _config(tmp_path, per_device_train_batch_size=4, generation_batch_size=4, num_generations=2,
                     max_steps=1, max_completion_length=16, learning_rate=1e-6, shuffle_dataset=False)
    trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=config, train_dataset=dataset,
                          processing_class=tokenizer)
    _train(trainer)

    assert len(reward.calls) == 1
    call = reward.calls[0]
    assert all(isinstance(c, list) and c[0]["role"] == "assistant" for c in call["completions"])
    assert sorted(call["pivot_ids"]) == sorted([p.id for p in pivots for _ in range(2)])
    by_id = {p.id: p for p in pivots}
    again = score([c[0]["content"] for c in call["completions"]], [by_id[i] for i in call["pivot_ids"]])
    assert call["rewards"] == [None if r.error else float(r.reward) for r in again]
    scored = [r for r in call["rewards"] if r is not None]
    (logged,) = _logged(trainer, "rewards/pivot_verifier/mean")
    assert scored and math.isclose(logged["rewards/pivot_verifier/mean"], sum(scored) / len(scored), abs_tol=1e-6)
    assert logged["completions/max_length"] <= 16
