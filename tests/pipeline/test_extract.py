import json

import pytest

from pivot_envs import Fixture, Trajectory
from pivot_envs.pipeline.extract import ExtractOptions, extract_pivots
from tests.conftest import shared_file


def call(name, args, cid="c1"):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def episode(user="cancel order A1", tool_result='{"status": "ok"}', reward=1.0, tid="t1"):
    return Trajectory(
        messages=[
            {"role": "system", "content": "policy"},
            {"role": "user", "content": user},
            {"role": "assistant", "content": None, "tool_calls": [call("cancel", {"order_id": "A1"})]},
            {"role": "tool", "tool_call_id": "c1", "content": tool_result},
            {"role": "assistant", "content": "Done, it is cancelled."},
        ],
        reward=reward,
        meta={"id": tid, "alternatives": {"2": [{"role": "assistant", "content": None, "tool_calls": [call("cancel", {"order_id": "A1"})]}]}},
    )


def test_one_candidate_per_assistant_turn_with_context_and_stable_ids():
    pivots, audit = extract_pivots([episode()], "tool_use")
    assert [p.meta["turn"] for p in pivots] == [2, 4]
    assert pivots[0].context == episode().messages[:2]
    assert pivots[0].expert["tool_calls"][0]["function"]["name"] == "cancel"
    assert pivots[0].meta["alternatives"] and "alternatives" not in pivots[1].meta
    again, _ = extract_pivots([episode()], "tool_use")
    assert [p.id for p in pivots] == [p.id for p in again]
    assert len({p.id for p in pivots}) == 2
    assert audit.kept == {"tool_call": 1, "text": 1}


def test_min_reward_drops_failed_trajectories():
    pivots, audit = extract_pivots([episode(reward=0.0), episode(tid="t2", user="other")], "tool_use", ExtractOptions(min_reward=1.0))
    assert {p.meta["trajectory_id"] for p in pivots} == {"t2"}
    assert audit.skipped["trajectory_below_min_reward"] == 2
    assert audit.trajectories_used == 1


def test_tool_error_turns_are_skipped_unless_kept():
    bad = episode(tool_result="Error: order A1 not found")
    pivots, audit = extract_pivots([bad], "tool_use")
    assert [p.meta["turn"] for p in pivots] == [4] and audit.skipped["tool_error"] == 1
    kept, _ = extract_pivots([bad], "tool_use", ExtractOptions(skip_tool_errors=False))
    assert len(kept) == 2


def test_chat_only_turns_follow_the_domain_default_and_the_override():
    pivots, audit = extract_pivots([episode()], "terminal")  # the final answer is a pivot in every built-in domain
    assert [p.meta["kind"] for p in pivots] == ["tool_call", "text"] and audit.kept["text"] == 1
    assert len(extract_pivots([episode()], "swe")[0]) == 1  # swe ends with `submit`: its chat-only turns are skipped
    assert len(extract_pivots([episode()], "terminal", ExtractOptions(skip_chat_only=True))[0]) == 1
    assert len(extract_pivots([episode()], "tool_use", ExtractOptions(skip_chat_only=True))[0]) == 1


def test_dedup_ignores_call_ids_and_argument_spelling():
    a = episode(tid="a")
    b = episode(tid="b")
    b.messages[2] = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "zz", "type": "function", "function": {"name": "cancel", "arguments": '{ "order_id" :"A1"}'}}]}
    b.messages[3] = {**b.messages[3], "tool_call_id": "zz"}
    pivots, audit = extract_pivots([a, b], "tool_use")
    assert len(pivots) == 2 and audit.skipped["duplicate"] == 2
    assert len(extract_pivots([a, b], "tool_use", ExtractOptions(dedup=False))[0]) == 4


