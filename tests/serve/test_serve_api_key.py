"""An API key on every route of ``pivot-envs serve`` (issue 37, item 8), checked with real clients.

The server is the real ``pivot-envs serve --policy replay`` command in a subprocess on 127.0.0.1, its key from
``$PIVOT_ENVS_API_KEY``; the clients are the openai SDK's, the MCP SDK's and ``examples/harness_minimal.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("mcp")

import httpx  # noqa: E402
import httpx2  # noqa: E402
import openai  # noqa: E402
from mcp import ClientSession  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from tests.conftest import ROOT, scaled  # noqa: E402
from tests.servers import free_port  # noqa: E402

KEY = "test-" + secrets.token_hex(12)
ENV_ID = "pivot/ToolUse-Episode-v0"
PIVOT_ENVS = str(Path(sys.executable).with_name("pivot-envs"))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    port = free_port()
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    env = {**os.environ, "PIVOT_ENVS_API_KEY": KEY}
    with open(log, "w") as sink:
        proc = subprocess.Popen([PIVOT_ENVS, "serve", "--policy", "replay", "--domain", "tool_use", "--host",
                                 "127.0.0.1", "--port", str(port), "--log-level", "warning"], env=env, stdout=sink,
                                stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + scaled(90)
    try:
        while True:
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "the server did not start: " + log.read_text()[-3000:]
            try:
                if httpx.get(url + "/health", headers={"Authorization": f"Bearer {KEY}"}).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _open(url: str, **spec) -> dict:
    answer = httpx.post(url + "/harness/rollouts", headers={"Authorization": f"Bearer {KEY}"},
                        json={"env": ENV_ID, "split": "test", **spec}, timeout=scaled(60))
    assert answer.status_code == 200, answer.text
    return answer.json()


def _app_routes():
    """Every route of the app the server runs (the same code, built here): ``(path, methods, websocket)``: those of
    its OpenAPI schema and those outside it (the MCP endpoints, WebSockets)."""
    from pivot_envs.serve.app import create_app

    app = create_app(domains=["tool_use"], policy="replay", api_key=KEY)
    try:
        found = {(path, tuple(sorted(m.upper() for m in ops)), False) for path, ops in app.openapi()["paths"].items()}
        for route in app.routes:
            if hasattr(route, "path"):
                websocket = type(route).__name__ == "WebSocketRoute"
                found.add((route.path, tuple(sorted(getattr(route, "methods", None) or ["GET"])), websocket))
    finally:
        app.state.harness.close()
    for path, methods, websocket in sorted(found):
        yield re.sub(r"\{[^}]+\}", "x", path.replace("{rest:path}", "x/y")), list(methods), websocket


def test_every_route_refuses_a_request_without_the_key(server):
    routes = list(_app_routes())
    assert len(routes) > 30 and any(p.endswith("/mcp") for p, _, _ in routes)
    checked = 0
    with httpx.Client(timeout=scaled(30)) as client:
        for path, methods, websocket in routes:
            assert "{" not in path, path
            if websocket:
                continue
            for method in methods:
                if method == "HEAD":
                    continue
                for headers in ({}, {"Authorization": "Bearer wrong"}, {"X-API-Key": KEY[:-1]}):
                    answer = client.request(method, server + path, headers=headers)
                    assert answer.status_code == 401, (method, path, headers, answer.status_code, answer.text[:200])
                    checked += 1
        refused = client.get(server + "/health")
        assert "Authorization: Bearer KEY" in refused.json()["detail"]["message"]
        assert refused.headers["www-authenticate"].startswith("Bearer")
        assert client.get(server + "/health", headers={"X-API-Key": KEY}).status_code == 200
    assert checked > 90


def test_an_openenv_websocket_without_the_key_is_closed(server):
    websockets = pytest.importorskip("websockets.sync.client")
    served = httpx.get(server + "/openenv", headers={"Authorization": f"Bearer {KEY}"}).json()["environments"]
    ws_path = served[0]["path"] + "/ws"
    with pytest.raises(Exception) as refused:
        with websockets.connect(server.replace("http", "ws") + ws_path, open_timeout=scaled(20)) as ws:
            ws.recv(timeout=scaled(20))
    assert "403" in str(refused.value) or "4401" in str(refused.value), repr(refused.value)


def test_an_openai_client_reaches_the_rollouts_base_url_with_the_key_only(server):
    opened = _open(server, index=0)
    good = openai.OpenAI(base_url=opened["base_url"], api_key=KEY, max_retries=0)
    reply = good.chat.completions.create(model="policy", messages=opened["messages"], tools=opened["tools"])
    assert reply.choices[0].message.content or reply.choices[0].message.tool_calls
    bad = openai.OpenAI(base_url=opened["base_url"], api_key="not-the-key", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as refused:
        bad.chat.completions.create(model="policy", messages=opened["messages"])
    assert refused.value.status_code == 401 and "API key" in str(refused.value)
    assert good.models.list().data[0].id == "policy"


def test_an_mcp_client_reaches_the_rollouts_world_with_the_key_only(server):
    opened = _open(server, index=0)

    async def tools(headers: dict) -> list[str]:
        http = httpx2.AsyncClient(headers=headers, timeout=scaled(60))
        async with streamable_http_client(opened["mcp_url"], http_client=http) as (read, write, *_), \
                ClientSession(read, write) as session:
            await session.initialize()
            return [t.name for t in (await session.list_tools()).tools]

    names = asyncio.run(tools({"Authorization": f"Bearer {KEY}"}))
    assert set(names) == {t["function"]["name"] for t in opened["tools"]} and "send_message_to_user" in names
    with pytest.raises(BaseException) as refused:  # the SDK reports the 401 as an error response
        asyncio.run(tools({}))
    assert "error response" in repr(refused.value), repr(refused.value)
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
    headers = {"Accept": "application/json, text/event-stream"}
    assert httpx.post(opened["mcp_url"], json=initialize, headers=headers).status_code == 401
    keyed = httpx.post(opened["mcp_url"], json=initialize, headers={**headers, "Authorization": f"Bearer {KEY}"})
    assert keyed.status_code == 200 and keyed.json()["result"]["serverInfo"]["name"] == "pivot-envs-world"


def test_the_minimal_harness_plays_a_task_against_a_server_with_a_key(server, tmp_path):
    opened = _open(server, task_id="tool_use-0-4")
    task = tmp_path / "task.json"
    task.write_text(json.dumps(opened))
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "harness_minimal.py"), str(task)],
                          env={**os.environ, "PIVOT_ENVS_API_KEY": KEY}, capture_output=True, text=True,
                          timeout=scaled(120))
    assert done.returncode == 0, done.stderr[-3000:]
    result = httpx.post(opened["base_url"].rsplit("/v1", 1)[0] + "/finish",
                        headers={"Authorization": f"Bearer {KEY}"}, timeout=scaled(60)).json()
    assert result["success"] is True and result["user_messages"] >= 1, result["reason"]


@pytest.mark.slow
def test_the_agents_sdk_example_plays_a_task_against_a_server_with_a_key(server, tmp_path):
    """A third-party client with the key: the OpenAI Agents SDK's model and MCP client send it as the docs say."""
    sdk = subprocess.run([sys.executable, "-c", "import agents.mcp"], cwd=tmp_path, capture_output=True)
    if sdk.returncode != 0:  # checked outside the repository, whose agents/ folder shadows the SDK's package
        pytest.skip("the OpenAI Agents SDK is not installed (pip install openai-agents)")
    opened = _open(server, task_id="tool_use-0-4")
    task = tmp_path / "task.json"
    task.write_text(json.dumps(opened))
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "harness_openai_agents.py"), str(task)],
                          env={**os.environ, "PIVOT_ENVS_API_KEY": KEY, "OPENAI_AGENTS_DISABLE_TRACING": "1"},
                          capture_output=True, text=True, timeout=scaled(180))
    assert done.returncode == 0, done.stderr[-3000:]
    result = httpx.post(opened["base_url"].rsplit("/v1", 1)[0] + "/finish",
                        headers={"Authorization": f"Bearer {KEY}"}, timeout=scaled(60)).json()
    assert result["success"] is True and result["user_messages"] >= 1, result["reason"]


def test_serve_refuses_a_host_beyond_loopback_without_a_key():
    from typer.testing import CliRunner

    from pivot_envs.cli import app

    runner = CliRunner(env={"PIVOT_ENVS_API_KEY": None})
    refused = runner.invoke(app, ["serve", "--host", "0.0.0.0", "--policy", "replay"])
    assert refused.exit_code != 0 and "--api-key" in refused.output and "--insecure-no-key" in refused.output
    empty = runner.invoke(app, ["serve", "--host", "0.0.0.0", "--api-key", " "])
    assert empty.exit_code != 0 and "the API key is empty" in empty.output
