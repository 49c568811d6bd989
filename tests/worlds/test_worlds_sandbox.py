"""The sandboxed worlds (``terminal``, ``swe``) on real bubblewrap sandboxes.

Replays bundled test trajectories and compares every tool result with the recorded one. To keep
the suite at a few seconds per domain on 2 cores, the default sample is one trajectory per task
family (plus one failed episode per domain), replayed on 2 threads; ``PIVOT_WORLDS_FULL=1``
replays the whole test split (60 trajectories per domain, 100 % on our machine: 284/284 terminal
and 461/461 swe tool results).
"""

from __future__ import annotations

import os
import pickle
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from pivot_envs.envs_data import load_trajectories
from pivot_envs.types import Fixture
from pivot_envs.verifiers.sandbox import SandboxUnavailable
from pivot_envs.worlds import World, WorldTask, build_world, context_calls

from tests.conftest import scaled

FULL = os.environ.get("PIVOT_WORLDS_FULL") == "1"


@pytest.fixture(scope="module")
def backend():
    from pivot_envs.verifiers.sandbox.session import shared_backend

    try:
        return shared_backend("bwrap")
    except SandboxUnavailable as exc:
        pytest.skip(f"bubblewrap does not work here: {exc}")


def sample(domain: str) -> list:
    """One trajectory per task family and the first failed episode (all with PIVOT_WORLDS_FULL=1)."""
    trajs = load_trajectories(domain, "test")
    if FULL:
        return trajs
    picked, seen = [], set()
    for traj in trajs:
        if traj.meta["task"] not in seen:
            seen.add(traj.meta["task"])
            picked.append(traj)
    failed = next(t for t in trajs if t.reward == 0.0)
    return picked + ([failed] if failed not in picked else [])


def replay(world: World, traj, domain: str) -> dict:
    """Start ``traj``'s task, execute its assistant calls; the recorded vs replayed tool results."""
    world.start(WorldTask.from_trajectory(traj, domain))
    start = world.digest()
    got, pairs = {}, []
    for message in traj.messages:
        if message.get("role") == "assistant":
            for call, result in world.execute(message):
                got[call["id"]] = (call["function"]["arguments"], result)
        elif message.get("role") == "tool":
            args, result = got[message["tool_call_id"]]
            pairs.append((args, message["content"], result.content))
    return {"id": traj.id, "start": start, "end": world.digest(), "pairs": pairs}


def replay_all(domain: str, trajs: list, workers: int = 2) -> tuple[list[dict], float]:
    worlds = [build_world({"name": domain, "backend": "bwrap"}) for _ in range(workers)]
    t0 = time.monotonic()
    with ThreadPoolExecutor(workers) as pool:
        chunks = [trajs[i::workers] for i in range(workers)]
        done = pool.map(lambda wc: [replay(wc[0], t, domain) for t in wc[1]], zip(worlds, chunks))
        by_id = {run["id"]: run for chunk in done for run in chunk}
    runs = [by_id[t.id] for t in trajs]  # in the order of trajs
    for world in worlds:
        world.close()
    return runs, time.monotonic() - t0


def check_match(domain: str, runs: list[dict], seconds: float) -> None:
    pairs = [(run["id"], *p) for run in runs for p in run["pairs"]]
    bad = [p for p in pairs if p[2] != p[3]]
    print(f"{domain}: {len(pairs) - len(bad)}/{len(pairs)} tool results reproduced over {len(runs)} trajectories "
          f"in {seconds:.1f} s ({len(pairs) / seconds:.1f} calls/s on 2 threads)")
    for traj_id, args, recorded, got in bad:
        print(f"MISMATCH {traj_id} {args}\n  recorded: {recorded[:300]!r}\n  replayed: {got[:300]!r}")
    assert len(pairs) > (250 if FULL else 60)
    assert not bad  # 100 %: every recorded tool result is reproduced


# --------------------------------------------------------------------------- terminal


@pytest.fixture(scope="module")
def terminal_runs(backend):
    trajs = sample("terminal")
    runs, seconds = replay_all("terminal", trajs)
    return trajs, runs, seconds


def test_terminal_replay_reproduces_recorded_tool_results(terminal_runs):
    _, runs, seconds = terminal_runs
    check_match("terminal", runs, seconds)


def test_terminal_digest_is_deterministic_and_tracks_files(terminal_runs):
    trajs, runs, _ = terminal_runs
    world = build_world({"name": "terminal", "backend": "bwrap"})  # a fresh world object: no shared cache
    changed = 0
    for traj, run in list(zip(trajs, runs))[:3]:
        again = replay(world, traj, "terminal")
        assert again["start"] == run["start"] and again["end"] == run["end"], traj.id
        world.start(WorldTask.from_trajectory(traj, "terminal"))
        before = world.files()
        for name, args in context_calls(traj.messages):
            world.call(name, args)
        files_changed = world.files() != before
        if files_changed:
            assert world.digest() != run["start"], traj.id
        changed += files_changed
    assert changed >= 1
    # every task that changes the tree (a mutating family) ends with another digest than its start
    mutating = {"tar_extract", "find_delete", "sed_replace", "tar_create", "write_config", "permissions",
                "organize_ext", "make_skeleton", "project_cleanup", "rename_symbol"}
    for traj, run in zip(trajs, runs):
        if traj.meta["task"] in mutating and traj.reward == 1.0:
            assert run["end"] != run["start"], traj.id
    world.close()


