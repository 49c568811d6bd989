"""The OpenEnv face of ``pivot-envs serve``: every served env as an OpenEnv environment.

OpenEnv (PyPI ``openenv``) is an env-control standard; its own clients (``openenv.GenericEnvClient``,
``openenv validate``) use these URLs as they are (``tests/serve/test_serve_openenv.py``). Trainers that speak
OpenEnv (TRL, Unsloth, SkyRL, verifiers) each need their own glue (a rollout function or env wrapper) to
drive one: none was run here. Each env id of the server (pivot and episode envs) is one OpenEnv environment under
``/openenv/NAME``, NAME being the id without its namespace (``pivot/ToolUse-v0`` -> ``ToolUse-v0``,
``pivot/Terminal-Episode-v0`` -> ``Terminal-Episode-v0``); ``GET /openenv`` lists them. Under that
prefix, in OpenEnv's shapes (``openenv.core.env_server`` 0.10, API version 1.0.0)::

    POST /reset    {"seed"?, "episode_id"?, "pivot_id" | "task_id" | "index"?, "options"?, "split"?, "reward_mode"?,
                    "session_id"?}
                   -> {"observation": {"messages", "tools", "metadata"}, "reward": null, "done": false, "metadata"}
    POST /step     {"action": {"text": STR} | {"message": ASSISTANT_MESSAGE}, "session_id"?}
                   -> {"observation", "reward", "done", "metadata"}
    GET  /state    ?session_id= -> {"episode_id", "step_count", "env_id", "kind", "split", "done", "session_id"}
    GET  /schema   -> {"action", "observation", "reset_observation", "state"} (JSON schemas)
    GET  /metadata -> {"name", "description", "version"}
    GET  /health   -> {"status": "healthy"}
    POST /mcp      JSON-RPC 2.0: openenv/session/create, openenv/session/close, tools/list
    WS   /ws       ?session_id= (attach to an HTTP session); frames {"type": "reset|step|state|close|mcp", "data"}
    GET  /openapi.json  this environment's OpenAPI document (paths relative to the prefix)

The observation's ``messages`` and ``tools`` are the env's (chat messages and OpenAI tool specs, as
JSON values, not JSON text); ``metadata`` is the env's ``info`` without ``expert`` (the recorded
answer: a label the agent must not see), plus ``terminated`` / ``truncated`` after a step. The reward
is the verifier's for a pivot env (one step, then ``done``) and the episode step's for an episode env
(0 until the end, then 1.0 on task success).

Per-turn rewards of episode envs: every step's ``metadata`` carries the env's ``turn_reward`` (the
verifier's reward for the turn while the episode is on the expert's path, else ``null``; see
:mod:`pivot_envs.episodes`), ``turn_reward_error`` and ``on_path``. The step ``reward`` stays task
success by default (``reward_mode: "success"``): OpenEnv consumers (TRL's rollout functions, the
OpenEnv examples) read ``reward`` as the environment's return and sum or take the last, so a dense
signal there would change what a success means. ``POST /reset {"reward_mode": "turn"}`` switches that
episode to dense rewards: each step's ``reward`` is its ``turn_reward`` (0.0 when ``null``: off the
path), the last step's too, and task success stays in ``metadata["success"]``. ``reward_mode`` holds
until the next reset (which sets it again, default ``"success"``); ``GET /state`` shows it. A pivot
env's reward is the verifier's in either mode (its one step is its one turn).

Sessions follow OpenEnv: every WebSocket connection plays its own env instance (made at its first
reset, closed when the socket closes); plain HTTP ``/reset`` and ``/step`` are stateless as in
OpenEnv's own server (``/reset`` makes a fresh env, resets it and closes it; ``/step`` without a session
is a 409, since a fresh env has no episode to step). A stateful HTTP session is named by ``session_id``:
one from ``POST /mcp {"method": "openenv/session/create"}`` (OpenEnv's HTTP session call) or any string
the client picks; ``/reset``, ``/step`` and ``/state`` with it play that session's own env, ``WS
/ws?session_id=`` attaches to it, ``openenv/session/close`` ends it. HTTP sessions expire after the
server's session TTL idle (not while a WebSocket is attached) and live in the worker process that made
them (a 421 elsewhere: serve them with ``--workers 1``; WebSocket sessions work with any worker count).

The server does not import ``openenv``: the shapes are written out here, and ``tests/serve/test_serve_openenv.py``
checks them with the real package (``openenv validate``, ``GenericEnvClient``).
"""