def test_dedup_keeps_tasks_that_open_alike_but_differ_in_tools_world_settings_or_start_fixture():
    tool = {"type": "function", "function": {"name": "cancel", "parameters": {"type": "object", "properties": {}}}}
    other_tool = {"type": "function", "function": {"name": "refund", "parameters": {"type": "object", "properties": {}}}}

    def variant(tid, tools=(), seed=0, fixture=None):
        traj = episode(tid=tid)
        traj.tools, traj.fixture = list(tools), fixture
        traj.meta["world_seed"] = seed
        return traj

    def kept(*trajs, domain="tool_use"):
        return len(extract_pivots(list(trajs), domain)[0])

    assert kept(variant("a", [tool]), variant("b", [tool])) == 2  # the same task twice: merged
    assert kept(variant("a", [tool, other_tool]), variant("b", [other_tool, tool])) == 2  # tool order is free
    assert kept(variant("a", [tool]), variant("b", [tool, other_tool])) == 4  # other tools
    assert kept(variant("a", seed=0), variant("b", seed=1)) == 4  # other world settings (meta["world"])
    pivots, _ = extract_pivots([variant("a", seed=0), variant("b", seed=1)], "tool_use")
    assert {p.meta["world"]["config"]["world_seed"] for p in pivots} == {0, 1}
    start = Fixture(files={"x": "1"})
    assert kept(variant("a", fixture=start), variant("b", fixture=Fixture(files={"x": "2"})), domain="terminal") == 4
    assert kept(variant("a", fixture=start), variant("b", fixture=start), domain="terminal") == 2


def test_turn_cap():
    pivots, audit = extract_pivots([episode()], "tool_use", ExtractOptions(max_turns_per_trajectory=1))
    assert len(pivots) == 1 and audit.skipped["turn_cap"] == 1


def test_terminal_fixture_replays_earlier_commands():
    traj = Trajectory(
        messages=[
            {"role": "user", "content": "make dirs"},
            {"role": "assistant", "content": None, "tool_calls": [call("bash", {"command": "mkdir out"})]},
            {"role": "tool", "tool_call_id": "c1", "content": ""},
            {"role": "assistant", "content": None, "tool_calls": [call("bash", {"command": "cd out && touch a"}, "c2")]},
            {"role": "tool", "tool_call_id": "c2", "content": ""},
            {"role": "assistant", "content": None, "tool_calls": [call("bash", {"command": "ls out"}, "c3")]},
        ],
        fixture=Fixture(files={"x": "1"}, setup="echo setup > s", workdir="/testbed"),
    )
    pivots, _ = extract_pivots([traj], "terminal")
    setups = [p.fixture.setup for p in pivots]
    assert setups[0] == "echo setup > s"
    assert setups[1] == "echo setup > s\n(\nmkdir out\n)"
    assert setups[2].endswith("(\ncd out && touch a\n)")  # each command in its own subshell: cd does not leak
    assert all(p.fixture.files == {"x": "1"} and p.fixture.workdir == "/testbed" for p in pivots)


def test_tau_bench_reward_one_tool_call_pivots_equal_tool_call_turns():
    from pivot_envs.formats import read_trajectories

    path = shared_file("tau-bench/gpt-4o-airline.jsonl")
    trajs = read_trajectories(path)
    winners = [t for t in trajs if t.reward == 1.0]
    assert len(winners) == 84
    tool_turns = sum(1 for t in winners for m in t.messages if m["role"] == "assistant" and m.get("tool_calls"))
    opts = ExtractOptions(min_reward=1.0, skip_tool_errors=False)
    pivots, audit = extract_pivots(trajs, "tool_use", opts)
    assert audit.kept["tool_call"] == tool_turns == sum(1 for p in pivots if p.expert.get("tool_calls"))
    # with the default (skip turns answered by a tool error) exactly those turns go
    errors = sum(1 for t in winners for i, m in enumerate(t.messages)
                 if m["role"] == "tool" and m["content"].startswith("Error") and t.messages[i - 1].get("tool_calls"))
    default_pivots, default_audit = extract_pivots(trajs, "tool_use", ExtractOptions(min_reward=1.0))
    assert default_audit.kept["tool_call"] == tool_turns - errors
    assert default_audit.skipped["tool_error"] == errors > 0
