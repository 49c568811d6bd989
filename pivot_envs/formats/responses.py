"""Conversions between OpenAI Responses-API items and OpenAI chat messages.

NeMo Gym rows describe the model call with Responses-API ``input`` items and
flat function tools; pivot-envs keeps chat messages and chat tool specs. These
are the two plain (not yet lossless) directions; :mod:`pivot_envs.formats.nemo_gym`
adds what makes a round trip exact.

Responses -> chat:

* ``{"role": system|developer|user|assistant, "content"}`` (``type`` absent or
  ``"message"``) -> a chat message; content given as parts
  (``input_text``/``output_text``/``text``) is joined into one string, other
  parts become chat parts (``input_image`` -> ``image_url``);
* ``{"type": "function_call", "call_id", "name", "arguments"}`` -> a tool call
  appended to the current assistant message (consecutive calls and a text
  message right before them form one assistant turn);
* ``{"type": "function_call_output", "call_id", "output"}`` -> a ``tool`` message;
* ``{"type": "reasoning", "summary": [...]}`` -> opens an assistant turn with
  ``reasoning_content`` (the summary texts joined by blank lines);
* a flat tool ``{"type": "function", "name", ...}`` -> ``{"type": "function",
  "function": {"name", ...}}`` (other tool types are kept as they are).
"""

from __future__ import annotations

import json
from typing import Any

from pivot_envs.formats.validate import (
    RowError,
    check_arguments,
    check_tools,
    require_dict,
    require_list,
    require_str,
)
from pivot_envs.types import Message, Tool

MESSAGE_ROLES = ("system", "developer", "user", "assistant")
TEXT_PARTS = ("input_text", "output_text", "text")
ITEM_TYPES = ("message", "function_call", "function_call_output", "reasoning")


# ---------------------------------------------------------------- Responses -> chat
def input_to_messages(items: list[Any], field_name: str) -> list[Message]:
    """Responses ``input`` items -> chat messages (validating each item; errors name ``field_name[i]...``)."""
    messages: list[Message] = []
    turn: Message | None = None  # the assistant message that function_call items join
    call_ids: set[str] = set()
    for i, item in enumerate(items):
        f = f"{field_name}[{i}]"
        item = require_dict(item, f, "a Responses input item object")
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            role = item.get("role")
            if role not in MESSAGE_ROLES:
                raise RowError(f"{f}.role", f"unknown role: {role!r}",
                               "use system, developer, user or assistant (tool results are function_call_output items)")
            content = content_from_parts(item.get("content"), f"{f}.content")
            if role != "assistant":
                turn = None
                messages.append({"role": role, "content": content})
            elif turn is not None and turn["content"] is None and not turn.get("tool_calls"):
                turn["content"] = content
            else:
                turn = {"role": "assistant", "content": content}
                messages.append(turn)
        elif kind == "function_call":
            call = _call_from_item(item, f, default_id=None)
            call_ids.add(call["id"])
            if turn is None:
                turn = {"role": "assistant", "content": None}
                messages.append(turn)
            turn.setdefault("tool_calls", []).append(call)
        elif kind == "function_call_output":
            call_id = require_str(item.get("call_id"), f"{f}.call_id", "set call_id to the call_id of the function_call it answers")
            if call_id not in call_ids:
                raise RowError(f"{f}.call_id", f"answers no earlier function_call: {call_id!r}",
                               "put the function_call item with this call_id before its output")
            turn = None
            messages.append({"role": "tool", "tool_call_id": call_id, "content": output_text(item.get("output"), f"{f}.output")})
        elif kind == "reasoning":
            summary = require_list(item.get("summary") or [], f"{f}.summary", "a list of summary parts")
            text = "\n\n".join(str(s.get("text", "")) for s in summary if isinstance(s, dict))
            turn = {"role": "assistant", "content": None, "reasoning_content": text}
            messages.append(turn)
        else:
            raise RowError(f"{f}.type", f"unsupported input item type: {kind!r}", f"supported: {', '.join(ITEM_TYPES)}")
    return messages


