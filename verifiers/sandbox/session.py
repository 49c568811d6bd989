"""A work tree that lives on the host between sandbox runs: the state of a multi-step episode.

:class:`SandboxSession` keeps a work directory's entries (with contents) in memory. Each
:meth:`SandboxSession.run` starts a **fresh** sandbox of the backend (the exec verifier's runner:
same isolation, limits, output caps and kill rules, see :mod:`.bwrap`) seeded with the current
tree; when the command completes, the tree it left becomes the session's state. So files carry
from run to run while nothing else does: no process, no ``/tmp``, no cwd or variables.

What a run keeps and loses:

* kept: paths, types (file, directory, symlink, fifo), permission bits (``0o7777``), contents;
* reset on every run: mtimes (every entry is unpacked with :data:`~.base.SEED_MTIME`, so
  listings are deterministic), ownership (everything belongs to the sandbox uid), hard links
  (a linked pair comes back as two equal files);
* a run that does not complete (wall-clock timeout, an output cap, a command that breaks the
  sandbox) leaves the state as it was before it (runs are atomic); a process killed by the
  CPU-time limit (SIGXCPU) is an ordinary completed run and its changes stay.

``tree_digest(state)`` is SHA-256 over the sorted ``(path, type, mode, contents hash / link
target)`` of every entry; it ignores mtimes and owners.
"""

from __future__ import annotations

import hashlib
import threading
from typing import Mapping

from pivot_envs.verifiers.sandbox.base import (
    FileEntry,
    SandboxBackend,
    SandboxLimits,
    SandboxRequest,
    SandboxResult,
    SandboxUnavailable,
    Seed,
    State,
    files_state,
)
from pivot_envs.verifiers.sandbox import get_backend

_BACKENDS: dict[tuple[str, str | None], SandboxBackend] = {}
_BACKENDS_LOCK = threading.Lock()


def shared_backend(name: str = "auto", docker_image: str | None = None) -> SandboxBackend:
    """A probed backend shared by every session of this process (one probe, one uid pool);
    raises :class:`SandboxUnavailable` saying what to install."""
    key = (name, docker_image)
    with _BACKENDS_LOCK:
        if key not in _BACKENDS:
            _BACKENDS[key] = get_backend(name, docker_image)
        return _BACKENDS[key]


def tree_digest(state: Mapping[str, FileEntry]) -> str:
    """SHA-256 of a work tree: sorted paths with their type, mode and contents (mtimes, owners ignored)."""
    h = hashlib.sha256()
    for path in sorted(state):
        entry = state[path]
        detail = entry.digest if entry.kind == "file" else entry.target if entry.kind == "symlink" else ""
        h.update(f"{path}\0{entry.kind}\0{entry.mode:o}\0{detail}\n".encode("utf-8", "surrogateescape"))
    return h.hexdigest()


class SandboxSession:
    """A work tree on the host plus the settings of the sandbox runs that change it.

    Args:
        workdir: where the tree is mounted in the sandbox (validated like a fixture's workdir).
        backend: a backend object, or a backend name for :func:`shared_backend`.
        limits: resource limits of every run.
        cpu_time_s: CPU seconds per process of a run (RLIMIT_CPU; what stops a runaway).
        shell: the program that runs a script (``bash``).
    """

    def __init__(self, workdir: str, backend: SandboxBackend | str = "auto", limits: SandboxLimits | None = None,
                 cpu_time_s: float | None = 10.0, shell: str = "bash", docker_image: str | None = None) -> None:
        self.backend = backend if isinstance(backend, SandboxBackend) else shared_backend(backend, docker_image)
        self.workdir = Seed(workdir, {}).workdir  # validates
        self.limits = limits or SandboxLimits()
        self.cpu_time_s = cpu_time_s
        self.shell = shell
        self._seed = Seed(self.workdir, {})
        self.runs = 0

    @property
    def state(self) -> State:
        """The current tree (entries keep their contents); do not mutate it, use :meth:`replace`."""
        return self._seed.files

    def replace(self, state: Mapping[str, FileEntry]) -> None:
        """Make ``state`` (entries with contents) the current tree."""
        for path, entry in state.items():
            if entry.kind == "file" and entry.data is None:
                raise ValueError(f"session state entry {path!r} has no contents")
        self._seed = Seed(self.workdir, dict(state))

    def digest(self) -> str:
        return tree_digest(self.state)

    def run(self, script: str, timeout_s: float, *, commit: bool = True,
            start_timeout_s: float = 30.0) -> SandboxResult:
        """Run ``script`` in a fresh sandbox holding the current tree; when it completes and ``commit``,
        the tree it left becomes the current one. Never raises for what the script does; the caller
        checks ``result.error`` (the sandbox itself failed)."""
        request = SandboxRequest(script=script, seed=self._seed, limits=self.limits, timeout_s=timeout_s,
                                 shell=self.shell, keep_contents=commit, start_timeout_s=start_timeout_s,
                                 cpu_time_s=self.cpu_time_s)
        result = self.backend.run(request)
        self.runs += 1
        if commit and result.completed:
            self._seed = Seed(self.workdir, result.files)
        return result


__all__ = ["SandboxSession", "SandboxUnavailable", "files_state", "shared_backend", "tree_digest"]
