"""A call turn is scored whole (the full demo of issue 35 found a policy that kept writing after its call, and the
verifier scored the first call alone): text after the call fails in every domain the default verifiers wrap in
``final_turn``; the same call alone, or after a line of prose, still passes."""

from __future__ import annotations

import json

import gymnasium
import pytest

from pivot_envs.actions import parse_action, stray_text
from pivot_envs.envs_data import load_pivots
from pivot_envs.verifiers import build_verifier
from pivot_envs.verifiers.defaults import default_verifier_spec


def hermes(name: str, arguments: dict) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def one_call_pivot(domain: str):
    for p in load_pivots(domain, "test"):
        calls = p.expert.get("tool_calls") or []
        if len(calls) == 1:
            return p
    raise AssertionError(f"{domain}: no one-call pivot")


def expert_call(pivot) -> str:
    fn = pivot.expert["tool_calls"][0]["function"]
    return hermes(fn["name"], json.loads(fn["arguments"]))


@pytest.mark.parametrize("domain", ["terminal", "tool_use", "search"])
def test_text_after_the_call_fails_the_same_call_passes(domain: str) -> None:
    pivot = one_call_pivot(domain)
    call = expert_call(pivot)
    verifier = build_verifier(default_verifier_spec(domain))
    right = [call, "Let me look first.\n" + call, call + "\n"]
    wrong = [call + "\n</tool_call>\nREADME.txt\nsales.csv\n",  # a stray tag, then output the model invented
             call + "\nREADME.txt\n" + call,  # invented output between two calls
             call + "\n</tool\n<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"comma"]  # cut mid-call
    results = verifier.verify_many(right + wrong, [pivot] * 6)
    assert [r.passed for r in results] == [True] * 3 + [False] * 3, [r.reason for r in results]
    assert all("text after the tool call" in r.reason for r in results[3:])


def test_through_the_env() -> None:
    env = gymnasium.make("pivot_envs:pivot/Terminal-v0", split="test")
    pivot = one_call_pivot("terminal")
    _, info = env.reset(options={"pivot_id": pivot.id})
    _, reward, *_ = env.step(expert_call(pivot) + "\n</tool_call>\nnotes.txt\n")
    assert reward == 0.0
    env.reset(options={"pivot_id": pivot.id})
    _, reward, *_ = env.step(expert_call(pivot))
    assert reward == 1.0


def test_stray_text() -> None:
    call = hermes("bash", {"command": "ls"})
    assert stray_text(call) == "" and stray_text("Looking.\n" + call) == "" and stray_text("plain answer") == ""
    assert stray_text(call + "\n</tool_call>\nREADME.txt") == "</tool_call> README.txt"
    assert len(parse_action(call + "\n" + call).tool_calls) == 2 and stray_text(call + "\n" + call) == ""
