"""Equivalence cases built from real shell commands (tldr-pages, ``../shared/data/tldr/commands.jsonl``).

Each command becomes the expert's ``bash`` tool call; re-spelled versions of
the same call (other key order, extra whitespace, an explicit default, a
number sent as text, the Hermes text format) must pass ``tool_call``, and the
command of another tldr page must fail it. Run in the sandbox, the same
commands written as plain text (as tldr and NL2Bash store them) must get the
same ``exec`` verdicts as when wrapped in ``bash`` calls.
"""

from __future__ import annotations

import json
import random
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from pivot_envs.actions import message_text, parse_action
from pivot_envs.types import Fixture, Pivot
from pivot_envs.verifiers.base import build_verifier
from pivot_envs.verifiers.defaults import EXACT_NORMALIZED
from pivot_envs.verifiers.sandbox import SandboxUnavailable, get_backend
from pivot_envs.verifiers.tool_name import command_word

from tests.conftest import scaled

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "tldr" / "commands.jsonl"
BASH = {"type": "function", "function": {"name": "bash", "description": "Run a shell command", "parameters": {
    "type": "object",
    "properties": {"command": {"type": "string"}, "timeout": {"type": "integer", "default": 120}},
    "required": ["command"],
}}}
STEP = 40  # every 40th command: ~740 real commands, well under a second per verifier


