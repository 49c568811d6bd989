"""TRL adapter, checked with a real ``trl.GRPOTrainer`` (no mock of TRL):

* pivots: ``to_dataset`` + ``make_reward_func`` train a tiny offline model that was first taught
  the expert actions, so its samples pass and fail; the rewards TRL logs are the verifier's;
* episodes: ``environment_factory=episode_environment_factory(...)`` with ``episode_dataset`` and
  ``make_episode_reward_func``: TRL resets our envs with the rows' tasks, runs the model's tool
  calls in our world, and logs the task success our envs computed (re-judged by replaying);
* the real pretrained SmolLM2-135M-Instruct (slow) trains one step with the verifier reward.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import math
from pathlib import Path

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
    reward = make_reward_func(keep_calls=1)
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
    steps, group = 3, 4
    reward = make_reward_func(keep_calls=steps)
    tokenizer = AutoTokenizer.from_pretrained(taught_model)
    model = AutoModelForCausalLM.from_pretrained(taught_model, dtype=torch.float32)
    before = {k: v.clone() for k, v in model.state_dict().items()}
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
    from pivot_envs.episodes import resolve_tasks

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
    reward = make_episode_reward_func(keep_calls=1)
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

    from pivot_envs.episodes import EpisodeEnv

    tasks = _episode_tasks()
    factory = episode_environment_factory(tasks, domain="search")
    dataset = episode_dataset(tasks, domain="search")
    steps, group = 2, 4
    reward = make_episode_reward_func(keep_calls=steps)
    tokenizer = AutoTokenizer.from_pretrained(episode_model)
    model = AutoModelForCausalLM.from_pretrained(episode_model, dtype=torch.float32)
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
    reward = make_reward_func(keep_calls=1)
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


# --- kept calls: a bounded window -----------------------------------------------------------------


def test_kept_calls_are_a_bounded_window():
    """``calls`` keeps the latest ``keep_calls`` calls (none by default): however long the run, it never grows."""
    pivots = _pivots()
    row = to_dataset(pivots[:1])[0]
    default, window = make_reward_func(), make_reward_func(keep_calls=3)
    for i in range(40):
        completion = [{"role": "assistant", "content": f"guess {i}"}]
        for reward in (default, window):
            reward(prompts=[row["prompt"]], completions=[completion], pivot=[row["pivot"]])
    assert default.n_calls == window.n_calls == 40
    assert len(default.calls) == 0
    assert [c["completions"][0][0]["content"] for c in window.calls] == ["guess 37", "guess 38", "guess 39"]
    episodes = make_episode_reward_func()
    assert episodes.calls.maxlen == 0 and make_episode_reward_func(keep_calls=2).calls.maxlen == 2
    with pytest.raises(ValueError, match="number of latest calls"):
        make_reward_func(keep_calls=True)


def test_a_process_whose_every_reward_errored_fails_the_run(monkeypatch):
    """``check_scored`` (the examples call it after ``trainer.train()``): a reward that scored nothing (every
    sample a verifier error, ``None`` to TRL, which then trains on nothing) raises; a wrong answer scored 0 is a
    score, and a reward never called is no verdict."""
    from pivot_envs.integrations.trl import check_scored
    from pivot_envs.verifiers.batch import VerifierResolver

    pivots = _pivots()
    row = to_dataset(pivots[:1])[0]
    scored, failing, idle = make_reward_func(), make_reward_func(), make_reward_func()
    assert scored(prompts=[row["prompt"]], completions=["Done."], pivot=[row["pivot"]]) == [0.0]
    check_scored(scored)
    check_scored(idle)

    def boom(self, actions, pivots):
        raise RuntimeError("judge offline")

    monkeypatch.setattr(type(VerifierResolver().for_pivot(pivots[0])), "verify_many", boom)
    for _ in range(2):
        assert failing(prompts=[row["prompt"]], completions=["x"], pivot=[row["pivot"]]) == [None]
    assert (failing.n_scored, failing.n_unscored) == (0, 2)
    with pytest.raises(RuntimeError, match="none of the 2 samples of this process could be scored"):
        check_scored(failing)


# --- PivotRL's figures through TRL's log_metric ----------------------------------------------------


def test_strict_reward_miss_rate_and_hack_monitor_are_logged_per_sample():
    """One ``log_metric`` value per sample it counts in, so TRL's sum/count over processes is the figure:
    the strict verifier's mean, P[strict = 0 | pass], and the hack monitor's shares over accepted samples."""
    from collections import defaultdict

    from pivot_envs.actions import parse_action
    from pivot_envs.verifiers.base import build_verifier
    from pivot_envs.verifiers.batch import VerifierResolver, verify_batch
    from pivot_envs.verifiers.hack_monitor import hack_counts

    pivots = _pivots()
    ds = to_dataset(pivots)
    call = pivots[0].expert["tool_calls"][0]["function"]
    arguments = json.loads(call["arguments"])
    arguments["query"] = " ".join(reversed(arguments["query"].split()))  # the same words: it still retrieves
    spaced = "<tool_call>" + json.dumps({"name": call["name"], "arguments": arguments}) + "</tool_call>"
    twice = message_text(pivots[1].expert) + message_text(pivots[1].expert)
    texts = [message_text(p.expert) for p in pivots] + [spaced, twice, "no idea"]
    rows = [ds[i] for i in range(len(pivots))] + [ds[0], ds[1], ds[2]]
    logged = defaultdict(list)
    reward = make_reward_func(keep_calls=1)
    out = reward(prompts=[r["prompt"] for r in rows], completions=texts, pivot=[r["pivot"] for r in rows],
                 log_metric=lambda name, value: logged[name].append(value))

    by_row = [Pivot.from_dict(json.loads(r["pivot"])) for r in rows]
    actions = [parse_action(t) for t in texts]
    strict = verify_batch(actions, by_row, build_verifier("strict"))
    passed = [r == 1.0 for r in out]
    assert out[: len(pivots)] == [1.0] * len(pivots) and out[-1] == 0.0
    # the reordered query passes but is not the expert's string (a miss); the doubled call is refused
    assert out[-3:] == [1.0, 0.0, 0.0] and [s.reward for s in strict[-3:]] == [0.0, 0.0, 0.0]
    assert logged["pivot/strict_reward"] == [float(s.reward) for s in strict]
    assert logged["pivot/miss_rate"] == [float(s.reward == 0) for s, ok in zip(strict, passed) if ok]
    results = verify_batch(actions, by_row, VerifierResolver().for_pivot)
    figures = hack_counts(actions, by_row, results, [bool(s.passed) for s in strict]).metrics()
    assert figures["hack/accepted"] == len(logged["hack/more_calls"]) == sum(passed)
    assert sum(logged["pivot/miss_rate"]) == 1 and 0 < figures["accepted_by/exact"] < 1
    for name, share in figures.items():
        if name != "hack/accepted":
            assert math.isclose(sum(logged[name]) / len(logged[name]), share), name
    assert logged["pivot/accept_rate"] == [float(ok) for ok in passed]
    assert reward.calls[-1]["strict"] == [float(s.reward) for s in strict]


# --- launches that would train other than they say ----------------------------------------------------


def test_check_launch_refuses_lone_processes_and_a_dropped_fsdp(monkeypatch):
    """accelerate's silent fallbacks, as its Accelerator reports them (``num_processes``, ``distributed_type``): each
    process alone (FSDP config on a machine without GPUs, no ``use_cpu``), and FSDP or ZeRO-3 asked, DDP run."""
    from types import SimpleNamespace

    from accelerate.utils import DistributedType

    from pivot_envs.integrations.trl import check_launch

    def trainer(n, kind):
        return SimpleNamespace(accelerator=SimpleNamespace(num_processes=n, distributed_type=kind))

    monkeypatch.setenv("WORLD_SIZE", "2")
    check_launch(trainer(2, DistributedType.MULTI_CPU))
    with pytest.raises(RuntimeError, match="each trains alone"):
        check_launch(trainer(1, DistributedType.NO))
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    check_launch(trainer(2, DistributedType.FSDP))
    with pytest.raises(RuntimeError, match="asks for FSDP but the run is MULTI_CPU"):
        check_launch(trainer(2, DistributedType.MULTI_CPU))
    monkeypatch.delenv("ACCELERATE_USE_FSDP")
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    with pytest.raises(RuntimeError, match="asks for DEEPSPEED"):
        check_launch(trainer(2, DistributedType.MULTI_GPU))


# --- the prompt profiling rendered, for a tool-aware chat template ---------------------------------

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _example(name: str):
    """``examples/<name>.py`` as a module (the examples are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _short_pivots() -> list[Pivot]:
    """The two first-turn search pivots with the shortest expert actions (of the first eight): ~800-token prompts
    with the tools, which a tiny model learns to answer in 160 steps."""
    firsts = [p for p in resolve_pivots("bundled:search:train") if len(p.context) <= 2][:8]
    return sorted(firsts, key=lambda p: len(message_text(p.expert)))[:2]


@pytest.fixture(scope="module")
def tool_model(tmp_path_factory):
    """The pivot example's tiny model (Qwen2.5's tool-aware chat template, from TRL), taught two pivots' expert
    actions on the prompts ``to_dataset(tokenizer=)`` renders: sampled, some pass and some fail."""
    from pivot_envs.models.tiny import train_lm

    pivots = _short_pivots()
    model_dir = _example("trl_pivotrl").tiny_model(tmp_path_factory.mktemp("trl_tool") / "model", pivots)
    ds = to_dataset(pivots, tokenizer=str(model_dir))
    train_lm(model_dir, [(row["prompt"], message_text(p.expert)) for row, p in zip(ds, pivots)], steps=160,
             lr=1e-2, batch_size=4, seed=0)
    return model_dir


def test_trained_prompt_is_the_profiled_prompt_for_a_tool_template(tool_model, tmp_path):
    """``to_dataset(tokenizer=)`` writes the text the ``hf`` agent (profile's, and the bundled trainers' sampler)
    renders: the pivot's own tools through the template's ``tools=``, the model folder's recorded format; TRL
    tokenizes that plain-text prompt into the very ids the agent samples from. Checked with TRL's Qwen2.5 and
    Llama 3.1 templates (Llama 3.1 puts the tools in the first user message: there the Hermes-message rows are
    another prompt), a recorded format (tools left out), and a tokenizer that adds its BOS itself."""
    import shutil

    from transformers import AutoTokenizer
    from trl.chat_template_utils import llama3_1_chat_template

    from pivot_envs.agents.hf import HFAgent
    from pivot_envs.agents.prompt_format import write_prompt_format
    from pivot_envs.agents.prompting import encode_prompt, template_text
    from pivot_envs.integrations._common import prompt_messages

    pivots = _pivots() + [p for p in resolve_pivots("bundled:search:train") if len(p.context) > 2][:2]
    folders = {"qwen2.5": tool_model, "llama3.1": tmp_path / "llama", "recorded": tmp_path / "recorded",
               "bos": tmp_path / "bos"}
    for name in ("llama3.1", "recorded", "bos"):
        shutil.copytree(tool_model, folders[name])
    for name in ("llama3.1", "bos"):
        tokenizer = AutoTokenizer.from_pretrained(folders[name])
        tokenizer.chat_template = llama3_1_chat_template
        tokenizer.add_bos_token = name == "bos"
        tokenizer.save_pretrained(folders[name])
    write_prompt_format(folders["recorded"], tools="none", max_prompt_tokens=None)
    for name, folder in folders.items():
        tokenizer = AutoTokenizer.from_pretrained(folder)
        assert "tools" in template_text(tokenizer) and "tool_calls" in template_text(tokenizer)
        agent = HFAgent(str(folder), device="cpu")
        ds = to_dataset(pivots, tokenizer=str(folder))
        for row, pivot in zip(ds, pivots):
            profiled = encode_prompt(agent.tokenizer, pivot, agent.prompt_config)
            assert tokenizer(row["prompt"])["input_ids"] == profiled, name  # TRL trains what profile sampled
            text = agent.tokenizer.decode(profiled)
            assert row["prompt"] == (text.removeprefix(tokenizer.bos_token) if name == "bos" else text), name
            assert (pivot.tools[0]["function"]["description"] in row["prompt"]) is (name != "recorded"), name
            hermes = tokenizer.apply_chat_template(prompt_messages(pivot, "hermes"), add_generation_prompt=True,
                                                   tokenize=False)
            assert (hermes == text) is (name == "qwen2.5"), name  # Hermes is Qwen's format, not Llama 3.1's
    assert AutoTokenizer.from_pretrained(folders["bos"])("x")["input_ids"][0] == tokenizer.bos_token_id


# --- two processes: torchrun on gloo, the examples' trainers ----------------------------------------

WORKER = """
import importlib.util, json, sys
import torch

example, out = sys.argv[1], sys.argv[2]
spec = importlib.util.spec_from_file_location("example", example)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
trainer, reward = module.build_trainer(module.parse_args(sys.argv[3:]))
from transformers import PrinterCallback
trainer.remove_callback(PrinterCallback)
tokenized = []
tokenize = trainer._tokenize_prompts
def record(prompts):  # TRL's own tokenization of the prompts, kept to compare with profiling's
    result = tokenize(prompts)
    tokenized.append([[int(t) for t in ids] for ids in result[0]])
    return result
trainer._tokenize_prompts = record
trainer.train()
rank = trainer.accelerator.process_index
model = trainer.accelerator.unwrap_model(trainer.model)
torch.save({k: v.detach().cpu().clone() for k, v in model.state_dict().items()}, f"{out}/weights{rank}.pt")
with open(f"{out}/rank{rank}.json", "w") as f:
    json.dump({"rank": rank, "world": trainer.accelerator.num_processes, "n_calls": reward.n_calls,
               "calls": [{k: c[k] for k in ("pivot_ids", "task_ids", "rewards", "strict") if k in c}
                         for c in reward.calls],
               "tokenized": tokenized, "log": trainer.state.log_history}, f)
"""


def _torchrun(tmp_path, example: str, *args: str) -> list[dict]:
    """Run ``examples/<example>.py``'s trainer on 2 processes (torchrun, gloo); the per-rank facts it wrote."""
    import os
    import subprocess
    import sys

    from tests.trainers.test_trainer_ddp import free_port

    out = tmp_path / "facts"
    out.mkdir()
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2",
           "--master_addr", "127.0.0.1", "--master_port", str(free_port()), str(script),
           str(EXAMPLES / f"{example}.py"), str(out), "--cpu", "--output-dir", str(tmp_path / "run"), *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]


