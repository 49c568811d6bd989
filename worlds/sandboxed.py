"""What the sandboxed worlds (``terminal``, ``swe``) share: sandbox settings, ``config()``, and opening a
task's sandbox session at its post-setup state (cached per fixture), and which commands ``bash -c`` can take."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from pivot_envs.types import Fixture
from pivot_envs.verifiers.sandbox import SandboxLimits, SandboxUnavailable
from pivot_envs.verifiers.sandbox.session import SandboxSession, files_state
from pivot_envs.worlds.base import World, WorldError, parse_arguments

MAX_COMMAND_BYTES = 131071
"""Longest command (UTF-8 bytes): it is one argument of ``bash -c`` (Linux's MAX_ARG_STRLEN)."""

SETUP_CACHE_SIZE = 16
"""Post-setup states kept per world (fixture key -> files), so a task's setup script runs once."""


class SandboxedWorld(World):
    """A world whose tools run commands in a sandbox (one fresh sandbox per call; see ``SandboxSession``).

    Args:
        backend: ``"bwrap"``, ``"docker"`` or ``"auto"`` (bwrap, else docker; never the host).
        timeout_s: wall-clock limit of one command (against hangs).
        cpu_time_s: CPU seconds per process of a command (against runaway computations: SIGXCPU).
        setup_timeout_s: wall-clock limit of the fixture's setup script.
        memory_mb, max_processes, max_file_size_mb, max_output_bytes, max_disk_mb: sandbox limits
            (:class:`~pivot_envs.verifiers.sandbox.SandboxLimits`).
        docker_image: image of the docker backend.
    """

    def __init__(self, backend: str = "auto", timeout_s: float = 30.0, cpu_time_s: float = 10.0,
                 setup_timeout_s: float = 120.0, memory_mb: int = 1024, max_processes: int = 64,
                 max_file_size_mb: int = 16, max_output_bytes: int = 1_000_000, max_disk_mb: int = 64,
                 docker_image: str | None = None) -> None:
        for key, value in (("timeout_s", timeout_s), ("cpu_time_s", cpu_time_s), ("setup_timeout_s", setup_timeout_s)):
            if not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"{self.name} world: {key} must be a positive number, got {value!r}")
        self._params: dict[str, Any] = {
            "backend": backend, "timeout_s": timeout_s, "cpu_time_s": cpu_time_s, "setup_timeout_s": setup_timeout_s,
            "memory_mb": memory_mb, "max_processes": max_processes, "max_file_size_mb": max_file_size_mb,
            "max_output_bytes": max_output_bytes, "max_disk_mb": max_disk_mb, "docker_image": docker_image,
        }
        self.limits = SandboxLimits(memory_mb=memory_mb, max_processes=max_processes,
                                    max_file_size_mb=max_file_size_mb, max_output_bytes=max_output_bytes,
                                    max_disk_mb=max_disk_mb)
        self.timeout_s = float(timeout_s)
        self.cpu_time_s = float(cpu_time_s)
        self.setup_timeout_s = float(setup_timeout_s)
        self._setups: OrderedDict[str, Any] = OrderedDict()  # fixture key -> post-setup state

    def open_session(self, task_id: str, fixture: Fixture, files: dict[str, bytes], setup_script: str) -> Any:
        """A sandbox session on ``fixture``'s work dir at its post-setup state: ``files`` with
        ``setup_script`` run once (when the fixture has a setup), then taken from the cache.

        Raises :class:`WorldError` naming the task when the sandbox, the files or the setup fail.
        """
        try:
            session = SandboxSession(fixture.workdir, self._params["backend"], self.limits, self.cpu_time_s,
                                     docker_image=self._params["docker_image"])
        except SandboxUnavailable as exc:
            raise WorldError(f"{self.name} world: {exc}") from None
        except ValueError as exc:
            raise WorldError(f"{self.name} world: task {task_id}: {exc}") from None
        key = fixture.key()
        if key in self._setups:
            self._setups.move_to_end(key)
            session.replace(self._setups[key])
            return session
        try:
            session.replace(files_state(files))
        except ValueError as exc:
            raise WorldError(f"{self.name} world: task {task_id}: bad fixture: {exc}") from None
        if fixture.setup.strip():
            run = session.run(setup_script, self.setup_timeout_s)
            if not run.completed:
                why = run.error or ("timed out" if run.timed_out else f"killed: {run.killed}")
                tail = run.stderr.decode("utf-8", "replace").strip()[-500:]
                raise WorldError(f"{self.name} world: task {task_id}: the fixture's setup did not complete: {why}"
                                 + (f"; stderr: {tail}" if tail else ""))
        self._setups[key] = session.state
        while len(self._setups) > SETUP_CACHE_SIZE:
            self._setups.popitem(last=False)
        return session

    def config(self) -> dict[str, Any]:
        return {"name": self.name, **self._params}


def command_refusal(name: str, arguments: str | dict[str, Any]) -> str | None:
    """Why a ``bash`` call cannot run at all (:func:`command_problem`), or ``None`` (another tool, or bad arguments:
    those the call itself answers with an error)."""
    if name != "bash":
        return None
    try:
        command = parse_arguments(arguments).get("command")
    except ValueError:
        return None
    return command_problem(command) if isinstance(command, str) else None


def command_problem(command: str) -> str | None:
    """Why ``command`` cannot be passed to ``bash -c`` (a NUL, or longer than one argument may be), or None."""
    if "\0" in command:
        return "the command contains a NUL character, which bash cannot run"
    size = len(command.encode("utf-8", "surrogateescape"))
    if size > MAX_COMMAND_BYTES:
        return f"the command is {size} bytes long; at most {MAX_COMMAND_BYTES} (write long scripts to a file first)"
    return None
