"""``pivot-envs serve`` over real HTTP on 127.0.0.1: NeMo Gym's resources-server protocol (with NeMo
Gym's own example rows, tests/data/nemo_gym/), gymnasium over HTTP, errors, /health and /metrics."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
uvicorn = pytest.importorskip("uvicorn")
requests = pytest.importorskip("requests")

from pivot_envs.serve.app import create_app  # noqa: E402
from pivot_envs.serve.gym_http import SessionStore  # noqa: E402
from tests.servers import free_port  # noqa: E402

CLI = [sys.executable, "-c", "from pivot_envs.cli import main; main()"]
DATA = Path(__file__).resolve().parents[1] / "data" / "nemo_gym"


def _rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / name).read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def url():
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(domains=["tool_use"]), host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "server did not start"
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)


def _response(calls: list[dict] | None = None, text: str | None = None) -> dict:
    """A Responses API response as NeMo Gym's model servers return it."""
    output: list[dict] = []
    if text is not None:
        output.append({"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
                       "content": [{"type": "output_text", "text": text, "annotations": []}]})
    for k, c in enumerate(calls or []):
        output.append({"id": f"fc_{k}", "type": "function_call", "call_id": f"call_{k}", "status": "completed",
                       "name": c["name"], "arguments": c["arguments"]})
    return {"id": "resp_1", "object": "response", "created_at": 1, "model": "m", "output": output,
            "parallel_tool_calls": False, "tool_choice": "auto", "tools": []}


def _calls(expected: dict) -> list[dict]:
    return expected["calls"] if expected["type"] == "function_call_batch" else [expected]


def _changed(calls: list[dict]) -> list[dict]:
    calls = copy.deepcopy(calls)
    args = json.loads(calls[-1]["arguments"])
    key = next(iter(args))
    args[key] = "zz-changed-value-404" if isinstance(args[key], str) else 987654
    calls[-1]["arguments"] = json.dumps(args)
    return calls


# ------------------------------------------------------------------ NeMo Gym protocol
def test_nemo_gym_example_rollouts_through_verify(url):
    """NeMo Gym's own rollout rows: the answer is the body + reward (+ ours); tool-call rows score as NeMo Gym's."""
    rows = _rows("example_rollouts.jsonl")
    assert requests.post(url + "/seed_session", json={}).status_code == 200
    for row in rows:
        body = {k: row[k] for k in ("responses_create_params", "response", "expected_action")}
        r = requests.post(url + "/verify", json=body)
        assert r.status_code == 200, r.text
        out = r.json()
        for k, v in body.items():
            assert out[k] == v  # the request body comes back unchanged
        assert out["error"] is None and out["verifier"] and isinstance(out["reason"], str)
        assert isinstance(out["reward"], float) and out["passed"] == (out["reward"] == 1.0)
        if row["expected_action"]["type"] != "message":
            assert out["reward"] == row["reward"], (row["category"], out["reason"])


@pytest.mark.parametrize("name", ["example_rollouts.jsonl", "parallel_example.jsonl"])
def test_nemo_gym_expert_scores_1_changed_argument_0(url, name):
    rows = [r for r in _rows(name) if r["expected_action"]["type"] != "message"]
    assert rows
    for row in rows:
        expected = row["expected_action"]
        base = {"responses_create_params": row["responses_create_params"], "expected_action": expected}
        good = requests.post(url + "/verify", json={**base, "response": _response(_calls(expected), text="ok")}).json()
        assert (good["reward"], good["passed"], good["error"]) == (1.0, True, None), good["reason"]
        bad = requests.post(url + "/verify", json={**base, "response": _response(_changed(_calls(expected)))}).json()
        assert (bad["reward"], bad["passed"], bad["error"]) == (0.0, False, None), bad["reason"]
        text = requests.post(url + "/verify", json={**base, "response": _response(text="let me check")}).json()
        assert text["reward"] == 0.0 and text["error"] is None


