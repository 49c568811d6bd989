"""Trajectory readers/writers: real tau-bench and SWE-agent files, round trips, bad rows."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from tests.conftest import shared_file
from pivot_envs.formats import (
    classify_keys,
    detect_format,
    read_pivots,
    read_trajectories,
    swe_agent_history,
    write_pivots,
    write_trajectories,
)
from pivot_envs.jsonl import BadRowError, ReadReport
from pivot_envs.types import Pivot, Trajectory

TAU = "tau-bench/gpt-4o-airline.jsonl"
SWE_SIMPLE = "swe-agent/function_calling_simple.traj"
SWE_MARSHMALLOW = "swe-agent/marshmallow-1867-function-calling.traj"


def _write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def _good_row(n: int) -> dict:
    return {
        "id": f"good-{n}",
        "messages": [
            {"role": "system", "content": "You are a weather bot."},
            {"role": "user", "content": f"Weather in city {n}?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": f"c{n}", "type": "function", "function": {"name": "get_weather", "arguments": json.dumps({"city": n})}}]},
            {"role": "tool", "tool_call_id": f"c{n}", "content": "sunny"},
            {"role": "assistant", "content": "It is sunny."},
        ],
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}],
        "reward": 1,
    }


def _bad_rows() -> dict[str, tuple[str, str]]:
    """kind -> (line text, the field its error must name)."""
    missing = _good_row(0)
    del missing["messages"]
    bad_role = _good_row(0)
    bad_role["messages"][1]["role"] = "robot"
    bad_args = _good_row(0)
    bad_args["messages"][2]["tool_calls"][0]["function"]["arguments"] = "{city: 3"
    no_call_id = _good_row(0)
    del no_call_id["messages"][3]["tool_call_id"]
    calls_not_list = _good_row(0)
    calls_not_list["messages"][2]["tool_calls"] = {"id": "c0"}
    return {
        "bad_json": ('{"messages": [', "<line>"),
        "missing_messages": (json.dumps(missing), "messages"),
        "bad_role": (json.dumps(bad_role), "messages[1].role"),
        "bad_arguments": (json.dumps(bad_args), "messages[2].tool_calls[0].function.arguments"),
        "tool_without_id": (json.dumps(no_call_id), "messages[3].tool_call_id"),
        "tool_calls_not_list": (json.dumps(calls_not_list), "messages[2].tool_calls"),
    }


# ---------------------------------------------------------------- tau-bench
def test_tau_bench_reads_200_trajectories_84_successes_with_inferred_tools():
    path = shared_file(TAU)
    assert detect_format(path) == "tau_bench"
    trajs = read_trajectories(path)
    assert len(trajs) == 200
    assert sum(t.reward == 1.0 for t in trajs) == 84
    first = trajs[0]
    assert first.meta["source"] == "tau-bench" and first.meta["tools_inferred"] is True
    assert first.id == f"tau-bench/{first.meta['task_id']}/{first.meta['trial']}"
    assert len({t.id for t in trajs}) == 200
    called = {c["function"]["name"] for t in trajs for m in t.messages for c in m.get("tool_calls") or []}
    specs = {tool["function"]["name"]: tool["function"] for tool in first.tools}
    assert set(specs) == called
    assert all(t.tools == first.tools for t in trajs)  # one tool list per file
    assert specs["get_user_details"]["parameters"]["properties"] == {"user_id": {"type": "string"}}
    assert '"required":' not in json.dumps(first.tools)  # no claims about required arguments
    # tool messages keep their name, as in the file
    raw = json.loads(path.read_text().splitlines()[0])
    assert first.messages == raw["messages"]


def test_tau_bench_skip_bad_keeps_every_good_row(tmp_path):
    path = shared_file(TAU)
    lines = path.read_text().splitlines()[:30]
    broken = json.loads(lines[10])
    broken["messages"][2]["role"] = "agent"
    lines[10] = json.dumps(broken)
    lines.insert(20, "not json")
    mixed = _write_lines(tmp_path / "mixed.jsonl", lines)
    with pytest.raises(BadRowError) as err:
        read_trajectories(mixed, "tau_bench")
    assert str(err.value).startswith(f"{mixed}:11: field 'messages[2].role'")
    report = ReadReport()
    trajs = read_trajectories(mixed, "tau_bench", skip_bad=True, report=report)
    assert len(trajs) == 29 and report.read == 29 and report.n_skipped == 2
    assert broken["task_id"] not in {t.meta["task_id"] for t in trajs if t.meta["trial"] == broken["trial"]}


# ---------------------------------------------------------------- SWE-agent
def test_swe_agent_traj_files_read_with_recoverable_thoughts_and_actions():
    simple, marsh = shared_file(SWE_SIMPLE), shared_file(SWE_MARSHMALLOW)
    for path, n_messages, reward in ((simple, 12, None), (marsh, 24, 1.0)):
        (traj,) = read_trajectories(path)
        raw = json.loads(path.read_text())
        assert len(traj.messages) == n_messages == len(raw["history"])
        assert traj.reward == reward
        for m in traj.messages:
            assert set(m) <= {"role", "content", "tool_calls", "tool_call_id", "name"}
        tool_msgs = [m for m in traj.messages if m["role"] == "tool"]
        assert tool_msgs and all(m["tool_call_id"].startswith("call_") for m in tool_msgs)
        actions = traj.meta["swe_agent_actions"]
        assert len(actions) == sum(1 for m in traj.messages if m["role"] == "assistant")
        assert swe_agent_history(traj) == raw["history"]
    (marsh_traj,) = read_trajectories(marsh)
    assert marsh_traj.meta["tools_source"] == "replay_config" and marsh_traj.meta["tools_inferred"] is False
    bash = next(t["function"] for t in marsh_traj.tools if t["function"]["name"] == "bash")
    assert bash["parameters"]["required"] == ["command"]
    assert marsh_traj.meta["exit_status"] == "submitted" and "diff --git" in marsh_traj.meta["submission"]
    assert marsh_traj.meta["swe_agent_config"]["base_commit"] == "bfd2593d4b416122e30cdefe0c72d322ef471611"
    (simple_traj,) = read_trajectories(simple)
    assert simple_traj.meta["tools_inferred"] is True
    assert {t["function"]["name"] for t in simple_traj.tools} == {"find_file", "open", "edit", "bash", "submit"}


def test_swe_agent_folder_and_jsonl_of_trajectories(tmp_path):
    simple, marsh = shared_file(SWE_SIMPLE), shared_file(SWE_MARSHMALLOW)
    folder = tmp_path / "run"
    for p in (simple, marsh):
        (folder / p.stem).mkdir(parents=True)
        shutil.copy(p, folder / p.stem / p.name)
    from_folder = read_trajectories(folder)
    assert detect_format(folder) == "swe_agent"
    assert [len(t.messages) for t in from_folder] == [12, 24]
    jsonl = _write_lines(tmp_path / "trajs.jsonl", [json.dumps(json.loads(p.read_text())) for p in (simple, marsh)])
    assert detect_format(jsonl) == "swe_agent"
    from_jsonl = read_trajectories(jsonl)
    assert [t.messages for t in from_jsonl] == [t.messages for t in from_folder]
    assert [t.reward for t in from_jsonl] == [None, 1.0]


def test_swe_agent_bad_file_names_file_and_field_and_skip_bad_keeps_the_good_one(tmp_path):
    marsh = shared_file(SWE_MARSHMALLOW)
    data = json.loads(marsh.read_text())
    data["history"][3].pop("tool_call_ids")
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "bad.traj").write_text(json.dumps(data))
    shutil.copy(marsh, folder / "good.traj")
    with pytest.raises(BadRowError) as err:
        read_trajectories(folder)
    assert f"bad.traj:1: field 'history[3].tool_call_id'" in str(err.value)
    report = ReadReport()
    trajs = read_trajectories(folder, skip_bad=True, report=report)
    assert len(trajs) == 1 and trajs[0].reward == 1.0 and report.n_skipped == 1


# ---------------------------------------------------------------- OpenAI chat JSONL
def test_openai_round_trip_is_lossless_and_unknown_keys_go_to_meta(tmp_path):
    path = shared_file(TAU)
    trajs = read_trajectories(path)[:40]
    for suffix in ("out.jsonl", "out.jsonl.gz"):
        out = tmp_path / suffix
        assert write_trajectories(trajs, out) == 40
        assert detect_format(out) == "openai"
        back = read_trajectories(out)
        assert [t.to_dict() for t in back] == [t.to_dict() for t in trajs]
    rows = [_good_row(1), {**_good_row(2), "task": "weather", "meta": {"split": "train"}}]
    src = _write_lines(tmp_path / "chat.jsonl", [json.dumps(r) for r in rows])
    a, b = read_trajectories(src)
    assert a.id == "good-1" and a.reward == 1.0 and a.tools == rows[0]["tools"]
    assert b.meta == {"id": "good-2", "task": "weather", "split": "train"}
    again = read_trajectories(_write_lines(tmp_path / "again.jsonl", [json.dumps(t.to_dict()) for t in (a, b)]))
    assert [t.to_dict() for t in again] == [a.to_dict(), b.to_dict()]


@pytest.mark.parametrize("kind", list(_bad_rows()))
def test_a_bad_line_names_file_line_and_field(tmp_path, kind):
    text, field_name = _bad_rows()[kind]
    path = _write_lines(tmp_path / "data.jsonl", [json.dumps(_good_row(1)), json.dumps(_good_row(2)), text, json.dumps(_good_row(3))])
    with pytest.raises(BadRowError) as err:
        read_trajectories(path, "openai")
    assert err.value.line == 3 and err.value.field == field_name
    assert str(err.value).startswith(f"{path}:3: field '{field_name}': ")


def test_skip_bad_keeps_every_good_row_and_counts_reasons(tmp_path):
    bad = _bad_rows()
    lines, good_ids = [], []
    for n, (text, _) in enumerate(bad.values()):
        lines += [json.dumps(_good_row(n)), text]
        good_ids.append(f"good-{n}")
    lines.append(json.dumps(_good_row(99)))
    good_ids.append("good-99")
    path = _write_lines(tmp_path / "data.jsonl", lines)
    report = ReadReport()
    trajs = read_trajectories(path, skip_bad=True, report=report)
    assert [t.id for t in trajs] == good_ids
    assert report.read == len(good_ids) and report.n_skipped == len(bad)
    fields = {reason.split(":")[0] for reason in report.skipped}
    assert fields == {re.sub(r"\[\d+\]", "[]", f) for _, f in bad.values()}  # reasons group by field shape
    assert all(count == 1 for count in report.skipped.values())


def test_tool_message_must_answer_an_earlier_call(tmp_path):
    row = _good_row(1)
    row["messages"][3]["tool_call_id"] = "nope"
    path = _write_lines(tmp_path / "x.jsonl", [json.dumps(row)])
    with pytest.raises(BadRowError, match=r"x.jsonl:1: field 'messages\[3\].tool_call_id': answers no earlier tool call"):
        read_trajectories(path)


# ---------------------------------------------------------------- detection and our pivot JSONL
def test_detection_by_keys_and_wrong_kind_errors(tmp_path):
    assert classify_keys({"messages", "tools"}) == "openai"
    assert classify_keys({"messages", "task_id", "trial", "reward"}) == "tau_bench"
    assert classify_keys({"history", "info"}) == "swe_agent"
    assert classify_keys({"id", "context", "expert", "tools"}) == "pivots"
    assert classify_keys({"responses_create_params", "expected_action"}) == "nemo_gym"
    assert classify_keys({"prompt"}) is None
    unknown = _write_lines(tmp_path / "u.jsonl", ['{"prompt": "x"}'])
    with pytest.raises(ValueError, match="cannot tell the format"):
        read_trajectories(unknown)
    chat = _write_lines(tmp_path / "c.jsonl", [json.dumps(_good_row(1))])
    with pytest.raises(ValueError, match="holds trajectories"):
        read_pivots(chat)


def test_pivot_jsonl_round_trip_and_errors(tmp_path):
    row = _good_row(1)
    pivot = Pivot(id="p1", domain="tool_use", context=row["messages"][:2], expert=row["messages"][2], tools=row["tools"],
                  meta={"turn": 2})
    out = tmp_path / "pivots.jsonl.gz"
    assert write_pivots([pivot, pivot], out) == 2
    assert detect_format(out) == "pivots"
    assert [p.to_dict() for p in read_pivots(out)] == [pivot.to_dict()] * 2
    bad = pivot.to_dict()
    bad["expert"] = {"role": "user", "content": "hi"}
    path = _write_lines(tmp_path / "bad.jsonl", [json.dumps(pivot.to_dict()), json.dumps(bad)])
    with pytest.raises(BadRowError, match=r"bad.jsonl:2: field 'expert.role'"):
        read_pivots(path)
    report = ReadReport()
    assert len(read_pivots(path, skip_bad=True, report=report)) == 1 and report.n_skipped == 1


def test_trajectory_written_then_read_keeps_fixture(tmp_path):
    from pivot_envs.types import Fixture

    traj = Trajectory(messages=_good_row(1)["messages"], fixture=Fixture(files={"a.txt": "x"}, setup="true"), meta={"id": "f"})
    out = tmp_path / "t.jsonl"
    write_trajectories([traj], out)
    (back,) = read_trajectories(out)
    assert back.to_dict() == traj.to_dict()
