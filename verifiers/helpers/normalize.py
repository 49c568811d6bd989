"""Normalisation shared by the verifiers: string normalisers, parsed tool calls, a per-pivot cache.

String normalisers are named so that configs stay plain JSON::

    pipeline = normalizer_pipeline(["lower", "strip_punctuation", "collapse_whitespace"])
    pipeline("  Hello,   World! ")  # -> "hello world"

Names (applied in the order given):

- ``lower``: Unicode case folding (``str.casefold``).
- ``strip``: remove surrounding whitespace.
- ``collapse_whitespace``: every run of whitespace becomes one space, ends stripped.
- ``remove_whitespace``: drop all whitespace.
- ``strip_punctuation``: delete punctuation characters (ASCII and the common
  Unicode ones: quotes, dashes, ellipses, CJK and full-width marks). Symbols such
  as ``$ + < = > ^ ` | ~`` are kept because they carry meaning in commands.
- ``strip_quotes``: remove one pair of matching surrounding quotes (``'x'``, ``"x"``, `` `x` ``).
- ``remove_articles``: drop the English words *a*, *an*, *the*.
- ``nfkc``: Unicode NFKC normalisation (full-width letters, ligatures...).
- ``shell_words``: a shell command's canonical spelling, its meaning kept (quoting and spacing between
  words only: :mod:`~pivot_envs.verifiers.helpers.shell_words`).
"""

from __future__ import annotations

import json
import re
import string
import unicodedata
from dataclasses import dataclass
from typing import Any, Callable, Generic, Sequence, TypeVar

from pivot_envs.types import Message, Pivot
from pivot_envs.verifiers.helpers.shell_words import shell_words

Normalizer = Callable[[str], str]

_ARTICLES = re.compile(r"\b(?:a|an|the)\b", re.IGNORECASE)
_KEPT_SYMBOLS = set("$+<=>^`|~")


def _punctuation_table() -> dict[int, None]:
    """Deletion table for punctuation (Unicode category P*), built from a few small blocks."""
    table = {ord(c): None for c in string.punctuation if c not in _KEPT_SYMBOLS}
    for lo, hi in ((0x80, 0x100), (0x2000, 0x2070), (0x3000, 0x3040), (0xFF00, 0xFF66)):
        for cp in range(lo, hi):
            if unicodedata.category(chr(cp)).startswith("P"):
                table[cp] = None
    return table


_PUNCT_TABLE = _punctuation_table()
_ASCII_PUNCT = bytes(c for c in _PUNCT_TABLE if c < 128)


def _strip_punctuation(text: str) -> str:
    if text.isascii():  # bytes.translate is ~6x faster than str.translate with a dict
        return text.encode("ascii").translate(None, _ASCII_PUNCT).decode("ascii")
    return text.translate(_PUNCT_TABLE)


def _strip_quotes(text: str) -> str:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"`":
        return text[1:-1]
    return text


_BFCL_DROPPED = re.compile(r"[ ,./\-_*^]")


def _bfcl(text: str) -> str:
    """BFCL's AST checker convention for string values: drop spaces and ``,./-_*^``, lower-case,
    single quotes as double quotes (so ``"April 1, 2024"`` equals ``"april 1 2024"``)."""
    return _BFCL_DROPPED.sub("", text).lower().replace("'", '"')


NORMALIZERS: dict[str, Normalizer] = {
    "lower": str.casefold,
    "strip": str.strip,
    "collapse_whitespace": lambda s: " ".join(s.split()),
    "remove_whitespace": lambda s: "".join(s.split()),
    "strip_punctuation": _strip_punctuation,
    "strip_quotes": _strip_quotes,
    "remove_articles": lambda s: _ARTICLES.sub("", s),
    "nfkc": lambda s: unicodedata.normalize("NFKC", s),
    "bfcl": _bfcl,
    "shell_words": shell_words,
}
"""The named string normalisers (a registry: read it, do not mutate it at run time)."""


def check_normalizers(names: Sequence[str], field_name: str = "normalizers") -> list[str]:
    """Validate normaliser names; raises ValueError naming the field and the known names."""
    if isinstance(names, str):
        raise ValueError(f"{field_name} must be a list of normaliser names, got the string {names!r}; write [{names!r}]")
    unknown = [n for n in names if n not in NORMALIZERS]
    if unknown:
        raise ValueError(f"{field_name}: unknown normaliser(s) {unknown}; known: {', '.join(sorted(NORMALIZERS))}")
    return list(names)


def normalizer_pipeline(names: Sequence[str]) -> Normalizer:
    """One function applying the named normalisers in order (identity for an empty list)."""
    funcs = tuple(NORMALIZERS[n] for n in check_normalizers(names))
    if not funcs:
        return _identity
    if len(funcs) == 1:
        return funcs[0]

    def pipeline(text: str) -> str:
        for f in funcs:
            text = f(text)
        return text

    return pipeline


