"""The NeMo Gym resources-server package (nemo_gym/resources_servers/pivot_envs), started by NeMo Gym's own runner.

The runner tests need NeMo Gym's venv, .venv-nemo-gym (nemo-gym 0.4.0 on Python 3.12 and this project:
``.ci/nemo_gym_venv.sh``), and skip without it. There ``gym env start`` starts the package's config (this server
and NeMo Gym's ``tool_simulation_agent``) and NeMo Gym's ``openai_model`` as the policy server, after Ray local and
its head server, as NeMo RL starts the servers of its ``config_paths``. The policy behind ``openai_model`` is a stub
on 127.0.0.1 that answers the expert's action or a wrong one (the package's ``tests/policy_actions.py``).

* ``/verify`` directly: the package's ``tests/verify_over_http.py`` sends the shipped rows over HTTP, wrapped as the
  agent wraps them, and validates each answer against NeMo Gym's own response types;
* a rollout: ``POST /run`` on NeMo Gym's agent (agent -> policy server -> stub -> ``/verify``), as NeMo RL runs one.

NeMo Gym builds a venv per server with uv; here ``skip_venv_if_present`` and each server's venv a link to
.venv-nemo-gym (no uv, no network at test time).
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from threading import Thread

import pytest
import yaml
from typer.testing import CliRunner

from pivot_envs.cli import app
from tests.conftest import skip_lane

ROOT = Path(__file__).resolve().parents[2]
GYM_ROOT = ROOT / "nemo_gym"  # what NeMo Gym's runner runs in: the folder holding resources_servers/
SERVER = GYM_ROOT / "resources_servers" / "pivot_envs"
CONFIG = "resources_servers/pivot_envs/configs/pivot_envs.yaml"
POLICY_CONFIG = "responses_api_models/openai_model/configs/openai_model.yaml"  # NeMo Gym's own, from its install
DATA = SERVER / "data" / "example.jsonl"
VENV = ROOT / ".venv-nemo-gym"
GYM = VENV / "bin" / "gym"
SERVER_DIRS = ("resources_servers/pivot_envs", "responses_api_agents/tool_simulation_agent",
               "responses_api_models/openai_model")
AGENT = "pivot_envs_agent"
START_TIMEOUT_S = 420  # Ray local, the head server and three server processes on a busy 2-core machine
READY = "All 3 / 3 servers ready"  # gym env start's line once every server of the config answers


def _rows() -> list[dict]:
    return [json.loads(line) for line in DATA.read_text().splitlines()]


def _policy_actions():
    spec = importlib.util.spec_from_file_location("policy_actions", SERVER / "tests" / "policy_actions.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_shipped_rows_are_the_exporters_rows_and_route_to_the_configs_agent(tmp_path):
    """data/example.jsonl is `pivot-envs extract --output-format nemo_gym` of the bundled tool_use test split, first 5
    rows (NeMo Gym's example size), and every row's agent_ref names the agent of configs/pivot_envs.yaml."""
    out = tmp_path / "rows.jsonl"
    result = CliRunner().invoke(app, ["extract", str(ROOT / "envs_data/tool_use/test.jsonl.gz"), "-o", str(out),
                                      "-d", "tool_use", "--output-format", "nemo_gym", "--agent-ref", AGENT])
    assert result.exit_code == 0, result.output
    shipped = DATA.read_text().splitlines()
    assert shipped == out.read_text().splitlines()[:5], (
        "data/example.jsonl is stale: regenerate it with pivot-envs extract envs_data/tool_use/test.jsonl.gz "
        f"-o rows.jsonl -d tool_use --output-format nemo_gym --agent-ref {AGENT} && head -n 5 rows.jsonl > "
        f"{DATA.relative_to(ROOT)}")
    config = yaml.safe_load((GYM_ROOT / CONFIG).read_text())
    agent = config[AGENT]["responses_api_agents"]["tool_simulation_agent"]
    assert agent["resources_server"]["name"] in config
    assert {d["jsonl_fpath"] for d in agent["datasets"]} == {str(DATA.relative_to(GYM_ROOT))}
    rows = _rows()
    assert {r["agent_ref"]["name"] for r in rows} == {AGENT}
    assert {r["expected_action"]["type"] for r in rows} == {"function_call", "message"}


# ------------------------------------------------------------------------------------- NeMo Gym's runner
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path: Path, n: int = 60) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-n:])


def _post(url: str, body: dict, timeout: float = 120) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def _stub_policy() -> ThreadingHTTPServer:
    """An OpenAI Responses endpoint (``POST /v1/responses``) answering the turn the request's ``user`` field names:
    ``"<row id>:expert"`` or ``"<row id>:wrong"``."""
    actions, rows = _policy_actions(), {r["id"]: r for r in _rows()}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            row_id, case = body["user"].split(":")
            row = rows[row_id]
            items = actions.expert_items(row["expected_action"]) if case == "expert" else actions.wrong_items(row)
            data = json.dumps({**actions.response_of(items), "model": body["model"]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    Thread(target=server.serve_forever, daemon=True).start()
    return server


def _sigint_default() -> None:
    """SIGINT as the default in the runner: a background shell (CI) starts its children with SIGINT ignored, and
    Ctrl-C (SIGINT) is how NeMo Gym's runner shuts down its servers and Ray."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _up(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/", timeout=5) as reply:
            return json.loads(reply.read()) == {"status": "ok"}
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _wait_until_up(url: str, runner: subprocess.Popen, log: Path) -> None:
    """Until the runner reports its servers ready (its own check) and the pivot_envs server answers NeMo Gym's
    liveness route."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if runner.poll() is not None:
            pytest.fail(f"gym env start exited with {runner.returncode} before its servers were up:\n{_tail(log)}")
        if READY in log.read_text(errors="replace") and _up(url):
            return
        time.sleep(2)
    pytest.fail(f"gym env start did not report {READY!r} with the pivot_envs server up at {url} within "
                f"{START_TIMEOUT_S} s:\n{_tail(log)}")


@pytest.fixture(scope="module")
def gym(tmp_path_factory):
    """`gym env start` of the package's config: {"verify": the pivot_envs server's URL, "agent": the agent's URL,
    "log": the runner's log} while NeMo Gym's runner holds them."""
    if not (GYM.exists() and os.access(GYM, os.X_OK)):
        skip_lane("nemo_gym", f"NeMo Gym's venv {VENV.name} is absent: create it with .ci/nemo_gym_venv.sh "
                    "(nemo-gym 0.4.0 on Python 3.12, from PATH or pyenv)")
    tmp = tmp_path_factory.mktemp("nemo_gym")
    venvs = tmp / "venvs"
    for server_dir in SERVER_DIRS:  # NeMo Gym's per-server venv path under uv_venv_dir: <type>/<name>/.venv
        (venvs / server_dir).mkdir(parents=True)
        (venvs / server_dir / ".venv").symlink_to(VENV.resolve(), target_is_directory=True)
    policy = _stub_policy()
    port, agent_port, head_port = _free_port(), _free_port(), _free_port()
    log = tmp / "gym_env_start.log"
    cmd = [str(GYM), "env", "start", f"+config_paths=[{CONFIG},{POLICY_CONFIG}]",
           f"+policy_base_url=http://127.0.0.1:{policy.server_address[1]}/v1", "+policy_api_key=unused",
           "+policy_model_name=stub", "+skip_venv_if_present=true", f"+uv_venv_dir={venvs}",
           f"+head_server={{host:127.0.0.1,port:{head_port}}}",
           f"++pivot_envs_resources_server.resources_servers.pivot_envs.port={port}",
           f"++{AGENT}.responses_api_agents.tool_simulation_agent.port={agent_port}",
           f"hydra.run.dir={tmp / 'hydra'}"]  # Hydra's run folder (else outputs/DATE/TIME in nemo_gym/)
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": ""}
    with log.open("w") as out:
        runner = subprocess.Popen(cmd, cwd=GYM_ROOT, stdout=out, stderr=subprocess.STDOUT, env=env,
                                  start_new_session=True, preexec_fn=_sigint_default)
    try:
        urls = {"verify": f"http://127.0.0.1:{port}", "agent": f"http://127.0.0.1:{agent_port}", "log": log}
        _wait_until_up(urls["verify"], runner, log)
        yield urls
    finally:
        runner.send_signal(signal.SIGINT)  # NeMo Gym's shutdown: its servers, head server and Ray cluster
        try:
            runner.wait(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(runner.pid, signal.SIGKILL)  # the runner's own session: its servers and Ray
            runner.wait(timeout=30)
        policy.shutdown()


@pytest.mark.slow
def test_verify_over_http_expert_1_wrong_0_answers_valid_for_nemo_gym(gym):
    script = SERVER / "tests" / "verify_over_http.py"
    done = subprocess.run([str(VENV / "bin" / "python"), str(script), gym["verify"], str(DATA)], check=False,
                          capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": ""})
    assert done.returncode == 0, f"{done.stderr[-4000:]}\nrunner log:\n{_tail(gym['log'])}"
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    rows = _rows()
    by_case = {(a["id"], a["case"]): a for a in answers}
    for row in rows:
        expert, wrong = by_case[(row["id"], "expert")], by_case[(row["id"], "wrong")]
        for answer in (expert, wrong):  # a 200, validated by the script against NeMo Gym's response types
            assert answer["status"] == 200 and answer["validated"] and answer["row_kept"], answer
            assert answer["error"] is None, answer
        assert (expert["reward"], expert["passed"]) == (1.0, True), expert
        assert (wrong["reward"], wrong["passed"]) == (0.0, False), wrong
    unscorable = [a for a in answers if a["case"] == "unscorable"]
    assert len(unscorable) == 1 and unscorable[0]["status"] == 422
    assert unscorable[0]["detail"]["field"] == "expected_action.type"
    assert len(answers) == 2 * len(rows) + 1


@pytest.mark.slow
def test_a_rollout_through_nemo_gyms_agent_is_scored_by_the_package(gym):
    """``POST /run`` on NeMo Gym's tool_simulation_agent, as NeMo RL runs a rollout: the agent asks the policy server
    (the stub behind NeMo Gym's openai_model), sends the answer to this server's /verify and validates the reply with
    its own response model (a reply it rejects is its 500)."""
    for row in _rows():
        for case, reward in (("expert", 1.0), ("wrong", 0.0)):
            params = {**row["responses_create_params"], "user": f"{row['id']}:{case}"}
            status, answer = _post(gym["agent"] + "/run", {**row, "responses_create_params": params})
            assert status == 200, f"{answer}\nrunner log:\n{_tail(gym['log'])}"
            assert (answer["reward"], answer["passed"], answer["error"]) == (reward, reward == 1.0, None), answer
            assert answer["expected_action"] == row["expected_action"]
            replied = case == "expert" and row["expected_action"]["type"] == "message"  # else the stub called a tool
            assert answer["response"]["output"][0]["type"] == ("message" if replied else "function_call")
