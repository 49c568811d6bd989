"""The terminal-domain generator: determinism, counts, wire format, and genuine, replayable tool results.

The replay tests do not trust the generator's own runner: they rebuild the state
before a turn with the project's extractor (setup + earlier commands, each in a
subshell), run the command with a plain ``bash`` and compare with the recorded
tool message; alternatives must do the same, near misses must not.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import tempfile
from collections import Counter
from pathlib import Path

import jsonschema
import pytest

from pivot_envs.domains import get_domain
from pivot_envs.envs_data.terminal import generator as T
from pivot_envs.envs_data.terminal.tasks import FAMILIES
from pivot_envs.pipeline.extract import ExtractOptions, extract_pivots, fixture_at
from pivot_envs.fixture import write_files
from pivot_envs.types import Fixture, Trajectory

N = 250
DIFFS = {"stdout", "stderr", "exit_code", "files"}


@pytest.fixture(scope="module")
def generated() -> tuple[list[Trajectory], dict]:
    return T.generate_with_stats(N, seed=0)


@pytest.fixture(scope="module")
def trajs(generated) -> list[Trajectory]:
    return generated[0]


def command_of(message: dict) -> str:
    return json.loads(message["tool_calls"][0]["function"]["arguments"])["command"]


def run_replayed(fixture: Fixture, command: str) -> tuple[T.CommandRun, T.State]:
    """Run ``command`` after the fixture's (replay) setup with a plain bash; output, exit status and tree."""
    with tempfile.TemporaryDirectory() as tmp:
        write_files(fixture, tmp)
        script = f"umask 022\n{{\n{fixture.setup}\n}} >/dev/null 2>&1\n(\n{command}\n)"
        proc = subprocess.run(
            ["bash", "--noprofile", "--norc", "-c", script],
            cwd=tmp,
            capture_output=True,
            stdin=subprocess.DEVNULL,
            timeout=60,
            env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": tmp},
        )
        run = T.CommandRun(proc.stdout.decode(), proc.stderr.decode(), proc.returncode)
        return run, T.capture(Path(tmp))


def test_same_seed_same_bytes_other_seed_other_data() -> None:
    a = [json.dumps(t.to_dict()) for t in T.generate(12, seed=3)]
    b = [json.dumps(t.to_dict()) for t in T.generate(12, seed=3)]
    c = [json.dumps(t.to_dict()) for t in T.generate(12, seed=4)]
    assert a == b
    assert a != c


def test_counts_families_failures_and_size(trajs: list[Trajectory]) -> None:
    assert len(trajs) == N
    assert len({t.id for t in trajs}) == N
    turns = sum(1 for t in trajs for m in t.messages if m["role"] == "assistant")
    assert turns >= 1000, turns
    tasks = Counter(t.meta["task"] for t in trajs)
    assert set(tasks) == set(FAMILIES) and len(tasks) >= 10
    failed = [t for t in trajs if t.reward == 0.0]
    assert 0.05 <= len(failed) / N <= 0.18
    assert all(t.meta.get("failure") for t in failed)
    assert all(t.reward == 1.0 and "failure" not in t.meta for t in trajs if t not in failed)
    data = "\n".join(json.dumps(t.to_dict()) for t in trajs).encode()
    assert len(gzip.compress(data)) < 1_000_000 * N / 300


def test_wire_format_schema_and_ids(trajs: list[Trajectory]) -> None:
    for t in trajs:
        assert t.tools == [T.BASH_TOOL]
        assert t.meta["source"] == "pivot-envs/terminal" and t.meta["id"].startswith("terminal-0-")
        assert t.fixture is not None and t.fixture.workdir.startswith("/")
        assert t.fixture.setup.startswith("export LC_ALL=C")
        roles = [m["role"] for m in t.messages]
        assert roles[0] == "system" and roles[1] == "user" and roles[-1] == "assistant"
        assert isinstance(t.messages[-1]["content"], str) and not t.messages[-1].get("tool_calls")
        for i, m in enumerate(t.messages):
            if m["role"] == "assistant" and m.get("tool_calls"):
                assert len(m["tool_calls"]) == 1
                call = m["tool_calls"][0]
                assert call["type"] == "function" and call["function"]["name"] == "bash"
                jsonschema.validate(json.loads(call["function"]["arguments"]), T.BASH_TOOL["function"]["parameters"])
                reply = t.messages[i + 1]
                assert reply["role"] == "tool" and reply["tool_call_id"] == call["id"] and reply["name"] == "bash"
            if m["role"] == "tool":
                assert t.messages[i - 1].get("tool_calls")
                assert "pivot-terminal-" not in m["content"] and "/tmp/" not in m["content"]


def test_alternatives_and_near_misses_are_well_formed(generated) -> None:
    trajs, stats = generated
    assert stats["alternatives_dropped"] == 0, stats["dropped"][:5]  # every planned alternative held
    assert stats["near_misses_dropped"] == 0, stats["dropped"][:5]
    schema = T.BASH_TOOL["function"]["parameters"]
    action_turns = with_alts = 0
    for t in trajs:
        calls = {str(i): m for i, m in enumerate(t.messages) if m["role"] == "assistant" and m.get("tool_calls")}
        action_turns += len(calls)
        for key, alts in t.meta.get("alternatives", {}).items():
            with_alts += 1
            assert key in calls and 1 <= len(alts) <= 3
            for alt in alts:
                assert alt["role"] == "assistant" and alt["tool_calls"][0]["id"] == calls[key]["tool_calls"][0]["id"]
                jsonschema.validate(json.loads(alt["tool_calls"][0]["function"]["arguments"]), schema)
                assert command_of(alt) != command_of(calls[key])
        for key, misses in t.meta.get("near_misses", {}).items():
            assert key in calls
            for miss in misses:
                assert miss["reason"] and miss["differs"] and set(miss["differs"]) <= DIFFS
                assert command_of(miss["message"]) != command_of(calls[key])
    assert with_alts / action_turns > 0.7


