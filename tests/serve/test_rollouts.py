"""Rollouts as a service (serve/rollouts.py) over real HTTP on 127.0.0.1: the router in a FastAPI app
served by uvicorn in a thread, two real ``transformers serve`` backends (tiny untrained model built
offline) and the controllable fake OpenAI server of tests/servers.py for failure injection."""

from __future__ import annotations

import contextlib
import json
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from tests.servers import control, free_port, start_fake_openai, start_transformers_serve, stats, transformers_serve_missing  # noqa: E402
from tests.conftest import scaled  # noqa: E402

from pivot_envs.actions import message_text  # noqa: E402
from pivot_envs.serve.rollouts import RolloutService, build_router  # noqa: E402
from pivot_envs.sources import resolve_pivots  # noqa: E402

SAMPLING = {"temperature": 1.0, "max_tokens": 8}


def call(method: str, url: str, payload=None, timeout: float = 30.0):
    data = None if payload is None else (payload if isinstance(payload, bytes) else json.dumps(payload).encode())
    req = urllib.request.Request(url, data=data, method=method, headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


@contextlib.contextmanager
def running(service: RolloutService):
    """The router in a FastAPI app, served by uvicorn in a thread; yields the root URL."""
    import uvicorn
    from fastapi import FastAPI

    app = FastAPI()
    app.include_router(build_router(service))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def wait_status(root: str, job_id: str, statuses=("done", "cancelled", "failed"), timeout: float = 90.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        code, view = call("GET", f"{root}/rollouts/{job_id}")
        assert code == 200, view
        if view["status"] in statuses:
            return view
        assert time.monotonic() < deadline, f"job still {view['status']} after {timeout}s: {view}"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def pivots():
    return resolve_pivots(None, domain="tool_use", split="test")[:3]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    pytest.importorskip("torch")
    from pivot_envs.models.reference import build_reference_model

    return str(build_reference_model("tool_use", tmp_path_factory.mktemp("m") / "tiny", steps=0, lm_steps=0, vocab_size=512))


@pytest.fixture(scope="module")
def serves(tiny_model, tmp_path_factory):
    """Two real ``transformers serve`` backends, started side by side."""
    missing = transformers_serve_missing()
    if missing:
        pytest.skip(missing)
    logs = tmp_path_factory.mktemp("serve")
    with ThreadPoolExecutor(2) as pool:
        servers = list(pool.map(lambda k: start_transformers_serve(logs / f"serve{k}.log", force_model=tiny_model), range(2)))
    yield servers
    for s in servers:
        s.stop()


@pytest.fixture()
def fake(tmp_path):
    server = start_fake_openai(tmp_path / "fake.log")
    yield server
    server.stop()


def test_job_on_two_real_backends_completes_with_verifier_rewards(serves, tiny_model, pivots, tmp_path):
    with running(RolloutService(tmp_path / "state")) as root:
        for s in serves:
            assert call("POST", f"{root}/backends", {"url": s.base_url})[0] == 200
        code, listed = call("GET", f"{root}/backends")
        assert code == 200 and [b["url"] for b in listed["backends"]] == [s.base_url for s in serves]
        code, made = call("POST", f"{root}/rollouts", {"pivot_ids": [p.id for p in pivots], "domain": "tool_use",
                                                       "split": "test", "n": 2, "model": tiny_model, "sampling": SAMPLING})
        assert code == 200, made
        view = wait_status(root, made["id"])
        assert view["status"] == "done" and view["done"] == view["total"] == 6
        assert [len(g) for g in view["results"]] == [2, 2, 2]
        for e in (e for g in view["results"] for e in g):
            assert set(e) >= {"text", "reward", "passed", "error", "token_ids", "logprobs"}
            assert isinstance(e["text"], str) and 0.0 <= e["reward"] <= 1.0 and e["error"] is None
            assert e["verifier"] and e["reason"]  # scored by the domain's verifier
        used = {b["url"]: b["requests"] for b in call("GET", f"{root}/backends")[1]["backends"]}
        assert all(n >= 1 for n in used.values())  # least-loaded spread the work over both
        record = json.loads((tmp_path / "state" / f"{made['id']}.json").read_text())
        assert record["status"] == "done" and record["results"] == view["results"]


def test_expert_reply_earns_full_reward_and_add_remove_backends_at_run_time(fake, serves, tiny_model, pivots, tmp_path):
    pivot = pivots[0]
    control(fake, reply=message_text(pivot.expert))
    with running(RolloutService(tmp_path / "state")) as root:
        call("POST", f"{root}/backends", {"url": fake.base_url})
        body = {"pivots": [pivot.to_dict()], "n": 3, "model": tiny_model, "sampling": SAMPLING}
        view = wait_status(root, call("POST", f"{root}/rollouts", body)[1]["id"])
        assert [e["reward"] for e in view["results"][0]] == [1.0, 1.0, 1.0]  # the expert's action, by the verifier
        assert call("DELETE", f"{root}/backends", {"url": fake.base_url})[0] == 200
        assert call("DELETE", f"{root}/backends", {"url": fake.base_url})[0] == 404
        assert call("POST", f"{root}/backends", {"url": serves[0].base_url})[0] == 200
        before = stats(fake)["requests"]
        view = wait_status(root, call("POST", f"{root}/rollouts", body)[1]["id"])
        assert view["status"] == "done" and stats(fake)["requests"] == before  # all went to the new backend
        assert {e["backend"] for e in view["results"][0]} == {serves[0].base_url}


def test_killed_backend_mid_run_loses_no_sample(fake, serves, tiny_model, pivots, tmp_path):
    control(fake, reply="hello", delay_s=0.5)
    with running(RolloutService(tmp_path / "state", cooldown_s=30)) as root:
        call("POST", f"{root}/backends", {"url": fake.base_url})
        call("POST", f"{root}/backends", {"url": serves[1].base_url})
        code, made = call("POST", f"{root}/rollouts", {"pivot_ids": [p.id for p in pivots], "domain": "tool_use",
                                                       "split": "test", "n": 4, "model": tiny_model, "sampling": SAMPLING})
        deadline = time.monotonic() + 20
        while stats(fake)["in_flight"] == 0:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        fake.proc.kill()  # dies with requests in flight
        view = wait_status(root, made["id"])
        assert view["status"] == "done" and view["done"] == 12
        entries = [e for g in view["results"] for e in g]
        assert all(e["error"] is None and e["text"] is not None for e in entries)
        assert view["retries"] >= 1
        dead = next(b for b in call("GET", f"{root}/backends")[1]["backends"] if b["url"] == fake.base_url)
        assert dead["failures"] >= 1 and not dead["healthy"]


def test_cancel_abandons_backend_calls_and_full_service_answers_429(fake, pivots, tmp_path):
    control(fake, hang=True)
    with running(RolloutService(tmp_path / "state", max_jobs=2)) as root:
        call("POST", f"{root}/backends", {"url": fake.base_url})
        body = {"pivot_ids": [pivots[0].id], "domain": "tool_use", "split": "test", "n": 2, "model": "m"}
        first = call("POST", f"{root}/rollouts", body)[1]["id"]
        second = call("POST", f"{root}/rollouts", body)[1]["id"]
        code, refused = call("POST", f"{root}/rollouts", body)
        assert code == 429 and "unfinished jobs" in refused["detail"]
        deadline = time.monotonic() + 10
        while stats(fake)["in_flight"] < 4:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        code, view = call("DELETE", f"{root}/rollouts/{first}")
        assert code == 200 and view["status"] == "cancelled"
        deadline = time.monotonic() + 10
        while call("GET", f"{root}/backends")[1]["backends"][0]["in_flight"] != 2:  # the first job's calls abandoned
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert call("POST", f"{root}/rollouts", body)[0] == 200  # room again
        assert call("GET", f"{root}/rollouts/{first}")[1]["status"] == "cancelled"
        for job in (second,):
            call("DELETE", f"{root}/rollouts/{job}")
    control(fake)


def test_restart_reports_unfinished_jobs(fake, pivots, tmp_path):
    control(fake, hang=True)
    state = tmp_path / "state"
    with running(RolloutService(state)) as root:
        call("POST", f"{root}/backends", {"url": fake.base_url})
        job = call("POST", f"{root}/rollouts", {"pivot_ids": [pivots[0].id], "domain": "tool_use", "split": "test",
                                                "n": 1, "model": "m"})[1]["id"]
        wait_status(root, job, ("running",))
    with running(RolloutService(state)) as root:  # a new service on the same state folder
        code, view = call("GET", f"{root}/rollouts/{job}")
        assert code == 200 and view["status"] == "failed" and "restarted before this job finished" in view["error"]
    control(fake)


@pytest.mark.parametrize("body, status, field", [
    ({"domain": "tool_use", "n": 1, "model": "m"}, 422, "pivots"),
    ({"pivot_ids": ["x"], "n": 1, "model": "m"}, 422, "domain"),
    ({"pivot_ids": ["nope"], "domain": "tool_use", "split": "test", "model": "m"}, 422, "pivot_ids"),
    ({"pivot_ids": ["x"], "domain": "no_such_domain", "model": "m"}, 422, "domain"),
    ({"pivots": [{"id": 3}], "domain": "tool_use", "model": "m"}, 422, "pivots[0]"),
    ({"pivot_ids": ["x"], "domain": "tool_use", "n": 0, "model": "m"}, 422, "n"),
    ({"pivot_ids": ["x"], "domain": "tool_use", "n": 1}, 422, "model"),
    ({"pivot_ids": ["x"], "domain": "tool_use", "model": "m", "sampling": {"temperature": "hot"}}, 422, "sampling.temperature"),
    (b"{not json", 400, "body"),
])
def test_malformed_bodies_name_the_field_and_unknown_ids_are_404_or_421(body, status, field, tmp_path):
    with running(RolloutService(tmp_path / "state")) as root:
        code, answer = call("POST", f"{root}/rollouts", body)
        assert code == status and answer["detail"]["field"] == field, answer
        assert call("GET", f"{root}/rollouts/nope")[0] == 404
        assert call("DELETE", f"{root}/rollouts/nope")[0] == 404
        elsewhere = call("GET", f"{root}/rollouts/w1-0123456789abcdef")  # a job id made by process 1
        assert elsewhere[0] == 421 and "--workers 1" in elsewhere[1]["detail"]["error"]
        assert call("POST", f"{root}/backends", {"url": "ftp://x"})[1]["detail"]["field"] == "url"


def test_slow_verifier_does_not_hold_up_sampling_without_fastapi(fake, pivots, tmp_path, monkeypatch):
    """RolloutService on its own: sampling finishes while the (slow) verifier still scores."""
    import asyncio

    import pivot_envs.serve.rollouts as rollouts

    real = rollouts.verify_batch
    release = threading.Event()  # scoring is held until every sample was drawn: no race against a clock

    def slow(*args, **kw):
        release.wait(scaled(60))
        return real(*args, **kw)

    monkeypatch.setattr(rollouts, "verify_batch", slow)  # the name the service's eval workers call
    control(fake, reply="hi")

    async def scenario():
        service = RolloutService(tmp_path / "state", backends=[fake.base_url], eval_batch=2, eval_workers=1)
        try:
            job = await service.submit({"pivot_ids": [p.id for p in pivots[:2]], "domain": "tool_use", "split": "test",
                                        "n": 4, "model": "m"})
            deadline = time.monotonic() + scaled(30)
            while stats(fake)["requests"] < 8:
                assert time.monotonic() < deadline, "sampling waited for the (held) verifier"
                await asyncio.sleep(0.01)
            assert service.get(job)["done"] == 0  # every sample drawn, none scored yet
            release.set()
            view = await service.wait(job, scaled(30))
            assert view["status"] == "done" and view["done"] == 8
        finally:
            release.set()
            await service.aclose()

    asyncio.run(scenario())
