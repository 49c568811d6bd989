"""Hostile commands against the bubblewrap sandbox: each must be contained.

For every case: the verifier returns within its timeout + 1 s (the second
stretched by ``slow_factor()`` on a loaded machine), the host is unchanged
(canary files, no new files), and no process of the sandbox is left (a scan of
/proc for the sandbox uids, when started by root, and for a unique marker in
command lines).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from pathlib import Path

import pytest

from pivot_envs.types import Fixture, Pivot
from pivot_envs.verifiers.exec import ExecVerifier
from pivot_envs.verifiers.sandbox import SandboxLimits, SandboxRequest, SandboxUnavailable, Seed, get_backend
from pivot_envs.verifiers.sandbox.bwrap import BwrapBackend

from tests.conftest import scaled

TIMEOUT_S = 2.0
"""The verifier's budget: the hostile commands that hang are stopped by it."""

RUN_TIMEOUT_S = 30.0
"""The budget of :func:`run`, whose commands must complete (``find /`` alone takes about 2 s on 2 idle cores)."""

LIMITS = SandboxLimits(max_output_bytes=100_000, max_file_size_mb=4, max_disk_mb=16, max_processes=64)


def bash(command: str) -> dict:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_0", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": command})}}]}


@pytest.fixture(scope="module")
def backend() -> BwrapBackend:
    try:
        found = get_backend("bwrap")
    except SandboxUnavailable as exc:
        pytest.skip(f"bubblewrap does not work here: {exc}")
    assert isinstance(found, BwrapBackend)
    return found


@pytest.fixture(scope="module")
def verifier(backend: BwrapBackend) -> ExecVerifier:
    v = ExecVerifier(backend="bwrap", timeout_s=TIMEOUT_S, max_output_bytes=100_000, max_file_size_mb=4,
                     max_disk_mb=16, max_processes=64)
    v.sandbox()  # probed now, not while timing
    return v


PIVOT = Pivot(id="hostile", domain="terminal", context=[], expert=bash("echo started"),
              fixture=Fixture(files={"data.txt": "hello\n"}, workdir="/testbed"))


def sandbox_processes(backend: BwrapBackend, marker: str | None = None) -> list[str]:
    """Processes that run as a sandbox uid (root only) or whose command line holds ``marker``."""
    uids = set(backend.sandbox_uids()) if os.geteuid() == 0 else set()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            status = (entry / "status").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        uid = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("Uid:")), -1)
        if uid in uids or (marker and marker in cmdline):
            found.append(f"{entry.name} uid={uid} {cmdline[:80]}")
    return found


def contained(verifier: ExecVerifier, command: str, marker: str | None = None):
    """Verify ``command`` against the harmless expert; assert time and leftovers; return the result."""
    verifier(bash("echo 'started'"), PIVOT)  # expert cached before timing (the expert's own text would skip it)
    t0 = time.monotonic()
    result = verifier(bash(command), PIVOT)
    elapsed = time.monotonic() - t0
    assert elapsed < TIMEOUT_S + scaled(1.0), f"took {elapsed:.2f} s"
    assert result.error is None, result.error
    assert sandbox_processes(verifier.sandbox(), marker) == []
    return result


def run(backend: BwrapBackend, command: str, timeout_s: float = RUN_TIMEOUT_S, **kw):
    """Run ``command`` on the backend directly (to look at its output); assert nothing is left running."""
    seed = Seed.from_fixture_files("/testbed", {"data.txt": "hello\n"})
    t0 = time.monotonic()
    result = backend.run(SandboxRequest(script=command, seed=seed, limits=LIMITS, timeout_s=timeout_s, **kw))
    assert time.monotonic() - t0 < timeout_s + scaled(1.0)
    assert sandbox_processes(backend) == []
    return result


