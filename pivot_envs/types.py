"""Core types that cross every room of pivot-envs.

All of them keep the OpenAI chat wire format: a message is a plain ``dict``
(``role``, ``content``, optional ``tool_calls``/``tool_call_id``/``name``), a
tool is an OpenAI function spec ``{"type": "function", "function": {...}}``.
Every dataclass round-trips through JSON with ``to_dict()``/``from_dict()``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

Message = dict[str, Any]
"""An OpenAI chat message dict (``role``, ``content``, optional ``tool_calls``, ``tool_call_id``)."""

Tool = dict[str, Any]
"""An OpenAI tool spec: ``{"type": "function", "function": {"name", "description", "parameters"}}``."""


def content_text(content: Any) -> str:
    """The text of a message's ``content``: a string as is, a list of content parts joined (their
    ``text``), ``None`` as ``""``."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content)
    return "" if content is None else str(content)


def stable_hash(*parts: Any, length: int = 16) -> str:
    """A short, stable hex digest of JSON-serialisable parts (sorted keys)."""
    text = json.dumps(parts, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:length]


@dataclass
class Fixture:
    """The environment state a pivot's actions run against.

    Attributes:
        files: relative path (inside ``workdir``) -> file content.
        setup: a shell script run inside ``workdir`` after the files are written.
        workdir: absolute path the fixture is mounted at inside a sandbox (e.g. ``/testbed``).
    """

    files: dict[str, str] = field(default_factory=dict)
    setup: str = ""
    workdir: str = "/workspace"

    def to_dict(self) -> dict[str, Any]:
        return {"files": dict(self.files), "setup": self.setup, "workdir": self.workdir}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> "Fixture | None":
        if data is None:
            return None
        if not isinstance(data, dict):
            raise ValueError(f"fixture must be an object with files/setup/workdir, got {type(data).__name__}")
        files = data.get("files") or {}
        if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
            raise ValueError("fixture.files must map relative paths to string contents")
        workdir = data.get("workdir") or "/workspace"
        if not str(workdir).startswith("/"):
            raise ValueError(f"fixture.workdir must be an absolute path, got {workdir!r}")
        return cls(files={str(k): v for k, v in files.items()}, setup=str(data.get("setup") or ""), workdir=str(workdir))

    def key(self) -> str:
        """A stable hash of the fixture, used to cache expert effects."""
        return stable_hash(self.to_dict())


@dataclass
class Trajectory:
    """One expert episode.

    Attributes:
        messages: the full conversation in OpenAI chat format.
        tools: OpenAI function specs available to the assistant.
        reward: task success or score of the episode, if known.
        meta: free-form provenance (``source``, ``task_id``, ``id``, ...).
        fixture: environment state at the start of the episode (terminal/SWE domains).
    """

    messages: list[Message]
    tools: list[Tool] = field(default_factory=list)
    reward: float | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    fixture: Fixture | None = None

    @property
    def id(self) -> str:
        """``meta["id"]`` when given, else a hash of the conversation."""
        if self.meta.get("id") is not None:
            return str(self.meta["id"])
        return stable_hash(self.meta.get("source"), self.messages)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"messages": self.messages, "tools": self.tools}
        if self.reward is not None:
            out["reward"] = self.reward
        if self.meta:
            out["meta"] = self.meta
        if self.fixture is not None:
            out["fixture"] = self.fixture.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Trajectory":
        messages = data.get("messages")
        if not isinstance(messages, list) or not all(isinstance(m, dict) and "role" in m for m in messages):
            raise ValueError("messages must be a list of objects with a 'role'")
        tools = data.get("tools") or []
        if not isinstance(tools, list):
            raise ValueError("tools must be a list of OpenAI function specs")
        reward = data.get("reward")
        if reward is not None and not isinstance(reward, (int, float)):
            raise ValueError(f"reward must be a number, got {reward!r}")
        return cls(
            messages=messages,
            tools=tools,
            reward=None if reward is None else float(reward),
            meta=dict(data.get("meta") or {}),
            fixture=Fixture.from_dict(data.get("fixture")),
        )


