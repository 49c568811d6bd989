"""The ``terminal`` world: one work tree per episode, each ``bash`` call run in a fresh sandbox on it.

Design. The episode's work tree lives on the host, in memory (a
:class:`~pivot_envs.verifiers.sandbox.session.SandboxSession`); every tool call starts a fresh
bubblewrap sandbox seeded with the current tree, runs the command there and, when it completes,
takes the tree it left as the new state. So files (contents, modes, new and deleted paths,
symlinks) carry from call to call; nothing else does. We chose this over one long-lived sandbox
running a shell fed through a pipe because:

* it is what the tool promises and what the data recorded: the ``bash`` tool's description says
  "each call starts a fresh shell in the working directory: `cd` and variables do not carry over",
  and the generator ran every command in its own subshell; a persistent shell's cwd and
  variables would change later results (a ``cd`` in one call moving the next);
* every limit of the exec verifier's sandbox applies per call, unchanged and already tested: no
  network, read-only system, size-capped tmpfs work dir, unprivileged uid when started by root
  (one uid of the backend's pool per run), CPU-time / memory / file-size / process / output
  limits, a wall-clock timeout, and every process killed when the call ends. Nothing a call
  starts survives it (no background process can change the tree behind a later call), so a
  replay is deterministic and ``close()`` has nothing left to kill;
* the digest is computed from the host copy without entering a sandbox, and a sandbox that dies
  never loses the episode's state.

The price is one sandbox start plus a tar of the tree in and out per call (about 35-40 ms for
these fixtures on our machine), and what a fresh sandbox cannot carry: background processes, files
outside the work directory (``/tmp``), mtimes (every file is 2000-01-01 at the start of a call, so
listings are deterministic), hard links (a linked pair comes back as two equal files). A call cut
short by the wall clock or an output cap is rolled back (its partial changes are dropped; the
result says so).

Task start. :meth:`TerminalWorld.start` writes ``task.fixture``'s files (mode 0644, directories
0755) at ``fixture.workdir`` and runs its setup script once in a sandbox (the post-setup tree is
cached per fixture; the setup's output and exit status are ignored, its cwd and variables do not
carry, as in the generator). A setup that does not complete raises :class:`WorldError`.

Tool results follow the generator (:func:`pivot_envs.envs_data.terminal.generator.tool_content`):
stdout then stderr; with a non-zero exit status and a message on stderr the text starts with
``Error: exit code N`` (a tool error); a non-zero status without stderr adds ``[exit code: N]``.
The command runs as ``bash -c COMMAND`` in the workdir, stdin from ``/dev/null``, ``HOME`` = the
workdir, ``LC_ALL=C``, ``TZ=UTC``, ``umask 022``. A call that times out or is stopped for its
output is an ``Error:`` result (exit code 124 resp. none) carrying what it printed.

Digest: SHA-256 over the work tree's sorted ``(path, type, permission bits, contents hash or link
target)`` (:func:`~pivot_envs.verifiers.sandbox.session.tree_digest`). It does not cover mtimes,
owners, anything outside the work directory, and no cwd or environment (none persists).
"""

from __future__ import annotations

import shlex
from typing import Any

from pivot_envs.types import Fixture
from pivot_envs.worlds.base import ToolResult, WorldError, WorldTask, parse_arguments
from pivot_envs.worlds.sandboxed import SandboxedWorld, command_problem, command_refusal

from . import NAME
from .generator import BASH_TOOL, CommandRun, tool_content

DEFAULT_WORKDIR = "/workspace"
"""Post-setup trees kept per world object (one per fixture)."""

TIMEOUT_EXIT = 124
"""Exit status reported for a command stopped by the wall clock (as coreutils ``timeout``)."""


