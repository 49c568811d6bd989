"""A harness's ``chat/completions`` request, read and checked: what the endpoint applies, refuses and ignores.

::

    request = read_chat_request(body)       # HarnessError (422) naming a field the endpoint cannot serve
    request.messages, request.tools, request.stop, request.tools_off, request.rest

Applied: ``messages`` (``developer`` read as ``system``), ``tools``, ``stop`` (a string or a list of up to 4:
the answer ends before the first one, its tokens cut there too: :mod:`pivot_envs.harness.stops`) and
``tool_choice: "none"`` (the prompt is rendered without tools and the answer is never read as a tool call).

Refused with 422 naming the field: ``n`` other than 1, ``stream: true``, a ``tool_choice`` that is not ``"none"``,
``"auto"``, ``"required"`` or a function, a malformed ``stop``.

Recorded, not applied (:data:`IGNORED_FIELDS`): the policy samples with its own settings, the behaviour policy
the trainer assumes: ``temperature``, ``top_p``, ``max_tokens`` / ``max_completion_tokens``, ``seed``,
``presence_penalty``, ``frequency_penalty``, ``logit_bias``, ``logprobs`` / ``top_logprobs``, ``response_format``,
``parallel_tool_calls``, ``tool_choice: "required"`` or a named function (a sampler cannot force a call: the
model's answer is returned as it is), ``user``, ``metadata``, ``store``, ``service_tier``, ``stream_options``,
``reasoning_effort``, ``extra_body``. Every request field is kept in the captured call (``request``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from pivot_envs.harness.state import HarnessError
from pivot_envs.types import Message

__all__ = ["ChatRequest", "IGNORED_FIELDS", "MAX_STOPS", "read_chat_request"]

MAX_STOPS = 4
"""The most stop sequences a request may give (OpenAI's limit)."""
IGNORED_FIELDS = ("temperature", "top_p", "max_tokens", "max_completion_tokens", "seed", "presence_penalty",
                  "frequency_penalty", "logit_bias", "logprobs", "top_logprobs", "response_format",
                  "parallel_tool_calls", "tool_choice (required, a named function)", "user", "metadata", "store",
                  "service_tier", "stream_options", "reasoning_effort", "extra_body")
"""The request fields recorded but not applied (see the module docstring)."""


@dataclass
class ChatRequest:
    """A checked chat request: ``messages`` and ``tools`` as sent (``developer`` messages read as ``system``),
    ``stop`` as a list, ``tools_off`` (``tool_choice: "none"``) and ``rest``: every other field, as sent."""

    messages: list[Message]
    tools: list[dict[str, Any]]
    stop: list[str] = field(default_factory=list)
    tools_off: bool = False
    rest: dict[str, Any] = field(default_factory=dict)


def read_chat_request(body: Any) -> ChatRequest:
    """The request's fields; :class:`~pivot_envs.harness.state.HarnessError` (422) naming a bad one."""
    if not isinstance(body, dict):
        raise HarnessError(422, "<body>", "must be a JSON object (an OpenAI chat.completions request)")
    messages = _messages(body.get("messages"))
    tools = body.get("tools") or []
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise HarnessError(422, "tools", "must be a list of OpenAI tool specs")
    if body.get("n") not in (None, 1):
        raise HarnessError(422, "n", f"the harness endpoint answers one choice per call (n=1), got n={body.get('n')!r}")
    if body.get("stream"):
        raise HarnessError(422, "stream", "streaming is not supported by the harness endpoint: send stream=false")
    rest = {k: v for k, v in body.items() if k not in ("messages", "tools")}
    return ChatRequest(messages=copy.deepcopy(messages), tools=copy.deepcopy(tools), stop=_stops(body.get("stop")),
                       tools_off=_tools_off(body.get("tool_choice")), rest=rest)


def _messages(messages: Any) -> list[Message]:
    if not isinstance(messages, list) or not messages:
        raise HarnessError(422, "messages", "must be a non-empty list of chat messages")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise HarnessError(422, f"messages[{i}]", "must be an object with a 'role'")
    return [{**m, "role": "system"} if m.get("role") == "developer" else m for m in messages]


def _stops(stop: Any) -> list[str]:
    if stop is None:
        return []
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise HarnessError(422, "stop", f"must be a string or a list of strings, got {stop!r}")
    if len(stops) > MAX_STOPS:
        raise HarnessError(422, "stop", f"at most {MAX_STOPS} stop sequences, got {len(stops)}")
    return [s for s in stops if s]


def _tools_off(choice: Any) -> bool:
    """``tool_choice``: ``"none"`` -> True; ``None``, ``"auto"``, ``"required"`` or a function -> False (the last two
    recorded, not applied); anything else is refused."""
    if choice is None or choice in ("auto", "required"):
        return False
    if choice == "none":
        return True
    if isinstance(choice, dict) and choice.get("type") in ("function", "allowed_tools", "custom"):
        return False
    raise HarnessError(422, "tool_choice", f"one of 'none', 'auto', 'required' or a function, got {choice!r}")