from __future__ import annotations

import inspect
import json
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Optional

from fastapi import APIRouter, Body, FastAPI, Request, WebSocket, WebSocketDisconnect
from fastapi.concurrency import run_in_threadpool
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

import pivot_envs
from pivot_envs.domains import get_domain
from pivot_envs.serve.gym_http import SessionError, jsonable, refuse_misrouted
from pivot_envs.serve.owner import new_id

PREFIX = "/openenv"
API_VERSION = "1.0.0"
"""The OpenEnv HTTP API version implemented (``openenv validate`` reads it as profile ``openenv-http/1.x``)."""
HIDDEN_INFO = frozenset({"expert"})
"""``info`` keys left out of the observation metadata: the recorded answer is a label."""

log = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------- wire models
class TextOrMessage(BaseModel):
    """An action: the model's raw text, or an OpenAI assistant message (``content`` and/or ``tool_calls``)."""

    model_config = ConfigDict(extra="forbid")
    text: Optional[str] = Field(default=None, description="Raw model output (<tool_call> blocks, JSON calls, prose)")
    message: Optional[dict[str, Any]] = Field(default=None, description="An OpenAI assistant message")
    metadata: dict[str, Any] = Field(default_factory=dict, description="OpenEnv's action metadata (ignored)")

    @model_validator(mode="after")
    def _one_form(self) -> "TextOrMessage":
        if (self.text is None) == (self.message is None):
            raise ValueError("give exactly one of 'text' (a string) or 'message' (an assistant message)")
        role = self.message.get("role", "assistant") if self.message is not None else "assistant"
        if role != "assistant":
            raise ValueError(f"'message' must be an assistant message, got role {role!r}")
        return self

    def raw(self) -> Any:
        """What the gymnasium env's ``step`` takes."""
        return self.text if self.text is not None else self.message


class ChatObservation(BaseModel):
    """The observation (schema only: answers are built as dicts)."""

    messages: list[dict[str, Any]] = Field(description="The conversation so far (chat messages)")
    tools: list[dict[str, Any]] = Field(description="The tools the agent may call (OpenAI tool specs)")
    done: bool = Field(default=False, description="Whether the episode has ended")
    reward: Optional[float] = Field(default=None, description="The step's reward (null at reset)")
    metadata: dict[str, Any] = Field(default_factory=dict, description="The env's info, without the expert answer")


class PlayState(BaseModel):
    """``GET /state`` (OpenEnv's ``State``: ``episode_id`` and ``step_count``, plus ours)."""

    model_config = ConfigDict(extra="allow")
    episode_id: Optional[str] = Field(default=None, description="The client's episode_id, else the pivot or task id")
    step_count: int = Field(default=0, ge=0, description="Steps since the last reset")
    env_id: str = Field(description="The gymnasium env id")
    kind: str = Field(description="'pivot' or 'episode'")
    split: Optional[str] = Field(default=None, description="The bundled split played")
    done: bool = Field(default=False, description="Whether the episode has ended")
    session_id: Optional[str] = Field(default=None, description="The HTTP session, if any")
    reward_mode: str = Field(default="success", description="What the step reward is: 'success' or 'turn'")


class ResetParams(BaseModel):
    """What a reset takes (the body of ``POST /reset``; the ``data`` of a WebSocket ``reset`` frame)."""

    model_config = ConfigDict(extra="forbid")
    seed: Optional[int] = Field(default=None, ge=0, description="Seeds the draw of a pivot/task")
    episode_id: Optional[str] = Field(default=None, max_length=255, description="Your name for the episode (in /state)")
    pivot_id: Optional[str] = Field(default=None, description="Start at this pivot")
    task_id: Optional[str] = Field(default=None, description="Episode envs: start this task at its first turn")
    index: Optional[int] = Field(default=None, description="Start at the index-th pivot/task")
    options: Optional[dict[str, Any]] = Field(default=None, description="More gymnasium reset options")
    split: Optional[str] = Field(default=None, description="Bundled split (train/test); another split remakes the env")
    reward_mode: Literal["success", "turn"] = Field(
        default="success", description="Episode envs: 'success' (the step reward is task success at the end, 0 before) "
                                       "or 'turn' (each step's reward is its per-turn reward, 0 off the expert's path)")

    def gym_options(self, kind: str) -> dict[str, Any]:
        """The gymnasium ``options``: ``options`` plus whichever of pivot_id/task_id/index was given."""
        chosen = {k: v for k, v in (("pivot_id", self.pivot_id), ("task_id", self.task_id), ("index", self.index))
                  if v is not None}
        if len(chosen) > 1:
            raise SessionError(422, {"field": "pivot_id", "message": f"give at most one of pivot_id, task_id, index; "
                                                                    f"got {', '.join(chosen)}"})
        if "task_id" in chosen and kind != "episode":
            raise SessionError(422, {"field": "task_id", "message": "task_id: pivot envs start at a pivot "
                                                                   "(pivot_id or index); task_id is for episode envs"})
        return {**(self.options or {}), **chosen}


