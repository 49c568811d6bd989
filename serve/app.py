"""The ``pivot-envs serve`` FastAPI app.

Faces:

* ``GET /health`` -> ``{"status": "ok", "domains", "env_ids", "sessions", "verifier", "pid"}``;
* ``GET /metrics`` -> Prometheus text format (``?format=json`` for JSON): requests by route and
  status, verified rows, verifier errors, bad rows, latency sums/counts and p50/p99 per route, live
  sessions. Counters are per process: with ``--workers N`` each worker counts its own requests;
* NeMo Gym's resources-server protocol (:mod:`pivot_envs.serve.nemo_gym`): ``POST /seed_session``,
  ``POST /verify``, ``POST /verify_batch`` (these two answered by :class:`VerifyFastPath`, ahead of
  FastAPI's routing: the same bytes with less work per request);
* gymnasium over HTTP (:mod:`pivot_envs.serve.gym_http`): ``POST /reset``, ``/step``, ``/step_many``,
  ``GET /sessions``, ``DELETE /sessions/{id}``;
* OpenEnv (:mod:`pivot_envs.serve.openenv`): every env under ``/openenv/NAME`` (``/reset``, ``/step``,
  ``/state``, ``/schema``, ``/metadata``, ``/health``, ``/mcp``, ``WS /ws``, ``/openapi.json``); ``GET /openenv``;
* rollouts as a service, :mod:`pivot_envs.serve.rollouts` (its ``build_router(state)``);
* with ``policy``: the harness endpoint (:mod:`pivot_envs.serve.harness`, :mod:`pivot_envs.harness`):
  ``POST /harness/rollouts`` opens a rollout with its own OpenAI-compatible ``base_url`` and its world over MCP
  (``mcp_url``); without it, the harness routes answer 404 saying how to turn it on.

With ``api_key``, every route requires it (:mod:`pivot_envs.serve.auth`: 401 without it).

Errors: a malformed body is a 4xx whose JSON ``detail`` names the field (FastAPI's 422 ``loc`` for
pydantic bodies; ``{"field", "message"}`` otherwise); an unknown session is a 404; an unknown env id a
400 listing the known ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
import time
from collections import defaultdict, deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Optional, Union

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, ConfigDict

import pivot_envs
from pivot_envs.domains import all_domains, get_domain
from pivot_envs.serve import nemo_gym, openenv, rollouts
from pivot_envs.serve.auth import ApiKeyMiddleware
from pivot_envs.serve.gym_http import SessionError, SessionStore
from pivot_envs.serve.harness_off import include_off_notice
from pivot_envs.verifiers.batch import VerifierResolver

CONFIG_ENV = "PIVOT_ENVS_SERVE_CONFIG"
"""Environment variable carrying create_app's arguments (JSON) to the workers of ``--workers N``."""
VERIFY_THREADS = 40
"""Worker threads of :class:`VerifyFastPath` (per process): anyio's default for FastAPI's threadpool."""


