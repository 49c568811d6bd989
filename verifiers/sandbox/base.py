"""The sandbox backend protocol, its request/result types and the host <-> sandbox wire format.

A backend runs one shell script in a *fresh* copy of a work directory and
reports what happened: exit code, stdout, stderr and the state of the work
directory afterwards. Backends (``bwrap``, ``docker``) differ only in how they
start and kill the sandbox; what goes in and what comes out is shared here:

* **in** (the sandbox's stdin): one tar stream holding ``.pivot/in/cmd`` (the
  script), ``.pivot/in/nonce`` (a random marker) and the work directory's
  entries under the work directory's path (``testbed/...`` for ``/testbed``).
  The sandbox mounts size-limited tmpfs at ``/.pivot``, ``/tmp`` and the work
  directory, and :data:`WRAPPER` unpacks the stream there (no host copy: the
  host never holds a writable tree the sandbox could reach).
* **out**: the command's stdout is the sandbox's stdout and its stderr the
  sandbox's stderr. The wrapper writes ``<nonce>:start <clock>`` on stderr right
  before the command; after it ``kill -KILL -1`` ends every process the command
  left behind, then the wrapper writes ``\\n<nonce> <exit code> <clock>\\n`` on
  stdout followed by a tar of ``.pivot/out`` and the work directory.
  :class:`StreamCollector` splits the streams back apart, enforcing byte caps
  while reading, so a command that prints gigabytes is killed, never buffered.
* **time**: ``<clock>`` is the sandbox kernel's ``/proc/uptime`` (1/100 s), read
  just before the command starts and just after it exits (empty where it
  cannot be read). Their difference is the command's own duration, which
  decides whether it kept to ``timeout_s``: a host process that is scheduled
  late (a loaded machine) notices the markers late, which must not shorten or
  lengthen the command's budget. The host's own deadline only ends a hang
  (it starts when the host sees the start marker, so it never ends a command
  before its budget is used up); at that deadline the host reads once more
  what the sandbox has already written before it calls the run timed out.

The nonce is read from a file the wrapper empties before the command starts,
so a command cannot forge the markers by accident; a hostile command that
breaks the protocol only makes its own run fail.
"""

from __future__ import annotations

import hashlib
import io
import math
import posixpath
import secrets
import signal
import tarfile
import threading
from dataclasses import dataclass, field
from typing import Mapping

from pivot_envs.fixture import safe_relative

SEED_MTIME = 946684800
"""mtime (2000-01-01 UTC) given to every file unpacked from a seed, so listings are deterministic."""

CONTROL_DIR = "/.pivot"
"""Where the wrapper keeps its input and output inside the sandbox (a separate small tmpfs)."""

RESERVED_ROOTS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/proc", "/dev",
                  "/sys", "/tmp", "/run", CONTROL_DIR)
"""A fixture's workdir may not be ``/`` nor lie under one of these (they are the sandbox's own mounts)."""

SANDBOX_UID = 65534
"""uid (and gid) a command sees inside the sandbox (``nobody``)."""