class ResetBody(ResetParams):
    session_id: Optional[str] = Field(default=None, max_length=255,
                                      description="Play this HTTP session's env (made on first use); omit: stateless")


class StepBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    action: TextOrMessage
    session_id: Optional[str] = Field(default=None, max_length=255, description="The HTTP session to step")
    timeout_s: Optional[float] = Field(default=None, gt=0, description="OpenEnv's step timeout (not enforced)")
    request_id: Optional[str] = Field(default=None, max_length=255, description="OpenEnv's request id (not used)")


# ------------------------------------------------------------------------------------- one env instance
@dataclass
class EnvSpec:
    """One served env: its OpenEnv name, gymnasium id, kind and description."""

    name: str
    env_id: str
    kind: str  # "pivot" | "episode"
    description: str
    split: Optional[str] = None  # what the env plays when made without split=


def registered_split(env_id: str) -> Optional[str]:
    """The split ``gymnasium.make(env_id)`` plays: the registered ``split`` kwarg, else the constructor's default."""
    import gymnasium
    from gymnasium.envs.registration import load_env_creator

    spec = gymnasium.spec(env_id)
    if "split" in (spec.kwargs or {}):
        return spec.kwargs["split"]
    creator = load_env_creator(spec.entry_point) if isinstance(spec.entry_point, str) else spec.entry_point
    param = inspect.signature(creator).parameters.get("split")
    return param.default if param is not None and isinstance(param.default, str) else None


