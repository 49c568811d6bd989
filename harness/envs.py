"""Episode envs for harness rollouts, by the open request's spec, pooled.

::

    envs = EpisodeEnvs(allowed={"pivot/Terminal-Episode-v0"})       # what a request may name
    key, make = envs.key({"env": "pivot/Terminal-Episode-v0", "split": "test"})
    env = envs.take(key, make)      # a pooled env of that spec, or a new one
    envs.give(key, env)             # back to the pool (its world session ends at its next reset)
    envs.drop(env)                  # closed for good: its world freed

A request names an episode env id, its ``split`` and its keyword arguments (``kwargs``); envs made from an id
get the pool's user simulator unless ``kwargs`` name one. The trainer's pool has a ``default`` factory instead
(its own env over the run's tasks).
"""

from __future__ import annotations

import json
import threading
from typing import Any, Callable, Collection

import gymnasium

from pivot_envs.harness.state import HarnessError

__all__ = ["EpisodeEnvs"]


class EpisodeEnvs:
    """Episode envs by spec, pooled: ``take(spec)`` gives a free env for the spec (made when none is free).

    Args:
        allowed: the episode env ids a request may name (``None``: any registered ``*-Episode-v0`` id).
        default: a zero-argument factory of the env used when a request names none (the trainer's).
        user: the user simulator of envs made from an id, unless the request's ``kwargs`` name one (``scripted``:
            the task's recorded user turns, reached through the user tool, :mod:`pivot_envs.harness.user`;
            ``none``: no user, the harness holds the conversation; ``openai:MODEL@URL``: an LLM user).
    """

    def __init__(self, allowed: Collection[str] | None = None, default: Callable[[], Any] | None = None,
                 user: Any = "scripted"):
        self.allowed = set(allowed) if allowed is not None else None
        self.default = default
        self.user = user
        self._free: dict[str, list[Any]] = {}
        self._lock = threading.Lock()
        self.in_use = 0
        self.made = 0
        self.closed = 0

    def key(self, spec: dict[str, Any]) -> tuple[str, Callable[[], Any]]:
        """``(pool key, factory)`` of an open request's ``env``, ``split`` and ``kwargs``."""
        env_id = spec.get("env")
        if env_id is None:
            if self.default is None:
                raise HarnessError(422, "env", "missing: name an episode env id, e.g. pivot/Terminal-Episode-v0")
            return "default", self.default
        if not isinstance(env_id, str):
            raise HarnessError(422, "env", f"must be an env id string, got {type(env_id).__name__}")
        known = self.known_ids()
        if env_id not in known:
            raise HarnessError(400, "env", f"unknown episode env {env_id!r}; served: {', '.join(sorted(known))}")
        kwargs = spec.get("kwargs") or {}
        if not isinstance(kwargs, dict):
            raise HarnessError(422, "kwargs", "must be an object of the env's keyword arguments")
        split = spec.get("split")
        settings = {**kwargs, **({"split": split} if split is not None else {})}
        settings.setdefault("user", self.user)

        def make() -> Any:
            try:
                return gymnasium.make(env_id, **settings).unwrapped
            except (TypeError, ValueError, KeyError) as exc:
                raise HarnessError(400, "kwargs", f"{env_id} cannot be made with {sorted(settings)}: {exc}") from None

        return json.dumps([env_id, settings], sort_keys=True, default=str), make

    def known_ids(self) -> set[str]:
        if self.allowed is not None:
            return set(self.allowed)
        return {k for k in gymnasium.registry if k.startswith("pivot/") and k.endswith("Episode-v0")}

    def take(self, key: str, make: Callable[[], Any]) -> Any:
        with self._lock:
            free = self._free.get(key)
            env = free.pop() if free else None
            self.in_use += 1
        if env is None:
            try:
                env = make()
            except BaseException:
                with self._lock:
                    self.in_use -= 1
                raise
            with self._lock:
                self.made += 1
        return env

    def give(self, key: str, env: Any) -> None:
        """Back to the pool (its world session ends at its next reset)."""
        with self._lock:
            self.in_use -= 1
            self._free.setdefault(key, []).append(env)

    def drop(self, env: Any) -> None:
        """Close an env for good: its world is freed (sandbox state dropped, MCP server stopped)."""
        with self._lock:
            self.in_use -= 1
            self.closed += 1
        env.close()

    def close(self) -> None:
        with self._lock:
            envs = [e for pool in self._free.values() for e in pool]
            self._free.clear()
        for env in envs:
            env.close()

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {"worlds_in_use": self.in_use, "worlds_pooled": sum(len(p) for p in self._free.values()),
                    "worlds_made": self.made, "worlds_closed": self.closed}