def _same_moved_weights(tmp_path, model_dir) -> None:
    """Both ranks ended with the same weights, and they are not the initial ones."""
    import torch
    from safetensors.torch import load_file

    w0, w1 = (torch.load(tmp_path / "facts" / f"weights{r}.pt", weights_only=True) for r in (0, 1))
    assert w0.keys() == w1.keys() and all(torch.equal(w0[k], w1[k]) for k in w0)
    initial = load_file(str(model_dir / "model.safetensors"))
    assert any(not torch.equal(w0[k], initial[k]) for k in initial if k in w0)


def _check_batches(ranks: list[dict], key: str, group: int, per_rank: int) -> list[list[float]]:
    """What TRL's RepeatSampler does: each step's global batch is its prompts, each repeated ``group`` times in a
    row, and rank r scores rows [r * per_rank, (r + 1) * per_rank), its own completions (each scored once): every id
    is scored ``group`` times in all. Returns each step's gathered rewards."""
    steps = ranks[0]["n_calls"]
    assert [r["n_calls"] for r in ranks] == [steps, steps] and all(len(r["calls"]) == steps for r in ranks)
    gathered = []
    for step in range(steps):
        ids = [r["calls"][step][key] for r in ranks]
        assert [len(x) for x in ids] == [per_rank, per_rank]
        everything = ids[0] + ids[1]
        distinct = list(dict.fromkeys(everything))
        assert everything == [i for i in distinct for _ in range(group)]
        gathered.append([x for r in ranks for x in r["calls"][step]["rewards"]])
    return gathered


