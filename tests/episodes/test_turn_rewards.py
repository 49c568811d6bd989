"""Per-turn rewards in episodes (``info["turn_reward"]``) and where they reach: OpenEnv, ``/verify``, TRL.

Real parts throughout: the bundled test tasks of every domain with a world (sandboxes for terminal and
SWE: skipped where there is none), each domain's default verifier, a real HTTP server (the module's
``create_app(domains=["tool_use"])`` of ``tests/serve/test_serve.py``) played with the real ``openenv`` client.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import pivot_envs  # noqa: F401  (registers the env ids)
from pivot_envs.episodes import EpisodeEnv
from pivot_envs.types import Pivot, VerifyResult
from pivot_envs.verifiers import Verifier, build_verifier

TASKS_PER_DOMAIN = 2

WRONG_FIRST_CALL: dict[str, dict[str, Any]] = {
    # a call the domain's default verifier rejects against every task's first expert turn
    "tool_use": {"name": "get_order", "arguments": {"order_id": "CL-000000"}},  # the expert asks, or finds the customer
    "search": {"name": "open", "arguments": {"doc_id": "no-such-doc"}},  # the expert searches first
    "terminal": {"name": "bash", "arguments": {"command": "echo nothing to see here"}},  # exec: other output
    "swe": {"name": "run_tests", "arguments": {}},  # the expert edits first ('run' is another category)
}


def call(name: str, arguments: dict[str, Any], call_id: str = "call_agent_1") -> dict[str, Any]:
    """An assistant message with one tool call."""
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}]}


def domain_env(domain: str, **kwargs: Any) -> EpisodeEnv:
    """The bundled test tasks of ``domain`` in its world; skips when its world (or sandbox) is missing here."""
    from pivot_envs.worlds import world_class

    try:
        world_class(domain)
    except ImportError as exc:
        pytest.skip(f"the {domain} world is not available: {exc}")
    env = EpisodeEnv(domain=domain, split="test", **kwargs)
    _, info = env.reset(options={"index": 0})
    if info["error"] and "andbox" in info["error"]:
        pytest.skip(f"no sandbox for the {domain} world here: {info['error']}")
    return env


def replay(env: EpisodeEnv, options: dict[str, Any]) -> list[dict[str, Any]]:
    """Play the recorded actions from ``options``'s start; the infos of the steps."""
    env.reset(options=options)
    infos = []
    while not env.done and (action := env.recorded_action()) is not None:
        infos.append(env.step(action)[4])
    return infos


def replay_rest(env: EpisodeEnv) -> list[float | None]:
    """Play the recorded actions to the end; the turn rewards of those steps."""
    out = []
    while not env.done and (action := env.recorded_action()) is not None:
        out.append(env.step(action)[4]["turn_reward"])
    return out


# --------------------------------------------------------------------------- the env


@pytest.mark.parametrize("domain", ["tool_use", "terminal", "search", "swe"])
def test_replaying_the_expert_scores_one_at_every_turn(domain):
    env = domain_env(domain)
    answers = 0
    for task in env.tasks[:TASKS_PER_DOMAIN]:
        infos = replay(env, {"task_id": task.id})
        assert infos[-1]["success"] is True and infos[-1]["error"] is None
        assert [i["turn_reward"] for i in infos] == [1.0] * len(infos) == env.scorer.rewards, task.id
        assert all(i["turn_reward_error"] is None and i["on_path"] is True for i in infos)
        assert len(infos) == env.expert_turns == sum(m["role"] == "assistant" for m in task.messages)
        assert env.episode_row()["turn_rewards"] == env.scorer.rewards
        answers += not [m for m in task.messages if m["role"] == "assistant"][-1].get("tool_calls")
    assert answers == (0 if domain == "swe" else TASKS_PER_DOMAIN)  # the answer turns scored 1.0 too (final_turn)


@pytest.mark.parametrize("domain", ["tool_use", "terminal", "search", "swe"])
def test_a_wrong_first_call_scores_zero_then_none(domain):
    env = domain_env(domain)
    wrong = WRONG_FIRST_CALL[domain]
    task = env.tasks[0]
    _, info = env.reset(options={"task_id": task.id})
    assert (info["turn_reward"], info["on_path"]) == (None, True)
    _, _, terminated, _, info = env.step(call(wrong["name"], wrong["arguments"]))
    assert (info["turn_reward"], info["turn_reward_error"], info["on_path"]) == (0.0, None, False)
    assert not terminated
    while not env.done and (action := env.recorded_action()) is not None:  # the expert's actions, too late
        _, _, _, _, info = env.step(action)
        assert info["turn_reward"] is None and info["on_path"] is False
    assert env.scorer.rewards[0] == 0.0 and env.scorer.rewards[1:] == [None] * (len(env.scorer.rewards) - 1)
    assert len(env.scorer.rewards) > 1 and env.scorer.errors == []


