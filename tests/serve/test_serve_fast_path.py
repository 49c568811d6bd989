"""``POST /verify`` and ``/verify_batch`` by :class:`~pivot_envs.serve.app.VerifyFastPath` give, on the wire,
byte for byte what the FastAPI routes give (``create_app(fast_verify=False)``): status line, headers (but
``date``), body, and the same ``/metrics`` counts, for good rows, changed rows and bad ones."""

from __future__ import annotations

import copy
import http.client
import json
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
uvicorn = pytest.importorskip("uvicorn")

from pivot_envs.serve.app import VerifyFastPath, create_app  # noqa: E402
from tests.servers import free_port  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "data" / "nemo_gym"


def _serve(app):
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "server did not start"
        time.sleep(0.02)
    return server, thread, port


@pytest.fixture(scope="module")
def ports():
    apps = [create_app(domains=["tool_use"], verifier="tool_call", fast_verify=fast) for fast in (True, False)]
    assert [any(m.cls is VerifyFastPath for m in app.user_middleware) for app in apps] == [True, False]
    servers = [_serve(app) for app in apps]
    yield [port for _, _, port in servers]
    for server, thread, _ in servers:
        server.should_exit = True
        thread.join(10)


def _exchange(port: int, method: str, path: str, body: bytes | None) -> tuple[int, str, list[tuple[str, str]], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, body=body, headers={"Content-Type": "application/json"} if body is not None else {})
        r = conn.getresponse()
        headers = [(k.lower(), v.replace(f":{port}/", ":PORT/")) for k, v in r.getheaders() if k.lower() != "date"]
        return r.status, r.reason, headers, r.read()
    finally:
        conn.close()


def _rows() -> tuple[dict, dict, dict]:
    row = [json.loads(line) for line in (DATA / "parallel_example.jsonl").read_text().splitlines() if line.strip()][3]
    expected = row["expected_action"]
    call = {"id": "fc_0", "type": "function_call", "call_id": "call_0", "status": "completed",
            "name": expected["name"], "arguments": expected["arguments"]}
    good = {"responses_create_params": row["responses_create_params"], "expected_action": expected,
            "response": {"id": "resp_1", "object": "response", "output": [call]}}
    changed = copy.deepcopy(good)
    args = json.loads(expected["arguments"])
    key = next(iter(args))
    args[key] = "zz-changed-välue ✓" if isinstance(args[key], str) else 987654  # non-ASCII: the str splice path
    changed["response"]["output"][0]["arguments"] = json.dumps(args, ensure_ascii=False)
    return row, good, changed


def _cases() -> list[tuple[str, str, bytes | None]]:
    _, good, changed = _rows()
    no_expected = {k: v for k, v in good.items() if k != "expected_action"}
    enc = lambda x: json.dumps(x, ensure_ascii=False).encode()  # noqa: E731
    return [
        ("POST", "/verify", enc(good)),
        ("POST", "/verify", json.dumps(good, indent=2).encode()),  # whitespace kept as sent
        ("POST", "/verify", enc(changed)),
        ("POST", "/verify", b"{not json"),  # malformed JSON: 422, field <body>
        ("POST", "/verify", b"\xff\xfe"),  # not UTF-8
        ("POST", "/verify", b""),
        ("POST", "/verify", enc(no_expected)),  # a field missing
        ("POST", "/verify", enc({**good, "expected_action": {"type": "shout"}})),  # a wrong field
        ("POST", "/verify", enc({**good, "response": {"output": "x"}})),
        ("POST", "/verify", enc([good])),  # not an object
        ("POST", "/verify_batch", enc([good, changed, no_expected, "nope", good])),
        ("POST", "/verify_batch", enc({"rows": [good, changed]})),
        ("POST", "/verify_batch", enc([])),
        ("POST", "/verify_batch", enc({"not": "a list"})),
        ("POST", "/verify_batch", b"[{not json"),
        ("GET", "/verify", None),  # not the fast path's: the router's 405 on both
        ("POST", "/verify/", enc(good)),  # nor this (the router's redirect)
    ]


def test_fast_path_answers_byte_for_byte_as_the_fastapi_routes(ports):
    fast, slow = ports
    for method, path, body in _cases():
        a, b = _exchange(fast, method, path, body), _exchange(slow, method, path, body)
        assert a == b, (method, path, body[:80] if body else body)
    # the answers themselves are what the routes promise (asked of both, so /metrics stays comparable)
    _, good, changed = _rows()
    for port in ports:
        status, _, headers, data = _exchange(port, "POST", "/verify", json.dumps(good).encode())
        assert status == 200 and ("content-type", "application/json") in headers
        out = json.loads(data)
        assert (out["reward"], out["passed"], out["error"]) == (1.0, True, None)
        assert {k: out[k] for k in good} == good
        status, _, _, data = _exchange(port, "POST", "/verify", json.dumps(changed).encode())
        assert status == 200 and json.loads(data)["reward"] == 0.0
        status, _, _, data = _exchange(port, "POST", "/verify", b"{not json")
        assert status == 422 and json.loads(data)["detail"]["field"] == "<body>"
        bad = json.dumps({**good, "expected_action": {"type": "shout"}}).encode()
        status, _, _, data = _exchange(port, "POST", "/verify", bad)
        assert status == 422 and json.loads(data)["detail"]["field"] == "expected_action.type"


def test_fast_path_metrics_count_as_the_routes(ports):
    """After the same requests, both servers' /metrics hold the same counts (routes, statuses, rows)."""
    snaps = []
    for port in ports:
        _, _, _, data = _exchange(port, "GET", "/metrics?format=json", None)
        snaps.append(json.loads(data))
    keep = ("requests", "verified_rows", "verify_errors", "bad_rows", "server_errors")
    counts = [({k: s[k] for k in keep}, {r: v["count"] for r, v in s["routes"].items()}) for s in snaps]
    assert counts[0] == counts[1]
    assert any(r["route"] == "/verify" and r["status"] == 422 for r in snaps[0]["requests"])
    assert snaps[0]["verified_rows"] > 0 and snaps[0]["bad_rows"] > 0
