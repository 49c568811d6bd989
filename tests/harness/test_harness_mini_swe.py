"""mini-swe-agent (PyPI ``mini-swe-agent``, unpatched) as a harness: terminal tasks through the endpoint.

The ``mini`` command itself runs each rollout, with ``examples/mini_swe_agent.yaml``: its own agent loop and its
litellm model class on the rollout's ``base_url``; its extension point, the environment class, is
:class:`pivot_envs.harness.shell.WorldShell`, which runs every shell command as the ``bash`` tool of the
rollout's world over MCP, so the terminal world (its sandbox, its work tree) is the state the task is scored in.

* with the ``replay`` policy (the tasks' expert commands) mini-swe-agent's runs solve the tasks, and the verdict
  equals the same episode replayed through the episode env;
* with the tiny model every call is captured with tokens the trainer re-scores within 1e-3, and every verdict
  equals its replay;
* a 3-step E2E run trains from mini-swe-agent's rollouts: the policy version rises, the captured tokens are in the loss.
"""

from __future__ import annotations

import shutil

import pytest

pytest.importorskip("minisweagent", reason="mini-swe-agent is not installed (pip install mini-swe-agent)")

from tests.conftest import ROOT  # noqa: E402
from pivot_envs.agents.spec import build_agent  # noqa: E402
from pivot_envs.episodes import EpisodeEnv  # noqa: E402
from tests.harness.harness_play import play_and_replay  # noqa: E402

pytestmark = pytest.mark.slow

MINI = shutil.which("mini")
HARNESS = [MINI or "mini", "-c", str(ROOT / "examples" / "mini_swe_agent.yaml"), "-t", "{task}",
           "-o", "{workdir}/trajectory.json", "-c", "environment.mcp_url={mcp_url}",
           "-c", "model.model_kwargs.api_base={base_url}"]
MINI_ENV = {"MSWEA_CONFIGURED": "1", "MSWEA_SILENT_STARTUP": "1", "MSWEA_COST_TRACKING": "ignore_errors",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
TASKS = "bundled:terminal:test"

if MINI is None:
    pytest.skip("the mini command of mini-swe-agent is not on PATH", allow_module_level=True)


def _make_env():
    return EpisodeEnv(tasks=TASKS, domain="terminal", user="none")


def _play(agent, task_ids, group_size):
    return play_and_replay(agent, _make_env, HARNESS, MINI_ENV, task_ids, group_size, max_turns=10)


@pytest.fixture(scope="module")
def task_ids():
    env = _make_env()
    try:
        return [t.id for t in env.tasks[:2]]
    finally:
        env.close()


def test_mini_swe_agent_solves_terminal_tasks_in_the_world_with_the_expert_policy(task_ids):
    results, stats = _play(build_agent("replay"), task_ids, group_size=1)
    for r in results:
        assert r["success"] is True, r["reason"]
        assert r["tool_calls"] and r["uncaptured_tool_calls"] == 0
        assert all(t["name"] == "bash" for t in r["tool_calls"])
    assert stats.harness_failures == 0


def test_mini_swe_agent_with_the_tiny_model_is_captured_and_rescored(terminal_base, task_ids):
    import torch

    from pivot_envs.trainers.logprobs import completion_logprobs
    from pivot_envs.trainers.token_batch import pack

    agent = build_agent({"kind": "hf", "model": str(terminal_base), "max_new_tokens": 40})
    results, stats = _play(agent, task_ids, group_size=2)
    calls = [c for r in results for c in r["calls"]]
    assert calls and stats.untrainable_calls == 0
    batch = pack([c["prompt_token_ids"] for c in calls], [c["completion_token_ids"] for c in calls], agent.pad_id,
                 "cpu")
    with torch.no_grad():
        logp = completion_logprobs(agent.model.eval(), batch)[0]
    deltas = [abs(float(logp[i, t]) - lp) for i, c in enumerate(calls) for t, lp in enumerate(c["logprobs"])]
    assert sum(deltas) / len(deltas) <= 1e-3, max(deltas)
    assert all(c["tools"][0]["function"]["name"] == "bash" for c in calls)  # mini-swe-agent's own tool spec


def test_three_e2e_steps_train_from_mini_swe_agent(terminal_base, tmp_path):
    from pivot_envs.trainers.episode_rl import EpisodeRLConfig, train_episode_rl

    rows = []
    cfg = EpisodeRLConfig(model=str(terminal_base), domain="terminal", tasks=TASKS, user="none",
                          output_dir=str(tmp_path / "run"), steps=3, group_size=2, tasks_per_step=2, max_turns=6,
                          max_new_tokens=32, lr=1e-3, save_every=0, plots=False, seed=0, turn_credit=0.5,
                          zero_variance="keep", harness=HARNESS, harness_env=MINI_ENV, harness_timeout_s=240)
    train_episode_rl(cfg, on_step=rows.append)
    assert [r["policy_version"] for r in rows] == [0, 1, 2]
    for r in rows:
        assert r["harness"] == "mini" and r["updated"] and r["used_samples"] > 0
        assert r["logprob_mismatch"] is not None and r["logprob_mismatch"] <= 1e-3
        assert r["episode_errors"] == 0 and r["retokenized_calls"] is not None
