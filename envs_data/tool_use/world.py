"""The ``tool_use`` world: the customer-service database and its 14 tools (the generator's own code).

State: the JSON database built by ``build_world(world_seed)`` (the task's ``world_seed``; 0 by
default), mutated in place by write tools. Digest: SHA-256 of the database as canonical JSON
(sorted keys), so two episodes that made the same changes in any order have the same digest.
The one free-text field the tools store, a ``transfer_to_human`` summary, enters the digest as
"a transfer with this priority" without its wording: two agents who hand over the same case in
their own words reach the same state (``world_exec`` still compares the calls' outputs).
A tool result starting with ``Error:`` is a tool error.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pivot_envs.worlds.base import ToolResult, World, WorldError, WorldTask

from . import NAME
from . import database


class ToolUseWorld(World):
    name = NAME

    def __init__(self) -> None:
        self._impl = database
        self._bases: dict[int, dict[str, Any]] = {}  # world_seed -> pristine database (built once)
        self._db: dict[str, Any] | None = None

    def tools(self) -> list[dict[str, Any]]:
        return [dict(spec) for spec in self._impl.TOOL_SPECS]

    def start(self, task: WorldTask) -> None:
        seed = int(task.config.get("world_seed", 0))
        if seed not in self._bases:
            self._bases[seed] = self._impl.build_world(seed)
        self._db = self._impl.clone(self._bases[seed])

    def call(self, name: str, arguments: str | dict[str, Any]) -> ToolResult:
        if self._db is None:
            raise WorldError("tool_use world: call() before start()")
        content = self._impl.execute(self._db, name, arguments)
        return ToolResult(content, error=content.startswith("Error:"))

    def digest(self) -> str:
        if self._db is None:
            raise WorldError("tool_use world: digest() before start()")
        state = {**self._db, "transfers": [{**t, "summary": None} for t in self._db.get("transfers", [])]}
        text = json.dumps(state, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def close(self) -> None:
        self._db = None
