"""A call turn is judged whole (issue 48, item 1): every call, not the first one. The expert's call followed by
``rm -rf ./*``, a repeated write, a second search after a matched one: each fails, in every domain; a turn whose
calls each match a distinct expert call, or that does what the expert's turn did, passes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pivot_envs.envs_data import load_pivots
from pivot_envs.types import Fixture, Pivot
from pivot_envs.verifiers import build_verifier
from pivot_envs.verifiers.defaults import default_verifier_spec
from pivot_envs.verifiers.helpers.whole_turn import perfect_matching, route
from pivot_envs.actions import parse_action


def calls(*pairs: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"c{i}", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
        for i, (n, a) in enumerate(pairs)]}


def test_perfect_matching_needs_a_distinct_partner_for_every_call():
    assert perfect_matching([[True, False], [False, True]])
    assert perfect_matching([[True, True], [True, False]])
    assert not perfect_matching([[True, False], [True, False]])  # both calls match the same expert call
    assert perfect_matching([])


def test_routes_by_the_number_of_calls_on_each_side():
    expert = Pivot(id="p", domain="", context=[], expert=calls(("a", {}), ("b", {})))
    assert route(parse_action(calls(("a", {}), ("b", {}))), expert) == "pairs"
    assert route(parse_action(calls(("a", {}))), expert) == "whole"
    assert route(parse_action(calls(("a", {}))), Pivot(id="q", domain="", context=[], expert=calls(("a", {})))) == "one"


FIXTURE = Fixture(files={"notes.txt": "status: draft\n", "logs/app.log": "ok\nERROR x\n"}, workdir="/work/shop")


def terminal_pivot(command: str) -> Pivot:
    return Pivot(id="t-" + command, domain="terminal", context=[{"role": "user", "content": "do it"}],
                 expert=calls(("bash", {"command": command})), fixture=FIXTURE,
                 tools=[{"type": "function", "function": {"name": "bash", "parameters": {
                     "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}])


@pytest.fixture(scope="module")
def terminal():
    return build_verifier(default_verifier_spec("terminal"))


def test_terminal_extra_repeated_and_split_turns(terminal, bwrap_ok):
    look = terminal_pivot("grep -c ERROR logs/app.log")
    write = terminal_pivot("echo done >> notes.txt")
    both = terminal_pivot("mkdir -p out && cp notes.txt out/")
    verdicts = terminal.verify_many([
        calls(("bash", {"command": "grep -c ERROR logs/app.log"}), ("bash", {"command": "rm -rf -- ./*"})),
        calls(("bash", {"command": "rm -rf -- ./*"}), ("bash", {"command": "grep -c ERROR logs/app.log"})),
        calls(("bash", {"command": "echo done >> notes.txt"}), ("bash", {"command": "echo done >> notes.txt"})),
        calls(("bash", {"command": "mkdir -p out"}), ("bash", {"command": "cp notes.txt out/"})),
        calls(("bash", {"command": "grep -c ERROR logs/app.log"})),
    ], [look, look, write, both, look])
    assert [v.passed for v in verdicts] == [False, False, False, True, True], [v.reason for v in verdicts]
    assert all(v.error is None for v in verdicts)
    assert "file changed" in verdicts[0].reason or "removed" in verdicts[0].reason


def test_search_and_tool_use_extra_calls_fail_and_matched_pairs_pass():
    search = next(p for p in load_pivots("search", "test") if p.expert.get("tool_calls")
                  and p.expert["tool_calls"][0]["function"]["name"] == "search")
    verifier = build_verifier(default_verifier_spec("search"))
    expert_call = (search.expert["tool_calls"][0]["function"]["name"],
                   json.loads(search.expert["tool_calls"][0]["function"]["arguments"]))
    extra, alone = verifier.verify_many([calls(expert_call, ("open", {"doc_id": "person-001"})), calls(expert_call)],
                                        [search, search])
    assert not extra.passed and "a turn is judged whole" in extra.reason and alone.passed
    two = next(p for p in load_pivots("tool_use", "test") if len(p.expert.get("tool_calls") or []) == 2)
    tool_use = build_verifier(default_verifier_spec("tool_use"))
    own = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in two.expert["tool_calls"]]
    swapped, doubled = tool_use.verify_many([calls(own[1], own[0]), calls(own[0], own[0])], [two, two])
    assert swapped.passed, swapped.reason
    assert not doubled.passed and "distinct call" in doubled.reason


def test_whole_turn_off_leaves_the_count_to_the_child():
    pivot = Pivot(id="p", domain="", context=[{"role": "user", "content": "x"}], expert=calls(("get", {"k": 1})))
    lenient = build_verifier({"name": "final_turn", "whole_turn": False, "world_state": False,
                              "calls": {"name": "tool_call", "allow_more_calls": True}})
    strict = build_verifier({"name": "final_turn", "world_state": False,
                             "calls": {"name": "tool_call", "allow_more_calls": True}})
    action = calls(("get", {"k": 1}), ("get", {"k": 2}))
    assert lenient.verify(parse_action(action), pivot).passed
    assert not strict.verify(parse_action(action), pivot).passed
