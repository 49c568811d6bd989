"""What an answer adds to the expert's: the part of ``grounded`` that looks past recall.

An answer that carries every fact of the expert's answer can still be wrong by what it adds. The ``facts``
verifier (``grounded``, :mod:`pivot_envs.verifiers.final_turn`) and the stop rules (:mod:`pivot_envs.verifiers.stop`)
fail an answer, where the expert's answer does not do the same, that

* **retracts or contradicts** what it said (``Correction: that is wrong, ignore the above``, ``scratch that``);
* **hedges** (``maybe``, ``I think``, ``it might be something else``) or offers candidates (``3 or 4``,
  ``Velat River or Saris River``);
* **claims an action nothing supports**: a past action (``deleted``, ``copied``, ``refunded``) of a kind neither the
  expert's answer nor the conversation's calls did; or a first-person one (``I also deleted the old backups``) whose
  object nothing in the conversation names, or that it adds to what the expert's answer reports (``also``,
  ``additionally``, ``as well``);
* **names someone or something nothing mentions**: a capitalised name (not opening a sentence, not a weekday or a
  month) that neither the conversation nor the expert's answer contains (another customer's name);
* **pastes tool output**: two or more of its lines are lines of the tools' outputs verbatim, and they are all its lines,
  or three or more and half of them;
* **lists values past a budget**: more specific values (numbers, dates, IDs, paths, file names, e-mails, and the
  short values tools returned) than the expert's answer states plus :attr:`Budget.extra_values` (a guess list, every
  value the tools returned);
* **is much longer**: more than :attr:`Budget.length_factor` times the expert's answer plus
  :attr:`Budget.length_slack` characters (a dump of tool outputs).

Values a tool never returned are :func:`pivot_envs.facts.ungrounded`'s (another task's answer, a made-up count).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Sequence

from pivot_envs.facts import COMMON_WORDS, contains_words, conversation_text, fold, returned_values, specific_values
from pivot_envs.types import Message, content_text


@dataclass(frozen=True)
class Budget:
    """How much an answer may add to the expert's (see the module docstring)."""

    extra_values: int = 2
    """Specific values beyond the expert answer's count."""
    length_factor: float = 3.0
    """The answer's length at most this times the expert answer's ..."""
    length_slack: int = 100
    """... plus this many characters."""

    def __post_init__(self) -> None:
        if self.extra_values < 0 or self.length_factor < 1 or self.length_slack < 0:
            raise ValueError(f"answer budget: extra_values >= 0, length_factor >= 1 and length_slack >= 0, got {self}")


RETRACTION = re.compile(
    r"\b(?:ignore\s+(?:the|that|this|my|all|everything)\s*(?:above|previous|earlier|answer|said)?|disregard|"
    r"correction\s*:|scratch\s+that|i\s+was\s+wrong|(?:that|this)(?:'s|\s+is|\s+was)\s+(?:wrong|incorrect|not\s+"
    r"(?:right|correct|true|accurate))|on\s+second\s+thought|i\s+made\s+a\s+mistake|the\s+above\s+is\s+(?:wrong|"
    r"incorrect)|is\s+(?:actually\s+)?(?:incorrect|not\s+correct)|retract|never\s*mind|not\s+the\s+(?:right\s+)?answer)\b",
    re.IGNORECASE)
"""A retraction or a contradiction of what the answer said."""

HEDGE = re.compile(
    r"\b(?:maybe|perhaps|possibly|probably|might(?:\s+\w+)?\s+be|may\s+be|could\s+(?:also\s+)?be|not\s+(?:sure|"
    r"certain)|unsure|uncertain|i\s+think|i\s+believe|i\s+guess|it\s+seems|likely|either|or\s+else|"
    r"other\s+possibilit\w*|alternatively|can't\s+be\s+sure|hard\s+to\s+say)\b", re.IGNORECASE)
"""A hedge: the answer does not commit to what it says."""

_ALTERNATIVES = re.compile(r"([\w$.,:/-]+)\s+or\s+([\w$.,:/-]+)", re.IGNORECASE)
_CLAIM = re.compile(r"\b(?:i|we)(?:'ve|\s+have|\s+had|'d)?\s+(also\s+|then\s+|just\s+|now\s+|already\s+|additionally\s+)?"
                    r"([a-z]+(?:ed|en|ent|ote|ade|ook|ut))\b([^.!?;\n]*)", re.IGNORECASE)
