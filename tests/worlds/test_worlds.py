"""Worlds: the protocol, the registry and the built-in worlds against their domains' bundled data."""

from __future__ import annotations

import pickle

import pytest

from pivot_envs.envs_data import load_trajectories
from pivot_envs.sources import resolve_pivots
from pivot_envs.worlds import World, WorldTask, build_world, context_calls


def replay_tool_results(world: World, traj, domain: str) -> tuple[int, int]:
    """Executes a trajectory's calls in ``world``; returns (tool results reproduced, tool messages)."""
    world.start(WorldTask.from_trajectory(traj, domain))
    results, same, total = {}, 0, 0
    for message in traj.messages:
        if message.get("role") == "assistant":
            for call, result in world.execute(message):
                results[call["id"]] = result
        elif message.get("role") == "tool":
            total += 1
            same += results[message["tool_call_id"]].content == message["content"]
    return same, total


def test_registry_names_close_matches_and_builds_from_config():
    with pytest.raises(ValueError, match="did you mean 'tool_use'"):
        build_world("tool_us")
    world = build_world("tool_use")
    assert build_world(world.config()).name == "tool_use"
    assert pickle.loads(pickle.dumps(world.config())) == {"name": "tool_use"}
    with pytest.raises(ValueError, match="give the server command"):
        build_world("mcp:")


def test_tool_use_world_reproduces_every_recorded_tool_result():
    world = build_world("tool_use")
    same = total = 0
    for traj in load_trajectories("tool_use", "test"):
        s, t = replay_tool_results(world, traj, "tool_use")
        same, total = same + s, total + t
    assert total > 100 and same == total


def test_tool_use_digest_tracks_writes_and_start_resets():
    world = build_world("tool_use")
    traj = next(t for t in load_trajectories("tool_use", "test") if t.meta.get("task") == "cancel_order")
    task = WorldTask.from_trajectory(traj, "tool_use")
    world.start(task)
    fresh = world.digest()
    replay_tool_results(world, traj, "tool_use")
    changed = world.digest()
    assert changed != fresh
    world.start(task)
    assert world.digest() == fresh  # a new episode does not see the last one's writes
    bad = world.call("get_order", {"order_id": "NOPE"})
    assert bad.error and bad.content.startswith("Error:") and world.digest() == fresh


def test_at_pivot_replays_the_context_calls():
    pivot = next(p for p in resolve_pivots("bundled:tool_use:test") if len(context_calls(p.context)) >= 2)
    world = build_world("tool_use")
    results = world.at_pivot(WorldTask.from_pivot(pivot), pivot.context)
    recorded = [m["content"] for m in pivot.context if m.get("role") == "tool"]
    assert [r.content for r in results] == recorded


def test_transfer_wording_is_not_state_but_the_transfer_is():
    world = build_world("tool_use")
    task = WorldTask(id="t", domain="tool_use", config={"world_seed": 0})
    digests = []
    for summary in ("Customer asks for a price match on order CL-1.", "Price-match request, order CL-1"):
        world.start(task)
        world.call("transfer_to_human", {"summary": summary, "priority": "normal"})
        digests.append(world.digest())
    world.start(task)
    fresh = world.digest()
    world.call("transfer_to_human", {"summary": "x", "priority": "urgent"})
    assert digests[0] == digests[1] != fresh and world.digest() not in (fresh, digests[0])