def test_an_equivalent_action_stays_on_the_path_and_other_results_leave_it():
    env = domain_env("tool_use")
    task = next(t for t in env.tasks if any(
        c["function"]["name"] == "find_customer_by_email" for m in t.messages for c in m.get("tool_calls") or []))
    env.reset(options={"task_id": task.id})
    while True:  # the expert's turns up to its e-mail look-up
        action = env.recorded_action()
        calls = action.get("tool_calls") or []
        if calls and calls[0]["function"]["name"] == "find_customer_by_email":
            break
        env.step(action)
    email = json.loads(calls[0]["function"]["arguments"])["email"]
    # the same look-up, e-mail in capitals (the world and the verifier read it case-insensitively)
    _, _, _, _, info = env.step(call("find_customer_by_email", {"email": email.upper()}, "my_own_id"))
    assert (info["turn_reward"], info["on_path"]) == (1.0, True)
    rest = replay_rest(env)
    assert rest and all(r == 1.0 for r in rest) and env.success

    # judged equivalent by a lenient verifier, but the world answers otherwise: the path ends after it
    lenient = EpisodeEnv(tasks=[task], domain="tool_use", verifier={"name": "tool_name"})
    lenient.reset()
    while (action := lenient.recorded_action()).get("tool_calls") is None or \
            action["tool_calls"][0]["function"]["name"] != "find_customer_by_email":
        lenient.step(action)
    _, _, _, _, info = lenient.step(call("find_customer_by_email", {"email": "someone.else@example.org"}))
    assert (info["turn_reward"], info["on_path"]) == (1.0, False)
    assert replay_rest(lenient)[0] is None


def test_an_episode_from_a_pivot_is_on_the_path():
    env = domain_env("search")
    pivot_id = env.pivot_ids()[3]
    infos = replay(env, {"pivot_id": pivot_id})
    assert infos and [i["turn_reward"] for i in infos] == [1.0] * len(infos) and len(infos) == env.expert_turns
    assert env.expert_turns < sum(m["role"] == "assistant" for m in env.task.messages)  # from the pivot on


class FailsAtTurn(Verifier):
    """The domain's verifier, failing (an infrastructure error) at one expert turn."""

    name = "fails_at_turn"

    def __init__(self, domain: str, turn: int):
        from pivot_envs.domains import get_domain

        self.inner = build_verifier(get_domain(domain).verifier_spec())
        self.turn = turn

    def verify(self, action: Any, pivot: Pivot) -> VerifyResult:
        if pivot.meta.get("turn") == self.turn:
            return VerifyResult.failure(self.name, "the judge is down")
        return self.inner.verify(action, pivot)


def test_a_verifier_failure_is_none_with_the_error_never_a_zero():
    env = domain_env("search")
    task = env.tasks[0]
    second = [i for i, m in enumerate(task.messages) if m["role"] == "assistant"][1]
    flaky = EpisodeEnv(tasks=[task], domain="search", verifier=FailsAtTurn("search", second))
    infos = replay(flaky, {"task_id": task.id})
    assert infos[0]["turn_reward"] == 1.0 and infos[0]["turn_reward_error"] is None
    assert infos[1]["turn_reward"] is None and "the judge is down" in infos[1]["turn_reward_error"]
    assert all(i["turn_reward"] is None and i["turn_reward_error"] is None for i in infos[2:])
    assert flaky.scorer.errors == [infos[1]["turn_reward_error"]] and infos[-1]["success"] is True


def test_score_turns_false_skips_the_verifier():
    env = EpisodeEnv(domain="search", split="test", score_turns=False)
    infos = replay(env, {"index": 0})
    assert env.scorer.verifier is None and infos[-1]["success"] is True
    assert all(i["turn_reward"] is None and i["on_path"] is None for i in infos)


# --------------------------------------------------------------------------- OpenEnv

try:
    from tests.serve.test_serve import url  # noqa: E402,F401  (the module's server: create_app(domains=["tool_use"]))