@pytest.fixture()
def terminal(backend):
    # a generous wall clock: on a loaded machine the CPU-time limit, not the clock, must stop a runaway
    world = build_world({"name": "terminal", "backend": "bwrap", "timeout_s": 20, "cpu_time_s": 1})
    world.start(WorldTask(id="t", domain="terminal", fixture=Fixture(
        files={"a.txt": "alpha\n", "sub/b.txt": "beta\n"}, setup="chmod 600 a.txt", workdir="/testbed")))
    yield world
    world.close()


def test_terminal_state_carries_between_calls(terminal):
    start = terminal.digest()
    assert terminal.call("bash", {"command": "stat -c %a a.txt"}).content == "600\n"  # the setup ran
    assert terminal.call("bash", '{"command": "echo hello > note.txt && mkdir -p out"}').content == ""
    assert terminal.call("bash", {"command": "cat note.txt; ls -d out"}).content == "hello\nout\n"
    assert terminal.digest() != start
    terminal.call("bash", {"command": "rm -r note.txt out"})
    assert terminal.digest() == start  # the same tree again: the same digest
    # each call is a fresh shell in the workdir, as the tool says: cd and variables do not carry
    terminal.call("bash", {"command": "cd sub && export X=1"})
    assert terminal.call("bash", {"command": "pwd; echo ${X:-unset}"}).content == "/testbed\nunset\n"


def test_terminal_tool_result_format_and_errors(terminal):
    assert terminal.call("bash", {"command": "grep -c zzz a.txt"}).content == "0\n[exit code: 1]"
    missing = terminal.call("bash", {"command": "cat nope.txt"})
    assert missing.error and missing.content == "Error: exit code 1\ncat: nope.txt: No such file or directory\n"
    assert terminal.call("bash", {"cmd": "ls"}).error
    assert terminal.call("python", {"command": "ls"}).error
    assert terminal.call("bash", "not json").error
    assert terminal.call("bash", {"command": "echo a\0b"}).content.startswith("Error: the command contains a NUL")
    assert terminal.call("bash", {"command": "#" * 200_000}).content.startswith("Error: the command is 200000 bytes")


def in_parallel(*calls):
    """Run the zero-argument callables on their own threads (each on its own world); their results."""
    with ThreadPoolExecutor(len(calls)) as pool:
        return [f.result() for f in [pool.submit(c) for c in calls]]


def test_terminal_limits_hold(terminal):
    t0 = time.monotonic()
    hang_world = build_world({"name": "terminal", "backend": "bwrap", "timeout_s": 1})
    hang_world.start(WorldTask(id="h", fixture=Fixture(workdir="/testbed")))
    runaway, hang = in_parallel(lambda: terminal.call("bash", {"command": "while :; do :; done"}),
                                lambda: hang_world.call("bash", {"command": "echo partial > hang.txt; sleep 30"}))
    assert runaway.error and "exit code 152" in runaway.content  # SIGXCPU after 1 CPU second
    assert hang.error and "timed out after 1 s" in hang.content  # the wall clock ends a hang
    assert hang_world.files() == {}  # a killed call is rolled back
    assert time.monotonic() - t0 < min(scaled(15), 28.0)  # nobody waited for the 30 s sleep
    net = terminal.call("bash", {"command": "exec 3<>/dev/tcp/1.1.1.1/53"})
    assert net.error and "Network is unreachable" in net.content
    big = terminal.call("bash", {"command": "head -c 20000000 /dev/zero > big.bin"})
    assert big.error and "exit code 153" in big.content  # SIGXFSZ past max_file_size_mb
    ro = terminal.call("bash", {"command": "touch /usr/x /etc/x"})
    assert ro.error and "Read-only file system" in ro.content
    who = terminal.call("bash", {"command": "id -u"})
    assert who.content == "65534\n"


def _processes_with(marker: str) -> list[int]:
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        pids.append(int(name))
            except OSError:
                pass
    return pids


def _processes_of(uids: list[int]) -> list[int]:
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}").st_uid in uids:
                    pids.append(int(name))
            except OSError:
                pass
    return pids


