"""``retrieves``: a search call judged by what it retrieves in the pivot's world, not by how its query is worded.

A search is a means to a document. At a pivot where the expert searched, the candidate's search (the same tool)
runs in the pivot's world, and it passes when its results hold the document the expert needed:

* the document the expert opened next (its first later ``open_tool`` call, from ``pivot.meta["after"]``), when the
  expert's own results held it;
* else the expert's own first result (its query found nothing it went on to open: an equivalent query finds the
  same first thing).

So ``"Nerys Nuashly born"`` passes where the expert searched ``"Nerys Nuashly birthplace"`` and opened her page,
and ``"Rufus Sarsto born"`` fails. Results are read as a JSON list of objects carrying ``id_key`` (the search
world's ``[{"doc_id": ..., "title": ..., "snippet": ...}]``); a result that is not such a list is a tool error,
and the candidate fails. A world that fails is an error, never a 0 or 1.

    {"name": "retrieves", "tool": "search", "open_tool": "open", "id_key": "doc_id"}
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pivot_envs.types import Action, Pivot, VerifyResult, stable_hash
from pivot_envs.verifiers.base import Verifier, register_verifier
from pivot_envs.cache import LRUCache
from pivot_envs.verifiers.helpers.pivot_worlds import PivotWorlds
from pivot_envs.worlds import WorldError, WorldTask


def _first_call(message: dict[str, Any], tool: str) -> dict[str, Any] | None:
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        if fn.get("name") == tool:
            args = fn.get("arguments")
            try:
                parsed = json.loads(args) if isinstance(args, str) else args
            except json.JSONDecodeError:
                return None
            return parsed if isinstance(parsed, dict) else None
    return None


@register_verifier("retrieves", accepted_by="effect")
@dataclass
class RetrievesVerifier(Verifier):
    """A search that retrieves the document the expert needed (see the module docstring)."""

    tool: str = "search"
    """The search tool."""
    open_tool: str = "open"
    """The tool that opens a result (its ``id_key`` argument names the document)."""
    id_key: str = "doc_id"
    """The key of a result's id, in the search results and in the open tool's arguments."""
    world: Any = None
    """The world the searches run in; ``None``: the pivot's domain world."""

    _worlds: PivotWorlds = field(init=False, repr=False, compare=False)
    _targets: Any = field(init=False, repr=False, compare=False)

    name = "retrieves"

    def __post_init__(self) -> None:
        self._worlds = PivotWorlds(self.world)
        self._targets = LRUCache(4096)

    def __getstate__(self) -> dict[str, Any]:
        return {"tool": self.tool, "open_tool": self.open_tool, "id_key": self.id_key, "world": self.world}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]  # unpickling: the config rebuilds the derived state

    def verify(self, action: Action, pivot: Pivot) -> VerifyResult:
        expert = _first_call(pivot.expert, self.tool)
        if expert is None:
            return VerifyResult.failure(self.name, f"pivot {pivot.id}: the expert made no {self.tool!r} call; "
                                        "`retrieves` judges search turns only")
        candidate = _first_call(action.message, self.tool)
        if candidate is None:
            return VerifyResult(0.0, False, self.name, f"no {self.tool!r} call")
        spec = self._worlds.spec(pivot)
        if spec is None:
            return VerifyResult.failure(self.name, f"pivot {pivot.id}: no world to search in (domain "
                                        f"{pivot.domain!r} has none: give world=...)")
        try:
            key = stable_hash(pivot.id, pivot.context, pivot.expert, pivot.meta.get("world"), pivot.meta.get("after"))
            target, why = self._targets.get_or_compute(key, lambda: self._target(spec, pivot, expert))[0]
            found = self._results(spec, pivot, candidate)
        except (WorldError, ValueError) as exc:
            return VerifyResult.failure(self.name, f"pivot {pivot.id}: world: {exc}")
        if found is None:
            return VerifyResult(0.0, False, self.name, "the search returned an error or no result list")
        if target is None:
            return VerifyResult.failure(self.name, f"pivot {pivot.id}: the expert's search returned nothing to compare")
        ok = target in found
        where = f"result {found.index(target) + 1} of {len(found)}" if ok else f"none of its {len(found)} results"
        return VerifyResult(float(ok), ok, self.name, f"retrieves {target!r} ({why}) as {where}")

    def _target(self, spec: Any, pivot: Pivot, expert: dict[str, Any]) -> tuple[str | None, str]:
        """The document the expert needed, and why (see the module docstring)."""
        results = self._results(spec, pivot, expert) or []
        later = (pivot.meta.get("after") or {}).get("calls") or []
        opened = next((o.get(self.id_key) for o in (_first_call(m, self.open_tool) for m in later) if o), None)
        if opened in results:
            return str(opened), "the document the expert opened next"
        return (results[0] if results else None), "the expert's first result"

    def _results(self, spec: Any, pivot: Pivot, arguments: dict[str, Any]) -> list[str] | None:
        with self._worlds.using(spec) as world:
            world.at_pivot(WorldTask.from_pivot(pivot), pivot.context)
            result = world.call(self.tool, arguments)
        if result.error:
            return None
        try:
            items = json.loads(result.content)
        except (json.JSONDecodeError, TypeError):
            return None
        if not isinstance(items, list):
            return None
        return [str(i[self.id_key]) for i in items if isinstance(i, dict) and self.id_key in i]

    def close(self) -> None:
        self._worlds.close()
