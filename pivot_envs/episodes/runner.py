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


@dataclass(frozen=True)
class EpisodeStart:
    """Where one episode starts: a task's first turn, or one of its pivots; ``repeat`` tells apart the
    plays of one start in a run (``repeat`` r > 0 is the r-th more play: its own samples)."""

    task_id: str
    pivot_id: str | None = None
    repeat: int = 0

    @property
    def id(self) -> str:
        base = self.pivot_id or self.task_id
        return f"{base}#{self.repeat}" if self.repeat else base

    def options(self) -> dict[str, Any]:
        out: dict[str, Any] = {"pivot_id": self.pivot_id} if self.pivot_id else {"task_id": self.task_id}
        if self.repeat:
            out["repeat"] = self.repeat
        return out


def repeated(starts: Sequence[EpisodeStart], repeats: int) -> list[EpisodeStart]:
    """Every start played ``repeats`` times, each play with its own ``repeat`` index (its own samples)."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    return [EpisodeStart(s.task_id, s.pivot_id, r) for r in range(repeats) for s in starts]


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
    replay_check: str = "off",
) -> list[dict[str, Any]]:
    """Play every start with ``agent``; returns the episode rows (:meth:`EpisodeEnv.episode_row`) in
    the order the episodes finished.

    Up to ``batch_size`` episodes are live at once, each in its own env (``make_env()``, reused for
    the next start when one finishes); every round advances all live episodes by one turn with ONE
    ``agent.sample(pivots, 1, seed=seed)`` call. Resets and steps (world and user-simulator calls) run on
    ``workers`` threads. ``on_done(row)`` is called as each episode finishes.

    ``replay_check``: ``"report"`` adds to every row how its tool results compare with the task's recorded
    ones (:meth:`EpisodeEnv.replay_check`: ``tool_results_match``, ``tool_result_mismatch``, ...);
    ``"strict"`` also makes a mismatch the episode's ``error`` (its success then ``None``); ``"off"``: neither.

    Results never depend on ``batch_size``, ``workers`` or the order of ``starts``: the agent gets the
    same ``seed`` at every round, and each pivot's id names its episode (task or pivot, ``repeat``) and
    turn (:meth:`EpisodeEnv.current_pivot`), so an agent that draws sample ``j`` at pivot ``p`` from
    ``(seed, p.id, j)`` alone (every built-in agent does) plays each episode the same way in any batch.
    """
    if batch_size < 1 or workers < 1:
        raise ValueError(f"batch_size and workers must be >= 1, got {batch_size} and {workers}")
    if replay_check not in REPLAY_CHECKS:
        raise ValueError(f"replay_check must be one of {', '.join(REPLAY_CHECKS)}, got {replay_check!r}")
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
        if replay_check != "off":
            check_row(env, row, strict=replay_check == "strict")
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
        while live:
            pivots = [env.current_pivot() for env in live]
            # one seed for every round: the pivot ids (episode, repeat, turn) make each draw its own
            groups = agent.sample(pivots, 1, seed=seed)
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


REPLAY_CHECKS = ("off", "report", "strict")


def check_row(env: EpisodeEnv, row: dict[str, Any], strict: bool) -> None:
    """Add the episode's replay check to ``row``; with ``strict`` a mismatch becomes the episode's error."""
    check = env.replay_check()
    row.update(check.row_fields())
    if strict and check.match is False and row.get("error") is None:
        row["error"] = f"replay: a tool result differs from the recorded one: {check.mismatch}"
        row["success"] = row["reward"] = None


def summarize_rows(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Task success per domain and over all rows: ``{"domains": {d: summary}, "overall": summary}``,
    a summary being ``{"episodes", "success" (over episodes without an error), "errors", "truncated",
    "turns_mean", "tool_calls_mean"}``, and with replay checks ``tool_results_compared`` and
    ``tool_results_match_share`` (the share of compared tool results that were as recorded)."""

    def summary(group: Sequence[dict[str, Any]]) -> dict[str, Any]:
        scored = [r for r in group if r.get("error") is None and r.get("success") is not None]
        compared = sum(int(r.get("tool_results_compared") or 0) for r in group)
        replay = {} if not any("tool_results_compared" in r for r in group) else {
            "tool_results_compared": compared,
            "tool_results_match_share": (sum(int(r.get("tool_results_matched") or 0) for r in group) / compared
                                         if compared else float("nan"))}
        return {**replay,
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
