"""What a terminal command shows, with a budget and the world's own limits (issue 48, items 6 and 7): a spray of
numbers, a dump of a small tree and output typed in (plainly or encoded) fail; a command the terminal world refuses
(past the shell's size limit) or fails (a trailing carriage return) fails too; ``2>/dev/null`` added, and ``ls -R DIR``
for ``find DIR -type f | sort``, pass."""

from __future__ import annotations

import base64
import json

import pytest

from pivot_envs.types import Fixture, Pivot
from pivot_envs.verifiers import build_verifier
from pivot_envs.verifiers.defaults import default_verifier_spec
from pivot_envs.verifiers.helpers.information import command_units, compare
from pivot_envs.worlds import build_world

FIXTURE = Fixture(files={"logs/app.log": "ok\nERROR a\nERROR b\n", "notes.txt": "2 items\n",
                         "releases/current/release/VERSION": "2.3.5\n", "releases/current/release/bin/run.sh": "x\n"},
                  workdir="/work/shop")
BASH = [{"type": "function", "function": {"name": "bash", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}]


def bash(command: str) -> dict:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": command})}}]}


def pivot(command: str) -> Pivot:
    return Pivot(id="p-" + command, domain="terminal", context=[{"role": "user", "content": "look"}],
                 expert=bash(command), fixture=FIXTURE, tools=BASH)


@pytest.fixture(scope="module")
def terminal():
    return build_verifier(default_verifier_spec("terminal"))


def verdicts(verifier, expert: str, candidates: list[str]) -> list:
    return verifier.verify_many([bash(c) for c in candidates], pivot(expert))


def test_sprays_small_tree_dumps_and_typed_output_fail(terminal, bwrap_ok):
    encoded = base64.b64encode(b"2\n").decode()
    got = verdicts(terminal, "grep -c ERROR logs/app.log",
                   ["echo {0..12}", "printf '2\\n'", f"echo {encoded} | base64 -d", "echo 2 | rev",
                    "grep ERROR logs/app.log | wc -l"])
    assert [v.passed for v in got] == [False, False, False, False, True], [v.reason for v in got]
    assert "a spray" in got[0].reason and all("typed in" in v.reason for v in got[1:3])
    # "echo 2 | rev" says the 2 in its own command line: it shows nothing the command did not say
    dumps = verdicts(terminal, "ls logs", ["find .", "ls -R", "ls -l logs"])
    assert [v.passed for v in dumps] == [False, False, True], [v.reason for v in dumps]


def test_the_false_rejects_of_the_information_rule_are_fixed(terminal, bwrap_ok):
    got = verdicts(terminal, "grep -c ERROR logs/app.log", ["grep -c ERROR logs/app.log 2>/dev/null"])
    got += verdicts(terminal, "find releases/current -type f | sort", ["ls -R releases/current"])
    assert all(v.passed for v in got), [v.reason for v in got]
    assert "2" not in command_units("grep -c x f 2>/dev/null") and "/dev/null" in command_units("ls 2>/dev/null")
    found, _ = compare("releases/current/release/VERSION\n", "releases/current/release:\nVERSION\n",
                       "find releases/current -type f", "ls -R releases/current")
    assert found.carried


def test_what_the_world_refuses_or_fails_the_verifier_refuses(terminal, bwrap_ok):
    huge = "cat notes.txt # " + "x" * 140_000
    got = verdicts(terminal, "cat notes.txt", [huge, "cat notes.txt\r", "cat notes.txt"])
    assert [v.passed for v in got] == [False, False, True], [v.reason for v in got]
    assert "the world refuses the call" in got[0].reason
    world = build_world("terminal")
    try:
        assert world.refusal("bash", {"command": huge}) is not None
        assert world.refusal("bash", {"command": "ls"}) is None
    finally:
        world.close()
