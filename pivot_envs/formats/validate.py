"""Checks on OpenAI chat messages and tool specs, with errors that name the field.

Every reader runs these checks on what it produced, so that a malformed row
stops (or is skipped and counted) with a message such as
``data.jsonl:17: field 'messages[3].tool_calls[0].function.arguments': ...``.

:class:`RowError` is a :class:`~pivot_envs.jsonl.BadRowError` that does not
know its file and line yet: :func:`pivot_envs.jsonl.read_rows` (or the reader
of a whole-document file) fills them in.
"""

from __future__ import annotations

import json
from typing import Any

from pivot_envs.jsonl import BadRowError

ROLES = ("system", "developer", "user", "assistant", "tool")
"""Chat roles a message may have."""


class RowError(BadRowError):
    """A bad row whose file and line are not known yet (the reader adds them)."""

    def __init__(self, field_name: str, problem: str, fix: str = ""):
        super().__init__("<row>", 0, field_name, problem, fix)
        msg = f"field '{field_name}': {problem}"
        self.args = (msg + (f" (fix: {fix})" if fix else ""),)


def require_dict(value: Any, field_name: str, what: str = "an object") -> dict[str, Any]:
    """``value`` if it is a dict, else a :class:`RowError` naming ``field_name``."""
    if not isinstance(value, dict):
        raise RowError(field_name, f"must be {what}: got {_kind(value)}")
    return value


def require_list(value: Any, field_name: str, what: str = "a list") -> list[Any]:
    """``value`` if it is a list, else a :class:`RowError` naming ``field_name``."""
    if not isinstance(value, list):
        raise RowError(field_name, f"must be {what}: got {_kind(value)}")
    return value


def require_str(value: Any, field_name: str, fix: str = "") -> str:
    """``value`` if it is a string, else a :class:`RowError` naming ``field_name``."""
    if not isinstance(value, str):
        raise RowError(field_name, f"must be a string: got {_kind(value)}", fix)
    return value


def check_messages(messages: Any, field_name: str = "messages", *, allow_empty: bool = False) -> list[dict[str, Any]]:
    """Validate a list of OpenAI chat messages; returns it unchanged.

    Checks: a list of objects; known roles; content a string, a list of parts
    or (assistant only) null; tool calls with an ``id``, a function ``name``
    and ``arguments`` that are a JSON-encoded object; tool messages with a
    ``tool_call_id`` that answers an earlier tool call.
    """
    messages = require_list(messages, field_name, "a list of chat messages")
    if not messages and not allow_empty:
        raise RowError(field_name, "is empty", "a trajectory needs at least one message")
    call_ids: set[str] = set()
    for i, message in enumerate(messages):
        check_message(message, f"{field_name}[{i}]", call_ids)
    return messages


def check_message(message: Any, field_name: str, call_ids: set[str] | None = None) -> dict[str, Any]:
    """Validate one chat message; ``call_ids`` collects tool-call ids seen so far (None: skip the cross-check)."""
    message = require_dict(message, field_name, "a chat message object")
    role = message.get("role")
    if role not in ROLES:
        raise RowError(f"{field_name}.role", f"unknown role: {role!r}", f"use one of {', '.join(ROLES)}")
    calls = message.get("tool_calls")
    content = message.get("content")
    if content is None:
        if role != "assistant":
            raise RowError(f"{field_name}.content", "missing or null content", "give the message a string content")
    else:
        check_content(content, f"{field_name}.content")
    if calls is not None:
        if role != "assistant":
            raise RowError(f"{field_name}.tool_calls", f"only assistant messages carry tool calls: role is {role!r}")
        calls = require_list(calls, f"{field_name}.tool_calls", "a list of tool calls")
        for j, call in enumerate(calls):
            call_id = check_tool_call(call, f"{field_name}.tool_calls[{j}]")
            if call_ids is not None:
                call_ids.add(call_id)
    if role == "tool":
        call_id = message.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            raise RowError(f"{field_name}.tool_call_id", "tool message without tool_call_id",
                           "set tool_call_id to the id of the tool call this message answers")
        if call_ids is not None and call_id not in call_ids:
            raise RowError(f"{field_name}.tool_call_id", f"answers no earlier tool call: {call_id!r}",
                           "give the earlier assistant tool call this id")
    return message


