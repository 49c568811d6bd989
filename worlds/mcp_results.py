"""How an MCP tool result reads as text: the one rendering that episodes, recorded tasks and replays share.

An MCP server sends a tool's return value as content blocks and, when the tool has an output schema, as
``structuredContent`` too. The SDKs do not send the same blocks for the same value:

* the MCP SDK (FastMCP in 1.x, MCPServer in 2.x): a list as one text block per item (a list of pairs
  flattened), an empty list or ``None`` as no block at all, a text as it is, anything else as JSON;
* ``fastmcp`` (PyPI): a list as one JSON text block, an empty list as no block;
* with an output schema, both: ``structuredContent`` holding an object as it is, anything else wrapped as
  ``{"result": VALUE}``.

A recorder that runs the tools itself (tau2-bench) writes a text as it is and anything else as the JSON text
of the value. :func:`result_text` makes one text of a result (what :class:`~pivot_envs.worlds.mcp.MCPWorld`
returns, what :func:`~pivot_envs.formats.tau2_tasks.read_tau2_tasks` records, what an episode shows):

* ``result_path``: the value at that key path of ``structuredContent`` (else of the text parsed as JSON);
* an error: its text, the SDK's wrapper of a raised exception (``Error executing tool NAME: ``,
  ``Error calling tool 'NAME': ``) replaced by ``Error: `` (what the world's own refusals and a recorder write);
* ``structuredContent`` ``{"result": VALUE}`` whose text blocks carry the same value (:func:`as_sent`): the
  JSON text of ``VALUE`` (a text as it is), so ``[]`` for no block and ``[x]`` for one;
* else the text blocks: several that are each JSON as their JSON array, else joined by newlines; any other
  block as a ``[TYPE content]`` placeholder (a resource's text as that text).

A server that sends no structured result loses part of the value on the way, and nothing at the client can
bring it back. :func:`as_sent` is a result's text as such a server would send its value; compared through it
(:meth:`MCPWorld.normalize_output <pivot_envs.worlds.mcp.MCPWorld.normalize_output>`), a recorded ``[]`` and
a replayed nothing are equal, as are ``[x]`` and ``x``. What it cannot tell apart is what such a server does
not send: ``[]``, ``null`` and an empty text; ``[x]`` and ``x``; a list of lists and the flat list; a list of
texts and those texts on separate lines.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pivot_envs.worlds.base import normalize_output


def result_text(data: Mapping[str, Any], tool: str = "", result_path: Sequence[str] | None = None) -> tuple[str, bool]:
    """``(text, error)`` of one ``tools/call`` result in its wire form (``CallToolResult.model_dump(by_alias=True,
    mode="json")``): see the module docstring for the rules; ``tool`` is the called tool's name."""
    blocks = list(data.get("content") or [])
    error = bool(data.get("isError"))
    texts = [_block_text(block) for block in blocks]
    content = join_blocks(texts) if all(b.get("type") == "text" for b in blocks) else "\n".join(texts)
    structured = data.get("structuredContent")
    if result_path:
        found, value = _at_path(structured, result_path)
        if not found:
            found, value = _at_path(maybe_json(content), result_path)
        if found:
            return value_text(value), error
    if error:
        return _error_text(content, tool), True
    if isinstance(structured, Mapping) and set(structured) == {"result"}:
        wrapped = value_text(structured["result"])
        if same_as_sent(wrapped, content):
            return wrapped, False
    return content, False


def value_text(value: Any) -> str:
    """A value as a recorder writes it: a text as it is, anything else its JSON text."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def join_blocks(texts: Sequence[str]) -> str:
    """Text blocks as one text: several that are each JSON are the JSON array of them (an SDK sends a list as
    one block per item), else the blocks joined by newlines."""
    if len(texts) > 1:
        try:
            return json.dumps([json.loads(t) for t in texts], ensure_ascii=False)
        except json.JSONDecodeError:
            pass
    return "\n".join(texts)


def value_blocks(value: Any) -> list[str]:
    """The text blocks the MCP SDK sends for a tool's return value when it sends no structured result: none for
    ``None``, one per item of a list (nested lists flattened), a text as it is, anything else as JSON."""
    if value is None:
        return []
    if isinstance(value, list):
        return [block for item in value for block in value_blocks(item)]
    return [value_text(value)]


def as_sent(text: str) -> str:
    """``text`` (a recorded or returned result) as the world reads the blocks a server without structured results
    sends for its value: JSON text parsed and rendered by :func:`value_blocks` + :func:`join_blocks`; other text
    as it is."""
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return text
    return join_blocks(value_blocks(value))


def same_as_sent(a: str, b: str) -> bool:
    """Whether two result texts hold the same value as an MCP server without structured results sends it
    (:func:`as_sent`, then the worlds' comparison: canonical JSON, else whitespace collapsed)."""
    return normalize_output(as_sent(a)) == normalize_output(as_sent(b))


_SDK_ERROR = "^(?:Error executing tool {name}|Error calling tool '{name}'): "


def _error_text(text: str, tool: str) -> str:
    """An error result's text, the SDK's wrapper of a raised exception replaced by ``Error: ``."""
    if not tool:
        return text
    stripped = re.sub(_SDK_ERROR.format(name=re.escape(tool)), "", text, count=1)
    return text if stripped == text else f"Error: {stripped}"


def _block_text(block: Mapping[str, Any]) -> str:
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text", ""))
    resource = block.get("resource")
    if kind == "resource" and isinstance(resource, Mapping) and "text" in resource:
        return str(resource["text"])
    return f"[{kind} content]"


def _at_path(value: Any, path: Sequence[str]) -> tuple[bool, Any]:
    for key in path:
        if not isinstance(value, Mapping) or key not in value:
            return False, None
        value = value[key]
    return True, value


def maybe_json(text: str) -> Any:
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return text
