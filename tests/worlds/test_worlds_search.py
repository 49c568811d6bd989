"""The search world against the bundled search trajectories: every recorded tool result comes back."""

from __future__ import annotations

import pickle

import pytest

from pivot_envs.envs_data import load_trajectories
from pivot_envs.sources import resolve_pivots
from pivot_envs.worlds import WorldError, WorldTask, build_world, context_calls


@pytest.fixture(scope="module")
def world():
    w = build_world("search")
    yield w
    w.close()


@pytest.mark.parametrize("split", ["train", "test"])
def test_search_world_reproduces_every_recorded_tool_result(world, split):
    same = total = errors = 0
    mismatches = []
    for traj in load_trajectories("search", split):
        world.start(WorldTask.from_trajectory(traj, "search"))
        results = {}
        for message in traj.messages:
            if message.get("role") == "assistant":
                for call, result in world.execute(message):
                    results[call["id"]] = result
            elif message.get("role") == "tool":
                total += 1
                got = results[message["tool_call_id"]]
                errors += got.error
                if got.content == message["content"]:
                    same += 1
                elif len(mismatches) < 3:
                    mismatches.append((traj.id, message["tool_call_id"]))
    assert total > 200 and errors > 0  # the bundled data has wrong-id opens: tool errors replay too
    assert same == total, f"{same}/{total} reproduced; first mismatches {mismatches}"


def test_search_world_is_stateless_with_a_constant_digest(world):
    traj = load_trajectories("search", "test")[0]
    task = WorldTask.from_trajectory(traj, "search")
    assert task.config == {"corpus_seed": 0}
    world.start(task)
    digest = world.digest()
    hits = world.call("search", '{"query": "river", "top_k": 3}')
    assert not hits.error and hits.content.startswith("[")
    assert world.call("open", {"doc_id": "nope"}).error
    assert world.call("open", "[1, 2]").error  # not an object: a tool error the agent sees
    assert world.call("delete", {}).content.startswith("Error: unknown tool")
    assert world.digest() == digest and len(digest) == 64
    assert [t["function"]["name"] for t in world.tools()] == ["search", "open"]
    other = build_world({"name": "search"})
    other.start(WorldTask(id="x", config={"corpus_seed": 3}))
    assert other.digest() != digest  # another corpus, another digest
    assert pickle.loads(pickle.dumps(world.config())) == {"name": "search"}


def test_search_world_errors_before_start_and_at_pivot():
    world = build_world("search")
    with pytest.raises(WorldError, match="before start"):
        world.call("search", {"query": "x"})
    pivot = next(p for p in resolve_pivots("bundled:search:test") if len(context_calls(p.context)) >= 2)
    results = world.at_pivot(WorldTask.from_pivot(pivot), pivot.context)
    assert [r.content for r in results] == [m["content"] for m in pivot.context if m.get("role") == "tool"]
