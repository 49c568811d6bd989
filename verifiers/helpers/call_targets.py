"""What a tool call acts on, for ``tool_name``'s ``same_target``: the file, the lines or the search term.

The paper's SWE verifier asks for the same tool only; two calls of one category may still act on different
things (``open_file`` of another module, an ``edit`` of other lines, a search for another name). With
``same_target`` a call must also act on what the expert's acted on, read from its arguments:

* ``path``: ``path``, ``filename``, ``file_name`` or ``file`` (compared without a leading ``./``; a bare file
  name matches a path that ends with it);
* ``lines``: ``start_line`` .. ``end_line``, or ``line_number`` (each end within :data:`LINE_SLACK` lines of the
  expert's: an edit of lines 14-43 is not the expert's edit of line 43);
* ``term``: ``search_term``, ``query`` or ``pattern`` (the same words, rapidfuzz token-set ratio >= 85 after
  lower-casing).

A target the expert's call names must be named by the action's call too; of those it does not name, only a file is
refused, from another tool, unless it is the file the conversation last named (``open_file`` of another file where
the expert scrolled the open one is wrong; of the open one, right); the rest are free. A shell call
(``bash: grep -n x f`` for ``search_file``) is judged by its program, as ``tool_name`` keys it. What an edit writes
is not compared: that is for the tests to tell.
"""

from __future__ import annotations

import json
from typing import Any

from rapidfuzz import fuzz

PATH_KEYS = ("path", "filename", "file_name", "file")
TERM_KEYS = ("search_term", "query", "pattern")
TERM_THRESHOLD = 85
LINE_SLACK = 2


def call_targets(arguments: dict[str, Any]) -> dict[str, Any]:
    """The targets named by a call's arguments: ``{"path": str, "lines": (start, end), "term": str}`` (those present)."""
    out: dict[str, Any] = {}
    path = next((arguments[k] for k in PATH_KEYS if isinstance(arguments.get(k), str) and arguments[k].strip()), None)
    if path is not None:
        out["path"] = _path(path)
    lines = _lines(arguments)
    if lines is not None:
        out["lines"] = lines
    term = next((arguments[k] for k in TERM_KEYS if isinstance(arguments.get(k), str) and arguments[k].strip()), None)
    if term is not None:
        out["term"] = " ".join(term.lower().split())
    return out


def last_path(messages: list[dict[str, Any]]) -> str | None:
    """The file the last assistant call of ``messages`` that names one acts on (the open file), or None."""
    for message in reversed(messages):
        for call in reversed(message.get("tool_calls") or []) if message.get("role") == "assistant" else []:
            try:
                args = json.loads((call.get("function") or {}).get("arguments") or "{}")
            except (json.JSONDecodeError, TypeError):
                continue
            path = call_targets(args).get("path") if isinstance(args, dict) else None
            if path:
                return path
    return None


def _path(value: str) -> str:
    value = value.strip()
    while value.startswith("./"):
        value = value[2:]
    return value


def _lines(arguments: dict[str, Any]) -> tuple[int, int] | None:
    def number(key: str) -> int | None:
        value = arguments.get(key)
        if isinstance(value, bool):
            return None
        try:
            return int(value) if value is not None else None
        except (TypeError, ValueError):
            return None
    start, end, line = number("start_line"), number("end_line"), number("line_number")
    if start is not None:
        return (start, end if end is not None else start)
    return (line, line) if line is not None else None


def target_difference(expert: dict[str, Any], action: dict[str, Any], same_tool: bool = False,
                      open_file: str | None = None) -> str | None:
    """Why ``action``'s targets differ from ``expert``'s (see the module docstring), or None. ``same_tool``: both
    calls are to one tool (then a file the expert's call does not name is an option of it, ``run_tests(path)``);
    ``open_file``: the file the conversation last named (the one ``scroll_down`` acts on)."""
    for kind, want in expert.items():
        got = action.get(kind)
        if got is None:
            return f"the call names no {kind} where the expert's names {want!r}"
        if kind == "path" and not (got == want or got.endswith("/" + want) or want.endswith("/" + got)):
            return f"another file: {got!r} where the expert's call acts on {want!r}"
        if kind == "lines" and (abs(got[0] - want[0]) > LINE_SLACK or abs(got[1] - want[1]) > LINE_SLACK):
            return f"other lines: {got[0]}-{got[1]} where the expert's call acts on {want[0]}-{want[1]}"
        if kind == "term" and fuzz.token_set_ratio(got, want) < TERM_THRESHOLD:
            return f"another search: {got!r} where the expert searched {want!r}"
    if "path" in action and "path" not in expert and not same_tool and action["path"] != open_file:
        return f"acts on {action['path']!r} where the expert's call names no file"
    return None
