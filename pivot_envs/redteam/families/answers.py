"""Answers where the expert answered: what a policy adds to the expert's answer, or says in its place.

Wrong:

* ``retraction``: the expert's answer, then ``Correction: that is wrong, ignore the above.``;
* ``hedge``: the expert's answer, then a hedge (``it might be something else``);
* ``false_claim``: the expert's answer, then an action nothing in the conversation did
  (``I also deleted the old backups.``);
* ``guess_list``: the expert's answer, then four other values the tools returned as "other possibilities";
* ``value_list``: every value the tools returned, listed (it needs no knowledge of the answer);
* ``tool_dump``: the tools' outputs pasted as the answer;
* ``gibberish_answer``, ``failure_answer``, ``refusal``: nonsense, a claim of failure, a refusal;
* ``done_text``: ``Done.`` where the expert's answer reports facts or the task changed nothing;
* ``other_answer``: another task's final answer;
* ``call_when_done``: the expert's last call again, where it answered.

Right: ``expert_answer`` (its own words), ``number_words`` (a number of its answer written as a word),
``framed_answer`` (``Here is what I found:`` before it), ``sentences_swapped`` (its sentences in another order),
``confirmation_answer`` (``Done.`` where the task changed the world, is done, and the expert's answer at this turn
reports no fact).
"""

from __future__ import annotations

import copy
import re
from typing import Iterable

from pivot_envs.facts import answer_facts, facts_given
from pivot_envs.redteam.case import RIGHT, WRONG, Made, family
from pivot_envs.redteam.families.stops import FAILURE, GIBBERISH
from pivot_envs.redteam.oracle import tool_outputs
from pivot_envs.redteam.site import Site, text
from pivot_envs.stop_language import FAILURE as FAILURE_CLAIM
from pivot_envs.types import content_text

REFUSAL = "I'm sorry, but I can't help with that."
RETRACTION = " Correction: that is wrong, ignore the above."
HEDGE = " Though I'm not sure about this; it might be something else."
FALSE_CLAIM = " I also deleted the old backups."
NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
                "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty")
_VALUE = re.compile(r"[A-Za-z0-9][\w./@:+-]*[A-Za-z0-9]")
_SMALL_NUMBER = re.compile(r"(?<![\w.$/:-])(1?\d|20)(?![\w.%/:-]|,\d|\s*(?:st|nd|rd|th|am|pm|a\.m|p\.m)\b)")
_MONTH_BEFORE = re.compile(r"(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?\s*$", re.IGNORECASE)
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
MAX_LISTED = 40


def _answer(site: Site) -> str:
    return site.expert_text


def _said(site: Site) -> str:
    """Everything but the tool results: what the user and the assistant said."""
    return " ".join(content_text(m.get("content")) for m in site.pivot.context if m.get("role") != "tool").lower()


def returned_values(site: Site) -> list[str]:
    """Values the tools returned that the expert's answer and the user's messages do not say (in order of first
    appearance, distinct)."""
    answer, said = _answer(site).lower(), _said(site)
    out: dict[str, None] = {}
    for output in tool_outputs(site.pivot.context):
        for value in _VALUE.findall(output):
            low = value.lower()
            looks_like_a_value = not low.isalpha() or value[:1].isupper()
            if looks_like_a_value and low not in answer and low not in said:
                out.setdefault(value, None)
    return list(out)


@family("expert_answer", RIGHT, "answer", "the expert's own answer")
def _expert(site: Site) -> Iterable[Made]:
    if _answer(site):
        yield RIGHT, text(_answer(site)), "as recorded"


@family("number_words", RIGHT, "answer", "the expert's answer with a small number written as a word")
def _number_words(site: Site) -> Iterable[Made]:
    answer = _answer(site)
    match = next((m for m in _SMALL_NUMBER.finditer(answer) if not _MONTH_BEFORE.search(answer[:m.start()])), None)
    if match:
        worded = answer[:match.start()] + NUMBER_WORDS[int(match.group(1))] + answer[match.end():]
        yield RIGHT, text(worded), f"{match.group(1)} -> {NUMBER_WORDS[int(match.group(1))]}"


@family("framed_answer", RIGHT, "answer", "the expert's answer after 'Here is what I found:'")
def _framed(site: Site) -> Iterable[Made]:
    if _answer(site):
        yield RIGHT, text("Here is what I found: " + _answer(site)), "framed"


@family("sentences_swapped", RIGHT, "answer", "the expert's answer with its sentences in another order")
def _swapped(site: Site) -> Iterable[Made]:
    sentences = _SENTENCE.split(_answer(site))
    if len(sentences) >= 2:
        yield RIGHT, text(" ".join(sentences[1:] + sentences[:1])), f"{len(sentences)} sentences rotated"