except pytest.skip.Exception as missing:  # no serve extra here: only the served tests skip
    _why = str(missing)

    @pytest.fixture(scope="module")
    def url():
        pytest.skip(_why)

EPISODE = "ToolUse-Episode-v0"


def _openenv_client(url: str) -> Any:
    pytest.importorskip("openenv")
    pytest.importorskip("websockets")
    from openenv import GenericEnvClient

    return GenericEnvClient(base_url=f"{url}/openenv/{EPISODE}", connect_timeout_s=120.0,
                            message_timeout_s=120.0).sync()


def _tool_use_task() -> Any:
    return EpisodeEnv(domain="tool_use", split="test").tasks[0]


def test_openenv_step_metadata_and_the_turn_reward_mode(url):
    task = _tool_use_task()
    expert = [m for m in task.messages if m["role"] == "assistant"]
    wrong = WRONG_FIRST_CALL["tool_use"]

    def play(env: Any, actions: list[dict[str, Any]], **reset: Any) -> list[Any]:
        """Reset, then step ``actions`` until the episode ends; the step results."""
        assert env.reset(task_id=task.id, split="test", **reset).metadata["turn_reward"] is None
        results = []
        for action in actions:
            results.append(env.step({"message": action}))
            if results[-1].done:
                break
        assert results[-1].done
        return results

    with _openenv_client(url) as env:
        # default: the reward is task success; the turn reward rides in the metadata
        results = play(env, expert)
        assert env.state()["reward_mode"] == "success"
        assert [r.metadata["turn_reward"] for r in results] == [1.0] * len(expert)
        assert [r.reward for r in results] == [0.0] * (len(expert) - 1) + [1.0]
        # reward_mode "turn": each step's reward is its turn reward, the last one included
        results = play(env, expert, reward_mode="turn")
        assert env.state()["reward_mode"] == "turn"
        assert [r.reward for r in results] == [1.0] * len(expert) and results[-1].metadata["success"] is True
        # off the path: 0.0 (its turn reward is null)
        results = play(env, [call(wrong["name"], wrong["arguments"]), *expert], reward_mode="turn")
        assert [r.reward for r in results] == [0.0] * len(results)
        assert [r.metadata["turn_reward"] for r in results] == [0.0] + [None] * (len(results) - 1)


def test_openenv_refuses_an_unknown_reward_mode(url):
    requests = pytest.importorskip("requests")
    r = requests.post(f"{url}/openenv/{EPISODE}/reset", json={"reward_mode": "dense"}, timeout=120)
    assert r.status_code == 422 and "reward_mode" in r.text


# --------------------------------------------------------------------------- /verify