_EXTRA = re.compile(r"\b(?:also|additionally|in\s+addition|as\s+well)\b", re.IGNORECASE)
_WORD = re.compile(r"[a-z][a-z0-9_-]+")

ACTION_KINDS: dict[str, tuple[str, ...]] = {
    "delete": ("delet", "remov", "eras", "purg", "wip", "rm", "unlink", "clean", "clear", "drop"),
    "move": ("mov", "renam", "mv", "relocat"),
    "copy": ("cop", "cp", "duplicat", "back"),
    "create": ("creat", "mad", "mak", "mkdir", "touch", "writ", "wrot", "add", "generat", "sav", "append", "insert"),
    "archive": ("archiv", "compress", "tar", "gzip", "zip", "pack", "bundl"),
    "extract": ("extract", "unpack", "unzip", "untar", "decompress"),
    "change": ("updat", "chang", "modif", "edit", "set", "sed", "replac", "fix", "correct", "convert", "chmod",
               "sort", "reset", "restor", "upgrad", "rewr"),
    "send": ("sent", "send", "email", "mail", "notif", "messag", "transferr", "pass", "hand"),
    "restart": ("restart", "reboot", "rerun", "ran", "run", "execut", "launch", "start", "stopp", "kill"),
    "install": ("install", "pip", "apt", "uninstall"),
    "money": ("refund", "charg", "paid", "pay", "credit", "bill"),
    "booking": ("book", "reserv", "cancel", "schedul", "reschedul", "regist"),
}
"""Kinds of action, each by the stems of its verbs, programs and tool names (a claim of ``deleted`` is supported by an
``rm`` call or the expert's ``removed``)."""


def _kind_of(verb: str) -> str | None:
    low = verb.lower()
    for kind, stems in ACTION_KINDS.items():
        if any(low.startswith(stem) for stem in stems if len(stem) >= 3) or low in stems:
            return kind
    return None


def _kinds_in(text: str) -> set[str]:
    """The kinds of action ``text`` names (any word starting with a kind's stem; short stems as whole words)."""
    out = set()
    words = set(re.findall(r"[a-z]+", text.lower()))
    for kind, stems in ACTION_KINDS.items():
        for stem in stems:
            if (len(stem) >= 3 and any(w.startswith(stem) for w in words)) or stem in words:
                out.add(kind)
                break
    return out


def _calls_text(context: Sequence[Message]) -> str:
    """The names and arguments of every call the conversation made (what was done)."""
    parts = []
    for m in context:
        for call in m.get("tool_calls") or [] if m.get("role") == "assistant" else []:
            fn = call.get("function") or {}
            args = fn.get("arguments")
            parts.append(f"{fn.get('name', '')} {args if isinstance(args, str) else json.dumps(args)}")
    return " ".join(parts).replace("_", " ")


_DONE_VERB = re.compile(r"\b(?:[a-z]+(?:ed|en)|made|sent|wrote|paid|put)\b", re.IGNORECASE)


def unsupported_claims(answer: str, expert_answer: str, context: Sequence[Message]) -> list[str]:
    """Actions ``answer`` claims that nothing supports (see the module docstring)."""
    done = _kinds_in(expert_answer) | _kinds_in(_calls_text(context))
    said = fold(" ".join([*conversation_text(context), expert_answer]))
    out = [verb for verb in _DONE_VERB.findall(answer) if (_kind_of(verb) or "") not in done | {""}]
    for match in _CLAIM.finditer(answer):
        extra, verb, rest = match.group(1) or "", match.group(2), match.group(3)
        kind = _kind_of(verb)
        if kind is None:
            continue
        objects = [w for w in _WORD.findall(rest.lower()) if w not in COMMON_WORDS and len(w) > 2]
        unnamed = objects and not any(contains_words(said, w) or contains_words(said, w.rstrip("s")) for w in objects)
        more = (_EXTRA.search(extra) or _EXTRA.search(rest)) and not _EXTRA.search(expert_answer)
        if kind not in done or unnamed or more:
            out.append(match.group(0).strip()[:80])
    return out


