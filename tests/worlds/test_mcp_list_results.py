"""An ``mcp:`` world reads a list the way a recorded task holds it (issue 37, item 6; issue 48, item 10).

The server is the MCP SDK's own ``MCPServer`` (``tests/mcp_servers/list_results.py``, a real stdio process): a tool
that returns a list sends one text block per item and no block for an empty list; with ``--text-only`` it sends no
structured result either (the channel of servers built on the SDK's FastMCP 1.x, such as tau3-bench's airline
server). A task file records a list as one JSON array (as pivots cut from it show it), so the world must read the
same value, or the replay check flags a world in the right state.
"""

from __future__ import annotations

import json
import sys

import pytest

pytest.importorskip("mcp.server.mcpserver")

from tests.conftest import ROOT  # noqa: E402
from pivot_envs.episodes import EpisodeEnv  # noqa: E402
from pivot_envs.types import Trajectory  # noqa: E402
from pivot_envs.worlds import WorldTask, build_world  # noqa: E402

SCRIPT = str(ROOT / "tests" / "mcp_servers" / "list_results.py")
SERVER = {"name": "mcp", "command": [sys.executable, SCRIPT]}
TEXT_ONLY = {"name": "mcp", "command": [sys.executable, SCRIPT, "--text-only"]}
FLIGHTS = {"SFO": [{"flight": "HAT001", "origin": "SFO", "seats": 3}, {"flight": "HAT002", "origin": "SFO", "seats": 0}],
           "JFK": [{"flight": "HAT003", "origin": "JFK", "seats": 5}], "SEA": []}


def test_a_list_sent_as_one_block_per_item_reads_as_the_json_array():
    world = build_world(SERVER)
    try:
        world.start(WorldTask(id="t"))
        listed = world.call("find_flights", {"origin": "SFO"})
        one = world.call("find_flights", {"origin": "JFK"})
        empty = world.call("find_flights", {"origin": "SEA"})
        single = world.call("status", {"flight": "HAT001"})
    finally:
        world.close()
    assert json.loads(listed.content) == FLIGHTS["SFO"] and listed.content.startswith("[")
    assert json.loads(one.content) == FLIGHTS["JFK"]  # one block, but the structured result says it is a list
    assert empty.content == "[]" and not empty.error  # no block at all: the structured result's empty list
    assert json.loads(single.content) == {"flight": "HAT001", "status": "on time"}  # one object: as it was


def test_without_structured_results_the_blocks_are_what_there_is():
    world = build_world(TEXT_ONLY)
    try:
        world.start(WorldTask(id="t"))
        listed, one, empty = (world.call("find_flights", {"origin": o}) for o in ("SFO", "JFK", "SEA"))
    finally:
        world.close()
    assert json.loads(listed.content) == FLIGHTS["SFO"]
    assert json.loads(one.content) == FLIGHTS["JFK"][0]  # one block: the item; nothing says it was a list
    assert empty.content == "" and not empty.error


def _flights_task(recorded: dict[str, str]) -> Trajectory:
    """A task that looks up each origin of ``recorded``, its results recorded as ``recorded[origin]``."""
    messages = [{"role": "system", "content": "You help travellers."},
                {"role": "user", "content": "Which flights leave SFO, JFK or SEA?"}]
    for i, (origin, content) in enumerate(recorded.items()):
        call = {"id": f"call_{i}", "type": "function",
                "function": {"name": "find_flights", "arguments": json.dumps({"origin": origin})}}
        messages += [{"role": "assistant", "content": None, "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": call["id"], "name": "find_flights", "content": content}]
    messages.append({"role": "assistant", "content": "HAT001 and HAT003 have seats; HAT002 is full."})
    return Trajectory(messages=messages, meta={"id": "flights-1"})


def _replay(world: dict, task: Trajectory):
    env = EpisodeEnv(tasks=[task], world=world, user="none", success_rules=["state"], score_turns=False)
    try:
        env.reset(options={"task_id": task.id})
        for message in (m for m in task.messages if m["role"] == "assistant"):
            env.step(message)
        return env.replay_check()
    finally:
        env.close()


@pytest.mark.parametrize("world", [SERVER, TEXT_ONLY], ids=["structured", "text-only"])
def test_the_replay_check_finds_the_recorded_arrays_equal(world):
    recorded = {origin: json.dumps(flights) for origin, flights in FLIGHTS.items()}  # what a recorder writes
    check = _replay(world, _flights_task(recorded))
    assert check.compared == 3 and check.match is True, check.mismatch


def test_the_replay_check_still_flags_lists_that_differ():
    wrong = {"SFO": json.dumps(FLIGHTS["SFO"][:1]), "JFK": "[]", "SEA": json.dumps(FLIGHTS["JFK"])}
    check = _replay(TEXT_ONLY, _flights_task(wrong))
    assert check.compared == 3 and check.matched == 0, check
    assert "task flights-1, turn 1" in check.mismatch and "find_flights" in check.mismatch