# ------------------------------------------------------------------------------------- metrics
class Metrics:
    """Thread-safe request/verify counters and latency windows (the last 4096 latencies per route)."""

    def __init__(self, window: int = 4096):
        self._lock = threading.Lock()
        self.requests: dict[tuple[str, int], int] = defaultdict(int)
        self.latency_sum: dict[str, float] = defaultdict(float)
        self.latency_count: dict[str, int] = defaultdict(int)
        self.latencies: dict[str, deque] = defaultdict(lambda: deque(maxlen=window))
        self.verified = 0
        self.verify_errors = 0
        self.bad_rows = 0
        self.errors = 0  # 5xx answers
        self.started = time.time()

    def observe(self, route: str, status: int, seconds: float) -> None:
        with self._lock:
            self.requests[(route, status)] += 1
            self.latency_sum[route] += seconds
            self.latency_count[route] += 1
            self.latencies[route].append(seconds)
            if status >= 500:
                self.errors += 1

    def count_verified(self, answers: list[dict[str, Any]]) -> None:
        with self._lock:
            for a in answers:
                if a.get("field") is not None:
                    self.bad_rows += 1
                else:
                    self.verified += 1
                    if a.get("error"):
                        self.verify_errors += 1

    def snapshot(self, sessions: int = 0) -> dict[str, Any]:
        with self._lock:
            routes = {}
            for route, count in self.latency_count.items():
                window = sorted(self.latencies[route])
                routes[route] = {"count": count, "latency_sum_s": self.latency_sum[route],
                                 "p50_s": _quantile(window, 0.5), "p99_s": _quantile(window, 0.99)}
            return {"pid": os.getpid(), "uptime_s": time.time() - self.started,
                    "requests": [{"route": r, "status": s, "count": c} for (r, s), c in sorted(self.requests.items())],
                    "routes": routes, "verified_rows": self.verified, "verify_errors": self.verify_errors,
                    "bad_rows": self.bad_rows, "server_errors": self.errors, "sessions": sessions}

    def prometheus(self, sessions: int = 0) -> str:
        snap = self.snapshot(sessions)
        lines = ["# HELP pivot_envs_requests_total HTTP requests by route and status.",
                 "# TYPE pivot_envs_requests_total counter"]
        for r in snap["requests"]:
            lines.append(f'pivot_envs_requests_total{{route="{r["route"]}",status="{r["status"]}"}} {r["count"]}')
        lines += ["# HELP pivot_envs_request_latency_seconds Request latency by route.",
                  "# TYPE pivot_envs_request_latency_seconds summary"]
        for route, s in sorted(snap["routes"].items()):
            lines.append(f'pivot_envs_request_latency_seconds{{route="{route}",quantile="0.5"}} {s["p50_s"]:.6f}')
            lines.append(f'pivot_envs_request_latency_seconds{{route="{route}",quantile="0.99"}} {s["p99_s"]:.6f}')
            lines.append(f'pivot_envs_request_latency_seconds_sum{{route="{route}"}} {s["latency_sum_s"]:.6f}')
            lines.append(f'pivot_envs_request_latency_seconds_count{{route="{route}"}} {s["count"]}')
        for name, key, help_ in (("pivot_envs_verified_rows_total", "verified_rows", "Rows scored by a verifier."),
                                 ("pivot_envs_verify_errors_total", "verify_errors", "Rows whose verifier failed (error set)."),
                                 ("pivot_envs_bad_rows_total", "bad_rows", "Malformed rows of /verify_batch."),
                                 ("pivot_envs_server_errors_total", "server_errors", "5xx answers.")):
            lines += [f"# HELP {name} {help_}", f"# TYPE {name} counter", f"{name} {snap[key]}"]
        lines += ["# HELP pivot_envs_sessions Live gym sessions.", "# TYPE pivot_envs_sessions gauge",
                  f"pivot_envs_sessions {sessions}"]
        return "\n".join(lines) + "\n"


def _quantile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