def _identity(text: str) -> str:
    return text


def normalize_text(text: str, names: Sequence[str]) -> str:
    """Apply the named normalisers to ``text`` (convenience; build a pipeline for hot loops)."""
    return normalizer_pipeline(names)(text)


# --------------------------------------------------------------------------- tool calls


class BadArguments:
    """Tool-call arguments that are not a JSON object: keeps the raw text and why."""

    __slots__ = ("raw", "why")

    def __init__(self, raw: str, why: str) -> None:
        self.raw = raw
        self.why = why

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BadArguments) and other.raw.strip() == self.raw.strip()

    def __hash__(self) -> int:
        return hash(self.raw.strip())

    def __repr__(self) -> str:
        return f"BadArguments({self.raw!r})"


def parse_arguments(arguments: Any) -> dict[str, Any] | BadArguments:
    """Arguments of a tool call as a dict; a :class:`BadArguments` when not a JSON object.

    An empty or all-whitespace string means no arguments (``{}``), as some
    models emit it for tools without parameters.
    """
    if isinstance(arguments, dict):
        return arguments
    if arguments is None:
        return {}
    if not isinstance(arguments, str):
        return BadArguments(str(arguments), f"arguments must be a JSON string, got {type(arguments).__name__}")
    if not arguments.strip():
        return {}
    try:
        value = json.loads(arguments)
    except (json.JSONDecodeError, RecursionError) as exc:
        return BadArguments(arguments, f"arguments are not valid JSON ({exc})")
    if not isinstance(value, dict):
        return BadArguments(arguments, f"arguments must be a JSON object, got {_json_type(value)}")
    return value


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def message_calls(message: Message) -> list[tuple[str, Any]]:
    """``(name, raw arguments)`` of each tool call of an assistant message, in order."""
    out = []
    for call in message.get("tool_calls") or []:
        if not isinstance(call, dict):
            continue
        fn = call.get("function", call)
        if not isinstance(fn, dict):
            continue
        out.append((str(fn.get("name") or ""), fn.get("arguments")))
    return out


def message_content(message: Message) -> str:
    """The text content of a message ('' when absent or not a string)."""
    content = message.get("content")
    return content if isinstance(content, str) else ""


_CANONICAL = json.JSONEncoder(sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=repr)


def canonical_json(value: Any) -> str:
    """Compact JSON with sorted keys: equal values give equal text."""
    return _CANONICAL.encode(value)


def canonical_calls(message: Message) -> str:
    """The calls of a message as canonical JSON, sorted so that call order does not matter.

    Arguments that are not a JSON object are kept as their raw text.
    """
    items = sorted(_canonical_call(name, raw) for name, raw in message_calls(message))
    return "[" + ",".join(items) + "]"


def _canonical_call(name: str, raw: Any) -> str:
    args = parse_arguments(raw)
    return _CANONICAL.encode({"arguments": args.raw if isinstance(args, BadArguments) else args, "name": name})


def tool_parameters(pivot: Pivot, name: str) -> dict[str, Any] | None:
    """The JSON Schema of tool ``name``'s parameters at ``pivot``, or None when unknown."""
    tool = pivot.tool_spec(name)
    if tool is None:
        return None
    fn = tool.get("function", tool)
    params = fn.get("parameters") if isinstance(fn, dict) else None
    return params if isinstance(params, dict) else None


# --------------------------------------------------------------------------- per-pivot cache

T = TypeVar("T")


@dataclass
class _Entry(Generic[T]):
    expert: Message
    tools: list
    value: T


class PivotCache(Generic[T]):
    """A small bounded cache of values derived from a pivot's expert action and tools.

    Keyed by ``pivot.id``; an entry is reused only while the pivot still holds
    the very same ``expert`` and ``tools`` objects (identity check), so two
    pivots that share an id but not their content never see each other's
    entry. When full, the cache is emptied (cheap, thread-safe under the GIL,
    and bounded). Pickling drops the entries.
    """

    def __init__(self, maxsize: int = 4096) -> None:
        self.maxsize = maxsize
        self._data: dict[str, _Entry[T]] = {}

    def get(self, pivot: Pivot, build: Callable[[Pivot], T]) -> T:
        """The cached value for ``pivot``, computing it with ``build(pivot)`` on a miss."""
        entry = self._data.get(pivot.id)
        if entry is not None and entry.expert is pivot.expert and entry.tools is pivot.tools:
            return entry.value
        value = build(pivot)
        if len(self._data) >= self.maxsize:
            self._data.clear()
        self._data[pivot.id] = _Entry(pivot.expert, pivot.tools, value)
        return value

    def __len__(self) -> int:
        return len(self._data)

    def __getstate__(self) -> dict[str, Any]:
        return {"maxsize": self.maxsize}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.maxsize = state["maxsize"]
        self._data = {}
