"""Facts: the values an expert found out with its tools and told the user, and whether an answer gives them.

The ``facts`` success rule (:mod:`pivot_envs.success`) and the ``facts`` verifier of a final turn
(:mod:`pivot_envs.verifiers.final_turn`) both use these functions; they depend on the core types only.

A **fact** is a value of an earlier tool result that the expert's answer repeats and that the task did
not give (the system prompt and every user message: repeating the user's own order id finds nothing out):

* ``date:`` / ``time:`` / ``num:`` / ``id:`` — typed values (:func:`typed_values`), from any tool result,
  compared by value (``$1,234.50`` = ``1234.5``, ``Feb 21st`` = ``2025-02-21``);
* ``value:`` — a JSON string leaf of a tool result, of any case (``seven@example.com``, ``blue``, ``dev``,
  ``/srv/app.yaml``, ``Copper Watering Can``), that the answer contains as whole words (case and
  spacing folded); leaves holding typed values are compared as those;
* ``word:`` — a token the answer takes from a plain-text tool result (shell output, a document) or from a
  long JSON string (> 80 characters): words, e-mails, paths, names, of any case; common English words
  (:data:`COMMON_WORDS`) are never facts.

An answer that repeats nothing a tool returned has no facts: a bare confirmation after writes
("Done: the theme is now dark." when the user asked for dark).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
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


def fold(text: str) -> str:
    """``text`` lower-cased with its whitespace collapsed (how answers and values are compared)."""
    return " ".join(text.lower().split())


def contains_words(haystack: str, needle: str) -> bool:
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


@dataclass
class ToolValues:
    """The values tool results returned: typed values, short JSON string leaves (folded), and tokens of
    plain texts (lower-cased)."""

    typed: set[str] = field(default_factory=set)
    values: set[str] = field(default_factory=set)
    words: set[str] = field(default_factory=set)

    def absorb(self, content: Any) -> None:
        """Add the values of one tool result: its JSON leaves, or its text."""
        text = content_text(content)
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, ValueError):
            self._text(text)
            return
        for leaf in _leaves(data):
            if isinstance(leaf, bool) or leaf is None:
                continue
            if isinstance(leaf, (int, float)):
                self.typed.add(_number(repr(float(leaf))) if not isinstance(leaf, int) else _number(str(leaf)))
                continue
            self._leaf(str(leaf))

    def without(self, said: "Said") -> "ToolValues":
        """These values less the ones the conversation had said already (a tool echoing back the order id
        it was asked about finds nothing out)."""
        return ToolValues({v for v in self.typed if v not in said.typed},
                          {v for v in self.values if not contains_words(said.text, v)},
                          {w for w in self.words if w not in said.tokens})

    def update(self, other: "ToolValues") -> None:
        self.typed |= other.typed
        self.values |= other.values
        self.words |= other.words

    def _text(self, text: str) -> None:
        self.typed |= typed_values(text)
        self.words |= _tokens(text)

    def _leaf(self, leaf: str) -> None:
        stripped = " ".join(leaf.split())
        if len(stripped) > MAX_VALUE_CHARS:
            self._text(stripped)
            return
        typed = typed_values(stripped)
        self.typed |= typed
        if not typed and len(stripped) >= 2 and fold(stripped) not in COMMON_WORDS:
            self.values.add(fold(stripped))


MAX_VALUE_CHARS = 80
"""A JSON string leaf longer than this is a text (its tokens are the values), not one value."""

COMMON_WORDS = frozenset("""
a about above after again all also am an and any are as at be been before being below between both but by
can could did do does doing done down during each else few for from further had has have having he her here
hers him his how i if in into is it its itself just may me might more most must my no nor not now of off on
once only or other our ours out over own same shall she should so some such than that the their them then
there these they this those through to too under until up upon us very was we were what when where which
while who whom why will with would yes you your yours
answer answers result results found find total file files line lines entry entries item items
value values key keys name names number numbers count counts unique sorted done ok okay please thanks thank
one two three four five six seven eight nine ten first second last new old now current here there
""".split())
"""Words that are never a fact by themselves: function words and the words any answer is made of."""


def tool_values(content: Any) -> ToolValues:
    """The values of one tool result (:class:`ToolValues`)."""
    out = ToolValues()
    out.absorb(content)
    return out


def _all_tokens(text: str) -> set[str]:
    """Every lower-cased token of ``text``, and a path's components (``frames.bin`` of ``archive/large/frames.bin``)."""
    out: set[str] = set()
    for token in (m.lower() for m in _TOKEN.findall(text)):
        out.add(token)
        if "/" in token:
            out.update(token.split("/"))
    return out