def test_tool_errors_are_followed_by_a_corrected_call(trajs: list[Trajectory]) -> None:
    tool_msgs = errors = 0
    for t in trajs:
        for i, m in enumerate(t.messages):
            if m["role"] != "tool":
                continue
            tool_msgs += 1
            if m["content"].startswith("Error:"):
                errors += 1
                nxt = t.messages[i + 1]
                assert nxt["role"] == "assistant" and nxt.get("tool_calls")
                assert command_of(nxt) != command_of(t.messages[i - 1])
    assert 0.005 <= errors / tool_msgs <= 0.1


def test_extractor_skips_error_turns_and_keeps_the_rest(trajs: list[Trajectory]) -> None:
    pivots, audit = extract_pivots(trajs[:60], "terminal", ExtractOptions(min_reward=1.0))
    assert pivots and audit.skipped["tool_error"] > 0 and audit.skipped["chat_only"] == 0
    finals = {(t.id, len(t.messages) - 1) for t in trajs[:60] if t.reward == 1.0}
    assert finals <= {(p.meta["trajectory_id"], p.meta["turn"]) for p in pivots}  # each task's final answer
    for p in pivots:
        assert p.fixture is not None and (p.expert.get("tool_calls") or p.meta["kind"] == "text")


def test_replay_reproduces_every_tool_result_and_alternative(trajs: list[Trajectory]) -> None:
    """One trajectory per family (the first len(FAMILIES) cycle through all of them)."""
    dom = get_domain("terminal")
    sample = trajs[: len(FAMILIES)]
    assert {t.meta["task"] for t in sample} == set(FAMILIES)
    for t in sample:
        for i, m in enumerate(t.messages):
            if m["role"] != "assistant" or not m.get("tool_calls"):
                continue
            fixture = fixture_at(t, i, dom)
            run, after = run_replayed(fixture, command_of(m))
            assert T.tool_content(run) == t.messages[i + 1]["content"], (t.id, i, command_of(m))
            for alt in t.meta.get("alternatives", {}).get(str(i), []):
                alt_run, alt_after = run_replayed(fixture, command_of(alt))
                assert (alt_run.stdout, alt_run.stderr, alt_run.code) == (run.stdout, run.stderr, run.code), command_of(
                    alt
                )
                assert T.tree_key(alt_after) == T.tree_key(after), command_of(alt)
            for miss in t.meta.get("near_misses", {}).get(str(i), []):
                miss_run, miss_after = run_replayed(fixture, command_of(miss["message"]))
                seen = {
                    "stdout": miss_run.stdout != run.stdout,
                    "stderr": miss_run.stderr != run.stderr,
                    "exit_code": miss_run.code != run.code,
                    "files": T.tree_key(miss_after) != T.tree_key(after),
                }
                assert {k for k, v in seen.items() if v} == set(miss["differs"]), command_of(miss["message"])


def test_summaries_report_real_outputs(trajs: list[Trajectory]) -> None:
    """Numbers in a few summaries come from the tool outputs (not from the plan)."""
    checked = 0
    for t in trajs:
        if t.meta["task"] != "sort_dedupe":
            continue
        tools = [m["content"] for m in t.messages if m["role"] == "tool"]
        before, after = int(tools[0].split()[0]), int(tools[3].split()[0])
        summary = next(m["content"] for m in t.messages if m["role"] == "assistant" and not m.get("tool_calls"))
        assert str(before) in summary and str(after) in summary
        checked += 1
    assert checked > 5


def test_exec_verifier_agrees_with_the_generator(trajs: list[Trajectory]) -> None:
    """The project's sandboxed ``exec`` verifier passes the alternatives and fails the near misses
    (those differing in stdout, exit code or files; it ignores stderr by default)."""
    from pivot_envs.verifiers.exec import ExecVerifier
    from pivot_envs.verifiers.sandbox import SandboxUnavailable, get_backend

    try:
        get_backend("bwrap")
    except SandboxUnavailable as exc:
        pytest.skip(f"bubblewrap does not work here: {exc}")
    verifier = ExecVerifier(backend="bwrap", timeout_s=10)
    pivots, _ = extract_pivots(trajs[: len(FAMILIES)], "terminal", ExtractOptions(min_reward=None, dedup=False))
    by_id = {t.id: t for t in trajs}
    best: dict[str, tuple[int, object]] = {}
    for p in pivots:  # per trajectory, the turn with the most candidates
        meta = by_id[p.meta["trajectory_id"]].meta
        key = str(p.meta["turn"])
        size = len(meta.get("alternatives", {}).get(key, [])) + len(meta.get("near_misses", {}).get(key, []))
        if size > best.get(p.meta["trajectory_id"], (0, None))[0]:
            best[p.meta["trajectory_id"]] = (size, p)
    assert len(best) >= 10
    for tid, (_, p) in sorted(best.items()):
        meta, key = by_id[tid].meta, str(p.meta["turn"])
        for alt in meta.get("alternatives", {}).get(key, []):
            result = verifier(alt, p)
            assert result.passed and result.error is None, (tid, command_of(alt), result.reason, result.error)
        for miss in meta.get("near_misses", {}).get(key, []):
            result = verifier(miss["message"], p)
            assert result.error is None, result.error
            assert result.passed == (set(miss["differs"]) <= {"stderr"}), (
                tid,
                command_of(miss["message"]),
                result.reason,
            )
