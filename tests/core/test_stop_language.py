"""Whether a text reads as a stop (issue 48, item 2): the rule that decides a stop where the task is done and the
expert's answer reports no fact. Real closings from the bundled data and from gpt-4o's tau-bench conversations must
read as stops; gibberish, failure claims, commands (tldr's, pasted as text) and the words before a call must not."""

from __future__ import annotations

import json

import pytest

from tests.conftest import shared_file
from dataclasses import dataclass

from pivot_envs.envs_data import load_pivots, load_trajectories
from pivot_envs.facts import answer_facts
from pivot_envs.stop_language import confirms, reads_as_stop, stop_problem
from pivot_envs.types import VerifyResult
from pivot_envs.verifiers import Verifier, build_verifier, register_verifier
from pivot_envs.verifiers.defaults import default_verifier_spec

WRONG = {
    "asdf qwerty zxcv": "no word of a confirmation",
    "Something went wrong and the task could not be completed.": "failed",
    "tar -xzf app-2.3.5.tar.gz -C releases/current": "shell command",
    "find releases/current -type f | sort": "shell command",
    "```bash\nls -la\n```": "code block",
    "Verifying.": "words before a call",
    "Let me check the format.": "words before a call",
    "Departments and their sizes:": "words before a call",
    "Next, where is Ulvel Motors based?": "words before a call",
    "I'm sorry, but I can't help with that.": "refusal",
    "": "empty",
}


@pytest.mark.parametrize("text,why", sorted(WRONG.items()))
def test_what_is_no_stop_is_refused_with_its_reason(text, why):
    ok, reason = reads_as_stop(text)
    assert not ok and why in reason


@pytest.mark.parametrize("text", ["Done.", "All done: everything you asked for is in place.",
                                  "downloads/ is sorted.", "Glad I could help, Ayesha. Take care!",
                                  "The file has been renamed.", "Your booking is now on Saturday."])
def test_confirmations_and_closings_read_as_stops(text):
    assert reads_as_stop(text) == (True, "reads as a stop")


def test_a_failure_claim_is_allowed_where_the_expert_itself_reports_one():
    expert = "I wasn't able to verify your account, so I've transferred you to a human agent."
    assert stop_problem("I couldn't verify you; a human agent will take over.", expert) is None
    assert stop_problem("I couldn't verify you; a human agent will take over.") is not None


def test_the_bundled_expert_closings_that_report_no_fact_read_as_stops_or_are_their_own_words():
    """Every bare final answer of the bundled terminal and tool_use tasks either confirms or (the few that inform:
    "Refunds usually take 5-7 business days") is decided by saying what the expert said; none breaks a stop rule."""
    seen = refused = 0
    for domain in ("terminal", "tool_use"):
        for task in load_trajectories(domain, "test"):
            last = task.messages[-1]
            if last.get("role") != "assistant" or last.get("tool_calls"):
                continue
            answer = last.get("content") or ""
            if answer_facts(task.messages[:-1], answer):
                continue
            seen += 1
            assert stop_problem(answer, answer) is None, answer
            refused += not confirms(answer)
    assert seen >= 40 and refused / seen < 0.2


def test_real_closings_read_as_stops_and_real_commands_do_not():
    closings_file, commands_file = shared_file("tau-bench/gpt-4o-airline.jsonl"), shared_file("tldr/commands.jsonl")
    closings = []
    for line in closings_file.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        last = next((m for m in reversed(row["messages"]) if m.get("role") == "assistant"), {})
        if row.get("reward") == 1 and (last.get("content") or "").strip() and not last.get("tool_calls"):
            closings.append(last["content"])
    commands = [json.loads(line)["command"].replace("{{", "").replace("}}", "")
                for line in commands_file.read_text(encoding="utf-8").splitlines()[::50]]
    read = sum(reads_as_stop(c)[0] for c in closings)
    pasted = sum(reads_as_stop(c)[0] for c in commands)
    assert len(closings) >= 30 and read / len(closings) >= 0.8
    assert len(commands) >= 500 and pasted / len(commands) <= 0.03


SEEN_BY_JUDGE: list = []


@register_verifier("test_stop_judge_no")
@dataclass
class NoJudge(Verifier):
    """A stand-in for an LLM judge that refuses everything and notes what it was shown."""

    def verify(self, action, pivot):
        SEEN_BY_JUDGE.append(pivot.expert.get("content"))
        return VerifyResult(0.0, False, self.name, "the judge says no")


def test_a_stop_judge_decides_the_bare_stops_in_place_of_the_rule():
    """``final_turn``'s ``stop_judge`` (any verifier spec; an LLM judge in practice) decides a stop where the task is
    done and the expert's answer is bare; the stop-language rule decides without one."""
    spec = default_verifier_spec("tool_use")
    rule, judged = build_verifier(spec), build_verifier({**spec, "stop_judge": "test_stop_judge_no"})
    pivots = load_pivots("tool_use", "test")  # "Done." at a bare answer turn gets the stop rule as a second look
    by_rule = rule.verify_many(["Done."] * len(pivots), pivots)
    bare = [p for p, r in zip(pivots, by_rule) if r.passed and "reads as a stop" in r.reason]
    assert bare, "no bare stop where the task is done among these pivots"
    SEEN_BY_JUDGE.clear()
    verdicts = judged.verify_many(["Done."] * len(bare), bare)
    assert not any(v.passed for v in verdicts) and all("judged: the judge says no" in v.reason for v in verdicts)
    assert len(SEEN_BY_JUDGE) == len(bare) and all(isinstance(c, str) for c in SEEN_BY_JUDGE)  # the expert's answer