def _alternatives(answer: str, expert_answer: str) -> list[str]:
    """``X or Y`` where both sides are specific values (numbers, IDs, names in capitals): candidates offered."""
    if re.search(r"\bor\b", expert_answer, re.IGNORECASE):
        return []
    out = []
    for left, right in _ALTERNATIVES.findall(answer):
        specific = all(any(c.isdigit() for c in side) or side[:1].isupper() for side in (left, right))
        if specific:
            out.append(f"{left} or {right}")
    return out


_NAME = re.compile(r"(?<![.!?:\n]\s)(?<!\n)(?<!^)\b([A-Z][^\W\d_]{2,})\b")
CALENDAR = frozenset("monday tuesday wednesday thursday friday saturday sunday january february march april may june "
                     "july august september october november december today tomorrow yesterday".split())


def unknown_names(answer: str, expert_answer: str, context: Sequence[Message]) -> list[str]:
    """Capitalised names in ``answer`` that neither the conversation nor ``expert_answer`` contains (see the module
    docstring)."""
    said = fold(" ".join([*conversation_text(context), expert_answer]))
    out = []
    for name in _NAME.findall(answer.strip()):
        low = name.lower()
        if low not in COMMON_WORDS and low not in CALENDAR and not contains_words(said, low):
            out.append(name)
    return out


PASTE_MIN_CHARS = 4
"""Lines shorter than this never count as pasted (``ok``, ``0``)."""


def pasted_lines(text: str, context: Sequence[Message]) -> int:
    """How many lines of ``text`` are lines of the conversation's tool outputs verbatim (at least
    :data:`PASTE_MIN_CHARS` characters each)."""
    outputs = {" ".join(line.split()) for m in context if m.get("role") == "tool"
               for line in content_text(m.get("content")).splitlines() if len(line.strip()) >= PASTE_MIN_CHARS}
    return sum(1 for line in text.splitlines() if " ".join(line.split()) in outputs)


def value_count(text: str, context: Sequence[Message]) -> int:
    """The specific values ``text`` states: typed values, specific tokens, and short values the tools returned."""
    values = {v for v in specific_values(text)}
    folded = fold(text)
    values |= {"value:" + v for v in returned_values(context).values if contains_words(folded, v)}
    return len(values)


def added_problem(answer: str, expert_answer: str, context: Sequence[Message], budget: Budget = Budget()) -> str | None:
    """Why ``answer`` is wrong by what it adds to ``expert_answer`` (see the module docstring), or ``None``."""
    if (retraction := RETRACTION.search(answer)) and not RETRACTION.search(expert_answer):
        return f"the answer retracts or contradicts itself ({retraction.group(0)!r})"
    if (hedge := HEDGE.search(answer)) and not HEDGE.search(expert_answer):
        return f"the answer hedges ({hedge.group(0)!r}) where the expert's commits"
    offered = _alternatives(answer, expert_answer)
    if offered:
        return f"the answer offers candidates ({offered[0]!r}) where the expert's names one"
    claims = unsupported_claims(answer, expert_answer, context)
    if claims:
        return f"the answer claims an action nothing in the conversation did ({claims[0]!r})"
    names = unknown_names(answer, expert_answer, context)
    if names:
        return f"the answer names {', '.join(names[:3])}, which nothing in the conversation mentions"
    pasted, lines = pasted_lines(answer, context), len([line for line in answer.splitlines() if line.strip()])
    dump = pasted == lines or (pasted >= 3 and 2 * pasted >= lines)
    if pasted >= 2 and dump and pasted > pasted_lines(expert_answer, context):
        return f"the answer pastes {pasted} lines of tool output, not an answer"
    mine, theirs = value_count(answer, context), value_count(expert_answer, context)
    if mine > theirs + budget.extra_values:
        return (f"the answer lists {mine} values where the expert's states {theirs} (at most {budget.extra_values} "
                "more: a guess list, or every value the tools returned)")
    cap = budget.length_factor * len(expert_answer.strip()) + budget.length_slack
    if len(answer.strip()) > cap:
        return (f"the answer is {len(answer.strip())} characters where the expert's is {len(expert_answer.strip())} "
                f"(at most {cap:.0f}: a dump, not an answer)")
    return None