@dataclass
class Play:
    """One env instance played through the OpenEnv face (a WebSocket's, an HTTP session's, or a stateless call's).

    The env is made at the first reset (with its ``split``); a lock makes concurrent calls run one at a time.
    """

    spec: EnvSpec
    make: Callable[[str, dict[str, Any]], Any]
    id: str = field(default_factory=new_id)
    env: Any = None
    split: Optional[str] = None  # the split of the env made (the spec's before one is made)
    steps: int = 0
    done: bool = False
    started: bool = False
    reward_mode: str = "success"  # the last reset's (ResetParams.reward_mode)
    episode_id: Optional[str] = None
    tools: list[dict[str, Any]] = field(default_factory=list)
    attached: bool = False  # a WebSocket plays this HTTP session now
    last_used: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def reset(self, params: ResetParams) -> dict[str, Any]:
        """Reset (making or remaking the env as ``split`` asks); the OpenEnv reset answer."""
        options = params.gym_options(self.spec.kind)
        with self.lock:
            self.last_used = time.monotonic()
            if self.env is None or (params.split is not None and params.split != self.split):
                self._make(params.split)
            try:
                obs, info = self.env.reset(seed=params.seed, options=options or None)
            except (KeyError, ValueError, IndexError, TypeError) as exc:
                name = next(iter(options), "options")
                message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
                raise SessionError(400, {"field": name, "message": f"field {name!r}: {message}"}) from None
            self.steps, self.done, self.started = 0, False, True
            self.reward_mode = params.reward_mode
            self.episode_id = params.episode_id or info.get("pivot_id") or info.get("task_id")
            return self._answer(obs, info, None, False)

    def step(self, action: TextOrMessage) -> dict[str, Any]:
        """One action; the OpenEnv step answer (``metadata`` gains ``terminated`` and ``truncated``)."""
        with self.lock:
            self.last_used = time.monotonic()
            if not self.started:
                raise SessionError(409, {"field": "session_id", "message": "no episode: reset first"})
            if self.done:
                raise SessionError(409, {"field": "session_id", "message": "the episode is over: reset first"})
            try:
                obs, reward, terminated, truncated, info = self.env.step(action.raw())
            except RuntimeError as exc:
                raise SessionError(409, {"field": "session_id", "message": str(exc)}) from None
            except (ValueError, TypeError) as exc:
                raise SessionError(422, {"field": "action", "message": f"field 'action': {exc}"}) from None
            self.steps += 1
            self.done = bool(terminated or truncated)
            info = {**info, "terminated": bool(terminated), "truncated": bool(truncated)}
            return self._answer(obs, info, self._reward(float(reward), info), self.done)

    def state(self, session_id: Optional[str] = None) -> dict[str, Any]:
        """OpenEnv's state of this instance."""
        return {"episode_id": self.episode_id, "step_count": self.steps, "env_id": self.spec.env_id,
                "kind": self.spec.kind, "split": self.split, "done": self.done, "session_id": session_id,
                "reward_mode": self.reward_mode}

    def close(self) -> None:
        with self.lock:
            self._close_env()

    # --- internals -------------------------------------------------------------------------
    def _reward(self, reward: float, info: dict[str, Any]) -> float:
        """The step reward under ``reward_mode``: the env's, or an episode step's turn reward (0.0 when ``None``)."""
        if self.reward_mode != "turn" or self.spec.kind != "episode":
            return reward
        turn = info.get("turn_reward")
        return 0.0 if turn is None else float(turn)

    def _make(self, split: Optional[str]) -> None:
        self._close_env()
        try:
            self.env = self.make(self.spec.env_id, {"split": split} if split is not None else {})
        except SessionError as exc:  # the gym face's "kwargs" error: here only split makes it
            message = str(exc.detail.get("message", "")).replace("field 'kwargs': ", "")
            raise SessionError(exc.status, {"field": "split", "message": f"field 'split': {message}"}) from None
        self.split = split if split is not None else self.spec.split
        self.started, self.episode_id, self.tools = False, None, []

    def _close_env(self) -> None:
        env, self.env, self.started = self.env, None, False
        if env is not None:
            try:
                env.close()
            except Exception:  # noqa: BLE001 - closing must not fail the request
                log.debug("closing %s failed", self.spec.env_id, exc_info=True)

    def _answer(self, obs: dict[str, str], info: dict[str, Any], reward: Optional[float], done: bool) -> dict[str, Any]:
        metadata = {k: v for k, v in jsonable(info).items() if k not in HIDDEN_INFO}
        self.tools = json.loads(obs["tools"])
        observation = {"messages": json.loads(obs["messages"]), "tools": self.tools, "metadata": metadata}
        return {"observation": observation, "reward": reward, "done": done, "metadata": metadata}


# ------------------------------------------------------------------------------------- HTTP sessions
class PlaySessions:
    """The live HTTP sessions (``session_id`` -> :class:`Play`): idle ones expire after ``ttl_s``
    (never while a WebSocket is attached), at most ``max_sessions`` at once."""

    def __init__(self, ttl_s: float, max_sessions: int):
        self.ttl_s, self.max_sessions = ttl_s, max_sessions
        self._plays: dict[str, Play] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._plays)

    def open(self, session_id: str, env_id: str, new: Callable[[str], Play]) -> Play:
        """The session ``session_id``, made with ``new(session_id)`` and registered when it does not exist yet
        (a 409 when ``max_sessions`` are live)."""
        play = self.find(session_id, env_id)
        if play is not None:
            return play
        with self._lock:
            play = self._plays.get(session_id)
            if play is None:
                if len(self._plays) >= self.max_sessions:
                    raise SessionError(409, {"field": "session_id", "message": f"{self.max_sessions} OpenEnv sessions "
                                             "are live: close some first (openenv/session/close)"})
                play = self._plays[session_id] = new(session_id)
        return self.find(session_id, env_id) or play  # made by a concurrent call: checked like any other

    def find(self, session_id: str, env_id: str) -> Optional[Play]:
        """The session, ``None`` when unknown here; a 421 when another worker made it, a 409 for another env's."""
        self.sweep()
        with self._lock:
            play = self._plays.get(session_id)
        if play is None:
            refuse_misrouted(session_id)
            return None
        if play.spec.env_id != env_id:
            raise SessionError(409, {"field": "session_id", "message": f"session {session_id!r} plays "
                                                                      f"{play.spec.env_id}, not {env_id}"})
        return play

    def get(self, session_id: str, env_id: str) -> Play:
        """The session; a 404 when unknown."""
        play = self.find(session_id, env_id)
        if play is None:
            raise SessionError(404, {"field": "session_id", "message": f"unknown session {session_id!r} (expired after "
                                                                      f"{self.ttl_s:g} s idle, closed, or never made)"})
        return play

    def attach(self, session_id: str, env_id: str) -> Play:
        """The session, marked as played by a WebSocket (one at a time; it does not expire meanwhile)."""
        play = self.get(session_id, env_id)
        with self._lock:
            if play.attached:
                raise SessionError(409, {"field": "session_id",
                                         "message": f"session {session_id!r} already has a WebSocket"})
            play.attached = True
        return play

    def detach(self, play: Play) -> None:
        with self._lock:
            play.attached = False
            play.last_used = time.monotonic()

    def pop(self, session_id: str) -> Optional[Play]:
        with self._lock:
            return self._plays.pop(session_id, None)

    def sweep(self) -> int:
        """Close the sessions idle for longer than ``ttl_s``; returns how many."""
        now = time.monotonic()
        with self._lock:
            dead = [p for p in self._plays.values()
                    if now - p.last_used > self.ttl_s and not p.attached and not p.lock.locked()]
            for p in dead:
                del self._plays[p.id]
        for p in dead:
            p.close()
        return len(dead)

    def close_all(self) -> None:
        with self._lock:
            plays = list(self._plays.values())
            self._plays.clear()
        for p in plays:
            p.close()