def test_verify_batch_bad_row_in_middle(url):
    row = _rows("parallel_example.jsonl")[3]  # a single function_call
    good = {"responses_create_params": row["responses_create_params"], "expected_action": row["expected_action"],
            "response": _response([row["expected_action"]])}
    changed = {**good, "response": _response(_changed([row["expected_action"]]))}
    bad = {k: v for k, v in good.items() if k != "expected_action"}
    r = requests.post(url + "/verify_batch", json=[good, changed, bad, "nope", good])
    assert r.status_code == 200, r.text
    out = r.json()
    assert [o["reward"] for o in out] == [1.0, 0.0, 0.0, 0.0, 1.0]
    assert [o["error"] is None for o in out] == [True, True, False, False, True]
    assert out[2]["field"] == "[2].expected_action" and "expected_action" in out[2]["error"]
    assert out[3]["field"] == "[3]"
    assert out[0]["expected_action"] == row["expected_action"]


def test_verify_malformed_bodies_name_the_field(url):
    row = _rows("parallel_example.jsonl")[3]
    good = {"responses_create_params": row["responses_create_params"], "expected_action": row["expected_action"],
            "response": _response([row["expected_action"]])}
    cases = [
        ({k: v for k, v in good.items() if k != "expected_action"}, "expected_action"),
        ({k: v for k, v in good.items() if k != "response"}, "response"),
        ({**good, "response": {"output": "x"}}, "response.output"),
        ({**good, "expected_action": {"type": "shout"}}, "expected_action.type"),
        ({**good, "responses_create_params": {"tools": []}}, "responses_create_params.input"),
        ([good], "<body>"),
    ]
    for body, field in cases:
        r = requests.post(url + "/verify", json=body)
        assert r.status_code == 422, (field, r.text)
        assert r.json()["detail"]["field"] == field
    r = requests.post(url + "/verify", data=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.json()["detail"]["field"] == "<body>"
    r = requests.post(url + "/verify_batch", json={"not": "a list"})
    assert r.status_code == 422 and r.json()["detail"]["field"] == "<body>"


# ------------------------------------------------------------------ gymnasium over HTTP
def test_pivot_env_reset_step_step_many(url):
    r = requests.post(url + "/reset", json={"env_id": "pivot/ToolUse-v0", "seed": 3}).json()
    sid, info = r["session_id"], r["info"]
    assert set(r["observation"]) == {"messages", "tools"} and json.loads(r["observation"]["messages"])
    again = requests.post(url + "/reset", json={"env_id": "pivot/ToolUse-v0", "seed": 3}).json()
    assert again["info"]["pivot_id"] == info["pivot_id"] and again["session_id"] != sid  # seeded, own session
    step = requests.post(url + "/step", json={"session_id": sid, "action": info["expert"]}).json()
    assert (step["reward"], step["terminated"], step["truncated"]) == (1.0, True, False)
    assert step["info"]["pivot_id"] == info["pivot_id"] and step["info"]["error"] is None
    many = requests.post(url + "/step_many", json={"session_id": sid, "actions": [info["expert"], "hello", info["expert"]]})
    assert [x["reward"] for x in many.json()["results"]] == [1.0, 0.0, 1.0]
    # reset an existing session on a chosen pivot
    r2 = requests.post(url + "/reset", json={"env_id": "pivot/ToolUse-v0", "session_id": sid,
                                             "options": {"pivot_id": again["info"]["pivot_id"]}}).json()
    assert r2["session_id"] == sid
    assert requests.delete(url + f"/sessions/{sid}").json()["closed"] is True
    assert requests.post(url + "/step", json={"session_id": sid, "action": "x"}).status_code == 404
    assert requests.delete(url + f"/sessions/{sid}").status_code == 404
    requests.delete(url + f"/sessions/{again['session_id']}")


def test_tool_use_episode_over_http(url):
    r = requests.post(url + "/reset", json={"env_id": "pivot/ToolUse-Episode-v0", "seed": 0,
                                            "kwargs": {"split": "test", "user": "scripted"}})
    assert r.status_code == 200, r.text
    sid, info = r.json()["session_id"], r.json()["info"]
    steps, done = 0, False
    while not done and steps < 40:
        action = info["expert"] or {"role": "assistant", "content": "Is there anything else?"}
        s = requests.post(url + "/step", json={"session_id": sid, "action": action})
        assert s.status_code == 200, s.text
        s = s.json()
        info, steps, done = s["info"], steps + 1, s["terminated"] or s["truncated"]
        if not done:
            assert s["reward"] == 0.0
    assert done and steps > 1
    assert info["error"] is None and info["success"] is True and s["reward"] == 1.0
    assert requests.post(url + "/step_many", json={"session_id": sid, "actions": ["x"]}).status_code == 400
    requests.delete(url + f"/sessions/{sid}")


def test_gym_errors(url):
    r = requests.post(url + "/reset", json={"env_id": "pivot/Nope-v0"})
    assert r.status_code == 400 and "pivot/ToolUse-v0" in r.json()["detail"]["known"]
    r = requests.post(url + "/reset", json={"env_id": "pivot/Terminal-v0"})  # not loaded: --domain tool_use
    assert r.status_code == 400
    r = requests.post(url + "/reset", json={"seed": 1})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "env_id"]
    r = requests.post(url + "/reset", json={"env_id": "pivot/ToolUse-v0", "seed": "abc"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "seed"]
    r = requests.post(url + "/reset", json={"env_id": "pivot/ToolUse-v0", "options": {"pivot_id": "nope"}})
    assert r.status_code == 400 and r.json()["detail"]["field"] == "options"
    r = requests.post(url + "/step", json={"session_id": "nope", "action": "x"})
    assert r.status_code == 404 and r.json()["detail"]["field"] == "session_id"
    r = requests.post(url + "/step", json={"session_id": "w1-0123abcd", "action": "x"})  # made by process 1
    assert r.status_code == 421 and r.json()["detail"]["field"] == "session_id"
    assert "server process 1" in r.json()["detail"]["message"] and "--workers 1" in r.json()["detail"]["message"]
    r = requests.post(url + "/step", json={"session_id": "nope"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "action"]
    r = requests.post(url + "/step_many", json={"session_id": "nope", "actions": "x"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][:2] == ["body", "actions"]


def test_sessions_expire_after_idle_ttl():
    # a ttl far beyond any stall while the session must live, a short one once it must die: both
    # checks hold however long this process waits between two lines on a loaded machine
    store = SessionStore({"pivot/ToolUse-v0": "pivot"}, ttl_s=3600)
    sid = store.reset("pivot/ToolUse-v0", None, 0, None, None)["session_id"]
    assert store.get(sid).env_id == "pivot/ToolUse-v0" and store.sweep() == 0 and len(store) == 1
    store.ttl_s = 0.05
    time.sleep(0.1)  # idle for longer than the ttl now
    assert store.sweep() == 1 and len(store) == 0 and store.expired == 1


def test_health_and_metrics(url):
    h = requests.get(url + "/health").json()
    assert h["status"] == "ok" and h["domains"] == ["tool_use"]
    assert set(h["env_ids"]) == {"pivot/ToolUse-v0", "pivot/ToolUse-Episode-v0"}
    requests.post(url + "/verify", json={"bad": 1})
    text = requests.get(url + "/metrics").text
    assert 'pivot_envs_requests_total{route="/health",status="200"}' in text
    assert 'pivot_envs_requests_total{route="/verify",status="422"}' in text
    assert "pivot_envs_request_latency_seconds_count" in text and "pivot_envs_verified_rows_total" in text
    snap = requests.get(url + "/metrics", params={"format": "json"}).json()
    assert snap["routes"]["/health"]["count"] >= 1 and snap["server_errors"] == 0


def test_cli_serve_with_two_workers(tmp_path):
    port = free_port()
    log = open(tmp_path / "serve.log", "w")
    proc = subprocess.Popen([*CLI, "serve", "--port", str(port), "--workers", "2",
                             "--domain", "tool_use", "--verifier", "tool_call", "--log-level", "warning"],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()
            try:
                h = requests.get(f"http://127.0.0.1:{port}/health", timeout=2).json()
                break
            except requests.ConnectionError:
                assert time.monotonic() < deadline
                time.sleep(0.2)
        assert h["domains"] == ["tool_use"] and h["verifier"]["name"] == "tool_call"
        # a session lives in the worker that made it: on the other one a step is a 421 that says so, never a 404
        base = f"http://127.0.0.1:{port}"
        made = requests.post(base + "/reset", json={"env_id": "pivot/ToolUse-v0", "seed": 0}, timeout=30).json()
        sid = made["session_id"]
        assert sid.startswith("w") and sid.split("-")[0][1:].isdigit()
        codes = set()
        for _ in range(64):  # uvloop's workers share fresh connections unevenly (up to ~9:1 idle): up to 64 tries
            r = requests.post(base + "/step", json={"session_id": sid, "action": made["info"]["expert"]}, timeout=30,
                              headers={"Connection": "close"})
            codes.add(r.status_code)
            if r.status_code == 421:
                assert f"server process {sid.split('-')[0][1:]}" in r.json()["detail"]["message"]
            if codes == {200, 421}:
                break
        assert codes <= {200, 421}, codes
        assert 200 in codes  # the owner answered at least once (up to 64 fresh connections)
    finally:
        proc.terminate()
        proc.wait(20)
    bad = subprocess.run([*CLI, "serve", "--domain", "nope"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--domain nope" in bad.stderr


def test_decode_with_spans_and_spliced_answers():
    from pivot_envs.serve.nemo_gym import decode_with_spans, encode_answer

    raw = ' [ {"a": 1, "b": [1, 2]} ,"x", {} , {"reward": 5}] '
    items, spans = decode_with_spans(raw)
    assert items == json.loads(raw) and spans == ['{"a": 1, "b": [1, 2]}', '"x"', "{}", '{"reward": 5}']
    assert decode_with_spans("[]") == ([], [])
    for bad in ("[1,", "[1 2]", "[1] x"):
        with pytest.raises(json.JSONDecodeError):
            decode_with_spans(bad)
    extra = {"reward": 1.0, "passed": True, "reason": "r", "error": None, "verifier": "v"}
    for row, span in zip(items, spans):
        answer = {**row, **extra} if isinstance(row, dict) else {"row": row, **extra}
        assert json.loads(encode_answer(answer, row, span)) == answer


NEMO_GYM_MESSAGE_RULE = {"name": "tool_call", "text_verifier": {"name": "fuzzy", "threshold": 0, "binary": True}}
"""The README's verifier spec for NeMo Gym's rule on ``message`` rows: any chat message scores 1."""


def test_nemo_gym_message_rule_reproduces_every_recorded_reward():
    """With the README's spec, every NeMo Gym example row (message rows included) gets NeMo Gym's own
    recorded reward; the default (fuzzy on text turns) differs on message rows only."""
    from pivot_envs.serve.nemo_gym import verify_rows
    from pivot_envs.verifiers.batch import VerifierResolver

    rows = _rows("example_rollouts.jsonl")
    bodies = [{k: row[k] for k in ("responses_create_params", "response", "expected_action")} for row in rows]
    ours = verify_rows(bodies, VerifierResolver(NEMO_GYM_MESSAGE_RULE))
    assert [a["reward"] for a in ours] == [row["reward"] for row in rows]
    assert all(a["error"] is None for a in ours)
    default = verify_rows(bodies, VerifierResolver(None))
    differs = [row["expected_action"]["type"] for row, a in zip(rows, default) if a["reward"] != row["reward"]]
    assert differs == ["message", "message"]  # fuzzy on the text: 67.6 and 41.2 < 80
    # a tool call where a message was expected still scores 0 under the rule, as in NeMo Gym
    message_row = next(b for b in bodies if b["expected_action"]["type"] == "message")
    call = {**message_row, "response": _response([{"name": "get_weather", "arguments": "{}"}])}
    assert verify_rows([call], VerifierResolver(NEMO_GYM_MESSAGE_RULE))[0]["reward"] == 0.0