def tools_from_responses(tools: Any, field_name: str) -> list[Tool]:
    """Flat Responses function tools -> chat function specs (other tools, and chat-style specs, unchanged)."""
    out: list[Tool] = []
    for i, tool in enumerate(require_list(tools, field_name, "a list of tool specs")):
        tool = require_dict(tool, f"{field_name}[{i}]", "a tool spec object")
        if tool.get("type", "function") == "function" and "function" not in tool:
            if not isinstance(tool.get("name"), str) or not tool["name"]:
                raise RowError(f"{field_name}[{i}].name", "missing function name")
            # ``strict: false`` is the chat default (a chat spec without ``strict``), written by tools_to_responses
            out.append({"type": "function", "function": {k: v for k, v in tool.items()
                                                         if k != "type" and not (k == "strict" and v is False)}})
        else:
            out.append(tool)
    return check_tools(out, field_name)


def expected_to_message(action: Any, field_name: str) -> Message:
    """``expected_action`` (``function_call``, ``function_call_batch`` or ``message``) -> the expert assistant message."""
    action = require_dict(action, field_name, 'an object such as {"type": "function_call", "name", "arguments"}')
    kind = action.get("type")
    if kind == "function_call":
        return {"role": "assistant", "content": None, "tool_calls": [_call_from_item(action, field_name, "call_0")]}
    if kind == "function_call_batch":
        calls = require_list(action.get("calls"), f"{field_name}.calls", "a non-empty list of function_call objects")
        if not calls:
            raise RowError(f"{field_name}.calls", "is empty", "a batch needs at least one call")
        return {"role": "assistant", "content": None,
                "tool_calls": [_call_from_item(require_dict(c, f"{field_name}.calls[{j}]"), f"{field_name}.calls[{j}]", f"call_{j}")
                               for j, c in enumerate(calls)]}
    if kind == "message":
        return {"role": "assistant", "content": content_from_parts(action.get("content"), f"{field_name}.content")}
    raise RowError(f"{field_name}.type", f"unsupported expected_action type: {kind!r}",
                   "use function_call, function_call_batch or message")


def content_from_parts(content: Any, field_name: str) -> str | list[dict[str, Any]]:
    """Responses content (a string or parts) -> chat content (a string, or chat parts when not all text)."""
    if isinstance(content, str):
        return content
    parts = require_list(content, field_name, "a string or a list of content parts")
    for k, part in enumerate(parts):
        require_dict(part, f"{field_name}[{k}]", "a content part object")
        if part.get("type") in TEXT_PARTS and not isinstance(part.get("text"), str):
            raise RowError(f"{field_name}[{k}].text", "text part without a string 'text'")
    if all(p.get("type") in TEXT_PARTS for p in parts):
        return "".join(p["text"] for p in parts)
    return [_chat_part(p) for p in parts]


def output_text(output: Any, field_name: str) -> str:
    """A ``function_call_output.output`` as the string content of a chat tool message."""
    if isinstance(output, str):
        return output
    if output is None:
        raise RowError(field_name, "missing function_call_output output", "give the tool result as a string")
    if isinstance(output, list) and all(isinstance(p, dict) and p.get("type") in TEXT_PARTS for p in output):
        return "".join(str(p.get("text", "")) for p in output)
    return json.dumps(output, ensure_ascii=False)


def _call_from_item(item: dict[str, Any], f: str, default_id: str | None) -> dict[str, Any]:
    name = item.get("name")
    if not isinstance(name, str) or not name:
        raise RowError(f"{f}.name", "missing function name")
    call_id = item.get("call_id") or item.get("id") or default_id
    if not isinstance(call_id, str) or not call_id:
        raise RowError(f"{f}.call_id", "function_call without call_id", "give every function_call a unique call_id")
    args = item.get("arguments", "{}")
    if isinstance(args, dict):
        args = json.dumps(args, ensure_ascii=False)
    else:
        check_arguments(args, f"{f}.arguments")
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