# ------------------------------------------------------------------------------------- the face
class OpenEnvFace:
    """The OpenEnv environments of one app: their specs, how envs are made, the HTTP sessions."""

    def __init__(self, specs: list[EnvSpec], make: Callable[[str, dict[str, Any]], Any], *, ttl_s: float,
                 max_sessions: int, version: str):
        self.specs = specs
        self.make = make
        self.sessions = PlaySessions(ttl_s, max_sessions)
        self.version = version

    def play(self, spec: EnvSpec, session_id: Optional[str] = None) -> Play:
        """A new, unregistered env instance."""
        return Play(spec, self.make, id=session_id or new_id(), split=spec.split)

    def session(self, spec: EnvSpec, session_id: Optional[str] = None) -> Play:
        """The HTTP session ``session_id`` (a new id: ``None``), made and registered when it does not exist yet."""
        return self.sessions.open(session_id or new_id(), spec.env_id, lambda sid: self.play(spec, sid))

    def metadata(self, spec: EnvSpec) -> dict[str, Any]:
        """OpenEnv's ``EnvironmentMetadata``."""
        return {"name": spec.name, "description": spec.description, "version": self.version}

    def close_all(self) -> None:
        self.sessions.close_all()


def env_name(env_id: str, taken: set[str]) -> str:
    """The OpenEnv name of an env id: the id without its namespace, or the whole id (``/`` -> ``.``) when taken."""
    name = env_id.rsplit("/", 1)[-1]
    return env_id.replace("/", ".") if name in taken else name


def describe(env_id: str, kind: str, domain: Any) -> str:
    """A description for ``/metadata``."""
    what = (f"{domain.description.rstrip('.')}. " if domain is not None and domain.description else "")
    if kind == "pivot":
        return (what + "One pivot per episode: reset loads the conversation up to an expert turn and its tools; "
                "step scores one assistant action with the domain's verifier (reward in [0, 1]) and ends the episode.")
    return (what + "One task per episode, played in the domain's world: a step's tool calls are executed, text "
            "goes to the simulated user; the reward is 1.0 on task success at the end, else 0. Each step's "
            "metadata.turn_reward scores the turn against the expert's while on the expert's path (null off it); "
            "reset with reward_mode='turn' to make it the step reward.")


def env_specs(env_ids: dict[str, str], domain_names: list[str]) -> list[EnvSpec]:
    """The served envs (``{env_id: kind}``) as :class:`EnvSpec`, names unique."""
    by_id: dict[str, Any] = {}
    for name in domain_names:
        d = get_domain(name)
        by_id[d.env_id] = by_id[d.episode_env_id] = d
    specs: list[EnvSpec] = []
    taken: set[str] = set()
    for env_id, kind in sorted(env_ids.items()):
        name = env_name(env_id, taken)
        taken.add(name)
        specs.append(EnvSpec(name, env_id, kind, describe(env_id, kind, by_id.get(env_id)), registered_split(env_id)))
    return specs