class ObserveMiddleware:
    """Counts every HTTP request in :class:`Metrics` (route template, status, seconds until the answer is sent).

    A plain ASGI middleware: Starlette's ``@app.middleware("http")`` (``BaseHTTPMiddleware``) adds a
    task group and a memory stream to every request. An unhandled exception still counts as a 500.
    """

    def __init__(self, app: Any, metrics: Metrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        status = 500

        async def send_observed(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_observed)
        finally:
            path = getattr(scope.get("route"), "path", None) or "<unmatched>"
            self.metrics.observe(path, status, time.perf_counter() - t0)


class VerifyFastPath:
    """``POST /verify`` and ``POST /verify_batch`` without FastAPI's routing, request and response machinery.

    A plain ASGI middleware inside :class:`ObserveMiddleware`: it reads the body, runs the route's work
    (bytes in, answer bytes out: :func:`nemo_gym.verify_body_text` / :func:`nemo_gym.verify_rows_text`) on a
    thread of its own pool (``VERIFY_THREADS``, as many as anyio's default limit on FastAPI's threadpool: a
    verifier may block on a judge or a sandbox; ``run_in_executor`` costs less per call than anyio's
    ``run_in_threadpool``), and sends the same answers the FastAPI routes send (they stay registered, for
    the OpenAPI document and for any other method or path): the answer bytes with ``application/json``; a
    :class:`nemo_gym.BodyError` as the same 422 ``{"detail": ...}`` (Starlette's ``JSONResponse``, as the
    app's handler); any other exception goes on to Starlette's 500. ``scope["route"]`` is set to the
    route, so ``/metrics`` counts the request under its path as the router would.
    """

    def __init__(self, app: Any, routes: dict[str, tuple[Any, Any]], executor: Any):
        self.app, self.routes, self.executor = app, routes, executor  # path -> (the FastAPI route, bytes -> bytes)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        entry = None
        if scope["type"] == "http" and scope["method"] == "POST" and not scope.get("root_path"):
            entry = self.routes.get(scope["path"])
        if entry is None:
            await self.app(scope, receive, send)
            return
        route, work = entry
        scope["route"] = route
        raw = await Request(scope, receive).body()
        try:
            content = await asyncio.get_running_loop().run_in_executor(self.executor, work, raw)
        except nemo_gym.BodyError as exc:
            response: Response = JSONResponse(status_code=422, content={"detail": exc.detail()})
        else:
            response = Response(content, media_type="application/json")
        await response(scope, receive, send)


# ------------------------------------------------------------------------------------- state
@dataclass
class ServeState:
    """What the routers share (the rollouts router gets this too)."""

    domains: list[str]
    verifier: Any
    resolver: Any
    sessions: SessionStore
    metrics: Metrics
    env_ids: dict[str, str] = field(default_factory=dict)


# ------------------------------------------------------------------------------------- bodies
class ResetBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    env_id: str
    options: Optional[dict[str, Any]] = None
    seed: Optional[int] = None
    session_id: Optional[str] = None
    kwargs: Optional[dict[str, Any]] = None


class StepBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    session_id: str
    action: Union[str, dict[str, Any]]


class StepManyBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    session_id: str
    actions: list[Union[str, dict[str, Any]]]


# ------------------------------------------------------------------------------------- app
def create_app(domains: list[str] | None = None, verifier: Any = None, *, session_ttl_s: float = 600.0,
               max_sessions: int = 4096, include_rollouts: bool = True, fast_verify: bool = True,
               policy: str | dict[str, Any] | None = None, harness_idle_timeout_s: float = 600.0,
               harness_max_turns: int = 30, harness_user: Any = "scripted", api_key: str | None = None) -> FastAPI:
    """The serve app.

    Args:
        domains: the domains whose envs are served (``None``: every registered domain).
        verifier: a verifier name or config for ``/verify``, the pivot envs and the episode envs' per-turn
            rewards (``None``: each pivot's domain default).
        session_ttl_s: idle seconds after which a gym session is closed.
        max_sessions: the most live gym sessions.
        include_rollouts: mount :mod:`pivot_envs.serve.rollouts`.
        fast_verify: answer ``POST /verify`` and ``/verify_batch`` by :class:`VerifyFastPath` (the same
            bytes as the FastAPI routes, with less work per request); ``False``: by the FastAPI routes.
        policy: an agent spec: serve the harness endpoint (``/harness/rollouts``) with this policy answering
            (``hf:DIR``, ``vllm:MODEL``, ``replay``, or ``openai:MODEL@URL`` to forward); ``None``: no endpoint.
        harness_idle_timeout_s: a harness rollout idle this long is abandoned (its world freed).
        harness_max_turns: model calls a harness rollout may make.
        harness_user: the user simulator of harness rollouts (``scripted``, ``none``, ``openai:MODEL@URL``), reached
            through the user tool of tasks with a user.
        api_key: every request must carry this key (:mod:`pivot_envs.serve.auth`); ``None``: no key.
    """
    if domains:
        chosen = [get_domain(d) for d in domains]  # KeyError/ValueError names unknown domains
    else:
        chosen = all_domains()
    env_ids: dict[str, str] = {}
    for d in chosen:
        env_ids[d.env_id] = "pivot"
        if d.world is not None and d.episode_env_id:
            env_ids[d.episode_env_id] = "episode"
    resolver = VerifierResolver(verifier)
    state = ServeState(domains=[d.name for d in chosen], verifier=verifier, resolver=resolver,
                       sessions=SessionStore(env_ids, verifier=verifier, ttl_s=session_ttl_s, max_sessions=max_sessions),
                       metrics=Metrics(), env_ids=env_ids)
    verify_domain = "tool_use" if "tool_use" in state.domains or not state.domains else state.domains[0]
    harness_endpoint = None
    if policy is not None:
        from pivot_envs.serve.harness import build_endpoint  # the harness face: the mcp SDK, a policy engine

        harness_endpoint = build_endpoint(policy, [k for k, kind in env_ids.items() if kind == "episode"],
                                          idle_timeout_s=harness_idle_timeout_s, max_turns=harness_max_turns,
                                          user=harness_user)

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI):
        async with contextlib.AsyncExitStack() as stack:
            if harness_endpoint is not None:
                await stack.enter_async_context(harness_endpoint.running())
            yield
        if verify_pool is not None:
            verify_pool.shutdown(wait=False)
        state.sessions.close_all()
        _app.state.openenv.close_all()
        service = getattr(_app.state, "rollouts", None)
        if service is not None:  # stop the rollout pipeline's workers and close its backend clients
            await service.aclose()

    app = FastAPI(title="pivot-envs serve", version=pivot_envs.__version__, lifespan=lifespan)
    app.state.serve = state

    fast_routes: dict[str, tuple[Any, Any]] = {}  # filled below, once the routes exist
    verify_pool = ThreadPoolExecutor(VERIFY_THREADS, thread_name_prefix="verify") if fast_verify else None
    if verify_pool is not None:
        app.add_middleware(VerifyFastPath, routes=fast_routes, executor=verify_pool)
    app.add_middleware(ObserveMiddleware, metrics=state.metrics)
    if api_key:
        app.add_middleware(ApiKeyMiddleware, key=api_key)  # added last: outermost, before any route or count

    @app.exception_handler(SessionError)
    async def _session_error(request: Request, exc: SessionError):
        return JSONResponse(status_code=exc.status, content={"detail": exc.detail})

    @app.exception_handler(nemo_gym.BodyError)
    async def _body_error(request: Request, exc: nemo_gym.BodyError):
        return JSONResponse(status_code=422, content={"detail": exc.detail()})

    # ---- health / metrics
    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", "domains": state.domains, "env_ids": sorted(env_ids), "sessions": len(state.sessions),
                "verifier": resolver.config(), "pid": os.getpid()}

    @app.get("/metrics")
    def metrics(format: str = "prometheus"):
        n = len(state.sessions)
        if format == "json":
            return state.metrics.snapshot(n)
        return PlainTextResponse(state.metrics.prometheus(n), media_type="text/plain; version=0.0.4")

    # ---- NeMo Gym resources server
    @app.post("/seed_session")
    async def seed_session(request: Request) -> dict[str, Any]:
        raw = await request.body()
        if raw.strip():
            try:
                body = json.loads(raw.decode())
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise nemo_gym.BodyError("<body>", f"not valid JSON: {exc}") from None
            if not isinstance(body, dict):
                raise nemo_gym.BodyError("<body>", "must be a JSON object")
        return {}

    # One thread hop per request: decoding, converting, verifying and encoding all run off the event
    # loop (a verifier may block: an LLM judge, a sandbox), and none of it is done twice.
    def _verify_one(raw: bytes) -> bytes:
        out, content = nemo_gym.verify_body_text(raw, resolver, verify_domain)  # a bad body: 422 naming the field
        state.metrics.count_verified([out])
        return content

    @app.post("/verify")
    async def verify(request: Request):
        return Response(await run_in_threadpool(_verify_one, await request.body()), media_type="application/json")

    def _verify_many(raw: bytes) -> bytes:
        out, content = nemo_gym.verify_rows_text(raw, resolver, verify_domain)
        state.metrics.count_verified(out)
        return content

    @app.post("/verify_batch")
    async def verify_batch(request: Request):
        return Response(await run_in_threadpool(_verify_many, await request.body()), media_type="application/json")

    for route in app.routes:  # VerifyFastPath answers these two (the routes above: the same answers, the slow way)
        work = {"/verify": _verify_one, "/verify_batch": _verify_many}.get(getattr(route, "path", None))
        if work is not None and "POST" in getattr(route, "methods", ()):
            fast_routes[route.path] = (route, work)

    # ---- gymnasium over HTTP
    @app.post("/reset")
    def reset(body: ResetBody) -> dict[str, Any]:
        return state.sessions.reset(body.env_id, body.options, body.seed, body.session_id, body.kwargs)

    @app.post("/step")
    def step(body: StepBody) -> dict[str, Any]:
        return state.sessions.step(body.session_id, body.action)

    @app.post("/step_many")
    def step_many(body: StepManyBody) -> dict[str, Any]:
        return state.sessions.step_many(body.session_id, body.actions)

    @app.get("/sessions")
    def sessions() -> dict[str, Any]:
        return {"sessions": state.sessions.list(), "ttl_s": state.sessions.ttl_s}

    @app.delete("/sessions/{session_id}")
    def delete_session(session_id: str) -> dict[str, Any]:
        if not state.sessions.delete(session_id):
            raise SessionError(404, {"field": "session_id", "message": f"unknown session {session_id!r}"})
        return {"session_id": session_id, "closed": True}

    # ---- OpenEnv: every env under /openenv/NAME (pivot_envs.serve.openenv)
    app.state.openenv = openenv.include(app, state)

    # ---- the harness endpoint (pivot_envs.serve.harness)
    if harness_endpoint is not None:
        harness_endpoint.include(app)
        app.state.harness = harness_endpoint
    else:
        include_off_notice(app)

    # ---- rollouts as a service (another module)
    if include_rollouts:
        router = rollouts.build_router(state)
        app.state.rollouts = getattr(router, "service", None)
        app.include_router(router)

    return app


def app_from_env() -> FastAPI:
    """App factory for ``uvicorn --factory`` (``--workers N``): create_app's arguments from ``$PIVOT_ENVS_SERVE_CONFIG``."""
    config = json.loads(os.environ.get(CONFIG_ENV) or "{}")
    return create_app(**config)
