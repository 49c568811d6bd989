"""Facts: the values an expert found out with its tools and told the user, and whether an answer gives them.

The ``facts`` success rule (:mod:`pivot_envs.success`) and the ``facts`` verifier of a final turn
(:mod:`pivot_envs.verifiers.final_turn`) both use these functions; they depend on the core types only.
A **fact** is a value that the expert wrote in an assistant text and that came from a tool result, not
from the task: typed values (dates, times, numbers, IDs: :func:`typed_values`) and names (a JSON
leaf of a tool result that looks like a name). The task's own values (the system prompt and every user
message) are not facts. :mod:`pivot_envs.success` documents the rule in full.
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterable, Sequence

from pivot_envs.types import Message, content_text


_MONTH_NAMES = ["january", "february", "march", "april", "may", "june", "july", "august", "september",
                "october", "november", "december"]
_MONTHS: dict[str, int] = {}
for _i, _name in enumerate(_MONTH_NAMES, start=1):
    _MONTHS[_name] = _i
    _MONTHS[_name[:3]] = _i
_MONTHS["sept"] = 9
_MONTH_RE = "|".join(sorted(_MONTHS, key=len, reverse=True))

_DATE_ISO = re.compile(r"(?<![\w-])(\d{4})-(\d{2})-(\d{2})(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?(?![\w-])")
_DATE_MD = re.compile(rf"\b({_MONTH_RE})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?\b(?:,?\s+\d{{4}}\b)?", re.IGNORECASE)
_DATE_DM = re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?({_MONTH_RE})\b\.?(?:,?\s+\d{{4}}\b)?", re.IGNORECASE)
_DATE_SLASH = re.compile(r"(?<![\w/])(\d{1,2})/(\d{1,2})(?:/(?:\d{4}|\d{2}))?(?![\w/])")
_TIME = re.compile(r"(?<![\w:])(\d{1,2}):(\d{2})(?::\d{2})?(?:\s*([ap])\.?\s?m\b\.?)?(?![\w:])|\b(\d{1,2})\s*([ap])\.?\s?m\b\.?",
                   re.IGNORECASE)
_GROUPED = re.compile(r"(?<![\w.,])\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\w,]|\.\d)")
_TOKEN = re.compile(r"[A-Za-z0-9]+(?:[-_./:@+][A-Za-z0-9]+)*")
_NUMBER = re.compile(r"^(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?$")
_NAME = re.compile(r"^[A-Z][A-Za-z'&.-]*(?:\s+[A-Za-z'&.-]+){1,5}$")


def _number(text: str) -> str:
    value = float(text.replace(",", ""))
    return "num:" + (f"{value:.6f}".rstrip("0").rstrip("."))


def _date(month: int, day: int) -> str | None:
    if 1 <= month <= 12 and 1 <= day <= 31:
        return f"date:{month:02d}-{day:02d}"
    return None


def _time(hour: int, minute: int, half: str | None) -> str | None:
    if half:
        if not 1 <= hour <= 12:
            return None
        hour = hour % 12 + (12 if half.lower() == "p" else 0)
    if 0 <= hour <= 23 and 0 <= minute <= 59:
        return f"time:{hour:02d}:{minute:02d}"
    return None


def typed_values(text: str) -> set[str]:
    """The dates, times, numbers and IDs in ``text``, normalised (see the module docstring)."""
    out: set[str] = set()
    if not text:
        return out

    def take(pattern: re.Pattern[str], make: Any, source: str) -> str:
        def sub(m: re.Match[str]) -> str:
            value = make(m)
            if value is None:
                return m.group(0)
            out.add(value)
            return " "
        return pattern.sub(sub, source)

    text = take(_DATE_ISO, lambda m: _date(int(m.group(2)), int(m.group(3))), text)
    text = take(_DATE_MD, lambda m: _date(_MONTHS[m.group(1).lower()], int(m.group(2))), text)
    text = take(_DATE_DM, lambda m: _date(_MONTHS[m.group(2).lower()], int(m.group(1))), text)
    text = take(_DATE_SLASH, lambda m: _date(int(m.group(1)), int(m.group(2))), text)
    text = take(_TIME, lambda m: (_time(int(m.group(1)), int(m.group(2)), m.group(3)) if m.group(1) is not None
                                  else _time(int(m.group(4)), 0, m.group(5))), text)
    text = take(_GROUPED, lambda m: _number(m.group(0)), text)
    for token in _TOKEN.findall(text):
        if _NUMBER.match(token):
            out.add(_number(token))
        elif any(c.isdigit() for c in token):
            out.add("id:" + token.lower())
    return out


def _fold(text: str) -> str:
    return " ".join(text.lower().split())


def _contains(haystack: str, needle: str) -> bool:
    """``needle`` occurs in ``haystack`` as whole words (both already folded)."""
    return bool(needle) and re.search(r"(?<!\w)" + re.escape(needle) + r"(?!\w)", haystack) is not None


def _leaves(value: Any) -> Iterable[Any]:
    if isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, list):
        for v in value:
            yield from _leaves(v)
    else:
        yield value


def tool_values(content: Any) -> tuple[set[str], set[str]]:
    """``(typed values, names)`` of one tool result: its JSON leaves, or its text."""
    text = content_text(content)
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, ValueError):
        return typed_values(text), set()
    typed: set[str] = set()
    names: set[str] = set()
    for leaf in _leaves(data):
        if isinstance(leaf, bool) or leaf is None:
            continue
        if isinstance(leaf, (int, float)):
            typed.add(_number(repr(float(leaf))) if not isinstance(leaf, int) else _number(str(leaf)))
            continue
        leaf = str(leaf)
        typed |= typed_values(leaf)
        stripped = " ".join(leaf.split())
        if len(stripped) <= 80 and _NAME.match(stripped):
            names.add(_fold(stripped))
    return typed, names


def _given(messages: Sequence[Message]) -> tuple[set[str], str]:
    """The typed values and the folded text that the task itself gives (system and user messages)."""
    text = " ".join(content_text(m.get("content")) for m in messages if m.get("role") in ("system", "user"))
    return typed_values(text), _fold(text)


def _stated(text: str, seen_typed: set[str], seen_names: set[str], given: set[str], given_text: str) -> set[str]:
    """The facts ``text`` states: tool-result values it repeats that the task did not give."""
    facts = (typed_values(text) & seen_typed) - given
    folded = _fold(text)
    return facts | {"name:" + n for n in seen_names if _contains(folded, n) and not _contains(given_text, n)}


def _absorb(message: Message, typed: set[str], names: set[str]) -> None:
    """Add the values of ``message`` to ``typed`` and ``names`` when it is a tool result."""
    if message.get("role") == "tool":
        t, n = tool_values(message.get("content"))
        typed |= t
        names |= n


def _tool_values_before(messages: Sequence[Message]) -> tuple[set[str], set[str]]:
    typed: set[str] = set()
    names: set[str] = set()
    for m in messages:
        _absorb(m, typed, names)
    return typed, names


def expert_facts(messages: Sequence[Message]) -> list[str]:
    """The facts the expert gave in ``messages`` (a whole trajectory): sorted ``kind:value`` strings,
    names as ``name:<folded text>`` (see the module docstring)."""
    given, given_text = _given(messages)
    seen_typed: set[str] = set()
    seen_names: set[str] = set()
    facts: set[str] = set()
    for m in messages:
        _absorb(m, seen_typed, seen_names)
        if m.get("role") == "assistant" and content_text(m.get("content")):
            facts |= _stated(content_text(m.get("content")), seen_typed, seen_names, given, given_text)
    return sorted(facts)


def answer_facts(context: Sequence[Message], answer: str) -> list[str]:
    """The facts that ``answer`` (one assistant text) states after the conversation ``context``: the
    same rule as :func:`expert_facts`, for one turn (a final-turn pivot's expert answer)."""
    return sorted(_stated(answer, *_tool_values_before(context), *_given(context))) if answer else []


def agent_answer(messages: Sequence[Message]) -> str:
    """The agent's answer for the ``facts`` rule: the text of every assistant message, joined."""
    return "\n".join(content_text(m.get("content")) for m in messages if m.get("role") == "assistant" and content_text(m.get("content")))


def facts_given(answer: str, facts: Sequence[str], min_recall: float = 1.0) -> tuple[bool, list[str]]:
    """Whether ``answer`` carries at least ``min_recall`` of ``facts``; returns ``(passed, missing facts)``."""
    if not facts:
        return True, []
    typed = typed_values(answer)
    folded = _fold(answer)
    missing = [f for f in facts if not (_contains(folded, f[5:]) if f.startswith("name:") else f in typed)]
    recall = 1.0 - len(missing) / len(facts)
    return recall >= min_recall - 1e-9, missing


def _calls(messages: Sequence[Message], skip_failed: bool) -> list[tuple[str, str]]:
    """``(name, canonical arguments)`` of the assistant tool calls in ``messages``."""
    failed: set[str] = set()
    if skip_failed:
        failed = {str(m.get("tool_call_id")) for m in messages
                  if m.get("role") == "tool" and content_text(m.get("content")).lstrip().startswith("Error")}
    out = []
    for m in messages:
        if m.get("role") != "assistant":
            continue
        for call in m.get("tool_calls") or []:
            if str(call.get("id")) in failed:
                continue
            fn = call.get("function") or {}
            args = fn.get("arguments") or "{}"
            try:
                args = json.dumps(json.loads(args) if isinstance(args, str) else args, sort_keys=True)
            except (json.JSONDecodeError, TypeError):
                args = str(args)
            out.append((str(fn.get("name", "")), args))
    return out


def calls_made(messages: Sequence[Message], expert_messages: Sequence[Message]) -> tuple[bool, list[str]]:
    """Whether the agent (``messages``) made every tool call the expert made that did not fail;
    returns ``(passed, the missing calls as NAME(ARGS))``."""
    made = set(_calls(messages, skip_failed=False))
    missing = [f"{name}({args})" for name, args in dict.fromkeys(_calls(expert_messages, skip_failed=True))
               if (name, args) not in made]
    return not missing, missing