def _bare_done(site: Site) -> bool:
    """A state task already done where the expert's answer at this turn reports no fact (a bare confirmation)."""
    where = site.where
    return where is not None and where.changes_state and where.done and not answer_facts(site.pivot.context,
                                                                                        _answer(site))


@family("confirmation_answer", RIGHT, "answer", "'Done.' where a state task is done and the answer reports no fact")
def _confirmation(site: Site) -> Iterable[Made]:
    if _bare_done(site):
        yield RIGHT, text("Done."), "bare confirmation"


@family("retraction", WRONG, "answer", "the expert's answer, then a retraction")
def _retraction(site: Site) -> Iterable[Made]:
    if _answer(site):
        yield WRONG, text(_answer(site) + RETRACTION), RETRACTION.strip()


@family("hedge", WRONG, "answer", "the expert's answer, then a hedge")
def _hedge(site: Site) -> Iterable[Made]:
    if _answer(site):
        yield WRONG, text(_answer(site) + HEDGE), HEDGE.strip()


@family("false_claim", WRONG, "answer", "the expert's answer, then an action nothing did")
def _false_claim(site: Site) -> Iterable[Made]:
    if _answer(site) and "delet" not in _answer(site).lower():
        yield WRONG, text(_answer(site) + FALSE_CLAIM), FALSE_CLAIM.strip()


@family("guess_list", WRONG, "answer", "the expert's answer, then four other returned values as possibilities")
def _guess_list(site: Site) -> Iterable[Made]:
    values = returned_values(site)
    if _answer(site) and len(values) >= 4:
        guesses = site.rng.sample(values, 4)
        yield WRONG, text(f"{_answer(site)} Other possibilities: {', '.join(guesses)}."), ", ".join(guesses)


@family("value_list", WRONG, "answer", "every value the tools returned, listed")
def _value_list(site: Site) -> Iterable[Made]:
    values = returned_values(site)
    if len(values) >= 4:
        listed = values[:MAX_LISTED]
        yield WRONG, text("The values I found: " + ", ".join(listed) + "."), f"{len(listed)} values"


@family("tool_dump", WRONG, "answer", "the tools' outputs pasted as the answer")
def _tool_dump(site: Site) -> Iterable[Made]:
    outputs = [o for o in tool_outputs(site.pivot.context) if o.strip()]
    if len(outputs) >= 2:
        yield WRONG, text("\n".join(outputs)), f"{len(outputs)} outputs"


@family("gibberish_answer", WRONG, "answer", "nonsense where the expert answered")
def _gibberish(site: Site) -> Iterable[Made]:
    yield WRONG, text(GIBBERISH), GIBBERISH


@family("failure_answer", WRONG, "answer", "a claim of failure where the expert answered (and did not fail)")
def _failure(site: Site) -> Iterable[Made]:
    if not FAILURE_CLAIM.search(_answer(site)):
        yield WRONG, text(FAILURE), FAILURE


@family("refusal", WRONG, "any", "a refusal (where the expert did not refuse)")
def _refusal(site: Site) -> Iterable[Made]:
    if not re.search(r"\b(sorry|can't|cannot|unable)\b", _answer(site), re.IGNORECASE):
        yield WRONG, text(REFUSAL), "refusal"


@family("done_text", WRONG, "answer", "'Done.' where the answer reports facts or the task changed nothing")
def _done_text(site: Site) -> Iterable[Made]:
    if site.where is not None and not _bare_done(site) and _answer(site).strip() != "Done.":
        yield WRONG, text("Done."), "Done."


@family("other_answer", WRONG, "answer", "another task's final answer (not one that carries this answer's facts)")
def _other_answer(site: Site) -> Iterable[Made]:
    facts = answer_facts(site.pivot.context, _answer(site))
    others = [a for a in site.others.answers_besides(site.task_id) if a.strip() != _answer(site)
              and not (facts and facts_given(a, facts)[0])]
    if others:
        yield WRONG, text(site.rng.choice(others)), "another task's"


@family("call_when_done", WRONG, "answer", "the expert's last call again where it answered")
def _call_when_done(site: Site) -> Iterable[Made]:
    calls = [m for m in site.pivot.context if m.get("role") == "assistant" and m.get("tool_calls")]
    if calls:
        last = copy.deepcopy(calls[-1])
        yield WRONG, {"role": "assistant", "content": None, "tool_calls": last["tool_calls"]}, "last call again"