# ------------------------------------------------------------------------------------- JSON-RPC (/mcp)
def rpc_result(result: Any, request_id: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def rpc_error(code: int, message: str, request_id: Any = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message, "data": None}}


PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS = -32700, -32600, -32601, -32602


def mcp_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI tool spec as an MCP tool (``name``, ``description``, ``inputSchema``)."""
    fn = tool.get("function") if isinstance(tool.get("function"), dict) else tool
    return {"name": str(fn.get("name", "")), "description": str(fn.get("description") or ""),
            "inputSchema": fn.get("parameters") or {"type": "object", "properties": {}}}


def handle_rpc(face: OpenEnvFace, spec: EnvSpec, request: Any, bound: Optional[Play] = None) -> dict[str, Any]:
    """Answer one JSON-RPC request (``/mcp``; a WebSocket ``mcp`` frame, ``bound`` to its env instance).

    ``openenv/session/create`` -> ``{"session_id"}`` (a new HTTP session; on a WebSocket: the socket's own id,
    which is no HTTP session); ``openenv/session/close`` ``{"session_id"}`` ->
    ``{"session_id", "closed": true}``; ``tools/list`` (``params.session_id``, or the socket's env) -> the
    current pivot/task's tools. Tools are not called through MCP: a tool call is an action (``step``).
    """
    if not isinstance(request, dict) or request.get("jsonrpc") != "2.0" or not isinstance(request.get("method"), str):
        return rpc_error(INVALID_REQUEST, "Invalid Request: need {'jsonrpc': '2.0', 'method': STR, 'params'?, 'id'?}",
                         request.get("id") if isinstance(request, dict) else None)
    method, request_id, params = request["method"], request.get("id"), request.get("params", {})
    if not isinstance(params, dict):
        return rpc_error(INVALID_PARAMS, "Params must be an object", request_id)
    try:
        if method == "openenv/session/create":
            play = bound or face.session(spec)
            return rpc_result({"session_id": play.id}, request_id)
        if method == "openenv/session/close":
            return _close_session(face, spec, params, bound, request_id)
        if method == "tools/list":
            return _list_tools(face, spec, params, bound, request_id)
    except SessionError as exc:
        return rpc_error(INVALID_PARAMS, str(exc.detail.get("message", exc)), request_id)
    if method == "tools/call":
        return rpc_error(METHOD_NOT_FOUND, "tools/call is not served: a tool call is an action, step with "
                                           "{'message': {'role': 'assistant', 'tool_calls': [...]}}", request_id)
    return rpc_error(METHOD_NOT_FOUND, f"Method not found: {method}", request_id)


def _close_session(face: OpenEnvFace, spec: EnvSpec, params: dict[str, Any], bound: Optional[Play],
                   request_id: Any) -> dict[str, Any]:
    session_id = params.get("session_id")
    if not isinstance(session_id, str) or not session_id:
        return rpc_error(INVALID_PARAMS, "Invalid params - 'session_id' is required", request_id)
    if bound is not None and bound.id == session_id:
        return rpc_error(INVALID_REQUEST, "Cannot close the session of this WebSocket: close the socket", request_id)
    play = face.sessions.find(session_id, spec.env_id)
    if play is None:
        return rpc_error(INVALID_PARAMS, f"Unknown session_id: {session_id}", request_id)
    if play.attached:
        return rpc_error(INVALID_REQUEST, f"session {session_id} is played by a WebSocket: close that socket first",
                         request_id)
    play = face.sessions.pop(session_id)
    if play is not None:
        play.close()
    return rpc_result({"session_id": session_id, "closed": True}, request_id)


def _list_tools(face: OpenEnvFace, spec: EnvSpec, params: dict[str, Any], bound: Optional[Play],
                request_id: Any) -> dict[str, Any]:
    session_id = params.get("session_id")
    play = face.sessions.get(session_id, spec.env_id) if isinstance(session_id, str) and session_id else bound
    if play is None:
        return rpc_error(INVALID_PARAMS, "tools depend on the pivot or task: reset a session and pass "
                                         "params.session_id (or read the observation's tools)", request_id)
    if not play.started:
        return rpc_error(INVALID_REQUEST, "no episode yet: reset first", request_id)
    return rpc_result({"tools": [mcp_tool(t) for t in play.tools]}, request_id)


# ------------------------------------------------------------------------------------- WebSocket
WS_ERROR_CODES = {"json": "INVALID_JSON", "type": "UNKNOWN_TYPE", "invalid": "VALIDATION_ERROR",
                  "env": "EXECUTION_ERROR", "session": "SESSION_ERROR"}


def ws_error(kind: str, message: str, **extra: Any) -> dict[str, Any]:
    """An OpenEnv WebSocket error frame (``{"type": "error", "data": {"message", "code", ...}}``)."""
    return {"type": "error", "data": {"message": message, "code": WS_ERROR_CODES[kind], **extra}}


async def ws_frame(face: OpenEnvFace, spec: EnvSpec, play: Play, message: dict[str, Any],
                   session_id: Optional[str]) -> Optional[dict[str, Any]]:
    """The answer to one client frame; ``None`` for ``close``."""
    kind, data = message.get("type"), message.get("data")
    try:
        if kind == "reset":
            params = ResetParams.model_validate(data if data is not None else {})
            return {"type": "observation", "data": await run_in_threadpool(play.reset, params)}
        if kind == "step":
            action = TextOrMessage.model_validate(data)
            return {"type": "observation", "data": await run_in_threadpool(play.step, action)}
        if kind == "state":
            return {"type": "state", "data": play.state(session_id)}
        if kind == "mcp":
            return {"type": "mcp", "data": await run_in_threadpool(handle_rpc, face, spec, data, play)}
        if kind == "close":
            return None
    except ValidationError as exc:
        return ws_error("invalid", "Invalid message", errors=json.loads(exc.json(include_url=False)))
    except SessionError as exc:
        return ws_error("env", str(exc.detail.get("message", "")), field=exc.detail.get("field"), status=exc.status)
    except Exception as exc:  # noqa: BLE001 - an env failure ends the frame, not the connection (as OpenEnv)
        log.exception("OpenEnv %s: %s frame failed", spec.name, kind)
        return ws_error("env", f"{type(exc).__name__}: {exc}")
    return ws_error("type", f"Unknown message type: {kind!r} (reset, step, state, close, mcp)")


async def serve_socket(face: OpenEnvFace, spec: EnvSpec, websocket: WebSocket, session_id: Optional[str]) -> None:
    """One WebSocket connection: its own env instance, or the HTTP session ``session_id`` it attaches to."""
    await websocket.accept()
    try:
        play = _socket_play(face, spec, session_id)
    except SessionError as exc:
        await websocket.send_text(json.dumps(ws_error("session", str(exc.detail.get("message", "")))))
        await websocket.close()
        return
    try:
        while True:
            raw = await websocket.receive_text()
            try:
                message = json.loads(raw)
            except json.JSONDecodeError as exc:
                answer: Optional[dict[str, Any]] = ws_error("json", f"Invalid JSON: {exc}")
            else:
                answer = (await ws_frame(face, spec, play, message, session_id) if isinstance(message, dict)
                          else ws_error("invalid", "a frame is a JSON object {'type', 'data'}"))
            if answer is None:
                break
            await websocket.send_text(json.dumps(answer))
    except WebSocketDisconnect:
        pass
    finally:
        if session_id:
            face.sessions.detach(play)
        else:
            await run_in_threadpool(play.close)
        try:
            await websocket.close()
        except (RuntimeError, WebSocketDisconnect):
            pass


def _socket_play(face: OpenEnvFace, spec: EnvSpec, session_id: Optional[str]) -> Play:
    return face.sessions.attach(session_id, spec.env_id) if session_id else face.play(spec)


# ------------------------------------------------------------------------------------- routes
def env_router(face: OpenEnvFace, spec: EnvSpec) -> APIRouter:
    """The routes of one OpenEnv environment, under its prefix ``/openenv/NAME`` (on the router itself, so that
    each route keeps its full path: the metrics label it)."""
    base = f"{PREFIX}/{spec.name}"
    router = APIRouter(prefix=base, tags=[f"OpenEnv {spec.name}"])

    @router.post("/reset", summary=f"Reset {spec.name} (stateless, or the HTTP session session_id)")
    def reset(body: ResetBody = Body(default_factory=ResetBody)) -> dict[str, Any]:
        play = face.session(spec, body.session_id) if body.session_id else face.play(spec)
        try:
            answer = play.reset(body)
        finally:
            if not body.session_id:
                play.close()  # OpenEnv's HTTP reset: a fresh env per request
        return _with_session(answer, body.session_id)

    @router.post("/step", summary=f"One action in {spec.name} (needs session_id: plain HTTP is stateless)")
    def step(body: StepBody) -> dict[str, Any]:
        if not body.session_id:
            raise SessionError(409, {"field": "session_id",
                                     "message": "plain HTTP is stateless in OpenEnv: a fresh env has no episode to "
                                                "step. Use WS /ws, or pass the session_id you reset with (POST /reset "
                                                "{'session_id': ...} or POST /mcp openenv/session/create)"})
        return _with_session(face.sessions.get(body.session_id, spec.env_id).step(body.action), body.session_id)

    @router.get("/state", response_model=PlayState, summary=f"The state of {spec.name} (of session_id, if given)")
    def state(session_id: Optional[str] = None) -> dict[str, Any]:
        if session_id:
            return face.sessions.get(session_id, spec.env_id).state(session_id)
        return face.play(spec).state()  # a fresh env: no episode

    @router.get("/schema", summary="JSON schemas of the action, observation and state")
    def schema() -> dict[str, Any]:
        observation = ChatObservation.model_json_schema()
        return {"action": TextOrMessage.model_json_schema(), "observation": observation,
                "reset_observation": observation, "state": PlayState.model_json_schema()}

    @router.get("/metadata", summary=f"What {spec.name} is")
    def metadata() -> dict[str, Any]:
        return face.metadata(spec)

    @router.get("/health", summary="Health check")
    def health() -> dict[str, str]:
        return {"status": "healthy"}

    @router.post("/mcp", summary="JSON-RPC 2.0: openenv/session/create, openenv/session/close, tools/list")
    async def mcp(request: Request) -> dict[str, Any]:
        try:
            body = json.loads(await request.body())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return rpc_error(PARSE_ERROR, f"Parse error: {exc}")
        return await run_in_threadpool(handle_rpc, face, spec, body)

    @router.websocket("/ws")
    async def ws(websocket: WebSocket, session_id: Optional[str] = None) -> None:
        await serve_socket(face, spec, websocket, session_id)

    document: dict[str, Any] = {}

    @router.get("/openapi.json", include_in_schema=False)
    def openapi(request: Request) -> dict[str, Any]:
        if not document:
            document.update(env_openapi(spec, router.routes, request.scope.get("root_path", "") + base))
        return document

    return router


def env_openapi(spec: EnvSpec, routes: list[Any], server_url: str) -> dict[str, Any]:
    """The OpenAPI document of one environment: its routes' paths relative to its prefix (``/reset``...),
    ``info.version`` the OpenEnv API version, ``servers`` its base URL."""
    document = get_openapi(title=f"OpenEnv: {spec.name} ({spec.env_id})", version=API_VERSION,
                           description=spec.description, routes=routes, servers=[{"url": server_url}])
    prefix = f"{PREFIX}/{spec.name}"
    document["paths"] = {path[len(prefix):] or "/": item for path, item in document.get("paths", {}).items()}
    return document


def _with_session(answer: dict[str, Any], session_id: Optional[str]) -> dict[str, Any]:
    if session_id:
        answer["metadata"] = {**answer.get("metadata", {}), "session_id": session_id}
    return answer


def include(app: FastAPI, state: Any) -> OpenEnvFace:
    """Mount every env of ``state`` (a :class:`~pivot_envs.serve.app.ServeState`) under ``/openenv/NAME``
    and ``GET /openenv`` (the list); returns the face (``close_all()`` at shutdown)."""
    specs = env_specs(state.env_ids, state.domains)
    face = OpenEnvFace(specs, state.sessions.make_env, ttl_s=state.sessions.ttl_s,
                       max_sessions=state.sessions.max_sessions, version=pivot_envs.__version__)

    @app.get(PREFIX, tags=["OpenEnv"], summary="The OpenEnv environments served here")
    def environments() -> dict[str, Any]:
        return {"environments": [{"name": s.name, "env_id": s.env_id, "kind": s.kind, "path": f"{PREFIX}/{s.name}"}
                                 for s in face.specs], "sessions": len(face.sessions)}

    for spec in specs:
        app.include_router(env_router(face, spec))
    return face
