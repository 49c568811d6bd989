"""Worlds: the state and tool implementations behind a domain's tools (see :mod:`.base`).

``build_world(spec)`` builds a fresh world from a built-in domain's world name (``tool_use``, ``terminal``,
``swe``, ``search``: their worlds live in the domain folders, ``pivot_envs/envs_data/<domain>/world.py``), a registered world's name (:func:`register_world`, or the entry-point group
``pivot_envs.worlds``), ``mcp:COMMAND [ARGS]`` (the tools of any MCP server over stdio), a config
dict ``{"name": ..., **params}`` (what :meth:`World.config` returns), a :class:`World` subclass or a
zero-argument factory. A World *instance* is refused: it would be shared (see :mod:`.registry`).
"""

from __future__ import annotations

from pivot_envs.worlds.base import ToolResult, World, WorldError, WorldTask, context_calls, json_by_value, normalize_output
from pivot_envs.worlds.task_state import TaskState, task_state
from pivot_envs.worlds.registry import (
    ENTRY_POINT_GROUP,
    WORLDS,
    WorldFactory,
    WorldSpec,
    build_world,
    describe_world,
    describe_world_spec,
    load_world_plugins,
    refuse_world_instance,
    register_world,
    world_class,
    world_factory,
    world_names,
    world_origin,
    world_plugin_errors,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "TaskState",
    "ToolResult",
    "WORLDS",
    "World",
    "WorldError",
    "WorldFactory",
    "WorldSpec",
    "WorldTask",
    "build_world",
    "context_calls",
    "describe_world",
    "describe_world_spec",
    "load_world_plugins",
    "refuse_world_instance",
    "register_world",
    "world_class",
    "world_factory",
    "world_names",
    "world_origin",
    "world_plugin_errors",
    "task_state",
    "json_by_value",
    "normalize_output",
]