def _tokens(text: str) -> set[str]:
    """The tokens of ``text`` that can be facts (:func:`_all_tokens`): no common words, no one-letter tokens,
    and no tokens with a digit (those are typed values)."""
    return {t for t in _all_tokens(text) if len(t) >= 2 and t not in COMMON_WORDS and not any(c.isdigit() for c in t)}


def content_words(text: str) -> set[str]:
    """What a text says, without the words any text is made of: its typed values and its tokens that are not
    common words (:data:`COMMON_WORDS`), lower-cased."""
    return typed_values(text) | {"word:" + t for t in _tokens(text)}


def coverage(answer: str, expected: str) -> tuple[float, list[str]]:
    """The share of ``expected``'s content words (:func:`content_words`) that ``answer`` carries, and the
    missing ones; 1.0 when ``expected`` has none."""
    want = content_words(expected)
    if not want:
        return 1.0, []
    have = content_words(answer) | number_words(answer)
    missing = sorted(want - have)
    return 1.0 - len(missing) / len(want), missing


@dataclass
class _Given:
    """What the task itself says (system and user messages): typed values, folded text, tokens."""

    typed: set[str]
    text: str
    tokens: set[str]


def _given(messages: Sequence[Message]) -> _Given:
    text = " ".join(content_text(m.get("content")) for m in messages if m.get("role") in ("system", "user"))
    return _Given(typed_values(text), fold(text), _all_tokens(text))


def _stated(text: str, seen: ToolValues, given: _Given) -> set[str]:
    """The facts ``text`` states: tool-result values it repeats that the task did not give."""
    facts = {v for v in typed_values(text) & seen.typed if v not in given.typed}
    folded = fold(text)
    facts |= {"value:" + v for v in seen.values if contains_words(folded, v) and not contains_words(given.text, v)}
    facts |= {"word:" + w for w in _tokens(text) & seen.words if w not in given.tokens}
    return facts


@dataclass
class Said:
    """What a conversation has said so far, outside tool results: texts and tool-call arguments."""

    typed: set[str] = field(default_factory=set)
    text: str = ""
    tokens: set[str] = field(default_factory=set)

    def add(self, text: str) -> None:
        self.typed |= typed_values(text)
        self.text += " " + fold(text)
        self.tokens |= _all_tokens(text)


def _read(messages: Sequence[Message], on_assistant_text: Any = None) -> ToolValues:
    """The values tool results found out in ``messages``: each result's values that nothing said before it
    (texts, tool-call arguments); ``on_assistant_text(text, seen)`` is called at every assistant text."""
    seen, said = ToolValues(), Said()
    for m in messages:
        if m.get("role") == "tool":
            seen.update(tool_values(m.get("content")).without(said))
            continue
        text = content_text(m.get("content"))
        if text and m.get("role") == "assistant" and on_assistant_text is not None:
            on_assistant_text(text, seen)
        for part in conversation_text([m]):
            said.add(part)
    return seen


def returned_values(messages: Sequence[Message]) -> ToolValues:
    """The values the tool results of ``messages`` found out (each result's values that nothing said before it)."""
    return _read(messages)


def expert_facts(messages: Sequence[Message]) -> list[str]:
    """The facts the expert gave in ``messages`` (a whole trajectory): sorted ``kind:value`` strings (see
    the module docstring); a fact counts from the first assistant text after the tool result it repeats."""
    given = _given(messages)
    facts: set[str] = set()
    _read(messages, lambda text, seen: facts.update(_stated(text, seen, given)))
    return sorted(facts)


def answer_facts(context: Sequence[Message], answer: str) -> list[str]:
    """The facts that ``answer`` (one assistant text) states after the conversation ``context``: the
    same rule as :func:`expert_facts`, for one turn (a final-turn pivot's expert answer)."""
    return sorted(_stated(answer, returned_values(context), _given(context))) if answer else []


_SPECIFIC = re.compile(r"[@/_:]|^[a-z0-9-]{2,}\.[a-z]{1,5}$")
"""A token that names something specific: an e-mail, a path, an identifier, a key, a file name."""
_DIGITS = re.compile(r"\d+(?:\.\d+)?")


