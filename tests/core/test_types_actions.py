import json

import pytest

from pivot_envs import Action, Fixture, Pivot, Profile, Trajectory, VerifyResult, parse_action
from pivot_envs.actions import message_text

CALL = {"id": "c1", "type": "function", "function": {"name": "get_order", "arguments": '{"order_id": "A1"}'}}


def test_json_round_trip_of_every_type():
    traj = Trajectory(messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": None, "tool_calls": [CALL]}],
                      tools=[{"type": "function", "function": {"name": "get_order", "parameters": {"type": "object"}}}],
                      reward=1.0, meta={"id": "t1"}, fixture=Fixture(files={"a.txt": "x"}, setup="touch b", workdir="/testbed"))
    assert Trajectory.from_dict(json.loads(json.dumps(traj.to_dict()))) == traj
    pivot = Pivot(id="p", domain="tool_use", context=traj.messages[:1], expert=traj.messages[1], tools=traj.tools,
                  fixture=traj.fixture, meta={"turn": 1}, profile=Profile(k=2, rewards=[0.0, 1.0], mean=0.5, var=0.25))
    assert Pivot.from_dict(json.loads(json.dumps(pivot.to_dict()))) == pivot
    res = VerifyResult(reward=1.0, passed=True, verifier="strict", reason="same", error=None)
    assert VerifyResult.from_dict(json.loads(json.dumps(res.to_dict()))) == res
    act = parse_action("hello")
    assert Action.from_dict(json.loads(json.dumps(act.to_dict()))) == act


def test_trajectory_ids_are_stable_and_content_based():
    a = Trajectory(messages=[{"role": "user", "content": "x"}])
    b = Trajectory(messages=[{"role": "user", "content": "x"}])
    c = Trajectory(messages=[{"role": "user", "content": "y"}])
    assert a.id == b.id != c.id
    assert Trajectory(messages=[], meta={"id": 7}).id == "7"


@pytest.mark.parametrize("bad", [{"files": {"a": 1}}, {"workdir": "relative"}, "nope"])
def test_fixture_rejects_bad_specs(bad):
    with pytest.raises(ValueError):
        Fixture.from_dict(bad)


def test_parse_openai_message_dict():
    act = parse_action({"role": "assistant", "content": None, "tool_calls": [
        {"id": "x", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]})
    assert act.tool_calls[0]["function"] == {"name": "f", "arguments": '{"a": 1}'}
    assert "<tool_call>" in act.text


def test_parse_several_hermes_blocks_and_keeps_surrounding_text():
    text = 'Let me check.\n<tool_call>\n{"name": "a", "arguments": {"x": 1}}\n</tool_call>\n<tool_call>{"name": "b", "arguments": {}}</tool_call>'
    act = parse_action(text)
    assert [c["function"]["name"] for c in act.tool_calls] == ["a", "b"]
    assert act.content == "Let me check."
    assert act.text == text


def test_parse_bare_json_forms():
    assert parse_action('{"name": "ls", "arguments": {"path": "."}}').tool_calls[0]["function"]["name"] == "ls"
    assert len(parse_action('[{"name": "a", "arguments": {}}, {"name": "b", "arguments": {}}]').tool_calls) == 2
    assert parse_action('```json\n{"name": "ls", "arguments": {}}\n```').tool_calls[0]["function"]["name"] == "ls"
    wrapped = parse_action('{"tool_calls": [{"type": "function", "function": {"name": "q", "arguments": "{}"}}]}')
    assert wrapped.tool_calls[0]["function"]["name"] == "q"


@pytest.mark.parametrize("text", ["just words", '{"not": "a call"}', "{broken json", "<tool_call>{broken</tool_call>", ""])
def test_unparseable_text_is_a_plain_content_action(text):
    act = parse_action(text)
    assert act.tool_calls == []
    assert act.message["role"] == "assistant"
    assert isinstance(act.content, str)


def test_message_text_round_trips_through_the_parser():
    msg = {"role": "assistant", "content": "ok", "tool_calls": [CALL]}
    again = parse_action(message_text(msg))
    assert again.content == "ok"
    assert json.loads(again.tool_calls[0]["function"]["arguments"]) == {"order_id": "A1"}