def _logged_means(log: list[dict], key: str) -> list[float]:
    return [row[key] for row in log if key in row]


@pytest.mark.slow
@pytest.mark.multiprocess
def test_two_processes_train_pivots(tool_model, tmp_path):
    """``examples/trl_pivotrl.py`` under ``torchrun --nproc_per_node 2`` (gloo): TRL spreads a pivot's G = 4
    samples over both ranks (2 each), every rank scores its own, TRL's logged reward mean and PivotRL's strict
    reward are the means over both ranks' samples, the prompts TRL tokenized are profiling's, and both ranks end
    with the same moved weights."""
    from pivot_envs.agents.hf import HFAgent
    from pivot_envs.agents.prompting import encode_prompt

    group, per_rank = 4, 2
    pivots = _short_pivots()
    source = tmp_path / "pivots.jsonl"
    source.write_text("".join(json.dumps(p.to_dict()) + "\n" for p in pivots))
    ranks = _torchrun(tmp_path, "trl_pivotrl", "--model", str(tool_model), "--pivots", str(source), "--keep-calls",
                      "2", "--num-generations", str(group), "--per-device-batch", str(per_rank), "--max-steps", "2",
                      "--learning-rate", "1e-3", "--max-completion-length", "64")
    assert [(r["rank"], r["world"]) for r in ranks] == [(0, 2), (1, 2)]
    gathered = _check_batches(ranks, "pivot_ids", group, per_rank)
    assert all(len(set(r["calls"][s]["pivot_ids"])) == 1 for r in ranks for s in range(2))  # one group a step
    logged = _logged_means(ranks[0]["log"], "rewards/pivot_verifier/mean")
    assert len(logged) == 2 and None not in [x for g in gathered for x in g]
    for mean, rewards in zip(logged, gathered):
        assert math.isclose(mean, sum(rewards) / len(rewards), abs_tol=1e-6)
    strict = [[x for r in ranks for x in r["calls"][s]["strict"]] for s in range(2)]
    for mean, values in zip(_logged_means(ranks[0]["log"], "pivot/strict_reward"), strict):
        assert math.isclose(mean, sum(values) / len(values), abs_tol=1e-6)
    rewards = [x for g in gathered for x in g]
    assert 1.0 in rewards and 0.0 in rewards  # a taught model: some samples pass, some fail (the weights move)
    agent = HFAgent(str(tool_model), device="cpu")
    by_id = {p.id: p for p in pivots}
    for r in ranks:
        for step, ids in enumerate(r["tokenized"]):
            pivot = by_id[r["calls"][step]["pivot_ids"][0]]
            assert ids == [encode_prompt(agent.tokenizer, pivot, agent.prompt_config)] * per_rank
    _same_moved_weights(tmp_path, tool_model)


