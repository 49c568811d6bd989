"""The harness endpoint (issue 28) over real HTTP: rollouts, the OpenAI-compatible face, the world over MCP, capture.

The policy is the demo's shipped terminal base (a 1.2M-parameter Llama, ``terminal_base``) sampling in-process
(the ``hf`` agent); the harness is ``examples/harness_minimal.py`` (the openai client and the MCP SDK's client)
run as a subprocess, or plain HTTP calls where a test checks an error. Nothing of the endpoint is mocked.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("mcp")

import httpx  # noqa: E402

from tests.conftest import ROOT, scaled  # noqa: E402
from pivot_envs.agents.spec import build_agent  # noqa: E402
from pivot_envs.episodes import EpisodeEnv  # noqa: E402
from pivot_envs.formats import read_trajectories  # noqa: E402
from pivot_envs.formats.atif import trajectories_from_atif  # noqa: E402
from pivot_envs.pipeline.extract import ExtractOptions, extract_pivots  # noqa: E402
from pivot_envs.harness.http import HarnessEndpoint, HarnessServer  # noqa: E402
from pivot_envs.harness.policy import EnginePolicy  # noqa: E402
from pivot_envs.harness.replay import replay_rollout  # noqa: E402
from pivot_envs.harness.envs import EpisodeEnvs
from pivot_envs.harness.rollouts import HarnessRollouts  # noqa: E402

ENV_ID = "pivot/Terminal-Episode-v0"
TOOL_USE_ID = "pivot/ToolUse-Episode-v0"
MINIMAL = ROOT / "examples" / "harness_minimal.py"


@pytest.fixture(scope="module")
def agent(terminal_base):
    return build_agent({"kind": "hf", "model": str(terminal_base), "max_new_tokens": 40, "temperature": 1.0})


@pytest.fixture(scope="module")
def server(agent):
    rollouts = HarnessRollouts(EnginePolicy(agent), EpisodeEnvs(allowed={ENV_ID}), idle_timeout_s=600, max_turns=6)
    with HarnessServer(HarnessEndpoint(rollouts)) as srv:
        yield srv


@pytest.fixture()
def client():
    with httpx.Client(timeout=scaled(60)) as c:
        yield c


def _open(client, server, **spec):
    answer = client.post(server.url + "/harness/rollouts", json={"env": ENV_ID, "split": "test", **spec})
    assert answer.status_code == 200, answer.text
    return answer.json()


def _finish_url(opened):
    return opened["base_url"].rsplit("/v1", 1)[0] + "/finish"


def _run_minimal(opened, tmp_path: Path) -> subprocess.CompletedProcess:
    task = tmp_path / f"{opened['rollout_id']}.json"
    task.write_text(json.dumps({**opened, "model": "policy"}))
    return subprocess.run([sys.executable, str(MINIMAL), str(task)], capture_output=True, text=True,
                          timeout=scaled(120))


def test_a_harness_plays_through_the_endpoint_and_every_call_is_captured(agent, server, client, tmp_path):
    opened = _open(client, server, index=1)
    assert {"rollout_id", "task_id", "base_url", "mcp_url", "messages", "tools"} <= set(opened)
    assert opened["messages"][0]["role"] == "system" and opened["messages"][-1]["role"] == "user"
    done = _run_minimal(opened, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    result = client.post(_finish_url(opened)).json()
    assert {"task_id", "success", "reward", "turn_rewards", "retokenized_calls", "calls", "messages"} <= set(result)
    assert result["status"] == "finished" and result["error"] is None and result["success"] in (True, False)
    assert result["calls"] and len(result["turn_rewards"]) == len(result["calls"])
    for call in result["calls"]:
        assert len(call["completion_token_ids"]) == len(call["logprobs"]) > 0
        assert call["prompt_token_ids"] and call["policy_version"] == 0 and call["messages"]
    # the opening is what the harness got, then one assistant turn per model call
    assistant = [m for m in result["messages"][len(opened["messages"]):] if m["role"] == "assistant"]
    assert len(assistant) == len(result["calls"]) + result["uncaptured_tool_calls"]
    assert result["messages"][: len(opened["messages"])] == opened["messages"]
    # the captured tokens re-scored by a forward pass of the same weights (float32, CPU)
    import torch

    from pivot_envs.trainers.logprobs import completion_logprobs
    from pivot_envs.trainers.token_batch import pack

    calls = result["calls"]
    batch = pack([c["prompt_token_ids"] for c in calls], [c["completion_token_ids"] for c in calls],
                 agent.pad_id, "cpu")
    with torch.no_grad():
        logp = completion_logprobs(agent.model.eval(), batch)[0]
    deltas = [abs(float(logp[i, t]) - lp) for i, c in enumerate(calls) for t, lp in enumerate(c["logprobs"])]
    assert sum(deltas) / len(deltas) <= 1e-3, max(deltas)
    # the same episode replayed through the episode env: the same results and the same verdict
    env = EpisodeEnv(tasks="bundled:terminal:test", domain="terminal", user="none")
    try:
        replayed = replay_rollout(result, env)
    finally:
        env.close()
    assert replayed.tool_results_equal and replayed.error is None
    assert (replayed.success, replayed.digest) == (result["success"], result["digest"])


def test_retokenization_is_detected_when_a_harness_edits_its_history(server, client):
    opened = _open(client, server, index=0)
    base, messages, tools = opened["base_url"], list(opened["messages"]), opened["tools"]
    first = client.post(base + "/chat/completions", json={"messages": messages, "tools": tools}).json()
    messages.append(first["choices"][0]["message"])
    messages.append({"role": "user", "content": "Please go on."})
    assert client.post(base + "/chat/completions", json={"messages": messages, "tools": tools}).status_code == 200
    edited = [messages[0], {"role": "user", "content": "A different task entirely."}]  # history rewritten
    assert client.post(base + "/chat/completions", json={"messages": edited, "tools": tools}).status_code == 200
    result = client.post(_finish_url(opened)).json()
    flags = [c["retokenized"] for c in result["calls"]]
    assert flags[0] is False and flags[2] is True and result["retokenized_calls"] == sum(f is True for f in flags)
    prompts = [c["prompt_token_ids"] for c in result["calls"]]
    assert prompts[2] != prompts[1][: len(prompts[2])]  # nothing spliced: each call keeps its own prompt


def test_a_prompt_the_window_cut_is_not_counted_as_retokenized(agent, server, client):
    """Past the policy's window (``max_prompt_tokens``) the prompt's middle is dropped, as in training: it cannot
    extend the previous prompt whatever the harness did, so it is counted apart, never as retokenization."""
    opened = _open(client, server, index=0)
    base, messages, tools = opened["base_url"], list(opened["messages"]), opened["tools"]
    first = client.post(base + "/chat/completions", json={"messages": messages, "tools": tools}).json()
    messages.append(first["choices"][0]["message"])
    messages.append({"role": "user", "content": "Here is the listing: " + " ".join(f"file{i}.txt" for i in range(300))})
    assert client.post(base + "/chat/completions", json={"messages": messages, "tools": tools}).status_code == 200
    result = client.post(_finish_url(opened)).json()
    window = agent.prompt_config.max_prompt_tokens
    first_call, second = result["calls"]
    assert len(first_call["prompt_token_ids"]) < window == len(second["prompt_token_ids"])
    assert first_call["prompt_cut"] is False and second["prompt_cut"] is True and second["retokenized"] is False
    assert result["retokenized_calls"] == 0 and result["capture"]["window_cut_calls"] == 1


def test_bad_requests_are_refused_naming_the_field(server, client):
    url = server.url + "/harness/rollouts"
    unknown = client.post(url, json={"env": "pivot/Nope-Episode-v0"})
    assert unknown.status_code == 400 and ENV_ID in unknown.json()["detail"]["message"]
    assert client.post(url, json={"env": ENV_ID, "task_id": "x", "index": 0}).json()["detail"]["field"] == "index"
    assert client.post(url, json={"env": ENV_ID, "sede": 1}).json()["detail"]["field"] == "sede"
    missing = client.post(url, json={"env": ENV_ID, "split": "test", "task_id": "no-such-task"})
    assert missing.status_code == 400 and missing.json()["detail"]["field"] == "task_id"
    assert client.post(server.url + "/harness/rollouts/w1-nope/finish").status_code == 404
    opened = _open(client, server, index=2)
    chat = opened["base_url"] + "/chat/completions"
    for body, field in (({"messages": []}, "messages"), ({"messages": opened["messages"], "n": 2}, "n"),
                        ({"messages": opened["messages"], "stream": True}, "stream")):
        answer = client.post(chat, json=body)
        assert answer.status_code == 422 and answer.json()["error"]["param"] == field
    first = client.post(_finish_url(opened)).json()
    assert client.post(_finish_url(opened)).json() == first  # idempotent
    again = client.post(chat, json={"messages": opened["messages"]})
    assert again.status_code == 409 and "finished" in again.json()["error"]["message"]


@pytest.fixture(scope="module")
def replay_server():
    """The expert's own actions answer every call (the ``replay`` policy): deterministic episodes."""
    rollouts = HarnessRollouts(EnginePolicy(build_agent("replay")), EpisodeEnvs(allowed={ENV_ID, TOOL_USE_ID}),
                               idle_timeout_s=600, max_turns=6)
    with HarnessServer(HarnessEndpoint(rollouts)) as srv:
        yield srv


