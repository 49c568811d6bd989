"""An ``mcp:`` world reads a list the way a recorded task holds it (issue 37, item 6).

The server is the MCP SDK's own ``MCPServer`` (``tests/mcp_servers/list_results.py``, a real stdio process): a tool
that returns a list sends one text block per item. A task file records that result as one JSON array (as pivots cut
from it show it), so the world must give the same value, or the replay check flags a world in the right state.
"""

from __future__ import annotations

import json
import sys

import pytest

pytest.importorskip("mcp.server.mcpserver")

from conftest import ROOT  # noqa: E402
from pivot_envs.episode_env import EpisodeEnv  # noqa: E402
from pivot_envs.types import Trajectory  # noqa: E402
from pivot_envs.worlds import WorldTask, build_world  # noqa: E402

SERVER = {"name": "mcp", "command": [sys.executable, str(ROOT / "tests" / "mcp_servers" / "list_results.py")]}
FLIGHTS = [{"flight": "HAT001", "origin": "SFO", "seats": 3}, {"flight": "HAT002", "origin": "SFO", "seats": 0}]


def test_a_list_sent_as_one_block_per_item_reads_as_the_json_array():
    world = build_world(SERVER)
    try:
        world.start(WorldTask(id="t"))
        listed = world.call("find_flights", {"origin": "SFO"})
        single = world.call("status", {"flight": "HAT001"})
    finally:
        world.close()
    assert json.loads(listed.content) == FLIGHTS and listed.content.startswith("[")
    assert json.loads(single.content) == {"flight": "HAT001", "status": "on time"}  # one block: as it was


def test_the_replay_check_finds_the_recorded_array_equal():
    call = {"id": "call_0", "type": "function",
            "function": {"name": "find_flights", "arguments": json.dumps({"origin": "SFO"})}}
    task = Trajectory(messages=[
        {"role": "system", "content": "You help travellers."},
        {"role": "user", "content": "Which flights leave SFO?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_0", "name": "find_flights", "content": json.dumps(FLIGHTS)},
        {"role": "assistant", "content": "HAT001 has 3 seats left; HAT002 is full."}], meta={"id": "flights-1"})
    env = EpisodeEnv(tasks=[task], world=SERVER, user="none", success_rules=["state"])
    try:
        env.reset(options={"task_id": "flights-1"})
        for message in (m for m in task.messages if m["role"] == "assistant"):
            env.step(message)
        check = env.replay_check()
    finally:
        env.close()
    assert check.compared == 1 and check.match is True, check.mismatch