@pytest.mark.slow
@pytest.mark.multiprocess
def test_two_processes_play_episodes(episode_model, tmp_path):
    """``examples/trl_episodes.py`` under ``torchrun --nproc_per_node 2`` (gloo), ``environment_factory``: with 4
    rollouts a rank and G = 4, each rank plays its own task's group (no task on both ranks), TRL's logged task
    success is the mean over both ranks' rollouts, and both ranks end with the same moved weights."""
    group, per_rank = 4, 4
    ranks = _torchrun(tmp_path, "trl_episodes", "--model", str(episode_model), "--keep-calls", "2",
                      "--num-generations", str(group), "--per-device-batch", str(per_rank), "--max-steps", "2",
                      "--learning-rate", "1e-3")
    assert [(r["rank"], r["world"]) for r in ranks] == [(0, 2), (1, 2)]
    gathered = _check_batches(ranks, "task_ids", group, per_rank)
    for step in range(2):
        assert not set(ranks[0]["calls"][step]["task_ids"]) & set(ranks[1]["calls"][step]["task_ids"])
    logged = _logged_means(ranks[0]["log"], "rewards/episode_success/mean")
    assert len(logged) == 2
    for mean, rewards in zip(logged, gathered):
        assert None not in rewards and math.isclose(mean, sum(rewards) / len(rewards), abs_tol=1e-6)
    rewards = [x for g in gathered for x in g]
    assert 1.0 in rewards and 0.0 in rewards
    _same_moved_weights(tmp_path, episode_model)
