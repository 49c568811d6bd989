"""Worlds a verifier starts at its pivots: one world per spec, built on first use, used one caller at a time.

``PivotWorlds(world)`` resolves a pivot's world spec (``world``, else the pivot's domain world) and hands out the
world under a lock (:meth:`PivotWorlds.using`), so a verifier shared by threads runs one replay at a time per world.
"""

from __future__ import annotations

import json
import threading
from contextlib import contextmanager
from typing import Any, Iterator

from pivot_envs.domains import find_domain
from pivot_envs.types import Pivot
from pivot_envs.worlds import World, build_world


class PivotWorlds:
    """The worlds of a verifier's pivots (see the module docstring)."""

    def __init__(self, world: Any = None) -> None:
        self.world = world
        self._worlds: dict[str, World] = {}
        self._lock = threading.Lock()

    def spec(self, pivot: Pivot) -> Any:
        """The world spec of ``pivot``, or ``None`` when it has none."""
        if self.world is not None:
            return self.world
        domain = find_domain(pivot.domain) if pivot.domain else None
        return domain.world if domain is not None else None

    @staticmethod
    def key(spec: Any) -> str:
        return json.dumps(spec, sort_keys=True, default=str)

    @contextmanager
    def using(self, spec: Any) -> Iterator[World]:
        """The world of ``spec``, held by this caller alone until the block ends."""
        with self._lock:
            name = self.key(spec)
            if name not in self._worlds:
                self._worlds[name] = build_world(spec)
            yield self._worlds[name]

    def close(self) -> None:
        with self._lock:
            for world in self._worlds.values():
                world.close()
            self._worlds.clear()
