"""gymnasium over HTTP: sessions of pivot envs and episode envs.

``POST /reset`` ``{"env_id", "options"?, "seed"?, "session_id"?, "kwargs"?}`` -> ``{"session_id", "observation", "info"}``
(a new session unless ``session_id`` names a live one of the same ``env_id``; ``kwargs`` go to
``gymnasium.make``, e.g. ``{"split": "test", "user": "scripted"}`` for an episode env).
``POST /step`` ``{"session_id", "action"}`` -> ``{"observation", "reward", "terminated", "truncated", "info"}``.
``POST /step_many`` ``{"session_id", "actions": [...]}`` -> ``{"results": [{"reward", "info"}, ...]}`` (pivot envs).
``DELETE /sessions/{id}`` closes one; ``GET /sessions`` lists them.

One env per session, a lock per session (concurrent calls on one session run one at a time; calls on
different sessions run in parallel in the server's thread pool). A session idle for longer than
``ttl_s`` is closed (checked on every request and by ``sweep()``).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pivot_envs.serve.owner import MISROUTED_STATUS, misrouted, new_id


@dataclass
class Session:
    id: str
    env_id: str
    env: Any
    lock: threading.Lock = field(default_factory=threading.Lock)
    last_used: float = field(default_factory=time.monotonic)
    steps: int = 0


class SessionError(Exception):
    """An HTTP error of the gym face: ``status`` (400, 404, 409, 421: a session of another server process)
    and a JSON ``detail``."""

    def __init__(self, status: int, detail: dict[str, Any]):
        super().__init__(detail.get("message", ""))
        self.status, self.detail = status, detail


def refuse_misrouted(session_id: str) -> None:
    """Raise the 421 :class:`SessionError` when ``session_id`` was made by another server process."""
    elsewhere = misrouted("session", session_id)
    if elsewhere:
        raise SessionError(MISROUTED_STATUS, {"field": "session_id", "message": elsewhere})


def jsonable(value: Any) -> Any:
    """Observations and infos as plain JSON (numpy scalars/arrays become numbers/lists)."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    try:
        json.dumps(value)
        return value
    except TypeError:
        return str(value)