@pytest.fixture()
def host_canary(tmp_path_factory):
    """A canary file in the host's /tmp and one in the user's home; both must survive unchanged."""
    token, secret = uuid.uuid4().hex, uuid.uuid4().hex
    tmp_canary = Path("/tmp") / f"pivot-canary-{token}"
    home_canary = Path.home() / f".pivot-canary-{token}"
    tmp_canary.write_text("original")
    home_canary.write_text(secret)
    home_canary.chmod(0o600)
    try:
        yield secret, tmp_canary, home_canary
        assert tmp_canary.read_text() == "original"
        assert home_canary.read_text() == secret
    finally:
        tmp_canary.unlink(missing_ok=True)
        home_canary.unlink(missing_ok=True)


def test_fork_bomb(verifier: ExecVerifier) -> None:
    result = contained(verifier, ":(){ :|:& };: ; sleep 5")
    assert not result.passed


def test_python_fork_bomb(verifier: ExecVerifier) -> None:
    result = contained(verifier, "python3 -c 'import os\nwhile True:\n    try: os.fork()\n    except OSError: pass'")
    assert not result.passed and "timed out" in result.reason


def test_rm_rf_root_and_home(verifier: ExecVerifier, host_canary) -> None:
    token, tmp_canary, home_canary = host_canary
    result = contained(verifier, "rm -rf --no-preserve-root / 2>/dev/null; echo started")
    assert not result.passed  # it times out walking the read-only /usr, or the work directory is gone
    result = contained(verifier, "rm -rf ~ /tmp/* 2>/dev/null; echo started")
    assert "file changed: data.txt (expert: unchanged; candidate: removed)" in result.reason
    assert Path("/usr/bin/env").exists() and Path(__file__).exists()


def test_write_outside_the_workdir(verifier: ExecVerifier, backend: BwrapBackend, host_canary) -> None:
    token, tmp_canary, home_canary = host_canary
    targets = [f"/etc/pivot-{token}", f"/usr/pivot-{token}", f"/usr/bin/pivot-{token}", f"/var/pivot-{token}",
               f"/pivot-{token}", str(Path(__file__).parent / f"pivot-{token}"), str(Path.home() / f"pivot-{token}")]
    command = "; ".join(f"echo pwned > {t} 2>/dev/null" for t in targets)
    command += f"; echo pwned > {tmp_canary}; echo pwned >> /etc/passwd; echo started"
    contained(verifier, command)
    for target in targets:
        assert not Path(target).exists(), target
    assert "pwned" not in Path("/etc/passwd").read_text()
    result = run(backend, f"touch /usr/x /etc/x /x /dev/x /proc/x 2>&1; cat {tmp_canary} 2>&1; "
                          f"echo pwned > {tmp_canary}; cat {tmp_canary}")
    assert result.stdout.count(b"Read-only file system") == 4 and b"/proc/x" in result.stdout
    assert b"No such file" in result.stdout and result.stdout.endswith(b"pwned\n")  # its own, fresh /tmp


def test_read_host_secrets(verifier: ExecVerifier, backend: BwrapBackend, host_canary) -> None:
    secret, tmp_canary, home_canary = host_canary
    command = (f"cat /etc/shadow {home_canary} /root/{home_canary.name} {tmp_canary}; ls -a /root /home ~; "
               f"find / -name '.pivot-canary-*' 2>/dev/null; grep -r {secret[:8]} /root /home /etc /work 2>/dev/null")
    result = run(backend, command)
    assert result.completed
    assert secret.encode() not in result.stdout + result.stderr
    assert b"root:" not in result.stdout  # no /etc/shadow
    assert b"/etc/shadow: No such file" in result.stderr and b"cannot access '/root'" in result.stderr
    leaked = contained(verifier, f"cat {home_canary} /etc/shadow 2>/dev/null || echo started")
    assert leaked.passed  # it read nothing and fell back to the expert's output


def test_network_is_unreachable(backend: BwrapBackend) -> None:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    accepted = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except socket.timeout:
                continue
            accepted.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        probe = (
            "import socket\n"
            f"try:\n    socket.create_connection(('127.0.0.1', {port}), timeout=1); print('CONNECTED')\n"
            "except OSError as e: print('refused', e)\n"
            "try:\n    socket.getaddrinfo('example.com', 80); print('RESOLVED')\n"
            "except OSError as e: print('no dns', e)\n"
        )
        result = run(backend, f"python3 -c \"{probe}\"; getent hosts example.com || echo no-getent; "
                              "cat /proc/net/dev | tail -n +3 | cut -d: -f1")
        out = result.stdout.decode()
        assert result.completed and "refused" in out and "no dns" in out and "no-getent" in out, out
        assert "CONNECTED" not in out and "RESOLVED" not in out
        assert [line.strip() for line in out.splitlines()[-1:]] == ["lo"]  # only the sandbox's own loopback
        time.sleep(0.3)
        assert accepted == []
    finally:
        stop.set()
        thread.join()
        server.close()