@pytest.fixture(scope="module")
def rows() -> list[dict[str, Any]]:
    if not DATA.exists():
        pytest.skip(f"{DATA} is absent (real third-party data lives in ../shared/data beside the project)")
    with DATA.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def sample(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return rows[::STEP]


def bash_call(arguments: str) -> dict[str, Any]:
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": "c0", "type": "function", "function": {"name": "bash", "arguments": arguments}}]}


def make_pivot(command: str, i: int) -> Pivot:
    return Pivot(id=f"tldr-{i}", domain="terminal", context=[{"role": "user", "content": "do it"}],
                 expert=bash_call(json.dumps({"command": command})), tools=[BASH])


def respellings(command: str) -> dict[str, dict[str, Any]]:
    """Functionally equivalent spellings of the call ``bash(command=command)``."""
    return {
        "reordered+default": bash_call(json.dumps({"timeout": 120, "command": command}, indent=2)),
        "surrounding whitespace": bash_call('{ "command" :  ' + json.dumps("  " + command + "\n") + " }"),
        "number as text": bash_call(json.dumps({"command": command, "timeout": "120"})),
        "null timeout": bash_call(json.dumps({"timeout": None, "command": command})),
    }


def test_respelled_calls_pass_tool_call(sample: list[dict[str, Any]]) -> None:
    # a command's surrounding whitespace means nothing to a shell; tool_call keeps it by default (IDs). The
    # timeout as text ("120") is the same call only to a backend that converts it: opt in to coerce: strict
    tool_call = build_verifier({"name": "tool_call", "normalizers": ["strip"], "coerce": "strict"})
    strict = build_verifier("strict")
    strict_misses = 0
    total = 0
    for i, row in enumerate(sample):
        p = make_pivot(row["command"], i)
        assert tool_call.safe_verify(p.expert, p).passed
        for how, action in respellings(row["command"]).items():
            r = tool_call.safe_verify(action, p)
            assert r.passed, (how, row, r)
            hermes = message_text(action)  # the same call as a Hermes <tool_call> text
            assert tool_call.safe_verify(hermes, p).passed, (how, hermes)
            strict_misses += not strict.safe_verify(action, p).passed
            total += 1
    # the strict baseline misses (almost) all of these equivalent actions
    assert strict_misses / total > 0.95


def test_other_pages_commands_fail(sample: list[dict[str, Any]]) -> None:
    tool_call = build_verifier("tool_call")
    n = len(sample)
    for i, row in enumerate(sample):
        other = sample[(i + n // 2) % n]
        if other["page"] == row["page"] or other["command"].strip() == row["command"].strip():
            continue
        p = make_pivot(row["command"], i)
        r = tool_call.safe_verify(bash_call(json.dumps({"command": other["command"]})), p)
        assert not r.passed and r.reason.startswith("call 'bash': argument 'command': "), (row, other, r)


def test_whitespace_inside_commands_is_normalised_by_the_exact_stage(sample: list[dict[str, Any]]) -> None:
    exact = build_verifier(EXACT_NORMALIZED)
    default = build_verifier("tool_call")
    changed = 0
    for i, row in enumerate(sample):
        spaced = row["command"].replace(" ", "   ")
        if spaced == row["command"]:
            continue
        p = make_pivot(row["command"], i)
        action = parse_action(bash_call(json.dumps({"command": spaced})))
        assert exact.safe_verify(action, p).passed
        assert not default.safe_verify(action, p).passed  # default: only surrounding whitespace is ignored
        changed += 1
    assert changed > len(sample) // 2


def test_schema_and_tool_name_on_real_commands(sample: list[dict[str, Any]]) -> None:
    schema = build_verifier("schema")
    names = build_verifier("tool_name")
    swe = build_verifier({"name": "tool_name", "aliases": "swe"})
    for i, row in enumerate(sample):
        p = make_pivot(row["command"], i)
        for action in respellings(row["command"]).values():
            assert names.safe_verify(action, p).passed
            assert swe.safe_verify(action, p).passed
            # "number as text" and "null timeout" are not schema-valid as written: schema checks form
            args = json.loads(action["tool_calls"][0]["function"]["arguments"])
            valid = isinstance(args.get("timeout", 0), int)
            assert schema.safe_verify(action, p).passed == valid
        other = sample[(i + 1) % len(sample)]["command"]
        if command_word(other) != command_word(row["command"]):
            assert not names.safe_verify(bash_call(json.dumps({"command": other})), p).passed


def test_command_word_finds_the_program_of_real_commands(rows: list[dict[str, Any]]) -> None:
    """On real tldr commands the parsed program is the page's program for the large majority."""
    hits = 0
    for row in rows:
        word = command_word(row["command"])
        page = row["page"]
        hits += word.lower() == page or word == page.split("-")[0] or word == page.split(" ")[0]
    assert hits / len(rows) > 0.88, hits / len(rows)


PLACEHOLDER = re.compile(r"\{\{(.*?)\}\}")
FIXTURE = Fixture(files={"notes.txt": "beta\nalpha\nbeta\n", "docs/readme.md": "# hi\n"}, workdir="/testbed")
EXEC_SAMPLE = 36


def fill(command: str) -> str:
    """The command with its tldr ``{{placeholders}}`` filled: the first of ``[-a|--all]`` choices,
    ``path/to/...`` as a file or directory of :data:`FIXTURE`, anything else as the placeholder's own text."""
    def value(match: re.Match) -> str:
        text = match.group(1)
        if text.startswith("[") and text.endswith("]") and "|" in text:
            return text[1:-1].split("|")[0]
        return re.sub(r"path/to/\w+", lambda m: "docs" if "dir" in m.group(0) else "notes.txt", text)

    return PLACEHOLDER.sub(value, command)


def test_plain_text_commands_verify_like_bash_calls(rows: list[dict[str, Any]]) -> None:
    """``exec`` on tldr commands (programs present on this host, placeholders filled): the command as plain
    text and the same command in a ``bash`` call get the same verdicts, as the action equal to the expert's
    and as a seeded other command."""
    try:
        get_backend("bwrap")
    except SandboxUnavailable as exc:
        pytest.skip(f"bubblewrap does not work here: {exc}")
    rng = random.Random(0)
    runnable = [fill(r["command"]) for r in rows if shutil.which(command_word(r["command"]) or "-")]
    commands = rng.sample(sorted(set(runnable)), EXEC_SAMPLE)
    pairs = [(c, c) for c in commands] + [(c, rng.choice([o for o in commands if o != c])) for c in commands]
    # the wall clock stretched on a loaded machine (some of these programs start slowly: gcloud, npm), so
    # that no command lands near its budget and flips between the two runs; CPU time is not stretched
    verifier = build_verifier({"name": "exec", "timeout_s": scaled(2), "cpu_time_s": 2, "workers": 2})
    as_call = [verifier.command(bash_call(json.dumps({"command": c}))) for c in commands]
    assert [verifier.command(parse_action(c).message) for c in commands] == as_call
    plain = verifier.verify_many(
        [parse_action(action) for _, action in pairs],
        [Pivot(id=f"tldr-{i}", domain="", context=[], expert=parse_action(expert).message, fixture=FIXTURE)
         for i, (expert, _) in enumerate(pairs)])
    calls = verifier.verify_many(
        [parse_action(bash_call(json.dumps({"command": action}))) for _, action in pairs],
        [Pivot(id=f"tldr-{i}", domain="", context=[], expert=bash_call(json.dumps({"command": expert})),
               fixture=FIXTURE) for i, (expert, _) in enumerate(pairs)])
    verdicts = lambda results: [(r.passed, r.error is None) for r in results]  # noqa: E731
    assert verdicts(plain) == verdicts(calls), [(p, a, b) for p, a, b in zip(pairs, plain, calls) if a.passed != b.passed]
    assert all(r.passed for r in plain[:EXEC_SAMPLE])  # the expert's own command
    others = plain[EXEC_SAMPLE:]
    assert sum(r.error is None and not r.passed for r in others) > EXEC_SAMPLE // 2, [r.reason for r in others]
