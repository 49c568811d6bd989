"""An episode's tasks, and what the expert did to a fresh world.

* :func:`resolve_tasks`: the tasks of a source (a trajectory file, ``bundled:DOMAIN[:SPLIT]``, a list of
  trajectories or dicts, or ``None``: the domain's bundled split). Only successful trajectories (``reward``
  absent or >= ``min_reward``) are tasks: success is measured against the state their expert reached.
* :func:`world_task`: the :class:`~pivot_envs.worlds.WorldTask` a world starts a task from.
* :class:`ExpertOutcomes`: the outcome of replaying a task's expert tool calls in a fresh world
  (:class:`ExpertOutcome`), cached per world config and task, bounded (least recently used entries go
  first). Every episode env uses the process's shared cache (:func:`shared_expert_outcomes`) unless its
  ``expert_outcomes`` attribute is set to another one.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from pivot_envs.domains import get_domain
from pivot_envs.facts import expert_facts
from pivot_envs.sources import resolve_trajectories
from pivot_envs.types import Trajectory, stable_hash
from pivot_envs.worlds import World, WorldTask

TaskSource = Any
"""A trajectory file, ``bundled:DOMAIN[:SPLIT]``, a list of trajectories (or dicts), or ``None``."""

BUNDLED = "bundled:"

GENERIC_WORLD_KEYS: tuple[str, ...] = ("probes",)
"""The task ``meta`` keys handed to a world when there is no domain: an MCP world's per-task digest
probes (:mod:`pivot_envs.worlds.mcp`; tau2 tasks carry them)."""

DEFAULT_MAX_OUTCOMES = 16_384
"""How many expert outcomes the shared cache keeps (one per world config and task; a few hundred bytes each)."""


def resolve_tasks(source: TaskSource, *, domain: str | None = None, split: str = "train",
                  min_reward: float | None = 1.0) -> list[Trajectory]:
    """The tasks of ``source`` (see the module docstring): successful trajectories, ids unique.

    Raises ``ValueError`` / ``FileNotFoundError`` naming the source and the fix.
    """
    trajs = resolve_trajectories(source, domain=domain, split=split, kind="task")
    label = str(source) if isinstance(source, (str, Path)) else (
        f"bundled:{domain}:{split}" if source is None else "the task list")
    tasks = [t for t in trajs if min_reward is None or t.reward is None or t.reward >= min_reward]
    seen: set[str] = set()
    for t in tasks:
        if t.id in seen:
            raise ValueError(f"{label}: two tasks have the id {t.id!r}; task ids must be unique")
        seen.add(t.id)
        if not any(m.get("role") == "user" for m in t.messages):
            raise ValueError(f"{label}: task {t.id!r} has no user message (an episode starts at the first one)")
    return tasks


def bundled_domain(source: TaskSource) -> str | None:
    """The domain of a ``bundled:DOMAIN[:SPLIT]`` source, else ``None``."""
    if isinstance(source, str) and source.startswith(BUNDLED):
        return source[len(BUNDLED):].partition(":")[0] or None
    return None


def world_task(task: Trajectory, domain: str | None, keys: Sequence[str] | None = None) -> WorldTask:
    """The :class:`~pivot_envs.worlds.WorldTask` of ``task``: the ``keys`` of its ``meta`` (default: its
    domain's ``world_keys``, or :data:`GENERIC_WORLD_KEYS` without a domain)."""
    if keys is None:
        keys = get_domain(domain).world_keys if domain else GENERIC_WORLD_KEYS
    return WorldTask.from_trajectory(task, domain or "", keys=keys)


# --------------------------------------------------------------------------- the expert's outcome


@dataclass(frozen=True)
class ExpertOutcome:
    """What the expert's trajectory did to a fresh world.

    Attributes:
        start_digest: the digest of the task's start state.
        expert_digest: the digest after replaying every tool call of the expert, in order.
        facts: the facts the expert told the user (:func:`pivot_envs.facts.expert_facts`).
    """

    start_digest: str
    expert_digest: str
    facts: tuple[str, ...] = ()

    @property
    def read_only(self) -> bool:
        """The expert changed no state: an information task."""
        return self.start_digest == self.expert_digest


def replay_expert(world: World, task: Trajectory, domain: str | None = None,
                  world_keys: Sequence[str] | None = None) -> ExpertOutcome:
    """Replay ``task``'s expert tool calls in a fresh start of ``world`` (not cached).

    Leaves ``world`` in the expert's final state; raises :class:`~pivot_envs.worlds.WorldError` when the
    world fails.
    """
    world.start(world_task(task, domain, world_keys))
    start = world.digest()
    for message in task.messages:
        if message.get("role") == "assistant":
            world.execute(message)
    return ExpertOutcome(start, world.digest(), tuple(expert_facts(task.messages)))


def world_identity(world: World) -> str:
    """The world's class and config: two worlds that only share a ``name`` (or a config) never share an outcome."""
    cls = type(world)
    return f"{cls.__module__}.{cls.__qualname__}:" + json.dumps(world.config(), sort_keys=True, default=str)


class ExpertOutcomes:
    """A thread-safe cache of :class:`ExpertOutcome` per (world config, task), holding at most ``max_entries``
    (the least recently used one is dropped first).

    ``get(world, task, ...)`` replays the expert in ``world`` on a miss (leaving the world in the expert's final
    state) and leaves the world alone on a hit. ``hits`` and ``misses`` count the look-ups.
    """

    def __init__(self, max_entries: int = DEFAULT_MAX_OUTCOMES):
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
            raise ValueError(f"max_entries must be an integer >= 1, got {max_entries!r}")
        self.max_entries = max_entries
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[tuple[str, str], ExpertOutcome] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def get(self, world: World, task: Trajectory, domain: str | None = None,
            world_keys: Sequence[str] | None = None) -> ExpertOutcome:
        """The expert's outcome of ``task`` in ``world`` (see the class docstring)."""
        key = (world_identity(world),
               stable_hash(domain, None if world_keys is None else list(world_keys), task.to_dict()))
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None:
                self._entries.move_to_end(key)
                self.hits += 1
                return hit
            self.misses += 1
        outcome = replay_expert(world, task, domain, world_keys)
        with self._lock:
            self._entries[key] = outcome
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
        return outcome


_SHARED = ExpertOutcomes()


def shared_expert_outcomes() -> ExpertOutcomes:
    """The process's expert-outcome cache, which every episode env uses by default (so the envs of a batch,
    and the envs a trainer makes again and again, replay each task's expert once)."""
    return _SHARED


def expert_outcome(world: World, task: Trajectory, domain: str | None = None,
                   world_keys: Sequence[str] | None = None) -> ExpertOutcome:
    """:meth:`ExpertOutcomes.get` on the shared cache (:func:`shared_expert_outcomes`)."""
    return _SHARED.get(world, task, domain, world_keys)