def episode_row(task: Any, response_output: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A verify row carrying ``task``'s whole episode from its first user message: the expert's
    continuation as ``expected_output``; the response is the expert's own items unless given."""
    from pivot_envs.formats.responses import messages_to_input, tools_to_responses

    first_user = next(i for i, m in enumerate(task.messages) if m["role"] == "user")
    rest = messages_to_input(task.messages[first_user + 1:])
    if response_output is None:  # as a model server returns them: typed items, its own call ids
        ids = {item["call_id"]: f"fc_{k}" for k, item in enumerate(rest) if item.get("type") == "function_call"}
        response_output = [{"type": "message", **i} if "role" in i else
                           {**i, "call_id": ids[i["call_id"]]} if "call_id" in i else i for i in rest]
    return {"responses_create_params": {"input": messages_to_input(task.messages[: first_user + 1]),
                                        "tools": tools_to_responses(task.tools)},
            "expected_output": rest, "response": {"output": response_output}}


def test_verify_scores_every_turn_of_an_episode_row(url):
    requests = pytest.importorskip("requests")
    task = _tool_use_task()
    turns = sum(m["role"] == "assistant" for m in task.messages)
    good = episode_row(task)
    answer = requests.post(f"{url}/verify", json=good, timeout=120).json()
    assert answer["step_rewards"] == [1.0] * turns and answer["step_errors"] == [None] * turns
    assert (answer["reward"], answer["passed"], answer["error"]) == (1.0, True, None)
    wrong = WRONG_FIRST_CALL["tool_use"]
    bad = episode_row(task, [{"type": "function_call", "call_id": "c1", "name": wrong["name"],
                              "arguments": json.dumps(wrong["arguments"])},
                             {"type": "function_call_output", "call_id": "c1", "output": "Error: no such order"},
                             *good["response"]["output"]])
    from pivot_envs.formats.responses import message_to_expected

    first = next(m for m in task.messages if m["role"] == "assistant")
    plain = {"responses_create_params": good["responses_create_params"], "expected_action": message_to_expected(first),
             "response": {"output": good["response"]["output"][:1]}}
    batch = requests.post(f"{url}/verify_batch", json=[bad, plain], timeout=120).json()
    assert batch[0]["step_rewards"] == [0.0] + [None] * turns and batch[0]["reward"] == 0.0
    assert "step_rewards" not in batch[1] and batch[1]["reward"] == 1.0  # a plain row is scored as before
    broken = {**good, "expected_output": [{"type": "function_call_output", "call_id": "x", "output": "?"}]}
    r = requests.post(f"{url}/verify", json=broken, timeout=120)
    assert r.status_code == 422 and r.json()["detail"]["field"] == "expected_output[0]"


def test_verify_episode_row_in_process_one_turn_and_a_verifier_failure():
    from pivot_envs.serve.nemo_gym import verify_rows
    from pivot_envs.verifiers.batch import VerifierResolver

    task = _tool_use_task()
    good = episode_row(task)
    first_turn = good["response"]["output"][:1]  # a one-turn response scores as a plain row
    [one] = verify_rows([episode_row(task, first_turn)], VerifierResolver(None))
    assert one["step_rewards"] == [1.0] and one["reward"] == 1.0
    second = [i for i, m in enumerate(task.messages) if m["role"] == "assistant"][1]
    [flaky] = verify_rows([good], VerifierResolver(FailsAtTurnOfContext("tool_use", second)))
    assert flaky["step_rewards"][:2] == [1.0, None] and set(flaky["step_rewards"][2:]) == {None}
    assert "the judge is down" in flaky["step_errors"][1] and flaky["error"] is None


class FailsAtTurnOfContext(FailsAtTurn):
    """:class:`FailsAtTurn` for pivots without a ``turn`` (verify rows): by the context's length."""

    def verify(self, action: Any, pivot: Pivot) -> VerifyResult:
        if len(pivot.context) == self.turn:
            return VerifyResult.failure(self.name, "the judge is down")
        return self.inner.verify(action, pivot)


# --------------------------------------------------------------------------- TRL


def test_trl_adapter_exposes_turn_rewards_and_per_turn_reward_functions():
    from pivot_envs.integrations.trl import episode_environment_factory, make_episode_reward_func

    env0 = EpisodeEnv(domain="search", split="test")
    task = env0.tasks[0]
    factory = episode_environment_factory([task], domain="search")
    success, mean, progress = (make_episode_reward_func(), make_episode_reward_func(per_turn="mean"),
                               make_episode_reward_func(1, per_turn="progress"))
    assert (success.__name__, mean.__name__, progress.__name__) == ("episode_success", "episode_turn_mean",
                                                                    "episode_progress")
    with pytest.raises(ValueError, match="per_turn"):
        make_episode_reward_func(per_turn="sum")

    def rollout(calls: list[dict[str, Any]]) -> Any:
        env = factory()
        env.reset(task_id=task.id)
        for c in calls:  # as TRL calls the tool methods
            getattr(env, c["function"]["name"])(**json.loads(c["function"]["arguments"]))
        return env

    expert = [m for m in task.messages if m["role"] == "assistant"]
    calls = [c for m in expert[:-1] for c in m["tool_calls"]]
    assert all(len(m["tool_calls"]) == 1 for m in expert[:-1])  # one call per turn: TRL's turns are the expert's
    final = [{"role": "assistant", "content": expert[-1]["content"]}]
    good, half = rollout(calls), rollout(calls[:2])
    assert good.turn_rewards == [1.0] * len(calls)
    envs = [good, half]
    kwargs = {"prompts": [[], []], "completions": [final, final], "environments": envs}
    assert success(**kwargs) == [1.0, 1.0]  # the right answer after half the look-ups is a task success...
    n = len(expert)
    assert good.turn_rewards == [1.0] * n and half.turn_rewards == [1.0, 1.0, 0.0]  # ...answering early scores 0
    assert mean(**kwargs) == [1.0, pytest.approx(2 / 3)]
    assert progress(**kwargs) == [1.0, pytest.approx(2 / n)]
    assert progress.calls[-1]["turn_rewards"] == [[1.0] * n, [1.0, 1.0, 0.0]]