SANDBOX_ENV: tuple[tuple[str, str], ...] = (
    ("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
    ("LC_ALL", "C"),
    ("LANG", "C.UTF-8"),
    ("TZ", "UTC"),
    ("TERM", "dumb"),
    ("USER", "nobody"),
    ("LOGNAME", "nobody"),
    ("PYTHONDONTWRITEBYTECODE", "1"),
    ("PYTHONHASHSEED", "0"),
    ("OMP_NUM_THREADS", "1"),
    ("OPENBLAS_NUM_THREADS", "1"),
    ("MKL_NUM_THREADS", "1"),
)
"""The whole environment of a command (plus ``HOME`` = the workdir); nothing leaks in from the host."""

WRAPPER = r"""
P=/.pivot
umask 0
tar -xf - -C / || {
  echo "pivot-sandbox: cannot unpack the work directory (over max_disk_mb, or a file over max_file_size_mb?)" >&2
  exit 91
}
read -r N < "$P/in/nonce" && : > "$P/in/nonce" || exit 92
umask 022
cd "$1" || exit 93
command -v "$2" >/dev/null || { echo "pivot-sandbox: the shell '$2' is not installed in the sandbox" >&2; exit 95; }
T0=; { read -r T0 _ < /proc/uptime; } 2>/dev/null
printf '%s:start %s\n' "$N" "$T0" >&2
"$2" "$P/in/cmd" </dev/null
rc=$?
T1=; { read -r T1 _ < /proc/uptime; } 2>/dev/null
kill -KILL -1 2>/dev/null
kill -KILL -1 2>/dev/null
printf '\n%s %s %s\n' "$N" "$rc" "$T1"
cd / || exit 94
chmod -R u+rX "$1" 2>/dev/null
exec tar -cf - "${P#/}/out" "${1#/}"
"""
"""The POSIX sh script every sandbox runs (``$1`` = workdir, ``$2`` = the command's shell)."""

SETUP_PREFIX = ("trap 'pivot_rc=$?; pwd > /.pivot/out/cwd; export -p > /.pivot/out/env; exit $pivot_rc' EXIT\n"
                "exec 1>/dev/null\n")
"""Prefix of a setup script: on exit, records the final cwd and exported variables; drops stdout."""


class SandboxUnavailable(RuntimeError):
    """No usable sandbox backend; the message says how to install or enable one."""


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one sandbox run.

    Attributes:
        memory_mb: address-space limit of each process (RLIMIT_AS; docker: the container's memory).
        max_processes: processes/threads the sandbox user may have at once (RLIMIT_NPROC; docker: pids_limit).
        max_file_size_mb: largest file a process may write (RLIMIT_FSIZE); writing past it kills with SIGXFSZ.
        max_output_bytes: stdout and stderr are each read up to this many bytes; more kills the run.
        max_disk_mb: size of the work-directory tmpfs (and of ``/tmp`` and ``/dev/shm``, each): the
            most the command can store.
        max_open_files: open file descriptors per process (RLIMIT_NOFILE).
    """

    memory_mb: int = 1024
    max_processes: int = 64
    max_file_size_mb: int = 16
    max_output_bytes: int = 1_000_000
    max_disk_mb: int = 64
    max_open_files: int = 256

    def __post_init__(self) -> None:
        for name in ("memory_mb", "max_processes", "max_file_size_mb", "max_output_bytes", "max_disk_mb",
                     "max_open_files"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"sandbox limit {name} must be a positive integer, got {value!r}")

    @property
    def snapshot_cap(self) -> int:
        """Most bytes the final tar may take (work dir + control files + tar overhead)."""
        return (self.max_disk_mb + 2 * self.max_file_size_mb + 4) << 20


@dataclass(frozen=True)
class FileEntry:
    """One path of a work-directory state. Equality ignores the kept contents (the digest decides).

    Attributes:
        kind: ``file``, ``dir``, ``symlink`` or ``other`` (fifo, device).
        mode: permission bits (``0o7777`` mask).
        size: bytes of a file.
        digest: sha256 of a file's contents.
        target: a symlink's target.
        data: a file's contents, kept only when asked for (seeds).
    """

    kind: str
    mode: int
    size: int = 0
    digest: str = ""
    target: str = ""
    data: bytes | None = field(default=None, compare=False, repr=False)

    def describe(self) -> str:
        if self.kind == "file":
            return f"file of {self.size} bytes, mode {self.mode:o}"
        if self.kind == "symlink":
            return f"symlink to {self.target}"
        return f"{self.kind}, mode {self.mode:o}"


State = dict[str, FileEntry]
"""A work-directory state: path relative to the workdir -> entry (the workdir itself is not listed)."""


def check_workdir(workdir: str) -> str:
    """Validate a fixture workdir for sandboxing; returns it normalised or raises ValueError naming the fix."""
    norm = posixpath.normpath(workdir) if isinstance(workdir, str) else ""
    if not norm.startswith("/") or norm == "/" or norm.startswith("//"):
        raise ValueError(f"fixture.workdir must be an absolute path other than '/', got {workdir!r}")
    for root in RESERVED_ROOTS:
        if norm == root or norm.startswith(root + "/"):
            raise ValueError(f"fixture.workdir {workdir!r} lies in {root}, which the sandbox mounts itself; "
                             "use a path such as /testbed or /workspace")
    if any(c in norm for c in "\n\0"):
        raise ValueError(f"fixture.workdir {workdir!r} contains a newline or NUL")
    return norm


def check_shell(shell: str) -> str:
    """Validate the program that runs commands: a bare name or an absolute path, no spaces."""
    if not isinstance(shell, str) or not shell or any(c.isspace() for c in shell) or "\0" in shell:
        raise ValueError(f"shell must be a program name or absolute path such as 'bash', got {shell!r}")
    return shell


def file_entry(data: bytes, mode: int = 0o644, keep: bool = False) -> FileEntry:
    """A ``file`` entry for ``data``."""
    return FileEntry("file", mode & 0o7777, len(data), hashlib.sha256(data).hexdigest(), data=data if keep else None)


def files_state(files: Mapping[str, bytes], modes: Mapping[str, int] | None = None) -> State:
    """A state holding ``files`` (relative path -> bytes, mode 0644 unless ``modes`` says otherwise)
    and their parent directories (0755)."""
    modes = modes or {}
    state: State = {}
    for rel, data in files.items():
        parts = safe_relative(rel).parts
        for i in range(1, len(parts)):
            parent = "/".join(parts[:i])
            if state.setdefault(parent, FileEntry("dir", 0o755)).kind != "dir":
                raise ValueError(f"file {rel!r} lies under {parent!r}, which is itself a file")
        path = "/".join(parts)
        if path in state:
            raise ValueError(f"file {rel!r} is given twice or is also a directory of another file")
        state[path] = file_entry(data, modes.get(path, 0o644), keep=True)
    return state


class Seed:
    """The state a sandbox run starts from: work-directory entries (with contents) plus a shell prelude.

    ``prelude`` runs in the command's shell before the command (the cwd and
    exported variables a setup script left behind). The tar members are
    encoded once and reused by every run.
    """

    def __init__(self, workdir: str, files: Mapping[str, FileEntry], prelude: str = "") -> None:
        self.workdir = check_workdir(workdir)
        self.files: State = dict(files)
        self.prelude = prelude
        self._blob: bytes | None = None
        self._lock = threading.Lock()

    @classmethod
    def from_fixture_files(cls, workdir: str, files: Mapping[str, str]) -> "Seed":
        """A seed holding ``files`` (relative path -> text) and their parent directories."""
        try:
            return cls(workdir, files_state({rel: text.encode("utf-8") for rel, text in files.items()}))
        except ValueError as exc:
            raise ValueError(f"fixture {exc}") from None

    def state(self) -> State:
        """The entries without their contents (what a run's result is compared against)."""
        return {k: FileEntry(e.kind, e.mode, e.size, e.digest, e.target) for k, e in self.files.items()}

    def blob(self) -> bytes:
        """The tar members (no end-of-archive marker) of the work directory, rooted at the workdir path."""
        with self._lock:
            if self._blob is None:
                self._blob = _encode_members(self.workdir.lstrip("/"), self.files)
            return self._blob

    @property
    def size(self) -> int:
        return sum(e.size for e in self.files.values())


def _tarinfo(name: str, entry: FileEntry) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.mtime = SEED_MTIME
    info.mode = entry.mode
    if entry.kind == "dir":
        info.type = tarfile.DIRTYPE
    elif entry.kind == "symlink":
        info.type = tarfile.SYMTYPE
        info.linkname = entry.target
    elif entry.kind == "file":
        info.size = entry.size
    else:
        info.type = tarfile.FIFOTYPE
    return info


def _encode_members(prefix: str, files: Mapping[str, FileEntry]) -> bytes:
    bio = io.BytesIO()
    tf = tarfile.open(fileobj=bio, mode="w", format=tarfile.GNU_FORMAT)
    for rel in sorted(files):
        entry = files[rel]
        if entry.kind == "file" and entry.data is None:
            raise ValueError(f"seed entry {rel!r} has no contents")
        info = _tarinfo(f"{prefix}/{rel}" if prefix else rel, entry)
        tf.addfile(info, io.BytesIO(entry.data) if entry.kind == "file" and entry.data is not None else None)
    end = tf.offset
    tf.close()
    return bio.getvalue()[:end]


@dataclass
class SandboxRequest:
    """One run: ``script`` executed by ``shell`` in a fresh copy of ``seed`` at ``seed.workdir``.

    Attributes:
        script: the shell text to run (the seed's prelude is prepended).
        seed: the starting state.
        limits: resource limits.
        timeout_s: wall-clock limit of the script, from the moment it starts (what ends a hang).
        shell: the program that runs the script (looked up in the sandbox's PATH).
        keep_contents: return file contents in the result's state (to build a seed from it).
        start_timeout_s: wall-clock limit for starting the sandbox and unpacking the seed.
        cpu_time_s: CPU seconds each process of the run may use (RLIMIT_CPU; what ends a runaway
            computation, which is killed by SIGXCPU); None: the wall-clock limits plus 2 s.
    """

    script: str
    seed: Seed
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    timeout_s: float = 10.0
    shell: str = "bash"
    keep_contents: bool = False
    start_timeout_s: float = 30.0
    cpu_time_s: float | None = None

    def __post_init__(self) -> None:
        check_shell(self.shell)
        if not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be positive, got {self.timeout_s!r}")
        if self.cpu_time_s is not None and not self.cpu_time_s > 0:
            raise ValueError(f"cpu_time_s must be positive, got {self.cpu_time_s!r}")

    @property
    def cpu_limit(self) -> int:
        """The per-process CPU-time limit in whole seconds (RLIMIT_CPU / the ``cpu`` ulimit)."""
        if self.cpu_time_s is not None:
            return max(1, math.ceil(self.cpu_time_s))
        return int(max(self.timeout_s, self.start_timeout_s)) + 2

    @property
    def snapshot_timeout_s(self) -> float:
        """Extra wall time allowed for writing out the final state once the command has ended."""
        return max(5.0, self.timeout_s)

    def encode(self, nonce: str) -> bytes:
        """The complete input tar stream (control files, then the seed, then the end marker)."""
        script = self.script if not self.seed.prelude else f"{self.seed.prelude}\n{self.script}"
        control = {
            "in": FileEntry("dir", 0o755),
            "out": FileEntry("dir", 0o755),
            "in/cmd": file_entry(script.encode("utf-8"), keep=True),
            "in/nonce": file_entry(f"{nonce}\n".encode(), keep=True),
        }
        return _encode_members(CONTROL_DIR.lstrip("/"), control) + self.seed.blob() + b"\0" * 1024


@dataclass
class SandboxResult:
    """What one sandbox run did.

    Attributes:
        exit_code: the command's exit status (a shell reports death by signal N as 128+N);
            None when the run did not complete.
        stdout, stderr: the command's output (each at most ``max_output_bytes``).
        files: the work-directory state after the command (contents only with ``keep_contents``).
        control: files the script left in ``/.pivot/out`` (a setup's ``cwd`` and ``env``).
        started: the command started (the sandbox came up and the seed was unpacked).
        timed_out: the command ran past ``timeout_s``: the sandbox was killed at the deadline, or the
            command ended but its own duration (``command_s``) exceeded the budget; either way its
            effects are not reported.
        killed: why the run was cut short for another reason (output cap, protocol broken by the command).
        error: an infrastructure failure (the sandbox could not start, the state could not be read).
        duration_s: wall time of the whole run (as the host saw it).
        command_s: the command's own duration, measured by the sandbox's clock from just before it
            started to just after it exited; None when the command did not end or the clock was unreadable.
    """

    exit_code: int | None = None
    stdout: bytes = b""
    stderr: bytes = b""
    files: State = field(default_factory=dict)
    control: dict[str, bytes] = field(default_factory=dict)
    started: bool = False
    timed_out: bool = False
    killed: str | None = None
    error: str | None = None
    duration_s: float = 0.0
    command_s: float | None = None

    @property
    def completed(self) -> bool:
        """The command ran to its end and its effects were captured."""
        return self.exit_code is not None and self.error is None and not self.timed_out and self.killed is None


class SandboxBackend:
    """Base class of the backends: :meth:`probe` once, then :meth:`run` from any thread."""

    name = "base"

    def __init__(self) -> None:
        self._probe_lock = threading.Lock()
        self._probe_result: tuple[str | None] | None = None

    def probe(self) -> str | None:
        """None when the backend works on this host, else why not (cached on this object)."""
        with self._probe_lock:
            if self._probe_result is None:
                try:
                    self._probe_result = (self._probe(),)
                except Exception as exc:  # noqa: BLE001 - any failure means "not usable here"
                    self._probe_result = (f"{type(exc).__name__}: {exc}",)
            return self._probe_result[0]

    def _probe(self) -> str | None:  # pragma: no cover - abstract
        raise NotImplementedError

    def run(self, request: SandboxRequest) -> SandboxResult:  # pragma: no cover - abstract
        """Run ``request`` in a fresh sandbox. Never raises for what the command does."""
        raise NotImplementedError

    def install_hint(self) -> str:  # pragma: no cover - abstract
        raise NotImplementedError


def new_nonce() -> str:
    return "pivot" + secrets.token_hex(12)


class StreamCollector:
    """Splits a sandbox's stdout and stderr back into the command's output, exit code and final tar.

    Feed chunks as they arrive; check :attr:`over` after each feed (kill the
    sandbox when it is set) and :attr:`started` / :attr:`ended` to move the
    wall-clock deadline on.
    """

    def __init__(self, nonce: str, limits: SandboxLimits) -> None:
        self._start = f"{nonce}:start".encode()  # then " <clock>" (possibly empty) and a newline
        self._end = f"\n{nonce} ".encode()
        self.cap = limits.max_output_bytes
        self.snapshot_cap = limits.snapshot_cap
        self.pre = bytearray()       # stderr before the start marker (sandbox / wrapper messages)
        self.stderr = bytearray()
        self.stdout = bytearray()
        self.tail = bytearray()      # stdout after the end marker: "<rc>\n<tar>"
        self.started = False
        self.ended = False
        self.over: str | None = None
        self.start_clock: float | None = None  # the sandbox's clock when the command started

    def feed_stderr(self, chunk: bytes) -> None:
        if not self.started:
            self.pre += chunk
            i = self.pre.find(self._start)
            j = self.pre.find(b"\n", i + len(self._start)) if i >= 0 else -1
            if j < 0:
                if len(self.pre) > 65536 + len(self._start) + 64:
                    self.over = "the sandbox wrote more than 64 KiB before the command started"
                return
            self.started = True
            self.start_clock = _clock(self.pre[i + len(self._start):j])
            rest = self.pre[j + 1:]
            del self.pre[i:]
            chunk = bytes(rest)
        self.stderr += chunk
        if len(self.stderr) > self.cap:
            del self.stderr[self.cap:]
            self.over = f"stderr exceeded {self.cap} bytes"

    def feed_stdout(self, chunk: bytes) -> None:
        if self.ended:
            self.tail += chunk
            if len(self.tail) > self.snapshot_cap:
                self.over = f"the final state exceeded {self.snapshot_cap} bytes"
            return
        start = max(0, len(self.stdout) - len(self._end))
        self.stdout += chunk
        i = self.stdout.find(self._end, start)
        if i >= 0:
            self.ended = True
            self.tail = self.stdout[i + len(self._end):]
            del self.stdout[i:]
        if len(self.stdout) > self.cap:
            del self.stdout[self.cap:]
            self.over = f"stdout exceeded {self.cap} bytes"

    def finish(self, result: SandboxResult, workdir: str, keep_contents: bool, timeout_s: float | None = None) -> None:
        """Fill ``result`` from what was collected (after the sandbox has exited).

        With ``timeout_s``, a command whose own duration (the sandbox's clock) exceeds it is timed
        out even though the host saw it end (the host was late in looking, not the command early).
        """
        result.started = self.started
        result.stdout = bytes(self.stdout)
        result.stderr = bytes(self.stderr)
        if result.timed_out or result.error:
            return
        if self.over:
            result.killed = self.over
            return
        if not self.ended:
            if self.started:
                result.killed = ("the sandbox ended before the command's effects were captured "
                                 "(the command killed its shell or broke the sandbox)")
            else:
                message = bytes(self.pre).decode("utf-8", "replace").strip()[-2000:]
                result.error = f"the sandbox failed to start: {message or 'no message'}"
            return
        nl = self.tail.find(b"\n")
        fields = self.tail[:nl].split() if nl > 0 else []
        try:
            result.exit_code = int(fields[0]) if fields else None
        except ValueError:
            result.exit_code = None
        if result.exit_code is None:
            result.killed = "the command's exit code could not be read (the command broke the sandbox)"
            return
        end_clock = _clock(fields[1]) if len(fields) > 1 else None
        if self.start_clock is not None and end_clock is not None and end_clock >= self.start_clock:
            result.command_s = round(end_clock - self.start_clock, 2)
            if timeout_s is not None and result.command_s > timeout_s:
                result.exit_code = None
                result.timed_out = True
                return
        try:
            result.files, result.control = parse_snapshot(bytes(self.tail[nl + 1:]), workdir, keep_contents)
        except (tarfile.TarError, ValueError, EOFError) as exc:
            result.exit_code = None
            result.killed = f"the final state could not be read ({exc}; the command broke the sandbox)"


def _clock(text: bytes | bytearray) -> float | None:
    """A ``/proc/uptime`` reading written by the wrapper (seconds), or None when absent or garbled."""
    try:
        value = float(bytes(text).strip() or b"nan")
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def parse_snapshot(data: bytes, workdir: str, keep_contents: bool) -> tuple[State, dict[str, bytes]]:
    """Decode the wrapper's final tar into the work-directory state and the control files."""
    prefix = workdir.strip("/")
    control_prefix = CONTROL_DIR.strip("/") + "/out/"
    state: State = {}
    control: dict[str, bytes] = {}
    saw_root = False
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tf:
        for member in tf:
            name = posixpath.normpath(member.name.lstrip("/"))
            if name.startswith(control_prefix) and member.isfile():
                control[name[len(control_prefix):]] = _read(tf, member)
                continue
            if name == prefix:
                saw_root = True
                continue
            if not name.startswith(prefix + "/"):
                continue
            rel = name[len(prefix) + 1:]
            if rel.startswith("../") or rel == "..":
                raise ValueError(f"unsafe path {member.name!r} in the sandbox's final state")
            mode = member.mode & 0o7777
            if member.isfile():
                state[rel] = file_entry(_read(tf, member), mode, keep_contents)
            elif member.islnk():
                linked = posixpath.normpath(member.linkname.lstrip("/"))
                source = state.get(linked[len(prefix) + 1:]) if linked.startswith(prefix + "/") else None
                state[rel] = source if source is not None else FileEntry("other", mode)
            elif member.isdir():
                state[rel] = FileEntry("dir", mode)
            elif member.issym():
                state[rel] = FileEntry("symlink", 0o777, target=member.linkname,
                                       digest=hashlib.sha256(member.linkname.encode()).hexdigest())
            else:
                state[rel] = FileEntry("other", mode)
    if not saw_root:
        raise ValueError("the work directory is missing from the final state")
    return state, control


def _read(tf: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    handle = tf.extractfile(member)
    return handle.read() if handle is not None else b""


def describe_exit(code: int | None) -> str:
    """``exit code 1`` or ``exit code 137 (killed by SIGKILL)`` for shell-style codes."""
    if code is None:
        return "no exit code"
    if code > 128:
        try:
            return f"exit code {code} (killed by {signal.Signals(code - 128).name})"
        except ValueError:
            pass
    return f"exit code {code}"


def sandbox_env(workdir: str) -> list[tuple[str, str]]:
    """The full environment of a command in ``workdir``."""
    return [*SANDBOX_ENV, ("HOME", workdir)]
