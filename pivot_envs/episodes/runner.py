"""Batched play: many episodes, one agent call per turn for all live episodes (``pivot-envs play``).

:func:`episode_starts` lists where episodes start (a task's first turn, or each of its pivots),
:func:`run_episodes` plays them with an agent in a pool of :class:`~pivot_envs.episodes.env.EpisodeEnv`
(world and user-simulator calls on threads), and :func:`summarize_rows` gives task success per domain.
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

from pivot_envs.agents import build_agent
from pivot_envs.episodes.env import EpisodeEnv
from pivot_envs.types import stable_hash


@dataclass(frozen=True)
class EpisodeStart:
    """Where one episode starts: a task's first turn, or one of its pivots."""

    task_id: str
    pivot_id: str | None = None

    @property
    def id(self) -> str:
        return self.pivot_id or self.task_id

    def options(self) -> dict[str, str]:
        return {"pivot_id": self.pivot_id} if self.pivot_id else {"task_id": self.task_id}


def episode_starts(env: EpisodeEnv, from_pivots: bool = False) -> list[EpisodeStart]:
    """One start per task (its first turn), or per pivot of the tasks (``from_pivots``), in task order."""
    if not from_pivots:
        return [EpisodeStart(t.id) for t in env.tasks]
    index = env.pivot_index()
    return [EpisodeStart(env.tasks[index[p][0]].id, p) for p in env.pivot_ids()]


def run_episodes(
    make_env: Callable[[], EpisodeEnv],
    starts: Iterable[EpisodeStart],
    agent: Any,
    *,
    batch_size: int = 16,
    workers: int = 1,
    seed: int = 0,
    on_done: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Play every start with ``agent``; returns the episode rows (:meth:`EpisodeEnv.episode_row`) in
    the order the episodes finished.

    Up to ``batch_size`` episodes are live at once, each in its own env (``make_env()``, reused for
    the next start when one finishes); every round advances all live episodes by one turn with ONE
    ``agent.sample(pivots, 1, seed=...)`` call, seeded from ``seed`` and the round. Resets and steps (world and user-simulator calls)
    run on ``workers`` threads. ``on_done(row)`` is called as each episode finishes.
    """
    if batch_size < 1 or workers < 1:
        raise ValueError(f"batch_size and workers must be >= 1, got {batch_size} and {workers}")
    agent = build_agent(agent)
    queue = deque(starts)
    envs: list[EpisodeEnv] = []
    rows: list[dict[str, Any]] = []
    pool = ThreadPoolExecutor(workers) if workers > 1 else None

    def parallel(fn: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
        if pool is None or len(items) < 2:
            return [fn(x) for x in items]
        return list(pool.map(fn, items))

    def finish(env: EpisodeEnv) -> None:
        row = env.episode_row()
        rows.append(row)
        if on_done is not None:
            on_done(row)

    def fill(slots: list[EpisodeEnv]) -> list[EpisodeEnv]:
        """Reset idle envs with the next starts; the ones whose reset already failed finish at once."""
        live: list[EpisodeEnv] = []
        while slots and queue:
            batch = [(env, queue.popleft()) for env in slots[: len(queue)]]
            slots = slots[len(batch):]
            parallel(lambda pair: pair[0].reset(options=pair[1].options()), batch)
            for env, _ in batch:
                if env.error is not None:
                    env.done = True
                    finish(env)
                    slots.append(env)
                else:
                    live.append(env)
        return live

    try:
        while len(envs) < min(batch_size, len(queue)):
            envs.append(make_env())
        live = fill(list(envs))
        round_ = 0
        while live:
            pivots = [env.current_pivot() for env in live]
            # a seed per round: agents that seed a sample by (seed, pivot id) would otherwise replay a
            # repeat of a task that starts in a later round exactly as its first play
            groups = agent.sample(pivots, 1, seed=int(stable_hash("episode-round", seed, round_), 16) % (2**63))
            round_ += 1
            actions = [g[0].action for g in groups]
            parallel(lambda pair: pair[0].step(pair[1]), list(zip(live, actions)))
            idle = []
            still = []
            for env in live:
                if env.done:
                    finish(env)
                    idle.append(env)
                else:
                    still.append(env)
            live = still + fill(idle)
    finally:
        if pool is not None:
            pool.shutdown(wait=True)
        for env in envs:
            env.close()
    return rows


def summarize_rows(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Task success per domain and over all rows: ``{"domains": {d: summary}, "overall": summary}``,
    a summary being ``{"episodes", "success" (over episodes without an error), "errors", "truncated",
    "turns_mean", "tool_calls_mean"}``."""

    def summary(group: Sequence[dict[str, Any]]) -> dict[str, Any]:
        scored = [r for r in group if r.get("error") is None and r.get("success") is not None]
        return {
            "episodes": len(group),
            "success": (sum(bool(r["success"]) for r in scored) / len(scored)) if scored else float("nan"),
            "errors": len(group) - len(scored),
            "truncated": sum(bool(r.get("truncated")) for r in group),
            "turns_mean": (sum(int(r.get("turns") or 0) for r in group) / len(group)) if group else float("nan"),
            "tool_calls_mean": (sum(int(r.get("tool_calls") or 0) for r in group) / len(group)) if group else float("nan"),
        }

    domains: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        domains.setdefault(str(r.get("domain") or "-"), []).append(r)
    return {"domains": {d: summary(g) for d, g in sorted(domains.items())}, "overall": summary(rows)}