def test_infinite_loop(verifier: ExecVerifier) -> None:
    result = contained(verifier, "while :; do :; done")
    assert not result.passed and result.reason == f"timed out after {TIMEOUT_S:g} s"


def test_background_processes_do_not_outlive_the_command(verifier: ExecVerifier) -> None:
    marker = "987.654321"
    t0 = time.monotonic()
    result = contained(verifier, f"sleep {marker} & nohup sleep {marker} >/dev/null 2>&1 & "
                                 f"setsid sleep {marker} & (trap '' HUP TERM; sleep {marker}) & echo started",
                       marker=marker)
    assert time.monotonic() - t0 < scaled(1.5)  # the command itself ends at once; nobody waits for the sleeps
    assert result.passed, result.reason  # same output and files as `echo started`


def test_gigabytes_of_output(verifier: ExecVerifier) -> None:
    result = contained(verifier, "yes")
    assert not result.passed and result.reason == "killed: stdout exceeded 100000 bytes"
    result = contained(verifier, "yes >&2")
    assert not result.passed and result.reason == "killed: stderr exceeded 100000 bytes"
    result = contained(verifier, "cat /dev/zero")
    assert result.reason == "killed: stdout exceeded 100000 bytes"


def test_filling_the_disk(verifier: ExecVerifier, backend: BwrapBackend) -> None:
    command = ("dd if=/dev/zero of=big bs=1M count=4096 2>&1 | tail -n 1; fallocate -l 10G huge; "
               "for i in $(seq 1 40); do head -c 3M /dev/zero > f$i || break; done; "
               "head -c 3M /dev/zero > /tmp/t1; echo started")
    result = run(backend, command)
    assert result.completed, result.killed or result.error
    sizes = [e.size for e in result.files.values() if e.kind == "file"]
    assert max(sizes) <= LIMITS.max_file_size_mb << 20
    assert sum(sizes) <= LIMITS.max_disk_mb << 20
    assert b"File size limit exceeded" in result.stderr or b"File too large" in result.stdout + result.stderr
    assert b"No space left on device" in result.stderr
    contained(verifier, command)


def test_setuid_and_privilege_escalation(verifier: ExecVerifier, backend: BwrapBackend) -> None:
    setuid_host = next((p for p in ("/usr/bin/su", "/usr/bin/passwd", "/usr/bin/mount", "/usr/bin/sudo")
                        if Path(p).exists() and Path(p).stat().st_mode & 0o4000), None)
    command = ("cp /usr/bin/id ./myid && chmod u+s,g+s ./myid && ./myid -u && ./myid -g; "
               "su -c 'id -u' root </dev/null 2>&1; sudo -n id -u 2>&1; "
               + (f"{setuid_host} --help >/dev/null 2>&1; " if setuid_host else "")
               + "unshare -U true 2>&1 && echo NESTED; mount -t tmpfs none /mnt 2>&1 && echo MOUNTED; "
               "grep -E '^(Uid|NoNewPrivs|CapEff|CapBnd)' /proc/self/status")
    result = run(backend, command)
    out = result.stdout.decode()
    assert result.completed, result.killed
    numbers = [line for line in out.splitlines() if line.strip().isdigit()]
    assert numbers == ["65534", "65534"], out  # the setuid copy runs as the sandbox user, nothing else as root
    assert "NoNewPrivs:\t1" in out and "CapEff:\t0000000000000000" in out and "CapBnd:\t0000000000000000" in out
    assert "NESTED" not in out and "MOUNTED" not in out
    assert not contained(verifier, "su -c 'echo started' root </dev/null; sudo -n echo started").passed
