"""Parse what a policy emitted into an :class:`~pivot_envs.types.Action`.

Accepted forms, tried in order:

1. an assistant message dict (OpenAI ``tool_calls`` and/or ``content``);
2. text with Hermes/Qwen blocks ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``
   (several per message; the text outside the blocks becomes ``content``);
3. bare JSON (optionally inside a ```json fence): one call ``{"name", "arguments"}``,
   a list of calls, ``{"tool_calls": [...]}`` or ``{"function": {...}}``;
4. anything else: a plain-content message. Unparseable text is a valid action
   that simply fails tool verifiers.

Tool-call ``arguments`` are always stored as a JSON *string* (the OpenAI wire
format); a string that is not valid JSON is kept verbatim so that verifiers
can fail it with a reason.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pivot_envs.types import Action, Message

_HERMES_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


def parse_action(raw: str | Message | Action) -> Action:
    """Turn raw model output (text or an assistant message dict) into an Action."""
    if isinstance(raw, Action):
        return raw
    if isinstance(raw, dict):
        return Action(text=message_text(raw), message=normalize_message(raw))
    if not isinstance(raw, str):
        raw = "" if raw is None else str(raw)
    calls, content = _parse_text(raw)
    message: Message = {"role": "assistant", "content": content if content else None}
    if calls:
        message["tool_calls"] = calls
    elif message["content"] is None:
        message["content"] = ""
    return Action(text=raw, message=message)


def stray_text(text: str) -> str:
    """What a Hermes-format turn carries from its first ``<tool_call>`` on that is no call: text between or after
    the calls (a stray closing tag, tool output the model invented), a block that does not parse. ``""`` for a turn
    that ends with its calls, and for text without ``<tool_call>`` (other formats parse whole or not at all)."""
    start = text.find("<tool_call>")
    if start < 0:
        return ""
    rest = text[start:]
    stray = [m.group(0) for m in _HERMES_BLOCK.finditer(rest) if _call_from_json_text(m.group(1), 0) is None]
    stray.append(_HERMES_BLOCK.sub("", rest))
    return " ".join(" ".join(s.split()) for s in stray if s.strip())


def normalize_message(message: Message) -> Message:
    """Copy an assistant message into canonical form (string arguments, ids, types)."""
    out: Message = {"role": "assistant", "content": message.get("content")}
    calls = message.get("tool_calls") or []
    if calls:
        out["tool_calls"] = [_tool_call(c, i) for i, c in enumerate(calls) if isinstance(c, dict)]
    if not out.get("tool_calls"):
        out.pop("tool_calls", None)
        if out["content"] is None:
            out["content"] = ""
    return out


def message_text(message: Message) -> str:
    """A text rendering of an assistant message in the Hermes format (content, then calls)."""
    parts: list[str] = []
    content = message.get("content")
    if isinstance(content, str) and content:
        parts.append(content)
    for call in message.get("tool_calls") or []:
        fn = call.get("function", call) if isinstance(call, dict) else {}
        args = fn.get("arguments", {})
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except json.JSONDecodeError:
                pass
        body = json.dumps({"name": fn.get("name"), "arguments": args}, ensure_ascii=False)
        parts.append(f"<tool_call>\n{body}\n</tool_call>")
    return "\n".join(parts)


def _parse_text(text: str) -> tuple[list[dict[str, Any]], str]:
    if "<tool_call>" in text:
        calls = []
        for i, block in enumerate(_HERMES_BLOCK.findall(text)):
            call = _call_from_json_text(block, i)
            if call is not None:
                calls.append(call)
        content = _HERMES_BLOCK.sub("", text).strip()
        return calls, content
    stripped = text.strip()
    fenced = _FENCE.match(stripped)
    candidate = fenced.group(1) if fenced else stripped
    if candidate[:1] in "{[":
        try:
            data = json.loads(candidate)
        except json.JSONDecodeError:
            return [], text
        calls = _calls_from_json(data)
        if calls:
            return calls, ""
    return [], text


def _call_from_json_text(block: str, index: int) -> dict[str, Any] | None:
    try:
        data = json.loads(block)
    except json.JSONDecodeError:
        return None
    calls = _calls_from_json(data, start=index)
    return calls[0] if calls else None


def _calls_from_json(data: Any, start: int = 0) -> list[dict[str, Any]]:
    if isinstance(data, dict) and isinstance(data.get("tool_calls"), list):
        data = data["tool_calls"]
    items = data if isinstance(data, list) else [data]
    calls = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            return []
        fn = item.get("function", item)
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            return []
        calls.append(_tool_call(item, start + i))
    return calls


def _tool_call(call: dict[str, Any], index: int) -> dict[str, Any]:
    fn = call.get("function", call)
    args = fn.get("arguments", fn.get("parameters", {}))
    if not isinstance(args, str):
        args = json.dumps(args, ensure_ascii=False)
    return {
        "id": str(call.get("id") or f"call_{index}"),
        "type": "function",
        "function": {"name": str(fn.get("name", "")), "arguments": args},
    }
