"""Answers judged for what they add (issue 48, item 3): an answer that carries the expert's facts fails when it also
retracts them, hedges, claims an action nothing did, names a customer nobody mentioned, lists values past the budget
or is a paste of tool outputs; the expert's own answer, reworded or with a number written as a word, still passes."""

from __future__ import annotations

import json

import pytest

from pivot_envs.additions import Budget, added_problem
from pivot_envs.envs_data import load_pivots
from pivot_envs.types import Pivot, content_text
from pivot_envs.verifiers import build_verifier
from pivot_envs.verifiers.defaults import default_verifier_spec

CONTEXT = [
    {"role": "system", "content": "You look after the team's files."},
    {"role": "user", "content": "How many ERROR lines are in logs/app.log, and rename notes.txt to notes.md?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": json.dumps(
            {"command": "grep -c ERROR logs/app.log && mv notes.txt notes.md"})}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "3"},
]
EXPERT = "logs/app.log has 3 ERROR lines, and notes.txt is now notes.md."


@pytest.mark.parametrize("answer,why", [
    (EXPERT + " Correction: that is wrong, ignore the above.", "retracts"),
    (EXPERT + " Though I'm not sure; it might be something else.", "hedges"),
    ("logs/app.log has 3 or 4 ERROR lines, and notes.txt is now notes.md.", "candidates"),
    (EXPERT + " I also deleted the old backups.", "claims an action"),
    (EXPERT + " I also compressed the logs.", "claims an action"),
    ("Done, Priya: " + EXPERT, "names Priya"),
    (EXPERT + " Other values: 7, 12, 19, notes.bak, app.log.1.", "lists"),
    (EXPERT + " " + "x" * 400, "characters"),
])
def test_what_an_answer_adds_can_make_it_wrong(answer, why):
    problem = added_problem(answer, EXPERT, CONTEXT)
    assert problem is not None and why in problem, problem


@pytest.mark.parametrize("answer", [EXPERT, "notes.txt is now notes.md; logs/app.log has 3 ERROR lines.",
                                    "Here is what I found: " + EXPERT, "I renamed notes.txt to notes.md; there are 3 "
                                    "ERROR lines in logs/app.log."])
def test_the_expert_answer_and_its_rewordings_add_nothing_wrong(answer):
    assert added_problem(answer, EXPERT, CONTEXT) is None


def test_the_budgets_are_configurable():
    long = EXPERT + " " + "It was a short and simple job. " * 9  # 342 characters: past 3 x 63 + 100
    assert added_problem(long, EXPERT, CONTEXT) is not None
    assert added_problem(long, EXPERT, CONTEXT, Budget(length_factor=6.0)) is None
    with pytest.raises(ValueError, match="extra_values"):
        Budget(extra_values=-1)


def test_the_facts_verifier_fails_padding_and_passes_number_words_on_real_answers():
    pivot = next(p for p in load_pivots("terminal", "test") if not p.expert.get("tool_calls")
                 and "3" in content_text(p.expert.get("content")).split())
    answer = content_text(pivot.expert.get("content"))
    verifier = build_verifier(default_verifier_spec("terminal"))
    padded, hedged, worded = verifier.verify_many(
        [{"role": "assistant", "content": answer + " I also deleted the old backups."},
         {"role": "assistant", "content": answer + " Maybe it is something else."},
         {"role": "assistant", "content": answer.replace(" 3 ", " three ", 1)}], [pivot] * 3)
    assert not padded.passed and not hedged.passed, (padded.reason, hedged.reason)
    assert worded.passed, worded.reason
    configured = build_verifier({"name": "facts", "max_extra_values": 0, "length_factor": 1.0, "length_slack": 0})
    assert not configured.verify_many([{"role": "assistant", "content": answer + " Thanks!"}], [pivot])[0].passed


def test_a_stop_that_names_another_customer_fails_where_a_plain_closing_passes():
    pivot = Pivot(id="kv", domain="", context=[{"role": "user", "content": "Please cancel my order, I'm Lucas."}],
                  expert={"role": "assistant", "content": "Glad I could help, Lucas. Take care!"})
    facts = build_verifier("facts")
    other, mine = facts.verify_many([{"role": "assistant", "content": "Glad I could help, Noah. Take care!"},
                                     {"role": "assistant", "content": "Glad I could help, Lucas. Take care!"}], [pivot] * 2)
    assert not other.passed and "Noah" in other.reason and mine.passed
