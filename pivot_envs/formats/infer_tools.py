"""Reconstruct minimal OpenAI tool specs from the tool calls seen in trajectories.

Some trajectory formats (tau-bench, SWE-agent without a replay config) record
the calls an agent made but not the tool specs it was given. This module
rebuilds one spec per tool name from the arguments seen:

* ``parameters.properties`` holds every argument key seen in any call, with a
  JSON-schema type inferred from the values (``integer`` and ``number`` merge
  into ``number``; different types give a list such as ``["string", "null"]``;
  lists get ``items`` and objects ``properties`` inferred the same way);
* no ``required`` list is claimed (a key absent from the calls seen may still
  be required, and a key present in every call may still be optional);
* the description says that the spec was inferred.

Readers that use it set ``meta["tools_inferred"] = True`` on the trajectory so
that verifiers relying on schemas (defaults, required keys) know how much to
trust them.
"""

from __future__ import annotations

import json
from typing import Any, Iterable

from pivot_envs.types import Message, Tool

_JSON_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object", type(None): "null"}


def infer_tools(conversations: Iterable[list[Message]]) -> list[Tool]:
    """One OpenAI function spec per tool name called in ``conversations``, sorted by name."""
    schemas: dict[str, dict[str, Any]] = {}
    counts: dict[str, int] = {}
    for messages in conversations:
        for message in messages:
            for call in message.get("tool_calls") or []:
                fn = call.get("function") or {}
                name = fn.get("name")
                if not isinstance(name, str):
                    continue
                try:
                    args = json.loads(fn.get("arguments") or "{}")
                except (json.JSONDecodeError, TypeError):
                    continue
                if not isinstance(args, dict):
                    continue
                counts[name] = counts.get(name, 0) + 1
                seen = schema_of(args)
                schemas[name] = merge_schemas(schemas[name], seen) if name in schemas else seen
    return [tool_spec(name, schemas[name], counts[name]) for name in sorted(schemas)]


def tool_spec(name: str, parameters: dict[str, Any], n_calls: int) -> Tool:
    """An OpenAI function spec for an inferred tool."""
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": f"(spec inferred from {n_calls} observed call{'s' if n_calls != 1 else ''}; "
                           "argument types are guesses and no argument is known to be required)",
            "parameters": parameters,
        },
    }


def schema_of(value: Any) -> dict[str, Any]:
    """A JSON schema describing one JSON value (objects without ``required``)."""
    kind = _JSON_TYPES.get(type(value), "string")
    schema: dict[str, Any] = {"type": kind}
    if kind == "object":
        schema["properties"] = {str(k): schema_of(v) for k, v in value.items()}
    elif kind == "array" and value:
        items = schema_of(value[0])
        for item in value[1:]:
            items = merge_schemas(items, schema_of(item))
        schema["items"] = items
    return schema


def merge_schemas(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """The smallest schema (in this module's vocabulary) that admits what ``a`` and ``b`` admit."""
    types = _merge_types(_types(a), _types(b))
    out: dict[str, Any] = {"type": types[0] if len(types) == 1 else types}
    if "object" in types:
        props = dict(a.get("properties") or {})
        for key, sub in (b.get("properties") or {}).items():
            props[key] = merge_schemas(props[key], sub) if key in props else sub
        out["properties"] = props
    if "array" in types:
        items_a, items_b = a.get("items"), b.get("items")
        if items_a and items_b:
            out["items"] = merge_schemas(items_a, items_b)
        elif items_a or items_b:
            out["items"] = items_a or items_b
    return out


def _types(schema: dict[str, Any]) -> list[str]:
    t = schema.get("type", [])
    return [t] if isinstance(t, str) else list(t)


def _merge_types(a: list[str], b: list[str]) -> list[str]:
    merged = sorted(set(a) | set(b))
    if "integer" in merged and "number" in merged:
        merged.remove("integer")
    return merged