class TerminalWorld(SandboxedWorld):
    """Shell tasks on a fixture's work tree; one ``bash`` tool (see the module docstring).

    Settings: :class:`~pivot_envs.worlds.sandboxed.SandboxedWorld`.
    """

    name = NAME

    def __init__(self, **sandbox: Any) -> None:
        super().__init__(**sandbox)
        self._session: Any = None
        self._tools: list[dict[str, Any]] = []

    # ------------------------------------------------------------------ protocol

    def tools(self) -> list[dict[str, Any]]:
        if self._tools:
            return [dict(t) for t in self._tools]
        return [dict(BASH_TOOL)]

    def start(self, task: WorldTask) -> None:
        fixture = task.fixture or Fixture(workdir=DEFAULT_WORKDIR)
        self._tools = list(task.tools)
        self._session = None
        self._session = self.open_session(task.id, fixture, {k: v.encode("utf-8") for k, v in fixture.files.items()},
                                          _script(fixture.setup))

    def call(self, name: str, arguments: str | dict[str, Any]) -> ToolResult:
        session = self._require()
        if name != "bash":
            return ToolResult(f"Error: unknown tool {name!r}; this world has one tool: bash", error=True)
        try:
            args = parse_arguments(arguments)
        except ValueError as exc:
            return ToolResult(f"Error: invalid arguments for bash: {exc}", error=True)
        command = args.get("command")
        extra = sorted(set(args) - {"command"})
        if not isinstance(command, str) or extra:
            problem = f"unexpected argument(s) {', '.join(extra)}" if extra else "'command' must be a string"
            return ToolResult(f"Error: invalid arguments for bash: {problem}", error=True)
        problem = command_problem(command)
        if problem:
            return ToolResult(f"Error: {problem}", error=True)
        return self.run(command, session)

    def digest(self) -> str:
        return self._require().digest()

    def refusal(self, name: str, arguments: str | dict[str, Any]) -> str | None:
        """A ``bash`` call whose command ``bash -c`` cannot take (:func:`command_problem`)."""
        return command_refusal(name, arguments)

    def close(self) -> None:
        self._session = None  # nothing runs between calls: every sandbox ended with its call

    # ------------------------------------------------------------------ helpers

    def run(self, command: str, session: Any = None) -> ToolResult:
        """Run one shell command on the current tree (the ``bash`` tool)."""
        session = session or self._require()
        result = session.run(_script(command), self.timeout_s)
        if result.error:
            raise WorldError(f"terminal world: the sandbox failed: {result.error}")
        stdout = result.stdout.decode("utf-8", "replace")
        stderr = result.stderr.decode("utf-8", "replace")
        if result.timed_out:
            return ToolResult(_cut("Error: exit code {code}: the command timed out after {t:g} s and was killed; "
                                   "its changes were discarded".format(code=TIMEOUT_EXIT, t=self.timeout_s),
                                   stdout + stderr), error=True)
        if result.killed:
            return ToolResult(_cut(f"Error: the command was stopped: {result.killed}; its changes were discarded",
                                   stdout + stderr), error=True)
        assert result.exit_code is not None
        content = tool_content(CommandRun(stdout, stderr, result.exit_code))
        return ToolResult(content, error=content.startswith("Error:"))

    def files(self) -> dict[str, bytes]:
        """The current regular files of the work tree (relative path -> contents)."""
        return {p: e.data or b"" for p, e in self._require().state.items() if e.kind == "file"}

    def _require(self) -> Any:
        if self._session is None:
            raise WorldError("terminal world: no episode (call start() first; close() ends it)")
        return self._session


def _script(command: str) -> str:
    """The sandbox script of one command: ``bash -c COMMAND`` (errors read ``bash: line 1: ...``)."""
    return f"exec bash -c {shlex.quote(command)}\n"


def _cut(head: str, output: str, keep: int = 10_000) -> str:
    """``head`` then what a stopped command printed, at most ``keep`` characters of it."""
    if len(output) > keep:
        output = output[:keep] + f"\n[... {len(output) - keep} more characters not shown]\n"
    return f"{head}\n{output}" if output else head