def check_content(content: Any, field_name: str) -> None:
    """Content is a string or a list of part objects with a ``type``."""
    if isinstance(content, str):
        return
    parts = require_list(content, field_name, "a string or a list of content parts")
    for k, part in enumerate(parts):
        part = require_dict(part, f"{field_name}[{k}]", "a content part object")
        if not isinstance(part.get("type"), str):
            raise RowError(f"{field_name}[{k}].type", "content part without a type", 'e.g. {"type": "text", "text": "..."}')


def check_tool_call(call: Any, field_name: str) -> str:
    """Validate one OpenAI tool call; returns its id."""
    call = require_dict(call, field_name, "a tool call object")
    call_id = call.get("id")
    if not isinstance(call_id, str) or not call_id:
        raise RowError(f"{field_name}.id", "tool call without id", "give every tool call a unique string id")
    if call.get("type", "function") != "function":
        raise RowError(f"{field_name}.type", f"unsupported tool call type: {call.get('type')!r}", 'use "function"')
    fn = require_dict(call.get("function"), f"{field_name}.function", 'an object {"name", "arguments"}')
    name = fn.get("name")
    if not isinstance(name, str) or not name:
        raise RowError(f"{field_name}.function.name", "missing function name")
    check_arguments(fn.get("arguments"), f"{field_name}.function.arguments")
    return call_id


def check_arguments(arguments: Any, field_name: str) -> dict[str, Any]:
    """Tool-call arguments are a JSON-encoded object string (the OpenAI wire format); returns them decoded."""
    fix = 'arguments must be a JSON-encoded object string such as "{\\"city\\": \\"Paris\\"}"'
    if not isinstance(arguments, str):
        raise RowError(field_name, f"must be a JSON string: got {_kind(arguments)}", fix)
    try:
        decoded = json.loads(arguments)
    except json.JSONDecodeError as exc:
        raise RowError(field_name, f"invalid JSON: {exc.msg} at column {exc.colno}", fix) from None
    if not isinstance(decoded, dict):
        raise RowError(field_name, f"must encode a JSON object: got {_kind(decoded)}", fix)
    return decoded


def check_tools(tools: Any, field_name: str = "tools") -> list[dict[str, Any]]:
    """Validate a list of OpenAI tool specs (function tools need a name; other tool types pass through)."""
    tools = require_list(tools, field_name, "a list of tool specs")
    for i, tool in enumerate(tools):
        tool = require_dict(tool, f"{field_name}[{i}]", "a tool spec object")
        if tool.get("type", "function") != "function":
            if "function" in tool:  # another tool type passes through, but a "function" entry must still be an object
                require_dict(tool["function"], f"{field_name}[{i}].function", "an object (or absent for this tool type)")
            continue
        if "function" not in tool and "name" in tool:
            raise RowError(f"{field_name}[{i}].function", "missing: a flat (Responses-API) tool spec",
                           'nest it as {"type": "function", "function": {"name", "description", "parameters"}}')
        fn = require_dict(tool.get("function"), f"{field_name}[{i}].function",
                          'an object {"name", "description", "parameters"}')
        if not isinstance(fn.get("name"), str) or not fn["name"]:
            raise RowError(f"{field_name}[{i}].function.name", "missing function name")
        if fn.get("parameters") is not None and not isinstance(fn["parameters"], dict):
            raise RowError(f"{field_name}[{i}].function.parameters", f"must be a JSON schema object: got {_kind(fn['parameters'])}")
    return tools


def check_alternatives(alternatives: Any, field_name: str = "meta.alternatives") -> dict[str, Any]:
    """Recorded alternative actions: ``{"<turn index>": [assistant message, ...]}``; returns them unchanged."""
    shape = 'an object {"<turn index>": [alternative assistant messages]}'
    alternatives = require_dict(alternatives, field_name, shape)
    for turn, messages in alternatives.items():
        messages = require_list(messages, f"{field_name}.{turn}", "a list of alternative assistant messages")
        for j, message in enumerate(messages):
            check_message(message, f"{field_name}.{turn}[{j}]", None)
    return alternatives


def check_reward(reward: Any, field_name: str = "reward") -> float | None:
    """A reward is a number or null."""
    if reward is None:
        return None
    if isinstance(reward, bool) or not isinstance(reward, (int, float)):
        raise RowError(field_name, f"must be a number or null: got {_kind(reward)}")
    return float(reward)


def _kind(value: Any) -> str:
    """A short description of a JSON value's type, for error messages."""
    if value is None:
        return "null"
    names = {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list", dict: "an object"}
    text = names.get(type(value), type(value).__name__)
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:37] + "..."
        text += f" {shown!r}"
    return text