@dataclass
class Profile:
    """Rewards of K samples of the reference policy at one pivot (PivotRL profiling).

    ``var`` is the population variance ``mean_k (r - mean)^2``, as in the paper.
    """

    k: int
    rewards: list[float]
    mean: float
    var: float
    strict_mean: float | None = None
    errors: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> "Profile | None":
        if data is None:
            return None
        return cls(
            k=int(data["k"]),
            rewards=[float(r) for r in data["rewards"]],
            mean=float(data["mean"]),
            var=float(data["var"]),
            strict_mean=None if data.get("strict_mean") is None else float(data["strict_mean"]),
            errors=int(data.get("errors", 0)),
        )


@dataclass
class Pivot:
    """One assistant turn of an expert trajectory: state ``context`` and expert action ``expert``.

    Attributes:
        id: stable id (hash of domain, trajectory id and turn index).
        domain: domain name (``tool_use``, ``terminal``, ``swe``, ``search`` or a registered one).
        context: the messages before the turn (the state s_t).
        tools: OpenAI function specs available at the turn.
        expert: the expert's assistant message at the turn (a*_t).
        fixture: environment state at the turn, for execution verifiers.
        meta: provenance (``trajectory_id``, ``turn``, ``source``, ``alternatives``...).
        profile: reference-policy statistics, once profiled.
    """

    id: str
    domain: str
    context: list[Message]
    expert: Message
    tools: list[Tool] = field(default_factory=list)
    fixture: Fixture | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    profile: Profile | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "domain": self.domain,
            "context": self.context,
            "tools": self.tools,
            "expert": self.expert,
        }
        if self.fixture is not None:
            out["fixture"] = self.fixture.to_dict()
        if self.meta:
            out["meta"] = self.meta
        if self.profile is not None:
            out["profile"] = self.profile.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Pivot":
        for key in ("id", "context", "expert"):
            if key not in data:
                raise ValueError(f"pivot is missing required field {key!r}")
        if not isinstance(data["context"], list):
            raise ValueError("context must be a list of messages")
        if not isinstance(data["expert"], dict) or data["expert"].get("role") != "assistant":
            raise ValueError("expert must be an assistant message object")
        return cls(
            id=str(data["id"]),
            domain=str(data.get("domain") or ""),
            context=data["context"],
            expert=data["expert"],
            tools=list(data.get("tools") or []),
            fixture=Fixture.from_dict(data.get("fixture")),
            meta=dict(data.get("meta") or {}),
            profile=Profile.from_dict(data.get("profile")),
        )

    def tool_spec(self, name: str) -> Tool | None:
        """The OpenAI spec of tool ``name`` at this pivot, if declared."""
        for tool in self.tools:
            fn = tool.get("function", tool)
            if fn.get("name") == name:
                return tool
        return None


@dataclass
class Action:
    """What a policy emitted at a pivot: the raw text and the parsed assistant message.

    ``message`` is always an assistant message; unparseable text becomes a
    plain-content message (a valid action that simply fails tool verifiers).
    """

    text: str
    message: Message

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        return list(self.message.get("tool_calls") or [])

    @property
    def content(self) -> str:
        content = self.message.get("content")
        return content if isinstance(content, str) else ""

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "message": self.message}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Action":
        return cls(text=str(data.get("text", "")), message=dict(data["message"]))


@dataclass
class VerifyResult:
    """The verdict of a verifier on one action.

    Attributes:
        reward: in [0, 1].
        passed: whether the action counts as functionally equivalent.
        verifier: name of the verifier that decided.
        reason: a short human-readable explanation.
        error: set when the verifier itself failed (judge down, sandbox crash,
            timeout of the verifier). Such a result is never a real 0 or 1:
            trainers mask it and count it.
    """

    reward: float
    passed: bool
    verifier: str
    reason: str = ""
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "VerifyResult":
        return cls(
            reward=float(data["reward"]),
            passed=bool(data["passed"]),
            verifier=str(data["verifier"]),
            reason=str(data.get("reason", "")),
            error=data.get("error"),
        )

    @classmethod
    def failure(cls, verifier: str, error: str) -> "VerifyResult":
        """An infrastructure failure: reward 0, not passed, ``error`` set."""
        return cls(reward=0.0, passed=False, verifier=verifier, reason="verifier error", error=error)
