import json
import warnings

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

import pivot_envs
from pivot_envs import Pivot
from pivot_envs.env import PivotEnv

ENV_IDS = ["pivot/ToolUse-v0", "pivot/Terminal-v0", "pivot/SWE-v0", "pivot/Search-v0"]


def make_pivots(n=5):
    return [
        Pivot(id=f"p{i}", domain="tool_use", context=[{"role": "user", "content": f"order {i} ✓"}],
              expert={"role": "assistant", "content": None, "tool_calls": [
                  {"id": "c", "type": "function", "function": {"name": "get_order", "arguments": json.dumps({"id": i})}}]},
              tools=[{"type": "function", "function": {"name": "get_order", "parameters": {"type": "object"}}}])
        for i in range(n)
    ]


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_check_env_passes_on_bundled_data(env_id):
    env = gymnasium.make(f"pivot_envs:{env_id}")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the checker's warnings are failures here
        check_env(env.unwrapped, skip_render_check=True)
    obs, info = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    assert isinstance(json.loads(obs["messages"]), list) and json.loads(obs["tools"])
    assert info["expert"]["role"] == "assistant"


def test_reset_by_pivot_id_and_seeded_sampling():
    env = gymnasium.make("pivot_envs:pivot/ToolUse-v0", pivots=make_pivots())
    _, info = env.reset(options={"pivot_id": "p3"})
    assert info["pivot_id"] == "p3"
    first = [env.reset(seed=s)[1]["pivot_id"] for s in range(6)]
    assert first == [env.reset(seed=s)[1]["pivot_id"] for s in range(6)]
    with pytest.raises(KeyError, match="nope"):
        env.reset(options={"pivot_id": "nope"})


def test_step_scores_text_and_message_actions_and_terminates():
    env = gymnasium.make("pivot_envs:pivot/ToolUse-v0", pivots=make_pivots())
    _, info = env.reset(options={"pivot_id": "p2"})
    _, reward, terminated, truncated, step_info = env.step('<tool_call>{"name": "get_order", "arguments": {"id": 2}}</tool_call>')
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert {"strict_reward", "reason", "pivot_id", "error", "passed", "verifier"} <= set(step_info)
    assert step_info["pivot_id"] == "p2" and step_info["error"] is None
    env.reset(options={"pivot_id": "p2"})
    assert env.step(info["expert"])[1] == 1.0
    env.reset(options={"pivot_id": "p2"})
    assert env.step("I refuse")[1] == 0.0


def test_step_many_scores_a_group_without_reloading():
    env = gymnasium.make("pivot_envs:pivot/ToolUse-v0", pivots=make_pivots())
    env.reset(options={"pivot_id": "p1"})
    group = ['{"name": "get_order", "arguments": {"id": 1}}', "nonsense", '{"name": "get_order", "arguments": {"id": 9}}']
    scored = env.unwrapped.step_many(group)
    assert [r for r, _ in scored] == [1.0, 0.0, 0.0]
    assert env.unwrapped.step_many(group) == scored  # repeatable at the same pivot


def test_custom_verifier_is_used():
    env = PivotEnv(pivots=make_pivots(), domain="tool_use", verifier={"name": "strict"})
    assert env.verifier.config() == {"name": "strict"}


def test_errors_name_the_problem():
    with pytest.raises(ValueError, match="unknown domain"):
        PivotEnv(pivots=make_pivots(), domain="nope")
    with pytest.raises(ValueError, match="no pivots"):
        PivotEnv(pivots=[], domain="tool_use")
    with pytest.raises(RuntimeError, match="reset"):
        PivotEnv(pivots=make_pivots()).step("x")


def test_pivot_file_source(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps(p.to_dict()) + "\n" for p in make_pivots(3)))
    env = gymnasium.make("pivot_envs:pivot/ToolUse-v0", pivots=str(path))
    assert len(env.unwrapped.pivots) == 3


def test_render_ansi_shows_context_and_expert():
    env = gymnasium.make("pivot_envs:pivot/ToolUse-v0", pivots=make_pivots(), render_mode="ansi")
    env.reset(options={"pivot_id": "p0"})
    text = env.render()
    assert "order 0" in text and "EXPERT" in text and "get_order" in text