def _chat_part(part: dict[str, Any]) -> dict[str, Any]:
    kind = part.get("type")
    if kind in TEXT_PARTS:
        return {"type": "text", "text": part["text"]}
    if kind == "input_image":
        image: dict[str, Any] = {"url": part.get("image_url") or ""}
        if part.get("detail") is not None:
            image["detail"] = part["detail"]
        return {"type": "image_url", "image_url": image}
    return dict(part)


# ---------------------------------------------------------------- chat -> Responses
def messages_to_input(messages: list[Message], content_parts: bool = False) -> list[dict[str, Any]]:
    """Chat messages -> Responses ``input`` items (string content, or one text part each when ``content_parts``)."""
    items: list[dict[str, Any]] = []
    for m in messages:
        role = m.get("role")
        if role == "tool":
            items.append({"type": "function_call_output", "call_id": m.get("tool_call_id"), "output": _text(m.get("content"))})
            continue
        if role != "assistant":
            items.append({"role": role, "content": _content_to_parts(m.get("content"), role, content_parts)})
            continue
        calls = m.get("tool_calls") or []
        if m.get("reasoning_content") is not None:
            items.append({"type": "reasoning", "summary": [{"type": "summary_text", "text": m["reasoning_content"]}]})
        if m.get("content") is not None or (not calls and m.get("reasoning_content") is None):
            items.append({"role": "assistant", "content": _content_to_parts(m.get("content") or "", role, content_parts)})
        for call in calls:
            fn = call.get("function") or {}
            items.append({"type": "function_call", "call_id": call.get("id"), "name": fn.get("name"), "arguments": fn.get("arguments")})
    return items


def tools_to_responses(tools: list[Tool]) -> list[dict[str, Any]]:
    """Chat function specs -> flat Responses function tools (other tools unchanged).

    ``strict`` is always written: the Responses API's ``FunctionToolParam`` requires it (NeMo Gym's request
    model rejects a function tool without it), and its default there is ``true``, while a chat spec without it
    is not strict: such a spec becomes ``"strict": false`` (read back as no ``strict``).
    """
    return [{"type": "function", **t["function"], "strict": t["function"].get("strict", False)}
            if t.get("type", "function") == "function" and isinstance(t.get("function"), dict) else t for t in tools]


def message_to_expected(expert: Message) -> dict[str, Any]:
    """The expert assistant message -> ``expected_action`` (one call, a batch, or a message)."""
    calls = expert.get("tool_calls") or []
    if not calls:
        return {"type": "message", "content": _text(expert.get("content"))}
    items = []
    for j, call in enumerate(calls):
        fn = call.get("function") or {}
        item = {"type": "function_call", "name": fn.get("name"), "arguments": fn.get("arguments")}
        if call.get("id") != f"call_{j}":
            item["call_id"] = call.get("id")
        items.append(item)
    return items[0] if len(items) == 1 else {"type": "function_call_batch", "calls": items}


def _content_to_parts(content: Any, role: str | None, content_parts: bool) -> Any:
    text_type = "output_text" if role == "assistant" else "input_text"
    if isinstance(content, str):
        return [{"type": text_type, "text": content}] if content_parts else content
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                out.append({"type": text_type, "text": part.get("text", "")})
            elif isinstance(part, dict) and part.get("type") == "image_url":
                image = part.get("image_url") or {}
                new = {"type": "input_image", "image_url": image.get("url", "")}
                if image.get("detail") is not None:
                    new["detail"] = image["detail"]
                out.append(new)
            else:
                out.append(part)
        return out
    return "" if content is None else content


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") in TEXT_PARTS)
    return "" if content is None else json.dumps(content, ensure_ascii=False)
