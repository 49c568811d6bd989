"""The :class:`~pivot_envs.worlds.TaskState` of pivots, read off their worlds and cached (for ``final_turn``).

A pivot's state needs its world (``world``, else the pivot's domain world) and the record of what the expert did
after the pivot that extraction keeps (``pivot.meta["after"]``: :func:`pivot_envs.pipeline.extract.after_turn`).
Without either there is no state to read (:meth:`TaskStates.get` gives ``None``). Each world is built once per
spec and runs one replay at a time; states are cached per (world, task settings, calls), so a group of samples
at one pivot, and the pivots of one trajectory that share a prefix, replay it once.
"""

from __future__ import annotations

from typing import Any

from pivot_envs.types import Pivot, stable_hash
from pivot_envs.cache import LRUCache
from pivot_envs.verifiers.helpers.pivot_worlds import PivotWorlds
from pivot_envs.worlds import TaskState, WorldTask, context_calls, task_state


class TaskStates:
    """Task states of pivots (see the module docstring). ``world``: a world spec for every pivot (``None``: each
    pivot's domain world); ``cache_size``: states kept."""

    def __init__(self, world: Any = None, cache_size: int = 4096) -> None:
        self._worlds = PivotWorlds(world)
        self._cache: LRUCache[str, TaskState] = LRUCache(cache_size)

    def get(self, pivot: Pivot) -> TaskState | None:
        """The task's state at ``pivot``; ``None`` without a world or a record of the expert's later turns.
        Raises :class:`~pivot_envs.worlds.WorldError` (or ``ValueError`` for a bad world spec) when the world fails."""
        after = pivot.meta.get("after")
        spec = self._worlds.spec(pivot)
        if spec is None or not isinstance(after, dict) or not isinstance(after.get("calls"), list):
            return None
        rest = [pivot.expert, *after["calls"]]
        key = stable_hash(PivotWorlds.key(spec), pivot.domain, pivot.meta.get("world"),
                          pivot.fixture.to_dict() if pivot.fixture is not None else None,
                          context_calls(pivot.context), [m.get("tool_calls") for m in rest])
        state, _ = self._cache.get_or_compute(key, lambda: self._compute(spec, pivot, rest))
        return state

    def _compute(self, spec: Any, pivot: Pivot, rest: list[dict[str, Any]]) -> TaskState:
        with self._worlds.using(spec) as world:
            return task_state(world, WorldTask.from_pivot(pivot), pivot.context, rest)

    def close(self) -> None:
        self._worlds.close()
