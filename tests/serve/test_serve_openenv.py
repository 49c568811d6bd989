"""``pivot-envs serve``'s OpenEnv face (``/openenv/NAME``) over real HTTP and WebSockets on 127.0.0.1, checked
with the real ``openenv`` package: ``openenv validate`` (CLI and Python API) passes on a pivot env and an
episode env, ``GenericEnvClient`` plays both with the rewards of in-process gymnasium envs, concurrent
sessions (WebSocket connections, HTTP session ids) are isolated, plain HTTP is stateless as in OpenEnv."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, Iterator

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
requests = pytest.importorskip("requests")
pytest.importorskip("openenv")
websockets_sync = pytest.importorskip("websockets.sync.client")

import gymnasium  # noqa: E402
from openenv import GenericEnvClient  # noqa: E402
from openenv.cli._validation import validate_running_environment  # noqa: E402

from tests.serve.test_serve import url  # noqa: E402,F401  (the module's server: create_app(domains=["tool_use"]))

PIVOT, EPISODE = "ToolUse-v0", "ToolUse-Episode-v0"
TIMEOUT = 120.0  # seconds: generous, for a busy 2-core machine


def base(url: str, name: str) -> str:
    return f"{url}/openenv/{name}"


@contextmanager
def client(url: str, name: str) -> Iterator[Any]:
    """A connected synchronous ``GenericEnvClient`` (one WebSocket session)."""
    env = GenericEnvClient(base_url=base(url, name), connect_timeout_s=TIMEOUT, message_timeout_s=TIMEOUT).sync()
    with env:
        yield env


def rpc(url: str, name: str, method: str, /, **params: Any) -> dict:
    """A JSON-RPC call to ``/mcp`` (always a 200: errors are in the JSON-RPC answer)."""
    body = {"jsonrpc": "2.0", "method": method, "params": params, "id": 7}
    r = requests.post(base(url, name) + "/mcp", json=body, timeout=TIMEOUT)
    assert r.status_code == 200, r.text
    return r.json()


def local_env(env_id: str, **kwargs: Any) -> Any:
    """The in-process gymnasium env the server plays (same verifier: the domain default)."""
    return gymnasium.make(env_id, disable_env_checker=True, **kwargs)


def experts(n: int) -> dict[str, dict]:
    """``{pivot_id: expert message}`` of the first ``n`` pivots of ToolUse-v0 (train)."""
    env = local_env("pivot/ToolUse-v0")
    out = {}
    for index in range(n):
        _, info = env.reset(options={"index": index})
        out[info["pivot_id"]] = info["expert"]
    return out


# ------------------------------------------------------------------ conformance
@pytest.mark.parametrize("name", [PIVOT, EPISODE])
def test_openenv_validate_passes(url, name):
    report = validate_running_environment(base(url, name), timeout_s=TIMEOUT)
    failed = [c for c in report["criteria"] if not c["passed"]]
    assert report["passed"] and not failed, failed
    assert {c["id"] for c in report["criteria"]} == {
        "openapi_version_available", "health_endpoint", "metadata_endpoint", "schema_endpoint", "mcp_endpoint",
        "mode_endpoint_consistency"}
    assert report["standard_profile"] == "openenv-http/1.x" and report["mode"] == "simulation"


def test_openenv_validate_cli(url):
    out = subprocess.run([sys.executable, "-m", "openenv.cli", "validate", base(url, PIVOT), "--json",
                          "--timeout", str(TIMEOUT)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert json.loads(out.stdout)["passed"] is True


def test_discovery_schema_metadata(url):
    listed = requests.get(url + "/openenv", timeout=TIMEOUT).json()["environments"]
    assert {(e["name"], e["env_id"], e["kind"]) for e in listed} == {
        (PIVOT, "pivot/ToolUse-v0", "pivot"), (EPISODE, "pivot/ToolUse-Episode-v0", "episode")}
    schema = requests.get(base(url, PIVOT) + "/schema", timeout=TIMEOUT).json()
    assert {"text", "message"} <= set(schema["action"]["properties"])
    assert {"messages", "tools", "reward", "done"} <= set(schema["observation"]["properties"])
    assert {"episode_id", "step_count"} <= set(schema["state"]["properties"])
    meta = requests.get(base(url, EPISODE) + "/metadata", timeout=TIMEOUT).json()
    assert meta["name"] == EPISODE and "task success" in meta["description"]
    doc = requests.get(base(url, EPISODE) + "/openapi.json", timeout=TIMEOUT).json()
    assert {"/reset", "/step", "/state", "/schema", "/metadata", "/health", "/mcp"} <= set(doc["paths"])
    assert doc["servers"] == [{"url": "/openenv/" + EPISODE}]
    assert requests.get(base(url, PIVOT) + "/health", timeout=TIMEOUT).json() == {"status": "healthy"}


# ------------------------------------------------------------------ GenericEnvClient vs in-process gymnasium
def test_generic_client_plays_pivot_env_like_gymnasium(url):
    local = local_env("pivot/ToolUse-v0")
    rewards = []
    with client(url, PIVOT) as env:
        for pivot_id, expert in experts(3).items():
            obs, _ = local.reset(options={"pivot_id": pivot_id})
            for action in ({"message": expert}, {"text": "Let me look into that for you."},
                           {"text": json.dumps({"name": "find_customer_by_email", "arguments": {"email": "x@y.z"}})}):
                start = env.reset(pivot_id=pivot_id)
                assert (start.reward, start.done) == (None, False)
                assert start.observation["messages"] == json.loads(obs["messages"])
                assert start.observation["tools"] == json.loads(obs["tools"])
                assert start.metadata["pivot_id"] == pivot_id and "expert" not in start.metadata  # no label leak
                result = env.step(action)
                _, reward, terminated, _, info = local.step(action.get("text", action.get("message")))
                assert (result.reward, result.done) == (reward, terminated) and result.done is True
                assert {k: result.metadata[k] for k in ("reason", "verifier", "passed", "strict_reward")} == \
                       {k: info[k] for k in ("reason", "verifier", "passed", "strict_reward")}
                rewards.append(result.reward)
                state = env.state()
                assert (state["episode_id"], state["step_count"], state["done"]) == (pivot_id, 1, True)
        assert rewards[::3] == [1.0, 1.0, 1.0] and 0.0 in rewards  # the expert scores 1, the rest as in-process
        with pytest.raises(RuntimeError, match="reset first"):
            env.step({"text": "one more"})  # a pivot episode is one step


@pytest.mark.parametrize("detour", [False, True], ids=["expert", "detour"])
def test_generic_client_plays_episode_env_like_gymnasium(url, detour):
    """The same actions in lockstep: in-process and served episodes agree turn by turn (reward, done,
    messages), and following the recorded actions ends in task success (reward 1.0)."""
    local = local_env("pivot/ToolUse-Episode-v0", split="test")
    _, info = local.reset(seed=0)
    task_id = info["task_id"]
    obs, info = local.reset(options={"task_id": task_id})
    with client(url, EPISODE) as env:
        result = env.reset(task_id=task_id, split="test")
        assert result.observation["messages"] == json.loads(obs["messages"]) and result.metadata["task_id"] == task_id
        done, turns = False, 0
        while not done:
            action = info["expert"] or {"role": "assistant", "content": "Is there anything else I can help with?"}
            if detour and turns == 0:
                action = {"role": "assistant", "content": "Let me check that for you."}
            obs, reward, terminated, truncated, info = local.step(action)
            result = env.step({"message": action})
            done, turns = terminated or truncated, turns + 1
            assert (result.reward, result.done) == (reward, done), turns
            assert result.observation["messages"] == json.loads(obs["messages"])
            assert result.metadata["turns"] == info["turns"] == turns
        assert result.metadata["success"] == info["success"] and result.metadata["error"] is None
        assert env.state()["step_count"] == turns
    if not detour:
        assert info["success"] is True and result.reward == 1.0 and turns > 1


# ------------------------------------------------------------------ isolation
def test_two_websocket_sessions_do_not_interfere(url):
    (a_id, a_expert), (b_id, b_expert) = experts(2).items()
    assert a_expert != b_expert
    local = local_env("pivot/ToolUse-v0")
    local.reset(options={"pivot_id": b_id})
    _, cross_reward, *_ = local.step(a_expert)  # A's expert at B's pivot
    with client(url, PIVOT) as a, client(url, PIVOT) as b:
        a.reset(pivot_id=a_id)
        b.reset(pivot_id=b_id)  # after A's reset: A must still be at its own pivot
        assert a.state()["episode_id"] == a_id and b.state()["episode_id"] == b_id
        assert a.step({"message": a_expert}).reward == 1.0
        assert b.state()["step_count"] == 0  # A's step did not count on B
        assert b.step({"message": a_expert}).reward == cross_reward
    assert cross_reward == 0.0


def test_concurrent_websocket_sessions_in_threads(url):
    pivots = list(experts(4).items())

    def play(order: list[tuple[str, dict]]) -> list[tuple[str, float]]:
        out = []
        with client(url, PIVOT) as env:
            for pivot_id, expert in order:
                start = env.reset(pivot_id=pivot_id)
                result = env.step({"message": expert})
                out.append((start.metadata["pivot_id"], result.reward))
        return out

    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(play, pivots), pool.submit(play, pivots[::-1])]
        results = [f.result(timeout=240) for f in futures]
    assert results[0] == [(p, 1.0) for p, _ in pivots]
    assert results[1] == [(p, 1.0) for p, _ in pivots[::-1]]


def test_two_episode_sessions_keep_their_own_history(url):
    local = local_env("pivot/ToolUse-Episode-v0", split="test")
    tasks = [t.id for t in local.unwrapped.tasks[:2]]
    with client(url, EPISODE) as a, client(url, EPISODE) as b:
        a.reset(task_id=tasks[0], split="test")
        b.reset(task_id=tasks[1], split="test")
        a_turn = a.step({"text": "Could you tell me your email address, please?"})
        b_start = b.state()
        assert b_start["step_count"] == 0 and b_start["episode_id"] == tasks[1]
        assert a.state()["step_count"] == 1 and a_turn.metadata["task_id"] == tasks[0]
        assert not any("email address, please" in str(m.get("content")) for m in
                       b.step({"text": "One moment."}).observation["messages"])


def test_split_picks_the_data_and_remakes_the_env(url):
    test_first = local_env("pivot/ToolUse-v0", split="test").reset(options={"index": 0})[1]["pivot_id"]
    train_first = local_env("pivot/ToolUse-v0").reset(options={"index": 0})[1]["pivot_id"]
    assert test_first != train_first
    with client(url, PIVOT) as env:
        assert env.state()["split"] == "train"  # what the env plays when no split is given
        assert env.reset(index=0, split="test").metadata["pivot_id"] == test_first
        assert env.state()["split"] == "test"
        assert env.reset(index=0).metadata["pivot_id"] == test_first  # no split: the env keeps its own
        assert env.reset(index=0, split="train").metadata["pivot_id"] == train_first
        assert env.state()["split"] == "train"


def test_http_sessions_expire_when_idle_and_are_capped():
    from pivot_envs.serve.gym_http import SessionError
    from pivot_envs.serve.openenv import EnvSpec, Play, PlaySessions

    spec = EnvSpec(PIVOT, "pivot/ToolUse-v0", "pivot", "", "train")

    def new(session_id: str) -> Play:  # no reset here: no env is ever made
        return Play(spec, lambda *args: pytest.fail("no env is made"), id=session_id)

    sessions = PlaySessions(ttl_s=60.0, max_sessions=2)
    a, b = (sessions.open(sid, spec.env_id, new) for sid in ("a", "b"))
    assert sessions.open("a", spec.env_id, lambda sid: pytest.fail("made twice")) is a
    with pytest.raises(SessionError) as full:
        sessions.open("c", spec.env_id, new)
    assert full.value.status == 409
    assert sessions.attach("a", spec.env_id) is a
    a.last_used = b.last_used = a.last_used - 61.0  # idle past the ttl (no waiting)
    assert sessions.sweep() == 1 and len(sessions) == 1  # b expired; a has a WebSocket attached
    with pytest.raises(SessionError) as gone:
        sessions.get("b", spec.env_id)
    assert gone.value.status == 404
    sessions.detach(a)
    assert sessions.sweep() == 0 and sessions.get("a", spec.env_id) is a  # detaching counts as use


# ------------------------------------------------------------------ plain HTTP: stateless, and HTTP sessions
def test_plain_http_is_stateless(url):
    root = base(url, PIVOT)
    first = requests.post(root + "/reset", json={"index": 0}, timeout=TIMEOUT)
    assert first.status_code == 200, first.text
    body = first.json()
    assert body["done"] is False and body["reward"] is None and "session_id" not in body["metadata"]
    assert body["observation"]["messages"] and body["observation"]["tools"]
    assert requests.post(root + "/reset", timeout=TIMEOUT).status_code == 200  # no body: OpenEnv's default reset
    step = requests.post(root + "/step", json={"action": {"text": "hello"}}, timeout=TIMEOUT)
    assert step.status_code == 409 and step.json()["detail"]["field"] == "session_id"
    assert "stateless" in step.json()["detail"]["message"]
    state = requests.get(root + "/state", timeout=TIMEOUT).json()
    assert (state["episode_id"], state["step_count"], state["env_id"]) == (None, 0, "pivot/ToolUse-v0")


def test_http_sessions_are_isolated_and_closable(url):
    root = base(url, PIVOT)
    (a_id, a_expert), (b_id, b_expert) = experts(2).items()
    made = rpc(url, PIVOT, "openenv/session/create")["result"]["session_id"]
    mine = "my-own-session-1"
    for sid, pivot_id in ((made, a_id), (mine, b_id)):
        r = requests.post(root + "/reset", json={"session_id": sid, "pivot_id": pivot_id}, timeout=TIMEOUT)
        assert r.status_code == 200 and r.json()["metadata"]["session_id"] == sid, r.text
    tools = rpc(url, PIVOT, "tools/list", session_id=made)["result"]["tools"]
    shown = requests.post(root + "/reset", json={"pivot_id": a_id}, timeout=TIMEOUT).json()["observation"]["tools"]
    assert [t["name"] for t in tools] == [t["function"]["name"] for t in shown] and "inputSchema" in tools[0]
    for sid, expert in ((mine, b_expert), (made, a_expert)):  # the other order: each session kept its pivot
        r = requests.post(root + "/step", json={"session_id": sid, "action": {"message": expert}}, timeout=TIMEOUT)
        assert r.status_code == 200 and r.json()["reward"] == 1.0 and r.json()["done"] is True, r.text
    state = requests.get(root + "/state", params={"session_id": made}, timeout=TIMEOUT).json()
    assert (state["episode_id"], state["step_count"], state["session_id"]) == (a_id, 1, made)
    # a WebSocket attaches to an HTTP session (OpenEnv's /ws?session_id=)
    ws_url = root.replace("http://", "ws://") + f"/ws?session_id={made}"
    with websockets_sync.connect(ws_url, open_timeout=TIMEOUT) as ws:
        ws.send(json.dumps({"type": "reset", "data": {"pivot_id": b_id}}))
        frame = json.loads(ws.recv(timeout=TIMEOUT))
        assert frame["type"] == "observation" and frame["data"]["metadata"]["pivot_id"] == b_id
        ws.send(json.dumps({"type": "mcp", "data": {"jsonrpc": "2.0", "method": "openenv/session/close",
                                                    "params": {"session_id": made}, "id": 1}}))
        assert json.loads(ws.recv(timeout=TIMEOUT))["data"]["error"]["code"] == -32600  # its own session
        ws.send(json.dumps({"type": "close"}))
    state = requests.get(root + "/state", params={"session_id": made}, timeout=TIMEOUT).json()
    assert (state["episode_id"], state["step_count"]) == (b_id, 0)  # the socket's reset, kept after it closed
    for sid in (made, mine):
        assert rpc(url, PIVOT, "openenv/session/close", session_id=sid)["result"] == {"session_id": sid, "closed": True}
        r = requests.post(root + "/step", json={"session_id": sid, "action": {"text": "x"}}, timeout=TIMEOUT)
        assert r.status_code == 404 and r.json()["detail"]["field"] == "session_id"
    assert rpc(url, PIVOT, "openenv/session/close", session_id=made)["error"]["code"] == -32602
    mine_other_env = requests.post(base(url, EPISODE) + "/reset", json={"session_id": "ep-1"}, timeout=TIMEOUT)
    assert mine_other_env.status_code == 200
    r = requests.post(root + "/step", json={"session_id": "ep-1", "action": {"text": "x"}}, timeout=TIMEOUT)
    assert r.status_code == 409 and "pivot/ToolUse-Episode-v0" in r.json()["detail"]["message"]
    rpc(url, EPISODE, "openenv/session/close", session_id="ep-1")


# ------------------------------------------------------------------ errors
def test_errors_name_the_field(url):
    root = base(url, PIVOT)
    sid = "errors-session"
    assert requests.post(root + "/reset", json={"session_id": sid}, timeout=TIMEOUT).status_code == 200
    cases = [
        ("/reset", {"pivot_id": "nope"}, 400, "pivot_id"),
        ("/reset", {"task_id": "t"}, 422, "task_id"),
        ("/reset", {"split": "nope"}, 400, "split"),
        ("/step", {"session_id": sid, "action": {"text": "a", "message": {"content": "b"}}}, 422, None),
        ("/step", {"session_id": sid, "action": {"message": {"role": "user", "content": "b"}}}, 422, None),
        ("/step", {"session_id": "nope", "action": {"text": "a"}}, 404, "session_id"),
    ]
    for path, body, status, field in cases:
        r = requests.post(root + path, json=body, timeout=TIMEOUT)
        assert r.status_code == status, (body, r.text)
        if field is not None:
            assert r.json()["detail"]["field"] == field, r.text
    for body, loc in (({"bogus": 1}, ["body", "bogus"]), ({"seed": -1}, ["body", "seed"])):
        r = requests.post(root + "/reset", json=body, timeout=TIMEOUT)
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == loc, r.text
    assert rpc(url, PIVOT, "tools/call", name="x")["error"]["code"] == -32601
    assert rpc(url, PIVOT, "tools/list")["error"]["code"] == -32602  # tools depend on the session's pivot
    r = requests.post(root + "/mcp", data=b"{nope", timeout=TIMEOUT)
    assert r.status_code == 200 and r.json()["error"]["code"] == -32700
    rpc(url, PIVOT, "openenv/session/close", session_id=sid)
    with client(url, PIVOT) as env:
        with pytest.raises(RuntimeError, match="reset first"):
            env.step({"text": "before any reset"})
        with pytest.raises(RuntimeError, match="VALIDATION_ERROR"):
            env.step({"txt": "typo"})
        assert env.reset(index=1).metadata["pivot_id"]  # the connection survives its errors
