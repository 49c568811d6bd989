"""The task's user through the harness (issue 37, item 2), and exports that replay (item 3).

A rollout of a task with a user lists one more tool, ``send_message_to_user``; the harness is
``examples/harness_minimal.py`` (unchanged: it calls whatever tools the rollout lists), a real subprocess against a
real endpoint; the policy is ``replay`` (the expert's own actions). The LLM user is a real OpenAI-compatible HTTP
server in a subprocess (``tests/servers.py``) whose reply the test sets: an LLM that plays a user cannot run here.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("mcp")

import httpx  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from tests.conftest import ROOT, scaled  # noqa: E402
from tests.servers import control, start_fake_openai  # noqa: E402
from pivot_envs.agents.spec import build_agent  # noqa: E402
from pivot_envs.cli import app  # noqa: E402
from pivot_envs.episodes import EpisodeEnv  # noqa: E402
from pivot_envs.harness.envs import EpisodeEnvs  # noqa: E402
from pivot_envs.harness.export import write_rollouts  # noqa: E402
from pivot_envs.harness.http import HarnessEndpoint, HarnessServer  # noqa: E402
from pivot_envs.harness.policy import EnginePolicy  # noqa: E402
from pivot_envs.harness.replay import replay_rollout  # noqa: E402
from pivot_envs.harness.rollouts import HarnessRollouts  # noqa: E402

TOOL_USE = "pivot/ToolUse-Episode-v0"
TERMINAL = "pivot/Terminal-Episode-v0"
MINIMAL = ROOT / "examples" / "harness_minimal.py"


def _server(user="scripted"):
    rollouts = HarnessRollouts(EnginePolicy(build_agent("replay")), EpisodeEnvs(allowed={TOOL_USE, TERMINAL}, user=user),
                               idle_timeout_s=600, max_turns=30)
    return HarnessServer(HarnessEndpoint(rollouts))


def _play(server, tmp_path, **spec) -> dict:
    opened = httpx.post(server.url + "/harness/rollouts", json={"split": "test", **spec}, timeout=scaled(60)).json()
    task = tmp_path / f"{opened['rollout_id']}.json"
    task.write_text(json.dumps(opened))
    done = subprocess.run([sys.executable, str(MINIMAL), str(task)], capture_output=True, text=True,
                          timeout=scaled(120))
    assert done.returncode == 0, done.stderr[-2000:]
    return httpx.post(opened["base_url"].rsplit("/v1", 1)[0] + "/finish", timeout=scaled(60)).json()


@pytest.fixture(scope="module")
def conversational():
    """Three tool_use test tasks whose user answers the agent at least twice: their recorded user turns."""
    env = EpisodeEnv(tasks="bundled:tool_use:test", domain="tool_use")
    try:
        users = {t.id: [m["content"] for m in t.messages if m["role"] == "user"] for t in env.tasks}
    finally:
        env.close()
    return {tid: turns for tid, turns in users.items() if len(turns) >= 3}


def test_the_expert_talks_to_the_scripted_user_through_the_harness_and_the_export_replays(conversational, tmp_path):
    chosen = sorted(conversational)[:3]
    with _server() as server:
        results = [_play(server, tmp_path, env=TOOL_USE, task_id=tid) for tid in chosen]
    env = EpisodeEnv(tasks="bundled:tool_use:test", domain="tool_use", user="scripted")
    try:
        for r in results:
            assert r["success"] is True, r["reason"]
            assert [m["content"] for m in r["messages"] if m["role"] == "user"] == conversational[r["task_id"]]
            assert r["user_messages"] == len(conversational[r["task_id"]]) - 1 and r["cut"] is None
            assert not any(m.get("tool_calls") and m["tool_calls"][0]["function"]["name"] == "send_message_to_user"
                           for m in r["messages"])  # in the judged episode a message to the user is assistant text
            replayed = replay_rollout(r, env)
            assert replayed.error is None and replayed.tool_results_equal
            assert (replayed.success, replayed.digest) == (r["success"], r["digest"])
    finally:
        env.close()
    rows = tmp_path / "rows.jsonl"
    write_rollouts(results, rows)
    out = tmp_path / "replayed.jsonl"
    ids = [a for tid in chosen for a in ("--task-id", tid)]
    played = CliRunner().invoke(app, ["play", "--env", TOOL_USE, "--agent", f"replay:{rows}", "--user", "scripted",
                                      *ids, "-o", str(out)])
    assert played.exit_code == 0, played.output
    again = {row["id"]: row for row in map(json.loads, out.read_text().splitlines())}
    assert sorted(again) == chosen
    assert all(again[r["task_id"]]["success"] == r["success"] for r in results)


def test_a_task_without_user_turns_gets_no_user_tool(tmp_path):
    with _server() as server:
        opened = httpx.post(server.url + "/harness/rollouts", json={"env": TERMINAL, "split": "test", "index": 0}).json()
        assert opened["user"] is None and "send_message_to_user" not in [t["function"]["name"] for t in opened["tools"]]
        answer = server.endpoint.rollouts.call_tool(opened["rollout_id"], "send_message_to_user", {"message": "hi"})
        assert answer.error and "unknown tool" in answer.content


def test_an_llm_user_that_ends_the_conversation_ends_the_episode(conversational, tmp_path):
    llm = start_fake_openai(tmp_path / "user.log")
    try:
        control(llm, reply="Thanks, that is all I needed. ###STOP###")
        with _server(user=f"openai:user-model@{llm.base_url}") as server:
            opened = httpx.post(server.url + "/harness/rollouts",
                                json={"env": TOOL_USE, "split": "test", "task_id": sorted(conversational)[0]}).json()
            assert opened["user"] == "send_message_to_user"
            rollouts = server.endpoint.rollouts
            said = rollouts.call_tool(opened["rollout_id"], "send_message_to_user", {"message": "Anything else?"})
            assert not said.error and said.content.startswith("Thanks, that is all I needed.")
            assert "ended the conversation" in said.content
            chat = httpx.post(opened["base_url"] + "/chat/completions", json={"messages": opened["messages"]}).json()
            assert chat["pivot_envs"] == {"cut": "user_ended", "captured": False}
            late = rollouts.call_tool(opened["rollout_id"], "get_order", {"order_id": "X"})
            assert late.error and "user ended the conversation" in late.content
            result = httpx.post(opened["base_url"].rsplit("/v1", 1)[0] + "/finish").json()
    finally:
        llm.stop()
    assert result["cut"] == "user_ended" and result["truncated"] is False and result["calls"] == []
    assert result["messages"][-2:] == [{"role": "assistant", "content": "Anything else?"},
                                       {"role": "user", "content": "Thanks, that is all I needed."}]
    assert result["tool_calls"][0]["user"] is True and len(result["tool_calls"]) == 1
