"""Property tests (hypothesis) for the core verifiers.

- no verifier raises on arbitrary text or arbitrary JSON arguments (``verify``
  itself is called, not the exception-catching ``safe_verify``);
- every verifier gives reward 1 to the expert action against itself;
- results are deterministic (same verifier twice, and a fresh copy).
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pivot_envs.actions import parse_action
from pivot_envs.types import Pivot
from pivot_envs.verifiers.base import build_verifier
from pivot_envs.verifiers.defaults import default_verifier_spec

SCHEMA = {
    "type": "object",
    "properties": {
        "s": {"type": "string"},
        "i": {"type": "integer"},
        "n": {"type": "number"},
        "b": {"type": "boolean"},
        "a": {"type": "array", "items": {"type": "integer"}},
        "u": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
        "o": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": ["string", "null"]}}},
        "d": {"type": "string", "default": "dflt"},
    },
    "required": ["s"],
}
TOOLS = [
    {"type": "function", "function": {"name": "f", "parameters": SCHEMA}},
    {"type": "function", "function": {"name": "g"}},
    {"type": "function", "function": {"name": "bash", "parameters": {
        "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}},
]

SPECS: list[Any] = [
    "strict",
    "tool_call",
    {"name": "tool_call", "normalizers": ["lower", "strip_punctuation", "collapse_whitespace"],
     "fuzzy_arguments": {"s": 80}, "content": "fuzzy"},
    "schema",
    "fuzzy",
    {"name": "fuzzy", "target": "arguments", "scorer": "WRatio", "binary": False},
    {"name": "fuzzy", "target": "argument:s", "scorer": "token_set_ratio"},
    {"name": "fuzzy", "target": "content", "scorer": "partial_ratio", "normalizers": ["nfkc", "remove_articles"]},
    "tool_name",
    {"name": "tool_name", "aliases": "swe"},
    {"name": "cascade", "stages": ["schema", {"role": "accept", "verifier": "strict"},
                                   {"role": "decide", "verifier": "tool_call"}]},
    {"name": "all", "verifiers": ["tool_name", "tool_call"]},
    {"name": "any", "verifiers": ["strict", "fuzzy"]},
    {"name": "weighted", "verifiers": ["strict", "tool_call", "fuzzy"]},
    default_verifier_spec("tool_use"),
    default_verifier_spec("swe"),
    default_verifier_spec("search"),
]
VERIFIERS = [build_verifier(s) for s in SPECS]
# Verifiers that judge form against SCHEMA: the expert passes only when it fits the schema
# (swe's default final_turn gates its calls on the schema too).
FORM_CHECKERS = {"schema", "cascade", "final_turn"}
SCHEMA_GATE = build_verifier("schema")

json_scalars = st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=True) | st.text(max_size=12)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)
names = st.sampled_from(["f", "g", "bash", "search", "open", "h"])
raw_arguments = st.one_of(
    st.dictionaries(st.sampled_from(list(SCHEMA["properties"]) + ["zz"]), json_values, max_size=5).map(json.dumps),
    json_values.map(json.dumps),
    st.text(max_size=30),
)
call_lists = st.lists(st.tuples(names, raw_arguments), max_size=3)

# values that fit SCHEMA, for the self-equivalence properties of form checkers too
valid_args = st.fixed_dictionaries(
    {"s": st.text(max_size=20)},
    optional={
        "i": st.integers(-10**9, 10**9),
        "n": st.floats(allow_nan=False, allow_infinity=False),
        "b": st.booleans(),
        "a": st.lists(st.integers(-100, 100), max_size=4),
        "u": st.lists(st.text(max_size=5), max_size=4, unique=True),
        "o": st.fixed_dictionaries({}, optional={"x": st.floats(allow_nan=False, allow_infinity=False),
                                                 "y": st.none() | st.text(max_size=5)}),
        "d": st.text(max_size=5),
    },
)
bash_commands = st.text(max_size=40)


def message(calls: list[tuple[str, str]], content: str | None) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        msg["tool_calls"] = [
            {"id": f"c{i}", "type": "function", "function": {"name": n, "arguments": a}} for i, (n, a) in enumerate(calls)
        ]
    return msg


def make_pivot(expert: dict[str, Any]) -> Pivot:
    return Pivot(id="prop", domain="tool_use", context=[{"role": "user", "content": "q"}], expert=expert, tools=TOOLS)


FAST = settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(action_text=st.text(max_size=200), expert_calls=call_lists, expert_content=st.none() | st.text(max_size=40))
def test_no_verifier_raises_on_arbitrary_text(action_text: str, expert_calls: list, expert_content: str | None) -> None:
    p = make_pivot(message(expert_calls, expert_content))
    action = parse_action(action_text)
    for v in VERIFIERS:
        r = v.verify(action, p)
        assert 0.0 <= r.reward <= 1.0


@FAST
@given(action_calls=call_lists, expert_calls=call_lists, content=st.none() | st.text(max_size=20))
def test_no_verifier_raises_on_arbitrary_json(action_calls: list, expert_calls: list, content: str | None) -> None:
    p = make_pivot(message(expert_calls, content))
    action = parse_action(message(action_calls, content))
    for v in VERIFIERS:
        r = v.verify(action, p)
        assert 0.0 <= r.reward <= 1.0 and isinstance(r.reason, str)


@FAST
@given(expert_calls=call_lists, content=st.none() | st.text(max_size=40))
def test_expert_against_itself_arbitrary(expert_calls: list, content: str | None) -> None:
    expert = message(expert_calls, content)
    p = make_pivot(expert)
    fits = SCHEMA_GATE.verify(parse_action(expert), p).passed
    for spec, v in zip(SPECS, VERIFIERS):
        r = v.verify(parse_action(expert), p)
        if v.name in FORM_CHECKERS and not fits:
            continue  # arbitrary arguments need not fit the declared schema
        assert r.passed and r.reward == 1.0, (spec, expert, r)


@FAST
@given(
    args=st.lists(valid_args, min_size=1, max_size=3),
    command=bash_commands,
    with_bash=st.booleans(),
    content=st.none() | st.text(max_size=40),
)
def test_expert_against_itself_valid(args: list, command: str, with_bash: bool, content: str | None) -> None:
    calls = [("f", json.dumps(a)) for a in args] + ([("bash", json.dumps({"command": command}))] if with_bash else [])
    expert = message(calls, content)
    p = make_pivot(expert)
    # the same action re-spelled: other key order, other spacing
    respelled = message([(n, json.dumps(json.loads(a), indent=1, sort_keys=True)) for n, a in reversed(calls)], content)
    for spec, v in zip(SPECS, VERIFIERS):
        r = v.verify(parse_action(expert), p)
        assert r.passed and r.reward == 1.0, (spec, expert, r)
        if v.name in ("tool_call", "schema", "tool_name", "cascade", "all"):
            r2 = v.verify(parse_action(respelled), p)
            assert r2.passed, (spec, respelled, r2)


@FAST
@given(text=st.text(max_size=80))
def test_text_turns_against_themselves(text: str) -> None:
    expert = {"role": "assistant", "content": text}
    p = make_pivot(expert)
    for spec, v in zip(SPECS, VERIFIERS):
        r = v.verify(parse_action(expert), p)
        assert r.passed and r.reward == 1.0, (spec, text, r)


@FAST
@given(action_calls=call_lists, expert_calls=call_lists, action_text=st.text(max_size=60))
def test_results_are_deterministic(action_calls: list, expert_calls: list, action_text: str) -> None:
    p = make_pivot(message(expert_calls, "some text"))
    for action in (parse_action(message(action_calls, None)), parse_action(action_text)):
        for spec, v in zip(SPECS, VERIFIERS):
            first = v.verify(action, p)
            assert v.verify(action, p) == first
            assert build_verifier(spec).verify(action, p) == first
