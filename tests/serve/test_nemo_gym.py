"""NeMo Gym pivot rows <-> Pivot: conversion, lossless round trips both ways, errors."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import shared_file
from pivot_envs.formats import detect_format, read_pivots, read_trajectories, write_pivots
from pivot_envs.formats.nemo_gym import pivot_from_row, row_from_pivot
from pivot_envs.formats.patch import apply_patch, diff, same
from pivot_envs.jsonl import BadRowError, ReadReport
from pivot_envs.types import Pivot, Profile

WEATHER_TOOL = {"type": "function", "name": "get_weather", "description": "Weather for a city.", "strict": True,
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                               "additionalProperties": False}}
TIME_TOOL = {"type": "function", "name": "get_time", "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}}}
AGENT = {"type": "responses_api_agents", "name": "single_step_tool_use_with_argument_comparison_agent"}


def fresh(make):
    """Row builders return deep copies, so a test that edits a row cannot touch the shared specs."""
    def wrapper() -> dict:
        return copy.deepcopy(make())
    wrapper.__name__ = make.__name__
    return wrapper


@fresh
def row_function_call() -> dict:
    """Expected single function call; context with parts, item ids, a developer message, an earlier call and its output."""
    return {
        "trajectory_id": 3344,
        "info": {"turn": 2, "step": 3, "depth": 4},
        "responses_create_params": {
            "input": [
                {"role": "system", "content": "You are a travel agent."},
                {"role": "developer", "content": [{"type": "input_text", "text": "Be brief."}]},
                {"role": "user", "content": [{"type": "input_text", "text": "Weather in Paris, "},
                                             {"type": "input_text", "text": "then in Rome?"}]},
                {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
                 "content": [{"type": "output_text", "text": "Checking Paris.", "annotations": []}]},
                {"type": "function_call", "id": "fc_1", "call_id": "call_a", "name": "get_weather",
                 "arguments": "{\"city\": \"Paris\"}", "status": "completed"},
                {"type": "function_call_output", "call_id": "call_a", "output": "{\"temp\": 21}"},
            ],
            "tools": [WEATHER_TOOL, TIME_TOOL],
            "parallel_tool_calls": False,
            "temperature": 1.0,
        },
        "expected_action": {"type": "function_call", "name": "get_weather", "arguments": "{\"city\": \"Rome\"}"},
        "agent_ref": AGENT,
        "pass_rate": 0.375,
        "pass_rate_total": 16,
        "pass_rate_passed": 6,
    }


@fresh
def row_message() -> dict:
    """Expected chat message; explicit message items, an int id, no tools."""
    return {
        "id": 42,
        "responses_create_params": {
            "input": [
                {"type": "message", "role": "user", "content": "Hello!"},
                {"type": "message", "role": "assistant", "content": "Hi, how can I help?"},
                {"type": "message", "role": "user", "content": "Tell me a joke."},
            ],
        },
        "expected_action": {"type": "message", "content": "Why did the chicken cross the road?"},
        "agent_ref": AGENT,
        "scenario": None,
    }


@fresh
def row_reasoning_and_dict_arguments() -> dict:
    """A reasoning item before a call, dict arguments, a call_id on the expected action."""
    return {
        "uuid": "u-7",
        "responses_create_params": {
            "input": [
                {"role": "user", "content": "What time is it in Tokyo?"},
                {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Need the tool."}]},
                {"type": "function_call", "call_id": "call_t", "name": "get_time", "arguments": {"tz": "Asia/Tokyo"}},
                {"type": "function_call_output", "call_id": "call_t", "output": [{"type": "input_text", "text": "09:00"}]},
                {"role": "user", "content": "And in Paris?"},
            ],
            "tools": [TIME_TOOL],
        },
        "expected_action": {"type": "function_call", "name": "get_time", "arguments": {"tz": "Europe/Paris"},
                            "call_id": "call_p"},
    }


@fresh
def row_batch_and_instructions() -> dict:
    """A plain-string input with instructions; a parallel batch as the expected action."""
    return {
        "responses_create_params": {"input": "Weather in Oslo and the time in Lima?", "instructions": "Use tools.",
                                    "tools": [WEATHER_TOOL, TIME_TOOL]},
        "expected_action": {"type": "function_call_batch", "calls": [
            {"type": "function_call", "name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"},
            {"type": "function_call", "name": "get_time", "arguments": "{\"tz\": \"America/Lima\"}"}]},
    }


ROWS = [row_function_call, row_message, row_reasoning_and_dict_arguments, row_batch_and_instructions]


def test_function_call_row_converts_to_chat():
    pivot = pivot_from_row(row_function_call())
    assert pivot.domain == "tool_use" and pivot.meta["source"] == "nemo_gym"
    assert [m["role"] for m in pivot.context] == ["system", "developer", "user", "assistant", "tool"]
    assert pivot.context[2]["content"] == "Weather in Paris, then in Rome?"
    assistant = pivot.context[3]
    assert assistant["content"] == "Checking Paris."
    assert assistant["tool_calls"] == [{"id": "call_a", "type": "function",
                                        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]
    assert pivot.context[4] == {"role": "tool", "tool_call_id": "call_a", "content": "{\"temp\": 21}"}
    assert pivot.expert == {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_0", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Rome\"}"}}]}
    weather = pivot.tool_spec("get_weather")
    assert weather["function"]["strict"] is True and weather["function"]["parameters"]["required"] == ["city"]
    assert pivot.id == pivot_from_row(row_function_call()).id  # stable hash id without an id field
    assert pivot.id != pivot_from_row({**row_function_call(), "trajectory_id": 1}).id


def test_message_reasoning_and_batch_rows_convert_to_chat():
    message = pivot_from_row(row_message())
    assert message.id == "42" and message.tools == []
    assert message.expert == {"role": "assistant", "content": "Why did the chicken cross the road?"}
    assert [m["role"] for m in message.context] == ["user", "assistant", "user"]
    reasoning = pivot_from_row(row_reasoning_and_dict_arguments())
    assert reasoning.id == "u-7"
    turn = reasoning.context[1]
    assert turn["reasoning_content"] == "Need the tool." and turn["content"] is None
    assert json.loads(turn["tool_calls"][0]["function"]["arguments"]) == {"tz": "Asia/Tokyo"}
    assert reasoning.context[2]["content"] == "09:00"
    assert reasoning.expert["tool_calls"][0]["id"] == "call_p"
    batch = pivot_from_row(row_batch_and_instructions())
    assert batch.context == [{"role": "system", "content": "Use tools."},
                             {"role": "user", "content": "Weather in Oslo and the time in Lima?"}]
    assert [c["function"]["name"] for c in batch.expert["tool_calls"]] == ["get_weather", "get_time"]
    assert [c["id"] for c in batch.expert["tool_calls"]] == ["call_0", "call_1"]


@pytest.mark.parametrize("make", ROWS, ids=[f.__name__ for f in ROWS])
def test_row_to_pivot_to_row_is_lossless(make, tmp_path):
    row = make()
    pivot = pivot_from_row(copy.deepcopy(row))
    assert same(row_from_pivot(pivot), row)
    # ... also through our own pivot JSONL, and Pivot -> row -> Pivot
    out = tmp_path / "pivots.jsonl"
    write_pivots([pivot], out)
    (again,) = read_pivots(out)
    assert same(row_from_pivot(again), row)
    assert same(pivot_from_row(row_from_pivot(pivot)).to_dict(), pivot.to_dict())


def test_files_round_trip_and_auto_detect(tmp_path):
    rows = [make() for make in ROWS]
    src = tmp_path / "gym.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert detect_format(src) == "nemo_gym"
    pivots = read_pivots(src)
    assert len(pivots) == 4
    out = tmp_path / "back.jsonl.gz"
    assert write_pivots(pivots, out, fmt="nemo_gym") == 4
    import gzip

    back = [json.loads(line) for line in gzip.open(out, "rt", encoding="utf-8")]
    assert all(same(a, b) for a, b in zip(back, rows)) and len(back) == 4


def test_pivot_to_row_to_pivot_is_lossless():
    pivot = Pivot(
        id="tau/3/0/5", domain="tool_use",
        context=[{"role": "system", "content": "policy"}, {"role": "user", "content": "cancel ABC"},
                 {"role": "assistant", "content": None, "tool_calls": [
                     {"id": "call_x", "type": "function", "function": {"name": "get_reservation", "arguments": "{\"id\": \"ABC\"}"}}]},
                 {"role": "tool", "tool_call_id": "call_x", "name": "get_reservation", "content": "{\"status\": \"ok\"}"}],
        expert={"role": "assistant", "content": "Shall I cancel?", "tool_calls": [
            {"id": "call_y", "type": "function", "function": {"name": "cancel", "arguments": "{\"id\": \"ABC\"}"}}]},
        tools=[{"type": "function", "function": {"name": "cancel", "parameters": {"type": "object"}}}],
        meta={"source": "tau-bench", "turn": 4, "alternatives": [{"role": "assistant", "content": "x"}]},
        profile=Profile(k=4, rewards=[1.0, 0.0, 0.0, 1.0], mean=0.5, var=0.25),
    )
    row = row_from_pivot(pivot, agent_ref="my_agent")
    assert row["agent_ref"] == {"type": "responses_api_agents", "name": "my_agent"}
    assert row["expected_action"] == {"type": "function_call", "name": "cancel", "arguments": "{\"id\": \"ABC\"}",
                                      "call_id": "call_y"}
    assert [i.get("type", i.get("role")) for i in row["responses_create_params"]["input"]] == [
        "system", "user", "function_call", "function_call_output"]
    back = pivot_from_row(json.loads(json.dumps(row)))
    # the agent_ref is row information the pivot did not have: it is kept for the way back
    assert back.meta.pop("nemo_gym")["patch"] == [["set", ["agent_ref"], row["agent_ref"]]]
    assert same(back.to_dict(), pivot.to_dict())
    plain = json.loads(json.dumps(row_from_pivot(pivot)))
    assert "agent_ref" not in plain
    assert same(pivot_from_row(plain).to_dict(), pivot.to_dict())


def test_tau_bench_pivots_survive_pivot_row_pivot_and_row_pivot_row():
    trajs = read_trajectories(shared_file("tau-bench/gpt-4o-airline.jsonl"))[:25]
    pivots = [Pivot(id=f"{t.id}/{i}", domain="tool_use", context=t.messages[:i], expert=m, tools=t.tools,
                    meta={"source": "tau-bench", "turn": i})
              for t in trajs for i, m in enumerate(t.messages) if m["role"] == "assistant"]
    assert len(pivots) > 200
    for pivot in pivots:
        row = json.loads(json.dumps(row_from_pivot(pivot)))
        expected = row["expected_action"]
        assert expected["type"] == ("function_call" if pivot.expert.get("tool_calls") else "message")
        back = pivot_from_row(row)
        assert same(back.to_dict(), pivot.to_dict())
        assert same(row_from_pivot(back), row)


def test_edited_pivot_writes_the_edit_and_keeps_row_fields():
    pivot = pivot_from_row(row_function_call())
    pivot.context = pivot.context + [{"role": "user", "content": "Actually, Madrid."}]
    pivot.expert = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_0", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Madrid\"}"}}]}
    row = row_from_pivot(pivot)
    assert row["responses_create_params"]["input"][-1] == {"role": "user", "content": [{"type": "input_text", "text": "Actually, Madrid."}]}
    assert row["expected_action"] == {"type": "function_call", "name": "get_weather", "arguments": "{\"city\": \"Madrid\"}"}
    assert row["agent_ref"] == AGENT and row["trajectory_id"] == 3344
    assert row["responses_create_params"]["parallel_tool_calls"] is False
    back = pivot_from_row(row)
    assert back.context == pivot.context and back.expert == pivot.expert


def test_a_row_edited_after_writing_reads_as_edited():
    pivot = Pivot(id="p", domain="swe", context=[
        {"role": "user", "content": "ls please"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"ls\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "name": "bash", "content": "a.py"}],
        expert={"role": "assistant", "content": "One file: a.py."}, meta={"turn": 3})
    row = row_from_pivot(pivot)
    assert row["pivot_envs"]["patch"]  # domain, meta and the tool message's name travel with the row
    row["responses_create_params"]["input"][0]["content"] = "list the files"
    back = pivot_from_row(row)
    assert back.context[0]["content"] == "list the files"
    assert "name" not in back.context[2]  # the stale conversation part of the patch gives way
    assert back.domain == "swe" and back.meta == {"turn": 3} and back.id == "p"
    assert pivot_from_row(row, domain="terminal").domain == "swe"  # the row's own domain wins
    assert pivot_from_row(row_message(), domain="terminal").domain == "terminal"


@pytest.mark.parametrize("mutate, field_name", [
    (lambda r: r.pop("expected_action"), "expected_action"),
    (lambda r: r.pop("responses_create_params"), "responses_create_params"),
    (lambda r: r["expected_action"].update(type="shell"), "expected_action.type"),
    (lambda r: r["expected_action"].update(arguments="{city"), "expected_action.arguments"),
    (lambda r: r["responses_create_params"]["input"][5].update(call_id="zzz"), "responses_create_params.input[5].call_id"),
    (lambda r: r["responses_create_params"]["input"][0].update(role="tool"), "responses_create_params.input[0].role"),
    (lambda r: r["responses_create_params"]["input"].append({"type": "web_search_call"}), "responses_create_params.input[6].type"),
    (lambda r: r["responses_create_params"]["tools"][1].pop("name"), "responses_create_params.tools[1].name"),
])
def test_bad_rows_name_line_and_field_and_skip_bad_keeps_good_ones(tmp_path, mutate, field_name):
    bad = row_function_call()
    mutate(bad)
    path = tmp_path / "gym.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in (row_message(), bad, row_batch_and_instructions())))
    with pytest.raises(BadRowError) as err:
        read_pivots(path, "nemo_gym")
    assert err.value.line == 2 and err.value.field == field_name, str(err.value)
    assert str(err.value).startswith(f"{path}:2: field '{field_name}'")
    report = ReadReport()
    pivots = read_pivots(path, "nemo_gym", skip_bad=True, report=report)
    assert [p.id for p in pivots] == ["42", pivot_from_row(row_batch_and_instructions()).id]
    assert report.read == 2 and report.n_skipped == 1


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.floats(-2, 2, allow_nan=False) | st.text(max_size=3),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=2), children, max_size=3),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(_json, _json)
def test_patch_turns_base_into_target(target, base):
    assert same(apply_patch(base, diff(target, base)), target)
    assert diff(target, target) == []
