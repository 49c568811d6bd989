"""Episodes: whole tasks played in their world (EpisodeEnv), user simulators, task success, ``play``, ``eval --episodes``.

Real parts throughout: the bundled test tasks of every domain whose world exists (sandboxes for
terminal and SWE), a real HTTP server for the LLM user (``transformers serve`` with a tiny model
trained to end the conversation; the controllable fake server for the error paths), the CLI
in-process, and a tiny model for ``eval --episodes``.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env
from typer.testing import CliRunner

import pivot_envs  # noqa: F401  (registers the env ids)
from pivot_envs.agents import build_agent
from pivot_envs.domains import Domain, register_domain
from pivot_envs.envs_data import load_trajectories
from pivot_envs.episodes import EpisodeEnv, ExpertOutcomes, SuccessPolicy, episode_starts, run_episodes, summarize_rows
from pivot_envs.facts import calls_made, expert_facts, facts_given, typed_values
from pivot_envs.success import answer_correct
from pivot_envs.users import LLMUser, ScriptedUser, build_user, parse_user_spec
from pivot_envs.worlds import World, WorldError

from tests.servers import closed_port, control, start_fake_openai, start_transformers_serve, transformers_serve_missing

DOMAINS = {"tool_use": "ToolUse", "terminal": "Terminal", "swe": "SWE", "search": "Search"}
REFUSAL = "Sorry, I cannot help with that."
_ENVS: dict[str, EpisodeEnv] = {}


def episode_env(domain: str, **kwargs) -> EpisodeEnv:
    """The bundled test tasks of ``domain`` in its world; skips when the world (or its sandbox) is missing."""
    from pivot_envs.worlds import world_class

    try:
        world_class(domain)
    except ImportError as exc:
        pytest.skip(f"the {domain} world is not available yet: {exc}")
    env = gymnasium.make(f"pivot_envs:pivot/{DOMAINS[domain]}-Episode-v0", split="test", **kwargs).unwrapped
    _, info = env.reset(options={"index": 0})
    if info["error"] and "andbox" in info["error"]:
        pytest.skip(f"no sandbox for the {domain} world here: {info['error']}")
    return env


def play(domain: str, agent, **kwargs) -> list[dict]:
    envs = [episode_env(domain, **kwargs)]
    starts = episode_starts(envs[0])

    def make_env() -> EpisodeEnv:
        return envs.pop() if envs else episode_env(domain, **kwargs)

    return run_episodes(make_env, starts, agent, batch_size=16, workers=2)


# --------------------------------------------------------------------------- controls on every domain


@pytest.mark.parametrize("domain", list(DOMAINS))
def test_replaying_the_expert_succeeds_and_a_refusal_fails(domain):
    rows = play(domain, "replay")
    tasks = [t for t in load_trajectories(domain, "test") if t.reward is None or t.reward >= 1.0]
    assert len(rows) == len(tasks) > 40
    summary = summarize_rows(rows)["overall"]
    assert summary["errors"] == 0, [r["error"] for r in rows if r["error"]][:3]
    assert summary["success"] >= 0.99, [(r["id"], r["reason"]) for r in rows if not r["success"]][:5]
    assert summary["truncated"] == 0 and summary["tool_calls_mean"] > 1
    # a refusal right after the first user message (and at every turn after it) must not pass
    refusals = play(domain, f"constant:{REFUSAL}")
    refused = summarize_rows(refusals)["overall"]
    assert refused["errors"] == 0 and refused["success"] <= 0.05, [(r["id"], r["reason"]) for r in refusals if r["success"]]
    assert all(r["messages"][len(_start(r)) ]["content"] == REFUSAL for r in refusals)


def _start(row: dict) -> list:
    """The messages of a row up to and including the first user message."""
    first = next(i for i, m in enumerate(row["messages"]) if m["role"] == "user")
    return row["messages"][: first + 1]


@pytest.mark.parametrize("domain", list(DOMAINS))
def test_check_env_passes(domain):
    env = episode_env(domain)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the checker's warnings are failures here
        check_env(env, skip_render_check=True)
    obs, info = env.reset(seed=0)
    assert env.observation_space.contains(obs) and json.loads(obs["tools"])
    messages = json.loads(obs["messages"])
    assert messages[-1]["role"] == "user" and sum(m["role"] == "user" for m in messages) == 1
    assert info["expert"]["role"] == "assistant" and info["error"] is None


# --------------------------------------------------------------------------- the env


def test_an_episode_step_by_step_executes_calls_and_asks_the_scripted_user():
    env = episode_env("tool_use")
    task = next(t for t in env.tasks if t.meta["task"] == "cancel_order")
    obs, info = env.reset(options={"task_id": task.id})
    assert json.loads(obs["messages"]) == task.messages[: len(json.loads(obs["messages"]))]
    rewards, steps = [], 0
    while True:
        obs, reward, terminated, truncated, info = env.step(info["expert"])
        rewards.append(reward)
        steps += 1
        if terminated or truncated:
            break
    assert (terminated, truncated, info["success"], info["error"]) == (True, False, True, None)
    assert rewards == [0.0] * (steps - 1) + [1.0]
    # the episode is the recorded conversation: same calls, same tool results, same user turns
    assert json.loads(obs["messages"]) == task.messages
    assert info["turns"] == sum(m["role"] == "assistant" for m in task.messages) == steps
    assert info["tool_calls"] == sum(m["role"] == "tool" for m in task.messages)
    assert info["digest"] == env.outcome.expert_digest != env.outcome.start_digest
    with pytest.raises(RuntimeError, match="episode is over"):
        env.step("hello")
    # a message dict and Hermes text are actions too; a tool error is the agent's, not an error
    env.reset(options={"task_id": task.id})
    _, _, terminated, _, info = env.step('<tool_call>{"name": "get_order", "arguments": {"order_id": "NOPE"}}</tool_call>')
    assert not terminated and info["tool_errors"] == 1 and info["error"] is None
    _, _, _, _, info = env.step({"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "launch_rocket", "arguments": "{}"}}]})
    assert info["tool_errors"] == 2 and "unknown tool 'launch_rocket'" in env.messages[-1]["content"]


def test_truncation_at_max_turns():
    env = episode_env("tool_use", max_turns=3)
    env.reset(options={"index": 0})
    call = '{"name": "get_order", "arguments": {"order_id": "CL-1"}}'
    for _ in range(2):
        _, reward, terminated, truncated, info = env.step(call)
        assert (reward, terminated, truncated) == (0.0, False, False)
    _, reward, terminated, truncated, info = env.step(call)
    assert (reward, terminated, truncated) == (0.0, False, True)
    assert info["success"] is False and "truncated" in info["reason"] and info["turns"] == 3


def test_reset_at_a_pivot_replays_the_context_and_the_user_goes_on_from_there():
    from pivot_envs.sources import resolve_pivots

    env = episode_env("tool_use")
    bundled = {p.id: p for p in resolve_pivots("bundled:tool_use:test")}
    ids = env.pivot_ids()
    assert set(ids) == set(bundled)  # the same pivots as pivot/ToolUse-v0, by id
    pivot = next(bundled[i] for i in ids if bundled[i].meta["kind"] == "text"
                 and sum(m["role"] == "user" for m in bundled[i].context) >= 2
                 and sum(m["role"] == "tool" for m in bundled[i].context) >= 1)
    obs, info = env.reset(options={"pivot_id": pivot.id})
    assert json.loads(obs["messages"]) == pivot.context and info["expert"] == pivot.expert
    assert info["pivot_id"] == pivot.id and env.episode_id == pivot.id
    task = next(t for t in env.tasks if t.id == pivot.meta["trajectory_id"])
    while True:
        _, _, terminated, truncated, info = env.step(env.recorded_action())
        if terminated or truncated:
            break
    assert info["success"] and env.messages == task.messages  # the user said only what came after the pivot
    with pytest.raises(KeyError, match="pivot_id 'nope'"):
        env.reset(options={"pivot_id": "nope"})
    with pytest.raises(KeyError, match="task_id 'nope'"):
        env.reset(options={"task_id": "nope"})


class BrokenWorld(World):
    """The tool_use world whose calls fail as infrastructure (the sandbox or server died)."""

    name = "broken"

    def __init__(self, fail_at: str = "call"):
        from pivot_envs.worlds import build_world

        self.inner = build_world("tool_use")
        self.fail_at = fail_at

    def tools(self):
        return self.inner.tools()

    def start(self, task):
        if self.fail_at == "start":
            raise WorldError("the sandbox is gone")
        self.inner.start(task)

    def call(self, name, arguments):
        if self.fail_at == "call":
            raise WorldError("the sandbox is gone")
        return self.inner.call(name, arguments)

    def digest(self):
        return self.inner.digest()


@pytest.mark.parametrize("fail_at", ["start", "call"])
def test_a_world_failure_ends_the_episode_with_an_error_not_a_zero(fail_at):
    # (the answer rule needs no replay of the expert at reset, so a failing call shows at the first step)
    env = EpisodeEnv(tasks="bundled:tool_use:test", world=lambda: BrokenWorld(fail_at),
                     success_rules=["answer"] if fail_at == "call" else None)
    _, info = env.reset(options={"index": 0})
    assert (info["error"] is not None) == (fail_at == "start")
    _, reward, terminated, truncated, info = env.step('{"name": "get_order", "arguments": {"order_id": "CL-1"}}')
    assert (reward, terminated, truncated) == (0.0, True, False)
    assert "WorldError: the sandbox is gone" in info["error"] and info["success"] is None
    row = env.episode_row()
    assert row["error"] == info["error"] and row["success"] is None and row["reward"] is None
    assert summarize_rows([row])["overall"]["errors"] == 1


def test_generic_episode_env_takes_a_world_and_a_task_file(tmp_path):
    from pivot_envs.formats import write_trajectories

    path = tmp_path / "tasks.jsonl"
    trajs = load_trajectories("tool_use", "test")[:6]
    write_trajectories(trajs, path)
    env = gymnasium.make("pivot_envs:pivot/Episode-v0", world="tool_use", tasks=str(path)).unwrapped
    assert env.domain_name == "tool_use" and len(env.tasks) == sum(t.reward == 1.0 for t in trajs)
    no_domain = EpisodeEnv(tasks=[t.to_dict() for t in trajs], world={"name": "tool_use"})
    assert no_domain.domain_name == "" and no_domain.success_policy.rules == ("state", "facts")
    rows = run_episodes(lambda: EpisodeEnv(tasks=trajs, world={"name": "tool_use"}), episode_starts(no_domain), "replay")
    assert all(r["success"] for r in rows)
    with pytest.raises(ValueError, match=r"no tasks \(1 trajectories given\)"):
        EpisodeEnv(tasks=[t for t in trajs if t.reward == 0.0][:1], world="tool_use")
    with pytest.raises(ValueError, match="episodes need a world"):
        EpisodeEnv(tasks=str(path))
    with pytest.raises(ValueError, match="unknown world 'tool_us'"):
        EpisodeEnv(tasks=str(path), world="tool_us")
    with pytest.raises(FileNotFoundError, match="no such task file"):
        EpisodeEnv(tasks=str(tmp_path / "none.jsonl"), world="tool_use")


def test_episode_env_ids_are_registered_for_domains_with_a_world():
    for name in DOMAINS.values():
        assert f"pivot/{name}-Episode-v0" in gymnasium.registry
    assert "pivot/Episode-v0" in gymnasium.registry
    from pivot_envs import domains

    try:
        plain = register_domain(Domain(name="recipes_ep", env_id="pivot/RecipesEp-v0"), replace=True)
        assert plain.episode_env_id == "pivot/RecipesEp-Episode-v0" and plain.episode_env_id not in gymnasium.registry
        worldly = register_domain(Domain(name="shop_ep", env_id="pivot/ShopEp-v0", world="tool_use",
                                         world_keys=("world_seed",)), replace=True)
        assert gymnasium.registry[worldly.episode_env_id].kwargs == {"domain": "shop_ep"}
        with pytest.raises(ValueError, match="ships no bundled tasks; give a trajectory file"):
            gymnasium.make("pivot/ShopEp-Episode-v0")
        env = gymnasium.make("pivot/ShopEp-Episode-v0", tasks="bundled:tool_use:test").unwrapped
        assert env.domain_name == "shop_ep" and env.world.name == "tool_use" and len(env.tasks) > 40
    finally:  # leave the registry as other test modules expect it
        for name in ("recipes_ep", "shop_ep"):
            domains._DOMAINS.pop(name, None)
        for env_id in ("pivot/RecipesEp-v0", "pivot/ShopEp-v0", "pivot/ShopEp-Episode-v0"):
            gymnasium.registry.pop(env_id, None)


# --------------------------------------------------------------------------- the sub-package's parts


def test_the_expert_outcome_cache_is_bounded_and_drops_the_least_recently_used():
    env = EpisodeEnv(domain="tool_use", split="test", score_turns=False)
    env.expert_outcomes = cache = ExpertOutcomes(max_entries=2)
    for index in (0, 1, 0, 2, 1):  # 0 and 1 cached; 0 used again; 2 drops 1; 1 drops 0
        env.reset(options={"index": index})
    assert (len(cache), cache.hits, cache.misses) == (2, 1, 4)
    env.reset(options={"index": 2})
    assert cache.hits == 2
    env.reset(options={"index": 0})  # dropped: replayed again, and the episode is judged as before
    while not env.done:
        env.step(env.recorded_action())
    assert cache.misses == 5 and len(cache) == 2 and env.success is True
    with pytest.raises(ValueError, match="max_entries must be an integer >= 1"):
        ExpertOutcomes(max_entries=0)


def test_the_success_policy_is_one_object_and_the_old_keywords_build_it():
    default = EpisodeEnv(domain="tool_use", split="test")
    assert default.success_policy == SuccessPolicy(("state", "facts"), 1.0) and default.success_policy.rules == ("state", "facts")
    policy = SuccessPolicy(("state",), min_fact_recall=0.5)
    for env in (EpisodeEnv(domain="tool_use", split="test", success_rules=["state"], min_fact_recall=0.5),
                EpisodeEnv(domain="tool_use", split="test", success_policy=policy),
                EpisodeEnv(domain="tool_use", split="test", success_policy={"rules": ["state"], "min_fact_recall": 0.5})):
        assert env.success_policy == policy and (env.success_policy.rules, env.success_policy.min_fact_recall) == (("state",), 0.5)
        task = next(t for t in env.tasks if t.meta["task"] == "cancel_order")
        env.reset(options={"task_id": task.id})
        while not env.done:
            env.step(env.recorded_action())
        assert env.success is True and env.checks == {"state": True}
    # a policy without the expert's rules replays no expert at reset
    answer_only = EpisodeEnv(domain="tool_use", split="test", success_policy=["answer"])
    answer_only.expert_outcomes = cache = ExpertOutcomes()
    answer_only.reset(options={"index": 0})
    assert answer_only.outcome is None and cache.misses == 0
    with pytest.raises(ValueError, match="not both"):
        EpisodeEnv(domain="tool_use", split="test", success_policy=policy, success_rules=["state"])
    with pytest.raises(ValueError, match=r"min_fact_recall must be in \[0, 1\], got 1.5"):
        EpisodeEnv(domain="tool_use", split="test", min_fact_recall=1.5)
    with pytest.raises(ValueError, match="unknown keys"):
        SuccessPolicy.build({"rule": ["state"]}, "tool_use")


def test_the_env_ids_lead_to_the_env_module():
    from pivot_envs.episodes import env as env_module

    for env_id in ("pivot/Episode-v0", "pivot/ToolUse-Episode-v0"):
        assert gymnasium.registry[env_id].entry_point == "pivot_envs.episodes.env:EpisodeEnv"
    env = gymnasium.make("pivot/Episode-v0", world="tool_use", tasks="bundled:tool_use:test")
    assert type(env.unwrapped) is env_module.EpisodeEnv and env.unwrapped.domain_name == "tool_use"
    env.close()
    env = gymnasium.make("pivot/ToolUse-Episode-v0", split="test")
    assert type(env.unwrapped) is env_module.EpisodeEnv and env.unwrapped.domain_name == "tool_use"
    env.close()


# --------------------------------------------------------------------------- success rules


def test_typed_values_normalise_dates_times_numbers_and_ids():
    assert typed_values("Order CL-913398 was delivered on Friday, February 21; $1,234.50 at 2:30 PM") == {
        "id:cl-913398", "date:02-21", "num:1234.5", "time:14:30"}
    assert typed_values("2025-02-21 / 21st of Feb / 2/21 / 14:30 / 1234.50 / cl-913398") == {
        "date:02-21", "time:14:30", "num:1234.5", "id:cl-913398"}
    assert typed_values("Sorry, I cannot help with that.") == set()


def test_expert_facts_come_from_tool_results_not_from_the_user():
    messages = [
        {"role": "user", "content": "Where is order CL-1? My email is a1@x.org"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "get_order", "arguments": '{"order_id": "CL-1"}'}}]},
        {"role": "tool", "tool_call_id": "c", "content": json.dumps(
            {"order_id": "CL-1", "delivered": "2025-02-21", "tracking": "1Z99", "item": "Copper Watering Can", "qty": 3})},
        {"role": "assistant", "content": "Order CL-1 (Copper Watering Can) arrived Feb 21, tracking 1Z99. I counted 7 boxes."},
    ]
    assert expert_facts(messages) == ["date:02-21", "id:1z99", "value:copper watering can"]
    facts = expert_facts(messages)
    assert facts_given("It was delivered on 2025-02-21 (tracking 1z99): your copper watering  can.", facts)[0]
    assert facts_given("It arrived on February 21.", facts) == (False, ["id:1z99", "value:copper watering can"])
    assert facts_given("It arrived on February 21.", facts, min_recall=0.3)[0]
    assert facts_given(REFUSAL, facts) == (False, facts)


def test_answer_check_and_the_look_up_fallback():
    assert answer_correct("So the answer is the Densel River.", ["Densel River", "Densel"])
    assert not answer_correct(REFUSAL, ["Densel River", "Densel"])
    assert not answer_correct("Avon River", ["Densel River"])
    expert = [{"role": "assistant", "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "get_user", "arguments": '{"id": "u1"}'}},
        {"id": "b", "type": "function", "function": {"name": "get_user", "arguments": '{"id": "typo"}'}}]},
        {"role": "tool", "tool_call_id": "a", "content": "{}"}, {"role": "tool", "tool_call_id": "b", "content": "Error: no user"}]
    agent = [{"role": "assistant", "tool_calls": [
        {"id": "z", "type": "function", "function": {"name": "get_user", "arguments": '{ "id":"u1" }'}}]}]
    assert calls_made(agent, expert) == (True, [])  # the expert's failed look-up is not required
    assert calls_made([{"role": "assistant", "content": REFUSAL}], expert) == (False, ['get_user({"id": "u1"})'])


# --------------------------------------------------------------------------- agents


def test_replay_file_matches_by_trajectory_id_and_noisy_expert_perturbs(tmp_path):
    from pivot_envs.formats import write_trajectories

    env = episode_env("tool_use")
    tasks = env.tasks[:8]
    # another "run": the first two tasks swapped ids, so their actions land in the wrong task
    a, b = tasks[0], tasks[1]
    other = [type(a)(messages=b.messages, tools=b.tools, reward=1.0, meta={**b.meta, "id": a.id}),
             type(a)(messages=a.messages, tools=a.tools, reward=1.0, meta={**a.meta, "id": b.id}), *tasks[2:]]
    path = tmp_path / "other.jsonl"
    write_trajectories(other, path)
    starts = [s for s in episode_starts(env) if s.task_id in {t.id for t in tasks}]
    rows = {r["id"]: r for r in run_episodes(lambda: episode_env("tool_use"), starts, f"replay:{path}")}
    assert [rows[t.id]["success"] for t in tasks] == [False, False] + [True] * 6
    assert build_agent(f"replay:{path}").config() == {"kind": "replay", "file": str(path)}
    env.reset(options={"task_id": env.tasks[9].id})  # a task the file does not have
    with pytest.raises(ValueError, match="no trajectory with id"):
        build_agent(f"replay:{path}").sample([env.current_pivot()], 1)
    noisy = run_episodes(lambda: episode_env("tool_use"), starts, "noisy_expert:1.0")
    assert sum(r["success"] for r in noisy) <= 2  # every action perturbed
    again = run_episodes(lambda: episode_env("tool_use"), starts, "noisy_expert:1.0")
    assert [r["messages"] for r in again] == [r["messages"] for r in noisy]  # deterministic


# --------------------------------------------------------------------------- user simulators


def test_scripted_and_no_user():
    task = next(t for t in load_trajectories("tool_use", "test")
                if t.reward == 1.0 and sum(m["role"] == "user" for m in t.messages) >= 3)
    users = [m["content"] for m in task.messages if m["role"] == "user"]
    sim = ScriptedUser()
    sim.start(task, task.messages[:2])
    assert [sim.reply([]).content for _ in range(len(users) - 1)] == users[1:]
    assert sim.reply([]).done
    env = EpisodeEnv(tasks=[task], domain="tool_use", user="none")
    env.reset()
    _, reward, terminated, _, info = env.step(REFUSAL)
    assert terminated and info["turns"] == 1 and env.messages[-1]["content"] == REFUSAL and reward == 0.0
    assert parse_user_spec("openai:m@http://h:1/v1") == {"kind": "openai", "model": "m", "base_url": "http://h:1/v1"}
    for bad in ("scriptd", "openai:", "openai:m@ftp://x"):
        with pytest.raises(ValueError, match="bad user simulator"):
            build_user(bad)


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    server = start_fake_openai(tmp_path_factory.mktemp("fake") / "fake.log")
    yield server
    server.stop()


def test_llm_user_replies_are_user_turns_and_the_stop_token_ends_the_episode(fake):
    task = next(t for t in load_trajectories("search", "test") if t.reward == 1.0)
    env = EpisodeEnv(tasks=[task], domain="search", user={"kind": "openai", "model": "u", "base_url": fake.base_url})
    env.reset()
    control(fake, reply="Hmm, can you look it up again?")
    _, _, terminated, _, _ = env.step("I think it is the Avon.")
    assert not terminated and env.messages[-1] == {"role": "user", "content": "Hmm, can you look it up again?"}
    control(fake, reply="Great, thanks! ###STOP###")
    final = next(m for m in reversed(task.messages) if m["role"] == "assistant")
    _, reward, terminated, _, info = env.step(final)
    assert terminated and reward == 1.0 and info["success"] and env.messages[-1]["content"] == "Great, thanks!"
    sim = env.user
    assert isinstance(sim, LLMUser) and sim.requests == 2
    prompt = sim.prompt(env.messages[:-1])
    assert task.messages[1]["content"] in prompt[0]["content"]  # the instruction (no meta: the first user message)
    assert [m["role"] for m in prompt[1:]] == ["user", "assistant", "user", "assistant", "user"]  # roles swapped
    # the endpoint is down: an infrastructure error, not a 0
    down = EpisodeEnv(tasks=[task], domain="search", user={"kind": "openai", "model": "u", "max_retries": 0,
                                                            "base_url": f"http://127.0.0.1:{closed_port()}/v1"})
    down.reset()
    _, _, terminated, _, info = down.step("Densel River")
    assert terminated and info["success"] is None and "UserSimulatorError" in info["error"]


@pytest.mark.slow
def test_llm_user_through_transformers_serve(tmp_path):
    missing = transformers_serve_missing()
    if missing:
        pytest.skip(missing)
    from pivot_envs.models.tiny import build_tiny_model, train_lm

    reply = "Thanks, that is all. ###STOP###"
    trajs = [t for t in load_trajectories("search", "test") if t.reward == 1.0]
    sim = LLMUser("x")
    prompts = []
    for t in trajs[:6]:
        sim.start(t, t.messages[:2])
        prompts.append(sim.prompt(t.messages[:2] + [{"role": "assistant", "content": "The answer is X."}]))
    model = build_tiny_model(tmp_path / "user", [m["content"] for p in prompts for m in p] + [reply], seed=0)
    assert train_lm(model, [(p, reply) for p in prompts], steps=60, lr=1e-2, seed=0, batch_size=2).final_loss < 0.1
    server = start_transformers_serve(tmp_path / "serve.log")
    try:
        user = {"kind": "openai", "model": str(Path(model).resolve()), "base_url": server.base_url,
                "max_tokens": 24, "timeout_s": 60.0}
        env = EpisodeEnv(tasks=trajs[10:12], domain="search", user=user)
        rows = run_episodes(lambda: EpisodeEnv(tasks=trajs[10:12], domain="search", user=user),
                            episode_starts(env), "replay")
    finally:
        server.stop()
    assert [r["error"] for r in rows] == [None, None]
    for row in rows:  # the held-out conversations end when the served user says the stop token
        assert row["success"] and row["messages"][-1] == {"role": "user", "content": "Thanks, that is all."}


# --------------------------------------------------------------------------- the CLI


def _cli(*args):
    from pivot_envs.cli import app

    return CliRunner().invoke(app, [str(a) for a in args])


def test_play_cli_end_to_end_with_resume(tmp_path):
    out = tmp_path / "runs" / "replay.jsonl"
    first = _cli("play", "--env", "pivot/ToolUse-Episode-v0", "--agent", "replay", "-o", out, "--limit", "5")
    assert first.exit_code == 0, first.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 5 and all(r["success"] and r["error"] is None for r in rows)
    assert {"id", "success", "reward", "turns", "tool_calls", "error", "digest", "messages"} <= set(rows[0])
    head = out.read_text()
    with out.open("a") as f:
        f.write('{"id": "torn')  # a run killed mid-write
    again = _cli("play", "--env", "pivot/ToolUse-Episode-v0", "--agent", "replay", "-o", out, "--limit", "8", "--workers", "2")
    assert again.exit_code == 0, again.output
    assert "5 of 8 episodes already played" in again.output and "dropping 1 unreadable row" in again.output
    text = out.read_text()
    assert text.startswith(head) and len(text.splitlines()) == 8
    assert "task success" in again.output and "1.000" in again.output
    # the output reads back as trajectories: replay:OUT from pivots, and a refusal control
    pivots = _cli("play", "--env", "pivot/ToolUse-Episode-v0", "--agent", f"replay:{out}", "--from-pivots",
                  "-o", tmp_path / "p.jsonl", "--tasks", out)
    assert pivots.exit_code == 0, pivots.output
    prow = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert len(prow) > 8 and all(r["success"] for r in prow) and all(r["pivot_id"] == r["id"] for r in prow)
    refusal = _cli("play", "--env", "pivot/ToolUse-Episode-v0", "--agent", f"constant:{REFUSAL}", "--limit", "4",
                   "-o", tmp_path / "r.jsonl", "--user", "none")
    assert refusal.exit_code == 0 and "0.000" in refusal.output


@pytest.mark.parametrize(("args", "culprit"), [
    (["--env", "pivot/ToolUse-v0", "--agent", "replay"], "--env 'pivot/ToolUse-v0' is not an episode env"),
    (["--env", "pivot/ToolUse-Episode-v0", "--agent", "gpt4"], "--agent: bad agent spec 'gpt4'"),
    (["--env", "pivot/ToolUse-Episode-v0", "--agent", "replay:nope.jsonl"], "--agent: bad agent spec 'replay:nope.jsonl'"),
    (["--env", "pivot/ToolUse-Episode-v0", "--agent", "replay", "--tasks", "nope.jsonl"], "--tasks nope.jsonl: nope.jsonl: no such task file"),
    (["--env", "pivot/ToolUse-Episode-v0", "--agent", "replay", "--tasks", "bundled:search:test"], "search tasks cannot be played"),
    (["--env", "pivot/ToolUse-Episode-v0", "--agent", "replay", "--user", "robot"], "--user: bad user simulator 'robot'"),
    (["--env", "pivot/ToolUse-Episode-v0", "--agent", "replay", "--max-turns", "0"], "--max-turns must be >= 1"),
    (["--env", "pivot/Episode-v0", "--agent", "replay"], "give --world SPEC and --tasks"),
    (["--env", "pivot/Episode-v0", "--agent", "replay", "--world", "tool_us", "--tasks", "bundled:tool_use:test"],
     "--world tool_us: unknown world 'tool_us' (did you mean 'tool_use'?)"),
])
def test_play_user_errors_are_one_line_naming_the_flag(tmp_path, monkeypatch, args, culprit):
    monkeypatch.chdir(tmp_path)
    result = _cli("play", *args, "-o", tmp_path / "out.jsonl")
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and culprit in lines[0], result.output
    assert not (tmp_path / "out.jsonl").exists()


def test_eval_episodes_reports_task_success_beside_per_turn_accuracy(tmp_path_factory, tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.trainers.test_sft_eval import tiny_setup

    tiny = tiny_setup(str(tmp_path_factory.getbasetemp() / "tiny-sft-eval"))
    report_path = tmp_path / "report.json"
    result = _cli("eval", "--model", tiny.final, "--pivots", "bundled:search:train", "--limit", "3", "--k", "0",
                  "--no-probes", "--max-new-tokens", "48", "--episodes", "--max-turns", "3", "-o", report_path)
    assert result.exit_code == 0, result.output
    assert "task success (episodes)" in result.output and "greedy functional" in result.output
    report = json.loads(report_path.read_text())
    block = report["domains"]["search"]["episodes"]
    assert block["episodes"] == 3 and block["errors"] == 0 and 0.0 <= block["success"] <= 1.0
    assert block["tool_calls_mean"] > 0  # the SFT'd tiny model searches in the world
    assert report["overall"]["episodes"]["episodes"] == 3 and report["settings"]["episodes"]["max_turns"] == 3
    bad = _cli("eval", "--model", tiny.final, "--pivots", tiny.pivots_path, "--episodes")
    assert bad.exit_code == 2 and "--episodes: episodes=True plays the tasks of bundled" in bad.output


def test_observation_is_the_json_of_the_messages_after_every_step():
    import json as _json

    env = EpisodeEnv(domain="tool_use", split="test")
    for start in episode_starts(env)[:3]:
        obs, _ = env.reset(options=start.options())
        assert obs["messages"] == _json.dumps(env.messages, ensure_ascii=False)
        while (action := env.recorded_action()) is not None:
            obs, _, terminated, truncated, info = env.step(action)
            assert obs["messages"] == _json.dumps(env.messages, ensure_ascii=False)
            assert obs["tools"] == _json.dumps(env._tools, ensure_ascii=False)
            if terminated or truncated:
                break
