"""The harness endpoint over HTTP: open a rollout, hand its ``base_url`` and ``mcp_url`` to a harness, finish it.

::

    endpoint = HarnessEndpoint(HarnessRollouts(policy, envs))
    endpoint.include(app)                       # FastAPI app (pivot-envs serve --policy does this)
    server = HarnessServer(endpoint).start()    # or its own uvicorn on 127.0.0.1 (the trainer does this)
    server.url                                  # http://127.0.0.1:PORT

Routes (the contract outside checks use: fields may be added, none renamed)::

    POST   /harness/rollouts          {"env": ENV_ID, "split"?, "task_id" | "index" | "pivot_id"?, "seed"?, "kwargs"?, "max_turns"?}
                                      -> {"rollout_id", "task_id", "base_url", "mcp_url", "model", "messages", "tools",
                                          "system", "task", "user", ...}
    POST   /harness/rollouts/{id}/v1/chat/completions   an OpenAI chat.completions request -> chat.completion
    GET    /harness/rollouts/{id}/v1/models             the one model ("policy")
    *      /harness/rollouts/{id}/mcp                   the rollout's world over MCP (streamable HTTP)
    POST   /harness/rollouts/{id}/finish  -> {"task_id", "success", "reward", "turn_rewards", "retokenized_calls",
                                              "calls": [{"prompt_token_ids", "completion_token_ids", "logprobs",
                                              "policy_version", ...}], "messages", "status", ...}
    DELETE /harness/rollouts/{id}     abandon it (its world is freed)
    GET    /harness/rollouts/{id}     its state; GET /harness/rollouts: every rollout and the world counts
    GET    /harness/rollouts/{id}/trajectory?format=row|atif   a finished rollout as a trajectory row or ATIF

Errors: ``{"detail": {"field", "message"}}`` with 400 (an unknown env, task or pivot; an ``index`` out of
range), 404 (unknown rollout), 409 (it is not open), 422 (a bad field), 429 (too many open), 502 (its world or
its user simulator failed); the chat route adds OpenAI's ``{"error": {"message", "type", "param", "code"}}`` so
OpenAI clients show the message. Past its turn limit, or after its user ended the conversation, a rollout's chat
route answers a closing text (200, ``finish_reason: "stop"``, ``"pivot_envs": {"cut": ...}``) that ends the
harness's loop (:mod:`pivot_envs.harness.rollouts`).
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from typing import Any, AsyncIterator

import uvicorn
from fastapi import APIRouter, FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from pivot_envs.harness.export import EXPORT_FORMATS, to_atif, trajectory_row
from pivot_envs.harness.mcp import WorldOverMCP
from pivot_envs.harness.rollouts import MODEL_NAME, HarnessRollouts
from pivot_envs.harness.state import PREFIX, HarnessError

__all__ = ["HarnessEndpoint", "HarnessServer", "PREFIX"]


class HarnessEndpoint:
    """The routes and the MCP face of a :class:`~pivot_envs.harness.rollouts.HarnessRollouts`."""

    def __init__(self, rollouts: HarnessRollouts):
        self.rollouts = rollouts
        self.mcp = WorldOverMCP(rollouts)
        self.router = self._router()

    def include(self, app: FastAPI) -> None:
        """Add the routes to ``app`` (enter :meth:`running` in the app's lifespan)."""
        app.include_router(self.router)
        app.router.routes.append(self.mcp.route(PREFIX + "/{rollout_id}/mcp"))

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """What must run while the app serves (the MCP session manager); closes the rollouts afterwards."""
        try:
            async with self.mcp.running():
                yield
        finally:
            await run_in_threadpool(self.close)

    def close(self) -> None:
        self.rollouts.close()
        self.rollouts.policy.close()

    def open(self, spec: dict[str, Any], root: str) -> dict[str, Any]:
        """Open a rollout and add its URLs (``root``: the server's URL, without a trailing slash)."""
        opened = self.rollouts.open(spec)
        rid = opened["rollout_id"]
        return {"rollout_id": rid, "task_id": opened["task_id"], "base_url": f"{root}{PREFIX}/{rid}/v1",
                "mcp_url": f"{root}{PREFIX}/{rid}/mcp",
                **{k: v for k, v in opened.items() if k not in ("rollout_id", "task_id")}}

    # ------------------------------------------------------------------ routes
    def _router(self) -> APIRouter:
        router = APIRouter()
        rollouts = self.rollouts

        @router.post(PREFIX)
        async def open_rollout(request: Request) -> Any:
            body = await _json(request)
            root = str(request.base_url).rstrip("/")
            return await _call(self.open, body, root)

        @router.get(PREFIX)
        async def list_rollouts() -> Any:
            return {"rollouts": rollouts.list(), "stats": rollouts.stats()}

        @router.get(PREFIX + "/{rollout_id}")
        async def get_rollout(rollout_id: str) -> Any:
            return await _call(lambda: rollouts.describe(rollouts.get(rollout_id)))

        @router.delete(PREFIX + "/{rollout_id}")
        async def abandon(rollout_id: str) -> Any:
            return await _call(rollouts.abandon, rollout_id, "abandoned by DELETE")

        @router.post(PREFIX + "/{rollout_id}/finish")
        async def finish(rollout_id: str) -> Any:
            return await _call(rollouts.finish, rollout_id)

        @router.get(PREFIX + "/{rollout_id}/trajectory")
        async def trajectory(rollout_id: str, format: str = "row") -> Any:
            if format not in EXPORT_FORMATS:
                return _error(HarnessError(422, "format", f"one of {', '.join(EXPORT_FORMATS)}, got {format!r}"))
            rollout = await _call(rollouts.get, rollout_id)
            if isinstance(rollout, JSONResponse):
                return rollout
            if rollout.result is None:
                return _error(HarnessError(409, "rollout_id", f"rollout {rollout_id} is {rollout.status}: finish it "
                                                              "first"))
            return to_atif(rollout.result) if format == "atif" else trajectory_row(rollout.result)

        @router.post(PREFIX + "/{rollout_id}/v1/chat/completions")
        async def chat(rollout_id: str, request: Request) -> Any:
            body = await _json(request)
            return await _call(rollouts.chat, rollout_id, body, openai_error=True)

        @router.get(PREFIX + "/{rollout_id}/v1/models")
        async def models(rollout_id: str) -> Any:
            return {"object": "list", "data": [{"id": MODEL_NAME, "object": "model", "owned_by": "pivot-envs"}]}

        return router


class HarnessServer:
    """A :class:`HarnessEndpoint` on its own uvicorn server in a background thread, on 127.0.0.1.

    ``start()`` returns once the server answers; ``url`` is its root; ``close()`` stops it and closes the
    endpoint (open rollouts are abandoned, pooled worlds closed).
    """

    def __init__(self, endpoint: HarnessEndpoint, host: str = "127.0.0.1", port: int = 0):
        self.endpoint = endpoint
        self.host = host
        self._socket = socket.socket()
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((host, port))
        self.port = self._socket.getsockname()[1]
        self.url = f"http://{host}:{self.port}"
        app = FastAPI(title="pivot-envs harness endpoint", lifespan=lambda _app: endpoint.running())
        endpoint.include(app)
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False,
                                                    timeout_keep_alive=30))
        self._thread = threading.Thread(target=self._run, name="harness-endpoint", daemon=True)

    def start(self, timeout_s: float = 30.0) -> "HarnessServer":
        """Start serving (once; a started server is returned as it is) and wait until it answers."""
        if self._thread.ident is not None:
            return self
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if not self._thread.is_alive():
                raise RuntimeError("the harness endpoint's server stopped at start (see the log above)")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the harness endpoint did not start in {timeout_s:g} s")
            time.sleep(0.02)
        return self

    def close(self) -> None:
        self.server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout=30)
        self._socket.close()

    def _run(self) -> None:
        self.server.run(sockets=[self._socket])

    def __enter__(self) -> "HarnessServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()


# --------------------------------------------------------------------------- helpers


async def _json(request: Request) -> Any:
    raw = await request.body()
    try:
        return json.loads(raw.decode() or "null")
    except (ValueError, UnicodeDecodeError) as exc:
        return _BadBody(str(exc))


class _BadBody:
    def __init__(self, problem: str):
        self.problem = problem


async def _call(fn: Any, *args: Any, openai_error: bool = False) -> Any:
    if any(isinstance(a, _BadBody) for a in args):
        bad = next(a for a in args if isinstance(a, _BadBody))
        return _error(HarnessError(422, "<body>", f"not valid JSON: {bad.problem}"), openai_error)
    try:
        return await run_in_threadpool(fn, *args)
    except HarnessError as exc:
        return _error(exc, openai_error)


def _error(exc: HarnessError, openai_error: bool = False) -> JSONResponse:
    body: dict[str, Any] = {"detail": exc.detail()}
    if openai_error:
        body["error"] = {"message": f"{exc.field}: {exc.message}", "type": "invalid_request_error",
                         "param": exc.field, "code": exc.status}
    return JSONResponse(status_code=exc.status, content=body)
