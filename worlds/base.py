"""The world protocol: what stands behind a domain's tools.

A :class:`World` builds the state at a task's start (:meth:`World.start`), executes one tool call
(:meth:`World.call` -> :class:`ToolResult`), gives a stable digest of the observable state
(:meth:`World.digest`) and closes. :meth:`World.at_pivot` builds the state at a pivot by starting
the task and replaying the context's earlier tool calls in order::

    from pivot_envs.worlds import build_world, WorldTask

    world = build_world("tool_use")                   # a built-in world, or "mcp:COMMAND ARGS"
    world.start(WorldTask.from_trajectory(traj))
    result = world.call("get_order", {"order_id": "CL-913398", "include_items": False})
    result.content, result.error, world.digest()
    world.close()

A world is built from its :meth:`World.config` (a picklable dict, or a spec string), so a Ray actor
or a server process can rebuild it: ``build_world(world.config())``.

An infrastructure failure (the sandbox or the MCP server is gone) raises :class:`WorldError`; a
tool that refuses its input (unknown id, bad arguments) is a normal :class:`ToolResult` with
``error=True``: the agent sees it, as in the trajectory.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Sequence

from pivot_envs.types import Fixture, Message, Pivot, Trajectory


class WorldError(RuntimeError):
    """The world itself failed (not the tool call): the episode or verification is an error."""


@dataclass(frozen=True)
class ToolResult:
    """What one tool call returned: the text the agent sees, and whether the tool reported an error."""

    content: str
    error: bool = False

    def message(self, call_id: str, name: str) -> Message:
        """The ``tool`` message that carries this result back to the agent."""
        return {"role": "tool", "tool_call_id": call_id, "name": name, "content": self.content}


@dataclass
class WorldTask:
    """What a world needs to build a task's start state.

    Attributes:
        id: the task (trajectory) id.
        domain: the task's domain ("" for an MCP task).
        config: the task's world settings, from the trajectory's ``meta`` (e.g. ``world_seed``).
        fixture: the start state's files and setup, when the domain has one.
        tools: the OpenAI tool specs the trajectory declares (``[]``: the world's own).
    """

    id: str
    domain: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    fixture: Fixture | None = None
    tools: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_trajectory(cls, traj: Trajectory, domain: str = "", keys: Sequence[str] | None = None) -> "WorldTask":
        """The task of a trajectory of ``domain``; ``keys`` picks its ``meta`` settings (default: the
        domain's ``world_keys``)."""
        keys = _world_keys(domain) if keys is None else keys
        config = {k: traj.meta[k] for k in keys if k in traj.meta}
        return cls(id=traj.id, domain=domain, config=config, fixture=traj.fixture,
                   tools=list(traj.tools))

    @classmethod
    def from_pivot(cls, pivot: Pivot) -> "WorldTask":
        """The task a pivot was cut from (extraction copies the world settings into ``pivot.meta``)."""
        world = pivot.meta.get("world") or {}
        fixture = world.get("fixture")
        return cls(id=str(pivot.meta.get("trajectory_id") or pivot.id), domain=pivot.domain,
                   config=dict(world.get("config") or {}),
                   fixture=Fixture.from_dict(fixture) if fixture is not None else pivot.fixture,
                   tools=list(pivot.tools))


WorldKeysOf = Callable[[str], Sequence[str]]
"""``domain name -> its world_keys`` (raises for an unknown domain)."""

_WORLD_KEYS_OF: list[WorldKeysOf] = []


def use_world_keys_of(lookup: WorldKeysOf) -> None:
    """Set how :meth:`WorldTask.from_trajectory` finds a domain's ``world_keys``. :mod:`pivot_envs.domains`
    sets it when it is imported (always, by ``import pivot_envs``): worlds sit below domains and never
    import them."""
    _WORLD_KEYS_OF[:] = [lookup]


def _world_keys(domain: str) -> Sequence[str]:
    if not domain:
        return ()
    if not _WORLD_KEYS_OF:
        raise ValueError(f"no domain registry to look up domain {domain!r}'s world_keys; pass keys=")
    return _WORLD_KEYS_OF[0](domain)


def json_by_value(value: Any) -> Any:
    """``value`` with JSON numbers compared by value: an integral float is its int (``0.0`` is ``0``; JSON has one
    number type, and tau2-bench's own models make ``0`` of ``0.0``)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: json_by_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_by_value(v) for v in value]
    return value


def normalize_output(content: Any) -> str:
    """A tool result as worlds compare it: canonical JSON (sorted keys, numbers by value) when it parses as
    JSON, else its text with whitespace collapsed."""
    text = content if isinstance(content, str) else json.dumps(content)
    try:
        return json.dumps(json_by_value(json.loads(text)), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    except (json.JSONDecodeError, TypeError, ValueError):
        return " ".join(str(text).split())


class World(ABC):
    """Base class of worlds. Subclasses set ``name`` and implement the four abstract methods below."""

    name: ClassVar[str] = "base"

    @abstractmethod
    def tools(self) -> list[dict[str, Any]]:
        """The OpenAI tool specs this world executes (after :meth:`start`)."""

    @abstractmethod
    def start(self, task: WorldTask) -> None:
        """A fresh state at ``task``'s start (whatever an earlier episode did is gone)."""

    @abstractmethod
    def call(self, name: str, arguments: str | dict[str, Any]) -> ToolResult:
        """Execute one tool call on the current state."""

    @abstractmethod
    def digest(self) -> str:
        """A stable hash of the observable state: equal states, equal digests."""

    def close(self) -> None:
        """Release processes, sandboxes and folders (idempotent)."""

    def config(self) -> dict[str, Any]:
        """What rebuilds this world: ``build_world(world.config())``."""
        return {"name": self.name}

    # ------------------------------------------------------------------ built on the four above

    def refusal(self, name: str, arguments: str | dict[str, Any]) -> str | None:
        """Why this world refuses the call outright, before running anything (a command longer than the shell takes
        one), or ``None``: a call it would answer with an error whatever the state. Verifiers ask it, so that they
        never credit a call the world would not run. The default refuses nothing."""
        return None

    def normalize_output(self, content: Any) -> str:
        """A tool result's content as this world compares it (replays, ``world_exec``): by default
        :func:`normalize_output` (canonical JSON with numbers by value, else whitespace collapsed)."""
        return normalize_output(content)

    def at_pivot(self, task: WorldTask, context: Sequence[Message]) -> list[ToolResult]:
        """:meth:`start` ``task``, then replay every tool call of the assistant turns in ``context``.

        Returns the replayed calls' results, in order (callers may compare them with the recorded
        ``tool`` messages).
        """
        self.start(task)
        return [self.call(name, args) for name, args in context_calls(context)]

    def execute(self, message: Message) -> list[tuple[dict[str, Any], ToolResult]]:
        """Execute every tool call of an assistant message, in order: ``[(call, result), ...]``."""
        return [(call, self.call(call["function"]["name"], call["function"].get("arguments") or "{}"))
                for call in message.get("tool_calls") or []]

    def __enter__(self) -> "World":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def context_calls(context: Sequence[Message]) -> list[tuple[str, Any]]:
    """The ``(name, arguments)`` of every tool call made by the assistant turns of ``context``."""
    out = []
    for message in context:
        if message.get("role") == "assistant":
            for call in message.get("tool_calls") or []:
                fn = call.get("function") or {}
                out.append((str(fn.get("name", "")), fn.get("arguments") or "{}"))
    return out


def parse_arguments(arguments: str | dict[str, Any]) -> dict[str, Any]:
    """Tool-call arguments as a dict; ``ValueError`` with the parser's message when they are not an object."""
    if isinstance(arguments, dict):
        return arguments
    text = arguments.strip() if isinstance(arguments, str) else ""
    if not text:
        return {}
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError(f"arguments must be a JSON object, got {type(value).__name__}")
    return value
