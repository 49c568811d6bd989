"""ATIF (Harbor's Agent Trajectory Interchange Format) in and out: detection, the mapping to chat, pivots
identical to those of the OpenAI chat form, ATIF written by extract, bad input named by file, line and field.

Documents come hand-written (no dependency) and, when the ``atif`` package is installed (the dev extra),
built with its reference pydantic models, which also check every document written here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.conftest import shared_file
from pivot_envs.cli import app
from pivot_envs.formats import (
    atif_from_trajectory,
    classify_keys,
    detect_format,
    read_trajectories,
    trajectories_from_atif,
    write_pivots,
    write_trajectories,
)
from pivot_envs.jsonl import BadRowError, ReadReport
from pivot_envs.pipeline.extract import extract_pivots
from pivot_envs.types import Fixture, Trajectory

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city.",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]


def _call(call_id: str, city: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "get_weather", "arguments": json.dumps({"city": city})}}


def _chat_row(n: int) -> dict[str, Any]:
    """One trajectory in OpenAI chat form: parallel calls, reasoning, a non-tool observation, two text turns."""
    return {
        "id": f"run-{n}",
        "messages": [
            {"role": "system", "content": "You are a weather bot."},
            {"role": "user", "content": f"Weather in Paris and Rome, day {n}?"},
            {"role": "assistant", "content": None, "reasoning_content": "Two cities: two calls.",
             "tool_calls": [_call(f"c{n}a", "Paris"), _call(f"c{n}b", "Rome")]},
            {"role": "tool", "tool_call_id": f"c{n}a", "content": "sunny"},
            {"role": "tool", "tool_call_id": f"c{n}b", "content": "rain"},
            {"role": "assistant", "content": "Paris is sunny, Rome has rain."},
            {"role": "user", "content": "(the user left the chat)"},
            {"role": "user", "content": "And Oslo?"},
            {"role": "assistant", "content": "Checking.", "tool_calls": [_call(f"c{n}c", "Oslo")]},
            {"role": "tool", "tool_call_id": f"c{n}c", "content": "snow"},
            {"role": "assistant", "content": [{"type": "text", "text": "Oslo has snow."}]},
        ],
        "tools": TOOLS,
        "reward": 0.5 + n,
    }


def _atif_doc(n: int) -> dict[str, Any]:
    """The same trajectory as :func:`_chat_row`, hand-written as an ATIF v1.8 document."""
    return {
        "schema_version": "ATIF-v1.8",
        "session_id": f"run-{n}",
        "agent": {"name": "weather-agent", "version": "1.0", "model_name": "m", "tool_definitions": TOOLS},
        "steps": [
            {"step_id": 1, "source": "system", "message": "You are a weather bot."},
            {"step_id": 2, "source": "user", "message": f"Weather in Paris and Rome, day {n}?",
             "timestamp": "2026-01-01T10:00:00Z"},
            {"step_id": 3, "source": "agent", "message": "", "reasoning_content": "Two cities: two calls.",
             "tool_calls": [{"tool_call_id": f"c{n}a", "function_name": "get_weather", "arguments": {"city": "Paris"}},
                            {"tool_call_id": f"c{n}b", "function_name": "get_weather", "arguments": {"city": "Rome"}}],
             "observation": {"results": [{"source_call_id": f"c{n}a", "content": "sunny"},
                                         {"source_call_id": f"c{n}b", "content": "rain"}]},
             "metrics": {"prompt_tokens": 30, "completion_tokens": 12}},
            {"step_id": 4, "source": "agent", "message": "Paris is sunny, Rome has rain.",
             "observation": {"results": [{"content": "(the user left the chat)"}]}},
            {"step_id": 5, "source": "user", "message": "And Oslo?"},
            {"step_id": 6, "source": "agent", "message": "Checking.",
             "tool_calls": [{"tool_call_id": f"c{n}c", "function_name": "get_weather", "arguments": {"city": "Oslo"}}],
             "observation": {"results": [{"source_call_id": f"c{n}c", "content": "snow"}]}},
            {"step_id": 7, "source": "agent", "message": [{"type": "text", "text": "Oslo has snow."}]},
        ],
        "extra": {"reward": 0.5 + n, "harness": "test"},
    }


def _write_lines(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def _pivot_view(trajs: list[Trajectory]) -> list[tuple]:
    """What must agree between the two forms: context, expert, tools, reward (and the pivot id)."""
    pivots, _ = extract_pivots(trajs, "tool_use")
    return [(p.id, p.context, p.expert, p.tools, p.meta.get("trajectory_reward")) for p in pivots]


def _run(*args: Any):
    return CliRunner().invoke(app, [str(a) for a in args])


# ---------------------------------------------------------------- reading, without the atif package
def test_hand_written_atif_gives_the_pivots_of_its_openai_chat_form(tmp_path):
    chat = read_trajectories(_write_lines(tmp_path / "chat.jsonl", [_chat_row(1), _chat_row(2)]))
    expected = _pivot_view(chat)
    assert len(expected) == 8  # 4 assistant turns per trajectory, the duplicated first turns differ by day

    one = tmp_path / "one.json"
    one.write_text(json.dumps(_atif_doc(1), indent=2))
    folder = tmp_path / "job"
    for n in (1, 2):
        (folder / f"trial-{n}" / "agent").mkdir(parents=True)
        (folder / f"trial-{n}" / "agent" / "trajectory.json").write_text(json.dumps(_atif_doc(n), indent=2))
        (folder / f"trial-{n}" / "result.json").write_text(json.dumps({"reward": 1, "trial": n}))  # passed over
    lines = _write_lines(tmp_path / "docs.jsonl", [_atif_doc(1), _atif_doc(2)])
    for path in (one, folder, lines):
        assert detect_format(path) == "atif"
    assert _pivot_view(read_trajectories(one)) == expected[:4]
    assert _pivot_view(read_trajectories(folder)) == expected
    report = ReadReport()
    trajs = read_trajectories(lines, report=report)
    assert _pivot_view(trajs) == expected and report.read == 2

    t = trajs[0]
    assert [m["role"] for m in t.messages] == [m["role"] for m in _chat_row(1)["messages"]]
    assert t.messages == _chat_row(1)["messages"] and t.tools == TOOLS and t.reward == 1.5
    assert t.id == "run-1" and t.meta["session_id"] == "run-1" and t.meta["source"] == "atif"
    assert t.meta["atif"] == {"schema_version": "ATIF-v1.8", "extra": {"harness": "test"},
                              "agent": {"name": "weather-agent", "version": "1.0", "model_name": "m"}}
    assert t.meta["atif_steps"] == [  # nothing lost: the step fields chat has no place for, by message index
        {"index": 1, "source": "user", "timestamp": "2026-01-01T10:00:00Z"},
        {"index": 2, "source": "agent", "metrics": {"prompt_tokens": 30, "completion_tokens": 12}},
    ]


def test_detection_and_the_errors_of_folders_and_json_files(tmp_path):
    assert classify_keys({"schema_version", "agent", "steps"}) == "atif"
    assert classify_keys({"agent", "steps"}) == "atif"
    assert classify_keys({"steps"}) is None
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match=r"empty: a folder is read as SWE-agent trajectories \(.traj files\) or ATIF"):
        detect_format(empty)
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"model": "m"}))
    with pytest.raises(ValueError, match=r"other: none of its 1 .json files is an ATIF document \(e.g. .*config.json "
                                         r"holds an object with keys \['model'\]\)"):
        read_trajectories(other)
    listed = tmp_path / "listed.json"
    listed.write_text(json.dumps([_atif_doc(1)]))
    with pytest.raises(ValueError, match="ATIF document"):
        detect_format(listed)
    with pytest.raises(BadRowError, match=r"listed.json:1: field '<row>': must be an ATIF document.*jq -c"):
        read_trajectories(listed, "atif")


def test_subagents_become_trajectories_of_their_own():
    doc = _atif_doc(1)
    sub = {"schema_version": "ATIF-v1.8", "trajectory_id": "search-1", "agent": {"name": "searcher", "version": "1"},
           "steps": [{"step_id": 1, "source": "user", "message": "find Oslo"},
                     {"step_id": 2, "source": "agent", "message": "Oslo is in Norway."}]}
    doc["subagent_trajectories"] = [sub]
    doc["steps"][5]["observation"]["results"][0]["subagent_trajectory_ref"] = [{"trajectory_id": "search-1"}]
    parent, child = trajectories_from_atif(doc)
    assert parent.id == "run-1" and child.id == "run-1/search-1" and child.meta["atif_parent_id"] == "run-1"
    assert [m["role"] for m in child.messages] == ["user", "assistant"] and child.tools == []
    assert parent.meta["atif_steps"][-1] == {"index": 8, "source": "agent", "results": [
        {"index": 9, "subagent_trajectory_ref": [{"trajectory_id": "search-1"}]}]}


# ---------------------------------------------------------------- bad input
def _bad_docs() -> dict[str, tuple[dict, str, str]]:
    """kind -> (document, the field its error names, a word of the problem)."""
    def doc(edit) -> dict:
        d = _atif_doc(0)
        edit(d)
        return d

    return {
        "no_version": (doc(lambda d: d.pop("schema_version")), "schema_version", "missing"),
        "v2": (doc(lambda d: d.update(schema_version="ATIF-v2.0")), "schema_version", "not an ATIF v1 version"),
        "no_steps": (doc(lambda d: d.update(steps=[])), "steps", "is empty"),
        "bad_source": (doc(lambda d: d["steps"][1].update(source="human")), "steps[1].source", "unknown step source"),
        "no_message": (doc(lambda d: d["steps"][4].pop("message")), "steps[4].message", "missing"),
        "args_list": (doc(lambda d: d["steps"][2]["tool_calls"][0].update(arguments=[1])),
                      "steps[2].tool_calls[0].arguments", "JSON object"),
        "no_function": (doc(lambda d: d["steps"][5]["tool_calls"][0].pop("function_name")),
                        "steps[5].tool_calls[0].function_name", "missing function name"),
        "stray_result": (doc(lambda d: d["steps"][2]["observation"]["results"][1].update(source_call_id="zz")),
                         "steps[2].observation.results[1].source_call_id", "answers no tool call of this step"),
        "user_calls": (doc(lambda d: d["steps"][1].update(tool_calls=[])), "steps[1].tool_calls", "only agent steps"),
        "bad_reward": (doc(lambda d: d["extra"].update(reward="high")), "extra.reward", "number or null"),
        "bad_tools": (doc(lambda d: d["agent"].update(tool_definitions=[{"type": "function", "function": {}}])),
                      "agent.tool_definitions[0].function.name", "missing function name"),
        "bad_part": (doc(lambda d: d["steps"][6].update(message=[{"type": "video"}])), "steps[6].message[0].type",
                     "unknown content part type"),
    }


@pytest.mark.parametrize("kind", list(_bad_docs()))
def test_a_bad_document_names_file_line_and_field(tmp_path, kind):
    doc, field, problem = _bad_docs()[kind]
    lines = _write_lines(tmp_path / "docs.jsonl", [_atif_doc(1), doc, _atif_doc(2)])
    with pytest.raises(BadRowError) as err:
        read_trajectories(lines)
    assert (err.value.line, err.value.field) == (2, field) and problem in err.value.problem
    assert str(err.value).startswith(f"{lines}:2: field '{field}': ")
    single = tmp_path / "doc.json"
    single.write_text(json.dumps(doc, indent=2))
    with pytest.raises(BadRowError, match=rf"doc.json:1: field '{re.escape(field)}'"):
        read_trajectories(single, "atif")


def test_skip_bad_keeps_every_good_document_in_lines_and_folders(tmp_path):
    bad = [doc for doc, _, _ in _bad_docs().values()]
    rows: list[Any] = []
    for n, doc in enumerate(bad):
        rows += [_atif_doc(n), doc]
    rows += ['{"schema_version": "ATIF-v1.8", "steps": [', _atif_doc(99)]
    lines = _write_lines(tmp_path / "docs.jsonl", rows)
    report = ReadReport()
    trajs = read_trajectories(lines, skip_bad=True, report=report)
    assert [t.id for t in trajs] == [f"run-{n}" for n in range(len(bad))] + ["run-99"]
    assert report.read == len(bad) + 1 and report.n_skipped == len(bad) + 1

    folder = tmp_path / "job"
    folder.mkdir()
    (folder / "a.json").write_text(json.dumps(_atif_doc(1)))
    (folder / "b.json").write_text(json.dumps(bad[3]))
    (folder / "c.json").write_text("{not json")
    (folder / "d.json").write_text(json.dumps(_atif_doc(2)))
    with pytest.raises(BadRowError, match=r"b.json:1: field 'steps\[1\].source'"):
        read_trajectories(folder)
    report = ReadReport()
    assert [t.id for t in read_trajectories(folder, skip_bad=True, report=report)] == ["run-1", "run-2"]
    assert report.read == 2 and report.n_skipped == 2


# ---------------------------------------------------------------- writing
def test_trajectories_written_as_atif_read_back_the_same(tmp_path):
    rows = [_chat_row(1), {
        "id": "odd",
        "messages": [
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "What is this?"},
                                         {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "k1", "type": "function", "function": {"name": "look", "arguments": '{"what":"it"}'}}]},
            {"role": "tool", "tool_call_id": "k1", "name": "look", "content": "a cat"},
            {"role": "assistant", "content": None},
        ],
        "meta": {"task_id": "t7"},
        "fixture": {"files": {"a.txt": "x"}, "setup": "true", "workdir": "/w"},
    }]
    trajs = read_trajectories(_write_lines(tmp_path / "chat.jsonl", rows))
    out = tmp_path / "out.atif.jsonl.gz"
    assert write_trajectories(trajs, out, fmt="atif") == 2
    assert detect_format(out) == "atif"
    back = read_trajectories(out)
    for a, b in zip(trajs, back):
        assert (b.messages, b.tools, b.reward, b.id) == (a.messages, a.tools, a.reward, a.id)
    assert back[1].meta["task_id"] == "t7" and back[1].fixture == Fixture(files={"a.txt": "x"}, setup="true", workdir="/w")
    # ATIF read -> written -> read keeps the messages and the step fields
    atif_trajs = read_trajectories(_write_lines(tmp_path / "docs.jsonl", [_atif_doc(1)]))
    again = read_trajectories(_write_lines(tmp_path / "again.jsonl", [atif_from_trajectory(atif_trajs[0])]))
    assert again[0].messages == atif_trajs[0].messages and again[0].meta["atif_steps"] == atif_trajs[0].meta["atif_steps"]
    with pytest.raises(ValueError, match=r"out.json: ATIF output is JSON lines.*\.jsonl"):
        write_trajectories(trajs, tmp_path / "out.json", fmt="atif")
    lost = Trajectory(messages=[{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "x", "content": "?"}])
    with pytest.raises(ValueError, match=r"messages\[1\]: a tool message answering 'x'"):
        write_trajectories([lost], tmp_path / "lost.jsonl", fmt="atif")


def test_extract_reads_an_atif_folder_and_writes_atif_pivots(tmp_path):
    folder = tmp_path / "job"
    folder.mkdir()
    for n in (1, 2):
        (folder / f"t{n}.json").write_text(json.dumps(_atif_doc(n)))
    (folder / "config.json").write_text(json.dumps({"agent": "weather-agent"}))
    ours, atif_out = tmp_path / "pivots.jsonl", tmp_path / "pivots.atif.jsonl"
    for out, extra in ((ours, []), (atif_out, ["--output-format", "atif"])):
        result = _run("extract", folder, "-o", out, "-d", "tool_use", "--min-reward", "1", *extra)
        assert result.exit_code == 0, result.output
    pivots = [json.loads(line) for line in ours.read_text().splitlines()]
    docs = [json.loads(line) for line in atif_out.read_text().splitlines()]
    assert len(pivots) == len(docs) == 8
    back = read_trajectories(atif_out)  # each document: the pivot's context, then its expert
    for pivot, doc, traj in zip(pivots, docs, back):
        assert doc["schema_version"] == "ATIF-v1.7" and doc["trajectory_id"] == pivot["id"]
        assert doc["steps"][-1]["source"] == "agent" and "observation" not in doc["steps"][-1]
        assert doc["extra"]["pivot_envs"]["pivot"]["meta"] == pivot["meta"]
        assert traj.messages == pivot["context"] + [pivot["expert"]] and traj.tools == pivot["tools"]
        assert traj.reward == pivot["meta"]["trajectory_reward"]


def test_extract_cli_errors_name_file_line_field_and_the_atif_output_rules(tmp_path):
    bad, field, _ = _bad_docs()["stray_result"]
    lines = _write_lines(tmp_path / "docs.jsonl", [_atif_doc(1), bad])
    result = _run("extract", lines, "-o", tmp_path / "p.jsonl", "-d", "tool_use")
    assert result.exit_code == 2 and f"docs.jsonl:2: field '{field}'" in result.output
    assert "--skip-bad" in result.output
    result = _run("extract", lines, "-o", tmp_path / "p.jsonl", "-d", "tool_use", "--skip-bad")
    assert result.exit_code == 0 and "rows skipped" in result.output
    result = _run("extract", lines, "-o", tmp_path / "p.json", "-d", "tool_use", "--output-format", "atif")
    assert result.exit_code == 2 and "one ATIF document per line" in result.output
    result = _run("extract", lines, "-o", tmp_path / "p.jsonl", "-d", "tool_use", "--output-format", "atf")
    assert result.exit_code == 2 and "use pivots, nemo_gym, atif" in result.output


def test_real_tau_bench_trajectories_through_atif_keep_their_pivots(tmp_path):
    trajs = read_trajectories(shared_file("tau-bench/gpt-4o-airline.jsonl"))[:30]
    out = tmp_path / "tau.atif.jsonl"
    write_trajectories(trajs, out, fmt="atif")
    back = read_trajectories(out)
    assert _pivot_view(back) == _pivot_view(trajs)
    assert [t.meta["task_id"] for t in back] == [t.meta["task_id"] for t in trajs]


# ---------------------------------------------------------------- with the reference models (pip install atif)
def test_documents_built_with_the_reference_models_give_the_chat_forms_pivots(tmp_path):
    atif = pytest.importorskip("atif")
    docs = []
    for n in (1, 2):
        steps = [atif.Step(step_id=1, source="system", message="You are a weather bot."),
                 atif.Step(step_id=2, source="user", message=f"Weather in Paris and Rome, day {n}?",
                           timestamp="2026-01-01T10:00:00Z"),
                 atif.Step(step_id=3, source="agent", message="", reasoning_content="Two cities: two calls.",
                           tool_calls=[atif.ToolCall(tool_call_id=f"c{n}a", function_name="get_weather", arguments={"city": "Paris"}),
                                       atif.ToolCall(tool_call_id=f"c{n}b", function_name="get_weather", arguments={"city": "Rome"})],
                           observation=atif.Observation(results=[atif.ObservationResult(source_call_id=f"c{n}a", content="sunny"),
                                                                 atif.ObservationResult(source_call_id=f"c{n}b", content="rain")])),
                 atif.Step(step_id=4, source="agent", message="Paris is sunny, Rome has rain.",
                           observation=atif.Observation(results=[atif.ObservationResult(content="(the user left the chat)")])),
                 atif.Step(step_id=5, source="user", message="And Oslo?"),
                 atif.Step(step_id=6, source="agent", message="Checking.",
                           tool_calls=[atif.ToolCall(tool_call_id=f"c{n}c", function_name="get_weather", arguments={"city": "Oslo"})],
                           observation=atif.Observation(results=[atif.ObservationResult(source_call_id=f"c{n}c", content="snow")])),
                 atif.Step(step_id=7, source="agent", message=[atif.ContentPart(type="text", text="Oslo has snow.")])]
        doc = atif.Trajectory(schema_version="ATIF-v1.8", session_id=f"run-{n}", steps=steps, extra={"reward": 0.5 + n},
                              agent=atif.Agent(name="weather-agent", version="1.0", tool_definitions=TOOLS))
        docs.append(doc.to_json_dict())
    chat = read_trajectories(_write_lines(tmp_path / "chat.jsonl", [_chat_row(1), _chat_row(2)]))
    from_models = read_trajectories(_write_lines(tmp_path / "docs.jsonl", docs))
    assert _pivot_view(from_models) == _pivot_view(chat)
    assert all(atif.Trajectory.model_validate(_atif_doc(n)) for n in (1, 2))  # the hand-written ones are valid too


def test_every_document_written_is_accepted_by_the_reference_models(tmp_path):
    atif = pytest.importorskip("atif")
    chat = read_trajectories(_write_lines(tmp_path / "chat.jsonl", [_chat_row(1), _chat_row(2)]))
    from_atif = read_trajectories(_write_lines(tmp_path / "docs.jsonl", [_atif_doc(1), _atif_doc(2)]))
    pivots, _ = extract_pivots(chat + from_atif, "tool_use")
    written = [tmp_path / "t.jsonl", tmp_path / "p.jsonl"]
    write_trajectories(chat + from_atif, written[0], fmt="atif")
    write_pivots(pivots, written[1], fmt="atif")
    for path in written:
        for line in path.read_text().splitlines():
            doc = json.loads(line)
            model = atif.Trajectory.model_validate(doc)
            assert model.to_json_dict() == doc  # nothing the models would drop or change
    restored = json.loads(written[0].read_text().splitlines()[2])  # from_atif[0]: its timestamps and metrics are back
    assert restored["steps"][1]["timestamp"] == "2026-01-01T10:00:00Z"
    assert restored["steps"][2]["metrics"] == {"prompt_tokens": 30, "completion_tokens": 12}
