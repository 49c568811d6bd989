"""One rendering of MCP results: a value reads the same in an episode and in the task that recorded it (issue 48,
item 10).

The server is a FastMCP server (PyPI ``fastmcp``, ``tests/mcp_servers/fastmcp_shapes.py``, a real stdio process)
whose tools return every shape of result, with structured results or ``--text-only`` (a list as one JSON text
block, an empty list as no block). A task is recorded the way a recorder that runs the tools itself writes it (the
JSON text of the value, a text as it is, ``Error: MESSAGE`` for a raised error) and replayed through
``EpisodeEnv``: the replay check must flag no result that is equal as data, and must flag every one that is not.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from typing import Any

import pytest

pytest.importorskip("fastmcp")

from tests.conftest import ROOT  # noqa: E402
from pivot_envs.episodes import EpisodeEnv  # noqa: E402
from pivot_envs.types import Trajectory  # noqa: E402
from pivot_envs.worlds import WorldTask, build_world  # noqa: E402
from pivot_envs.worlds.mcp_results import as_sent, same_as_sent  # noqa: E402

SCRIPT = ROOT / "tests" / "mcp_servers" / "fastmcp_shapes.py"
WORLDS = {"structured": {"name": "mcp", "command": [sys.executable, str(SCRIPT)]},
          "text-only": {"name": "mcp", "command": [sys.executable, str(SCRIPT), "--text-only"]}}
HAT001 = {"flight": "HAT001", "origin": "SFO", "destination": "JFK", "seats": 3}
HAT003 = {"flight": "HAT003", "origin": "JFK", "destination": "SEA", "seats": 5}


def _shapes() -> Any:
    """A fresh copy of the server's module: its tools as plain functions on a fresh state (how a recorder runs them)."""
    spec = importlib.util.spec_from_file_location("fastmcp_shapes_for_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SHAPES = _shapes()


def _record() -> dict[str, str]:
    """Every call of ``CALLS`` run in order on one fresh state, recorded as a recorder writes it."""
    tools, out = _shapes(), {}
    for shape, (name, args) in SHAPES.CALLS.items():
        try:
            value = getattr(tools, name)(**args)
            out[shape] = value if isinstance(value, str) else json.dumps(value)
        except ValueError as exc:
            out[shape] = f"Error: {exc}"
    return out


def _task(task_id: str, recorded: dict[str, str]) -> Trajectory:
    messages = [{"role": "system", "content": "You help travellers."}, {"role": "user", "content": "Flights?"}]
    for i, (shape, (name, args)) in enumerate(SHAPES.CALLS.items()):
        call = {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
        messages += [{"role": "assistant", "content": None, "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": call["id"], "name": name, "content": recorded[shape]}]
    messages.append({"role": "assistant", "content": "That is all I found."})
    return Trajectory(messages=messages, meta={"id": task_id})


def _replay(world: dict[str, Any], tasks: list[Trajectory]) -> dict[str, Any]:
    env = EpisodeEnv(tasks=tasks, world=world, user="none", success_rules=["state"], score_turns=False)
    checks = {}
    try:
        for task in tasks:
            env.reset(options={"task_id": task.id})
            for message in (m for m in task.messages if m["role"] == "assistant"):
                env.step(message)
            checks[task.id] = env.replay_check()
    finally:
        env.close()
    return checks


def test_each_shape_reads_as_its_value():
    recorded = _record()
    for mode, spec in WORLDS.items():
        world = build_world(spec)
        try:
            world.start(WorldTask(id="t"))
            got = {shape: world.call(name, args) for shape, (name, args) in SHAPES.CALLS.items()}
        finally:
            world.close()
        assert got["error"].error and got["error"].content == "Error: flight HAT999 not found", mode
        assert got["text"].content == "Booked a seat on HAT001." and got["number"].content == "3", mode
        for shape in ("one-item list", "list of objects", "list of texts", "list of pairs", "object"):
            assert json.loads(got[shape].content) == json.loads(recorded[shape]), (mode, shape, got[shape].content)
        # an empty list: the structured result says so; sent as text only, it is no block at all
        assert got["empty list"].content == ("[]" if mode == "structured" else ""), mode


# A recording of each call that differs from what the server returns, as data.
WRONG = {
    "empty list": json.dumps([HAT003]),
    "one-item list": "[]",
    "list of objects": json.dumps([HAT001]),
    "list of texts": json.dumps(["JFK", "SEA"]),
    "list of pairs": "[]",
    "number": "4",
    "object": json.dumps({**HAT003, "seats": 6}),
    "text": "Booked a seat on HAT002.",
    "error": "Error: flight HAT998 not found",
}


@pytest.mark.parametrize("mode", list(WORLDS))
def test_the_replay_check_flags_what_differs_as_data_and_nothing_else(mode):
    assert set(WRONG) == set(SHAPES.CALLS)
    checks = _replay(WORLDS[mode], [_task("recorded", _record()), _task("wrong", WRONG)])
    right, wrong = checks["recorded"], checks["wrong"]
    assert right.compared == len(SHAPES.CALLS) and right.match is True, right.mismatch
    assert wrong.compared == len(SHAPES.CALLS) and wrong.matched == 0, wrong
    assert wrong.mismatch.startswith("task wrong") and "find_flights" in wrong.mismatch


def test_as_sent_is_what_a_server_without_structured_results_keeps():
    assert as_sent("[]") == as_sent("null") == as_sent("") == ""
    assert same_as_sent(json.dumps([HAT001]), json.dumps(HAT001))  # one block for a one-item list
    assert same_as_sent(json.dumps([[HAT001, HAT003]]), json.dumps([HAT001, HAT003]))  # pairs are flattened
    assert same_as_sent('["SFO", "JFK"]', "SFO\nJFK")  # a list of texts: a text block each
    assert as_sent(as_sent(json.dumps([HAT001, HAT003]))) == as_sent(json.dumps([HAT001, HAT003]))
    assert not same_as_sent("[]", json.dumps([HAT001]))
    assert not same_as_sent(json.dumps([HAT001, HAT003]), json.dumps([HAT003, HAT001]))  # order is data
    assert not same_as_sent("3", "4") and not same_as_sent("[1, 2]", "[1, 2, 3]")