def test_the_turn_limit_ends_the_harness_loop_cleanly_and_is_recorded(replay_server, client, tmp_path):
    opened = _open(client, replay_server, index=3, max_turns=1)
    chat = opened["base_url"] + "/chat/completions"
    first = client.post(chat, json={"messages": opened["messages"], "tools": opened["tools"]}).json()
    assert first["choices"][0]["finish_reason"] == "tool_calls"  # the expert's first turn calls a tool
    closing = client.post(chat, json={"messages": opened["messages"], "tools": opened["tools"]})
    assert closing.status_code == 200  # an answer that ends a harness's loop, never an error text to repeat
    body = closing.json()
    assert body["choices"][0]["finish_reason"] == "stop" and "tool_calls" not in body["choices"][0]["message"]
    assert body["pivot_envs"] == {"cut": "turn_limit", "captured": False}
    result = client.post(_finish_url(opened)).json()
    assert result["truncated"] is True and result["cut"] == "turn_limit" and result["success"] is False
    assert len(result["calls"]) == 1 and result["closing_answers"] == 1
    # the minimal harness (8 turns of its own) against a 1-turn limit: it stops cleanly at the closing answer, which
    # is not the agent's answer in the episode the world judged
    opened = _open(client, replay_server, index=3, max_turns=1)
    done = _run_minimal(opened, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    result = client.post(_finish_url(opened)).json()
    assert result["truncated"] is True and result["cut"] == "turn_limit" and len(result["calls"]) == 1
    assert not any("turn limit" in str(m.get("content")) for m in result["messages"])


def test_an_index_past_the_tasks_is_refused_not_wrapped(replay_server, client):
    url = replay_server.url + "/harness/rollouts"
    n = len(EpisodeEnv(tasks="bundled:terminal:test", domain="terminal").tasks)
    for index in (n, 100000, -1):
        answer = client.post(url, json={"env": ENV_ID, "split": "test", "index": index})
        assert answer.status_code == 400, (index, answer.text)
        assert answer.json()["detail"]["field"] == "index" and f"[0, {n - 1}]" in answer.json()["detail"]["message"]
    assert _open(client, replay_server, index=n - 1)["task_id"]


def test_tool_choice_none_is_honoured_and_other_choices_are_named(replay_server, client):
    opened = _open(client, replay_server, index=0)
    chat = opened["base_url"] + "/chat/completions"
    body = {"messages": opened["messages"], "tools": opened["tools"]}
    none = client.post(chat, json={**body, "tool_choice": "none"}).json()["choices"][0]
    assert none["finish_reason"] == "stop" and "tool_calls" not in none["message"]
    assert "<tool_call>" in none["message"]["content"]  # the model's text, never read as a call
    for accepted in ("auto", "required", {"type": "function", "function": {"name": "bash"}}):
        answer = client.post(chat, json={**body, "tool_choice": accepted})
        assert answer.status_code == 200 and answer.json()["choices"][0]["message"]["tool_calls"], accepted
    bad = client.post(chat, json={**body, "tool_choice": "always"})
    assert bad.status_code == 422 and bad.json()["error"]["param"] == "tool_choice"
    result = client.post(_finish_url(opened)).json()
    assert result["calls"][0]["tools"] == [] and result["calls"][0]["request"]["tool_choice"] == "none"
    assert result["calls"][1]["tools"] == opened["tools"]


def test_stop_cuts_the_text_and_the_trained_tokens(terminal_base, client):
    """Greedy, the same prompt gives the same completion; with a stop sequence from inside it, the answer ends
    before it, and the captured tokens and log-probs are the uncut ones' prefix up to the token holding it."""
    agent = build_agent({"kind": "hf", "model": str(terminal_base), "max_new_tokens": 24, "temperature": 0})
    rollouts = HarnessRollouts(EnginePolicy(agent), EpisodeEnvs(allowed={ENV_ID}), idle_timeout_s=600, max_turns=6)
    with HarnessServer(HarnessEndpoint(rollouts)) as srv:
        def ask(**extra):
            opened = _open(client, srv, index=5)
            body = {"messages": opened["messages"], "tools": opened["tools"], **extra}
            answer = client.post(opened["base_url"] + "/chat/completions", json=body)
            assert answer.status_code == 200, answer.text
            return answer.json()["choices"][0], client.post(_finish_url(opened)).json()["calls"][0]

        _, whole = ask()
        text = whole["text"]
        assert len(text) > 8, text
        stop = text[len(text) // 2:len(text) // 2 + 3]
        choice, cut = ask(stop=["never in it \u2603", stop])
    assert cut["text"] == text[:text.index(stop)] and choice["finish_reason"] in ("stop", "tool_calls")
    n = len(cut["completion_token_ids"])
    assert 0 < n < len(whole["completion_token_ids"])
    assert cut["completion_token_ids"] == whole["completion_token_ids"][:n] and cut["logprobs"] == whole["logprobs"][:n]
    decoded = [agent.tokenizer.decode(cut["completion_token_ids"][:k], skip_special_tokens=True) for k in (n - 1, n)]
    assert len(decoded[0]) <= len(cut["text"]) < len(decoded[1])  # kept up to the token that starts the stop
    assert decoded[1].startswith(cut["text"])


def test_an_idle_rollout_is_abandoned_and_its_world_freed_others_unaffected(agent, tmp_path):
    rollouts = HarnessRollouts(EnginePolicy(agent), EpisodeEnvs(allowed={ENV_ID}), idle_timeout_s=0.4, max_turns=4)
    with HarnessServer(HarnessEndpoint(rollouts)) as srv, httpx.Client(timeout=scaled(60)) as client:
        idle = _open(client, srv, index=0)
        live = _open(client, srv, index=1)
        deadline = time.monotonic() + scaled(20)
        while client.get(srv.url + f"/harness/rollouts/{idle['rollout_id']}").json()["status"] == "open":
            client.post(live["base_url"] + "/chat/completions", json={"messages": live["messages"]})  # keeps it busy
            assert time.monotonic() < deadline, "the idle rollout was never abandoned"
        state = client.get(srv.url + f"/harness/rollouts/{idle['rollout_id']}").json()
        assert state["status"] == "abandoned" and "no request" in state["reason"]
        assert client.post(_finish_url(idle)).status_code == 409
        stats = client.get(srv.url + "/harness/rollouts").json()["stats"]
        assert stats["worlds_closed"] >= 1 and stats["abandoned"] >= 1
        result = client.post(_finish_url(live)).json()
        assert result["status"] == "finished" and result["calls"]


def test_a_finished_rollout_exports_as_a_trajectory_row_and_atif(server, client, tmp_path):
    opened = _open(client, server, index=4)
    assert _run_minimal(opened, tmp_path).returncode == 0
    result = client.post(_finish_url(opened)).json()
    root = server.url + f"/harness/rollouts/{opened['rollout_id']}/trajectory"
    row = client.get(root).json()
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(row) + "\n")
    (traj,) = read_trajectories(path)
    assert traj.messages == result["messages"] and traj.reward == result["reward"]
    pivots, _ = extract_pivots([traj], "terminal", ExtractOptions(min_reward=None))
    assert len(pivots) >= 1  # extract -> profile -> filter -> PivotRL starts here
    (from_atif,) = trajectories_from_atif(client.get(root, params={"format": "atif"}).json())
    assert [m["role"] for m in from_atif.messages] == [m["role"] for m in result["messages"]]
    assert client.get(root, params={"format": "csv"}).status_code == 422


def test_pivot_envs_serve_policy_mounts_the_endpoint():
    from fastapi.testclient import TestClient

    from pivot_envs.serve.app import create_app

    with TestClient(create_app(domains=["terminal"], policy="replay")) as client:
        opened = client.post("/harness/rollouts", json={"env": ENV_ID, "split": "test", "index": 0}).json()
        assert opened["base_url"].endswith(f"/harness/rollouts/{opened['rollout_id']}/v1")
        # what the trainer's task file holds, too
        assert opened["model"] == "policy" and opened["system"] == opened["messages"][0]["content"]
        assert opened["task"] == opened["messages"][1]["content"] and opened["user"] is None
        base = "/" + opened["base_url"].split("/", 3)[3]
        answer = client.post(base + "/chat/completions", json={"messages": opened["messages"], "tools": opened["tools"]})
        expert = next(m for m in EpisodeEnv(tasks="bundled:terminal:test", domain="terminal").tasks[0].messages
                      if m["role"] == "assistant")
        call = answer.json()["choices"][0]["message"]["tool_calls"][0]["function"]
        assert call["name"] == expert["tool_calls"][0]["function"]["name"]  # the replay policy answered
        result = client.post(base.rsplit("/v1", 1)[0] + "/finish").json()
        assert result["calls"][0]["completion_token_ids"] is None and result["unexecuted_tool_calls"] == 1
        assert client.post("/harness/rollouts", json={"env": "pivot/ToolUse-Episode-v0"}).status_code == 400


def test_serve_without_a_policy_says_how_to_turn_the_harness_routes_on():
    from fastapi.testclient import TestClient

    from pivot_envs.serve.app import create_app

    with TestClient(create_app(domains=["terminal"])) as client:
        for method, path in (("POST", "/harness/rollouts"), ("POST", "/harness/rollouts/w1-x/v1/chat/completions"),
                             ("GET", "/harness/rollouts/w1-x")):
            answer = client.request(method, path)
            assert answer.status_code == 404 and "--policy" in answer.json()["detail"]["message"], (path, answer.text)
        assert client.get("/health").status_code == 200


def test_serve_refuses_a_policy_with_several_workers():
    from typer.testing import CliRunner

    from pivot_envs.cli import app

    result = CliRunner().invoke(app, ["serve", "--policy", "replay", "--workers", "2"])
    assert result.exit_code != 0 and "--workers 1" in result.output
    bad = CliRunner().invoke(app, ["serve", "--policy", "nope"])
    assert bad.exit_code != 0 and "--policy nope" in bad.output and "unknown agent kind" in bad.output