def test_terminal_close_leaves_no_process(terminal, backend):
    out = terminal.call("bash", {"command": "nohup setsid sleep 317 >/dev/null 2>&1 & (sleep 318 &) ; echo started"})
    assert out.content == "started\n"
    assert _processes_with("sleep 317") == [] and _processes_with("sleep 318") == []  # ended with the call
    terminal.close()
    assert _processes_with("sleep 31") == []
    if os.geteuid() == 0:  # root-started sandboxes run as the pool's uids: none is left
        assert _processes_of(backend.sandbox_uids()) == []
    with pytest.raises(Exception, match="no episode"):
        terminal.call("bash", {"command": "ls"})


def test_terminal_config_rebuilds_and_at_pivot(backend):
    from pivot_envs.sources import resolve_pivots

    world = build_world({"name": "terminal", "backend": "bwrap", "timeout_s": 7})
    config = pickle.loads(pickle.dumps(world.config()))
    assert config["name"] == "terminal" and build_world(config).config() == config
    pivot = next(p for p in resolve_pivots("bundled:terminal:test") if len(context_calls(p.context)) >= 2)
    results = world.at_pivot(WorldTask.from_pivot(pivot), pivot.context)
    assert [r.content for r in results] == [m["content"] for m in pivot.context if m.get("role") == "tool"]


# --------------------------------------------------------------------------- swe


@pytest.fixture(scope="module")
def swe_runs(backend):
    trajs = sample("swe")
    runs, seconds = replay_all("swe", trajs)
    return trajs, runs, seconds


def test_swe_replay_reproduces_recorded_tool_results(swe_runs):
    _, runs, seconds = swe_runs
    check_match("swe", runs, seconds)


def test_swe_digest_tests_pass_and_determinism(swe_runs):
    trajs, runs, _ = swe_runs
    world = build_world({"name": "swe", "backend": "bwrap"})
    starts = {run["start"] for run in runs}
    assert len(starts) == 1  # an unchanged repository: the start digest (a diff of nothing)
    for traj, run in zip(trajs, runs):
        assert run["end"] != run["start"], traj.id  # every expert edits a file
    for traj, run in list(zip(trajs, runs))[:2] + [(t, r) for t, r in zip(trajs, runs) if t.reward == 0.0][:1]:
        world.start(WorldTask.from_trajectory(traj, "swe"))
        assert not world.tests_pass(), traj.id  # the injected bug fails its tests
        again = replay(world, traj, "swe")
        assert again["end"] == run["end"] and [p[2] for p in again["pairs"]] == [p[2] for p in run["pairs"]]
        assert world.tests_pass() == (traj.reward == 1.0), traj.id  # fixed, or the wrong fix still fails
    world.close()


@pytest.fixture()
def swe(backend):
    traj = load_trajectories("swe", "test")[0]
    world = build_world({"name": "swe", "backend": "bwrap", "timeout_s": 20, "cpu_time_s": 1})
    world.start(WorldTask.from_trajectory(traj, "swe"))
    yield world
    world.close()


def test_swe_state_carries_and_real_commands(swe):
    start = swe.digest()
    made = swe.call("bash", {"command": "printf 'print(6 * 7)\\n' > answer.py && ls answer.py"})
    assert made.content.startswith("answer.py\n(Open file: n/a)")
    assert swe.call("bash", {"command": "python answer.py"}).content.startswith("42\n")
    opened = swe.call("open_file", {"path": "answer.py"})
    assert "1:print(6 * 7)" in opened.content
    swe.call("edit", {"start_line": 1, "end_line": 1, "replacement": "print(6 * 9)"})
    assert swe.call("bash", {"command": "python3 answer.py"}).content.startswith("54\n")
    assert swe.digest() != start and "answer.py" in swe.diff()
    swe.call("bash", {"command": "rm answer.py"})
    assert swe.digest() == start and swe.diff() == ""
    bad = swe.call("open_file", {"path": "nope.py"})
    assert bad.error and bad.content.startswith("Error: File nope.py not found")
    assert swe.call("goto", {"line_number": "x"}).error
    assert swe.call("frobnicate", {}).error


def test_swe_limits_hold(swe):
    swe.call("bash", {"command": "printf 'while True:\\n    pass\\n' > spin.py"})
    hang_world = build_world({"name": "swe", "backend": "bwrap", "timeout_s": 1})
    hang_world.start(WorldTask(id="h", domain="swe", fixture=Fixture(files={"x.py": ""}, workdir="/testbed")))
    spin, hang = in_parallel(lambda: swe.call("bash", {"command": "python spin.py"}),
                             lambda: hang_world.call("bash", {"command": "python -c 'import time; time.sleep(30)'"}))
    assert spin.error and "SIGXCPU" in spin.content
    assert hang.error and "Error: command timed out after 1 seconds" in hang.content  # the generator's wording
    net = swe.call("bash", {"command": "python -c \"import socket; socket.create_connection(('1.1.1.1', 53), 2)\""})
    assert "Network is unreachable" in net.content
    assert swe.config()["timeout_s"] == 20 and build_world(swe.config()).config() == swe.config()