def specific_values(text: str) -> set[str]:
    """The values ``text`` states that name something specific: typed values (dates, times, numbers, IDs)
    and tokens that are e-mails, paths, identifiers, keys or file names (lower-cased ``text:`` entries)."""
    out = typed_values(text)
    for token in (m.lower() for m in _TOKEN.findall(text)):
        if _SPECIFIC.search(token) and not any(c.isdigit() for c in token):
            out.add("text:" + token)
    return out


def ungrounded(answer: str, sources: Sequence[str]) -> list[str]:
    """The specific values of ``answer`` (:func:`specific_values`) that none of ``sources`` states: what an
    answer claims that nothing in the conversation (nor the expert's answer) gave. An ID is grounded by the
    same ID, or by its one number (``30-day`` by ``30 days``); a path by any text that contains it."""
    text = "\n".join(sources)
    typed, folded = typed_values(text), fold(text)
    out = []
    for value in sorted(specific_values(answer)):
        kind, _, body = value.partition(":")
        if value in typed or (kind in ("text", "id") and contains_words(folded, body)):
            continue
        if kind == "id":
            numbers = _DIGITS.findall(body)
            if len(numbers) == 1 and _number(numbers[0]) in typed:
                continue
        out.append(body if kind == "text" else value)
    return out


def conversation_text(messages: Sequence[Message]) -> list[str]:
    """Every text of a conversation, tool-call arguments included (what an answer may take values from)."""
    out = []
    for m in messages:
        out.append(content_text(m.get("content")))
        for call in m.get("tool_calls") or []:
            fn = call.get("function") or {}
            args = fn.get("arguments")
            out.append(args if isinstance(args, str) else json.dumps(args))
    return out


def agent_answer(messages: Sequence[Message]) -> str:
    """The agent's answer for the ``facts`` rule: the text of every assistant message, joined."""
    return "\n".join(content_text(m.get("content")) for m in messages if m.get("role") == "assistant" and content_text(m.get("content")))


NUMBER_WORDS = {word: value for value, word in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen "
    "eighteen nineteen twenty".split())}
NUMBER_WORDS.update({"thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90,
                     "hundred": 100, "a dozen": 12, "dozen": 12})
_TENS = ("twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
_NUMBER_WORD = re.compile(r"\b(?:(" + "|".join(_TENS) + r")[- ](one|two|three|four|five|six|seven|eight|nine)|("
                          + "|".join(sorted(NUMBER_WORDS, key=len, reverse=True)) + r"))\b", re.IGNORECASE)


def number_words(text: str) -> set[str]:
    """The numbers ``text`` writes as words (``three``, ``twenty-one``), as typed values (``num:3``): an answer that
    says "three files" gives the fact ``3``. Only for recognising facts: a word never states a value by itself
    (``one of the files`` names no number), so :func:`ungrounded` does not read them."""
    out = set()
    for match in _NUMBER_WORD.finditer(text or ""):
        if match.group(1):
            value = NUMBER_WORDS[match.group(1).lower()] + NUMBER_WORDS[match.group(2).lower()]
        else:
            value = NUMBER_WORDS[match.group(3).lower()]
        out.add(_number(str(value)))
    return out


def facts_given(answer: str, facts: Sequence[str], min_recall: float = 1.0) -> tuple[bool, list[str]]:
    """Whether ``answer`` carries at least ``min_recall`` of ``facts`` (numbers may be written as words); returns
    ``(passed, missing facts)``."""
    if not facts:
        return True, []
    typed = typed_values(answer) | number_words(answer)
    folded = fold(answer)
    tokens = _all_tokens(answer)

    def given(fact: str) -> bool:
        kind, _, value = fact.partition(":")
        if kind in ("value", "name"):  # name: the facts of rows written before values of any case counted
            return contains_words(folded, value)
        if kind == "word":
            return value in tokens
        return fact in typed

    missing = [f for f in facts if not given(f)]
    recall = 1.0 - len(missing) / len(facts)
    return recall >= min_recall - 1e-9, missing


def call_keys(messages: Sequence[Message], skip_failed: bool = False) -> list[tuple[str, str]]:
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
    made = set(call_keys(messages, skip_failed=False))
    missing = [f"{name}({args})" for name, args in dict.fromkeys(call_keys(expert_messages, skip_failed=True))
               if (name, args) not in made]
    return not missing, missing