class SessionStore:
    """Live env sessions.

    Args:
        env_ids: the env ids that may be made (``{env_id: "pivot" | "episode"}``).
        verifier: the verifier spec given to pivot envs, and to episode envs for their per-turn rewards
            (``None``: the domain default).
        ttl_s: idle seconds after which a session is closed.
        max_sessions: the most live sessions (a reset beyond it is a 429... here a 409 naming the limit).
    """

    def __init__(self, env_ids: dict[str, str], verifier: Any = None, ttl_s: float = 600.0, max_sessions: int = 4096):
        self.env_ids = env_ids
        self.verifier = verifier
        self.ttl_s = ttl_s
        self.max_sessions = max_sessions
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()
        self.expired = 0

    # --- lifecycle ------------------------------------------------------------------
    def sweep(self) -> int:
        """Close the sessions idle for longer than ``ttl_s``; returns how many."""
        now = time.monotonic()
        with self._lock:
            dead = [s for s in self._sessions.values() if now - s.last_used > self.ttl_s and not s.lock.locked()]
            for s in dead:
                del self._sessions[s.id]
        for s in dead:
            _close(s.env)
        self.expired += len(dead)
        return len(dead)

    def get(self, session_id: Any) -> Session:
        self.sweep()
        if not isinstance(session_id, str) or not session_id:
            raise SessionError(422, {"field": "session_id", "message": "field 'session_id': a non-empty string is required"})
        with self._lock:
            session = self._sessions.get(session_id)
        if session is None:
            refuse_misrouted(session_id)
            raise SessionError(404, {"field": "session_id",
                                     "message": f"unknown session {session_id!r} (expired after {self.ttl_s:g} s idle, "
                                                "deleted, or never created: POST /reset first)"})
        return session

    def delete(self, session_id: str) -> bool:
        with self._lock:
            session = self._sessions.pop(session_id, None)
        if session is None:
            return False
        with session.lock:
            _close(session.env)
        return True

    def close_all(self) -> None:
        with self._lock:
            sessions = list(self._sessions.values())
            self._sessions.clear()
        for s in sessions:
            _close(s.env)

    def list(self) -> list[dict[str, Any]]:
        now = time.monotonic()
        with self._lock:
            return [{"session_id": s.id, "env_id": s.env_id, "steps": s.steps, "idle_s": round(now - s.last_used, 3)}
                    for s in self._sessions.values()]

    def __len__(self) -> int:
        return len(self._sessions)

    # --- the gym calls --------------------------------------------------------------
    def make_env(self, env_id: str, kwargs: dict[str, Any]) -> Any:
        import gymnasium

        kind = self.env_ids.get(env_id)
        if kind is None:
            raise SessionError(400, {"field": "env_id", "known": sorted(self.env_ids),
                                     "message": f"unknown env_id {env_id!r}; known: {', '.join(sorted(self.env_ids))}"})
        kwargs = dict(kwargs)
        if self.verifier is not None:  # a pivot env's reward; an episode env's per-turn rewards
            kwargs.setdefault("verifier", self.verifier)
        try:
            return gymnasium.make(env_id, disable_env_checker=True, **kwargs)
        except TypeError as exc:
            raise SessionError(400, {"field": "kwargs", "message": f"field 'kwargs': {exc}"}) from None
        except (ValueError, KeyError, FileNotFoundError) as exc:
            raise SessionError(400, {"field": "kwargs", "message": f"field 'kwargs': cannot make {env_id}: {exc}"}) from None

    def reset(self, env_id: str, options: dict[str, Any] | None, seed: int | None, session_id: str | None,
              kwargs: dict[str, Any] | None) -> dict[str, Any]:
        self.sweep()
        session = None
        if session_id is not None:
            with self._lock:
                session = self._sessions.get(session_id)
            if session is not None and session.env_id != env_id:
                raise SessionError(409, {"field": "session_id", "message": f"session {session_id!r} runs {session.env_id}, "
                                                                          f"not {env_id}: omit session_id for a new session"})
        if session is None:
            if len(self._sessions) >= self.max_sessions:
                raise SessionError(409, {"field": "session_id", "message": f"{self.max_sessions} sessions are live: "
                                                                          "DELETE /sessions/{id} some first"})
            env = self.make_env(env_id, kwargs or {})
            session = Session(id=session_id or new_id(), env_id=env_id, env=env)
            with self._lock:
                self._sessions[session.id] = session
        with session.lock:
            try:
                obs, info = session.env.reset(seed=seed, options=options or None)
            except (KeyError, ValueError, IndexError, TypeError) as exc:
                raise SessionError(400, {"field": "options", "message": f"field 'options': {exc}"}) from None
            session.last_used = time.monotonic()
            session.steps = 0
        return {"session_id": session.id, "observation": jsonable(obs), "info": jsonable(info)}

    def step(self, session_id: str, action: Any) -> dict[str, Any]:
        session = self.get(session_id)
        with session.lock:
            try:
                obs, reward, terminated, truncated, info = session.env.step(action)
            except RuntimeError as exc:  # step before reset, step after the end
                raise SessionError(409, {"field": "session_id", "message": str(exc)}) from None
            except (ValueError, TypeError) as exc:
                raise SessionError(422, {"field": "action", "message": f"field 'action': {exc}"}) from None
            session.last_used = time.monotonic()
            session.steps += 1
        return {"observation": jsonable(obs), "reward": float(reward), "terminated": bool(terminated),
                "truncated": bool(truncated), "info": jsonable(info)}

    def step_many(self, session_id: str, actions: list[Any]) -> dict[str, Any]:
        session = self.get(session_id)
        env = session.env.unwrapped
        if not hasattr(env, "step_many"):
            raise SessionError(400, {"field": "session_id", "message": f"{session.env_id} has no step_many "
                                                                      "(only pivot envs score a group of actions)"})
        with session.lock:
            try:
                scored = env.step_many(actions)
            except RuntimeError as exc:
                raise SessionError(409, {"field": "session_id", "message": str(exc)}) from None
            except (ValueError, TypeError) as exc:
                raise SessionError(422, {"field": "actions", "message": f"field 'actions': {exc}"}) from None
            session.last_used = time.monotonic()
            session.steps += len(actions)
        return {"results": [{"reward": float(r), "info": jsonable(i)} for r, i in scored]}


def _close(env: Any) -> None:
    try:
        env.close()
    except Exception:  # noqa: BLE001 - closing a dead session must not fail the request
        pass
