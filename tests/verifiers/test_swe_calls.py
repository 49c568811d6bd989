"""SWE calls judged by their content (issue 48, item 4), on the bundled swe test split in the swe world: what an edit
writes, what a read reads, what a test run runs; a command by every program of its chain."""

from __future__ import annotations

import json

import pytest

from pivot_envs.envs_data import load_pivots
from pivot_envs.verifiers import build_verifier
from pivot_envs.verifiers.defaults import default_verifier_spec
from pivot_envs.verifiers.helpers.shell_programs import command_kind, command_paths, outside


def call(name: str, **arguments) -> dict:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}]}


@pytest.mark.parametrize("command,kind", [
    ("cat f && rm -rf ./*", "destroy"), ("rm reproduce.py", "destroy"), ("sed -n '1,200p' a/b.py", "read"),
    ("sed -i '3s/.*/x/' a.py", "write"), ("echo hi > f", "write"), ("ls 2>/dev/null", "read"),
    ("python3 -c \"open('f', 'w').write('x')\"", "write"), ("python -c \"print('all tests passed')\"", "run"),
    ("grep -rn 'def get_page' .", "search"), ("find . -name x.py -delete", "destroy"), ("printf 'ok\\n'", "other")])
def test_a_command_is_told_by_every_program_of_it(command, kind):
    assert command_kind(command) == kind


def test_paths_outside_the_repository():
    assert command_paths("sed -n '1,200p' a/b.py") == ["a/b.py"]
    assert outside("/etc/passwd", "/testbed") and outside("../x", "/testbed") and not outside("/testbed/a.py", "/testbed")


def pivot_with(name: str, pick=lambda args: True):
    return next(p for p in load_pivots("swe", "test") if p.expert["tool_calls"][0]["function"]["name"] == name
                and pick(json.loads(p.expert["tool_calls"][0]["function"]["arguments"])))


@pytest.fixture(scope="module")
def swe():
    return build_verifier(default_verifier_spec("swe"))


def test_edits_by_what_they_write(swe, bwrap_ok):
    pivot = pivot_with("edit", lambda a: a["start_line"] > 3)
    args = json.loads(pivot.expert["tool_calls"][0]["function"]["arguments"])
    near = {**args, "replacement": args["replacement"] + " "}
    got = swe.verify_many([call("edit", **{**args, "replacement": "pass"}), call("edit", **{**args, "replacement": ""}),
                           call("bash", command="rm -rf ./*"), call("edit", **near), pivot.expert], [pivot] * 5)
    assert [v.passed for v in got] == [False, False, False, True, True], [v.reason for v in got]
    assert all(v.error is None for v in got)


def test_reads_runs_and_text_after_the_call(swe, bwrap_ok):
    read = pivot_with("open_file")
    path = json.loads(read.expert["tool_calls"][0]["function"]["arguments"])["path"]
    run = pivot_with("run_tests")
    got = swe.verify_many([call("bash", command="cat /etc/passwd"), call("bash", command=f"sed -n '1,200p' {path}"),
                           call("bash", command=f"cat {path} && rm -rf ./*"),
                           call("bash", command="python -c \"print('all tests passed')\""),
                           call("bash", command="python run_tests.py"),
                           f'<tool_call>{{"name": "open_file", "arguments": {{"path": "{path}"}}}}</tool_call>\n'
                           "<tool_response>ok</tool_response>"],
                          [read, read, read, run, run, read])
    assert [v.passed for v in got] == [False, True, False, False, True, False], [v.reason for v in got]
    assert "outside the repository" in got[0].reason and "text after the tool call" in got[5].reason
