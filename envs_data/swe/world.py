"""The ``swe`` world: a repository in a sandbox behind SWE-agent's tools (the generator's own editor).

State: the repository (``task.fixture``'s files at ``fixture.workdir``, after its setup script if
it has one) plus the editor's state (the open file and its window). The file viewer and editor
tools (``open_file``, ``goto``, ``scroll_down``, ``search_dir``, ``search_file``, ``find_file``,
``create``, ``edit``, ``submit``) are the generator's code
(:class:`pivot_envs.envs_data.swe.generator.World`) working on the host copy of the repository,
so their results are the recorded ones byte for byte. Everything that runs code runs in a fresh
sandbox (bubblewrap: no network, read-only system, size-capped work dir, unprivileged uid, CPU /
memory / file-size / process limits, a wall-clock timeout; see
:mod:`pivot_envs.verifiers.sandbox.session`) seeded with the current repository; what the run
leaves in the work tree becomes the repository:

* ``run_tests(path)`` runs the task's ``test_command`` (``task.config["test_command"]``, default
  ``python run_tests.py``) with the path appended;
* ``bash``: ``python``/``python3 SCRIPT ...`` runs the script; the simple file commands the
  generator emulates keep its output format and run on the host copy (``cat FILE...``, ``ls
  [DIR]``, ``rm [-f] FILE...``, ``grep [-r] [-n] TEXT [PATH...]``, ``find [DIR] [-name GLOB]``:
  the options it understands, no shell syntax); any other command (other programs or options,
  pipes, redirections, globs, variables) runs for real in the sandbox under ``bash -c``
  (``python`` is ``python3`` there), where the generator refused it;
* ``python`` output is stdout and stderr interleaved (``python3 -B -E -s -u``), with the caret
  lines of tracebacks dropped (they differ between Python versions) and no exit status, as
  recorded; empty output reads "Your command ran successfully and did not produce any output.";
  a run past ``timeout_s`` ends with ``Error: command timed out after N seconds`` and its changes
  are dropped.

Task success: :meth:`SWEWorld.tests_pass` runs ``test_command`` on the current repository
(without keeping what the run writes) and says whether it exited 0; :meth:`SWEWorld.test_report`
also returns its output.

Digest: SHA-256 of the repository's changes against the start state: every path whose regular
file contents, mode or symlink target differ (added, changed, removed), so an unchanged
repository, or one whose changes were undone, has the start digest. It does not cover the
editor's open file and window, directories (as ``git diff``), mtimes or owners.

The editor shows paths under ``/testbed`` (the generator's convention, the bundled fixtures'
workdir).
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import shlex
import signal
from dataclasses import dataclass
from typing import Any, Sequence

from pivot_envs.types import Fixture
from pivot_envs.verifiers.sandbox.session import files_state
from pivot_envs.worlds.base import ToolResult, WorldError, WorldTask, parse_arguments
from pivot_envs.worlds.sandboxed import SandboxedWorld, command_problem, command_refusal

from . import NAME
from . import generator as gen

EMPTY_OUTPUT = "Your command ran successfully and did not produce any output."
SHELL_SYNTAX = set("|&;<>()$`*?[]{}~!\\\n")
"""Characters that make a ``bash`` command a real shell command (run in the sandbox)."""
SHELL_PRELUDE = 'python() { python3 "$@"; }\nexport -f python\nexport PYTHONUNBUFFERED=1\n'
KILLING_SIGNALS = {signal.SIGXCPU: "its CPU time limit", signal.SIGXFSZ: "the file size limit",
                   signal.SIGKILL: "", signal.SIGSEGV: "", signal.SIGABRT: "", signal.SIGBUS: ""}
"""Signals whose exit status (128 + N) gets an ``Error:`` line: the generator showed no exit status."""
SHOWN_CAP = 100_000
"""Characters of a stopped run's output that are shown."""


def _encode(text: str) -> bytes:
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace")


def _decode(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


@dataclass
class _Repo(gen.World):
    """The generator's world, with code execution routed to the sandbox of ``owner``."""

    owner: Any = None

    def tool_run_tests(self, path: str | None = None) -> str:
        return self.owner._run_tests(path)

    def tool_bash(self, command: str) -> str:
        try:
            words = shlex.split(command)
        except ValueError as exc:
            raise gen.ToolError(f"cannot parse command: {exc}") from exc
        if not words:
            return EMPTY_OUTPUT
        simple = not (set(command) & SHELL_SYNTAX)
        if simple and words[0] in ("python", "python3") and len(words) > 1:
            return _shown(self.owner._python(words[1:]).output)
        if simple and _emulated(words):
            return super().tool_bash(command)
        return self.owner._shell(command)

    def _ls(self, args: list[str]) -> str:
        """The generator's ``ls``, also listing symlinks and folders without files."""
        extra = [p for p, e in self.owner._others.items() if e.kind != "dir" or not any(
            f.startswith(p + "/") for f in self.files)]
        if not extra:
            return super()._ls(args)
        files = self.files
        try:
            self.files = {**files, **{p: "" for p in extra}}
            return super()._ls(args)
        finally:
            self.files = files


def _emulated(words: list[str]) -> bool:
    """Whether the generator's emulation of ``words`` behaves as the real command would (the
    options it understands only); otherwise the command runs for real."""
    prog, args = words[0], words[1:]
    flags = [a for a in args if a.startswith("-")]
    if prog in ("cat", "ls"):
        return not flags
    if prog == "rm":
        return all(a == "-f" for a in flags)
    if prog == "grep":
        return all(set(a[1:]) <= set("rn") and len(a) > 1 for a in flags)
    if prog == "find":
        rest = args[1:] if args and not args[0].startswith("-") else args
        return not rest or (len(rest) == 2 and rest[0] == "-name")
    return False


def _shown(output: str) -> str:
    output = output.rstrip("\n")
    return output if output.strip() else EMPTY_OUTPUT


class SWEWorld(SandboxedWorld):
    """A repository with SWE-agent's tools; code runs in a sandbox (see the module docstring).

    Settings: :class:`~pivot_envs.worlds.sandboxed.SandboxedWorld` (``timeout_s`` defaults to the generator's run limit).
    """

    name = NAME

    def __init__(self, timeout_s: float = float(gen.RUN_TIMEOUT_S), **sandbox: Any) -> None:
        super().__init__(timeout_s=timeout_s, **sandbox)
        self.test_command = gen.TEST_COMMAND
        self._repo: _Repo | None = None
        self._session: Any = None
        self._modes: dict[str, int] = {}     # regular files whose mode is not 0644
        self._others: dict[str, Any] = {}    # directories, symlinks, fifos (FileEntry)
        self._start_entries: dict[str, tuple[str, int, str]] = {}
        self._tools: list[dict[str, Any]] = []
        self._failed_run = False  # the last run was killed (timeout, output cap, a limit's signal)

    # ------------------------------------------------------------------ protocol

    def tools(self) -> list[dict[str, Any]]:
        return [dict(t) for t in (self._tools or gen.TOOLS)]

    def start(self, task: WorldTask) -> None:
        fixture = task.fixture or Fixture(workdir=gen.WORKDIR)
        self._repo = self._session = None
        self._tools = list(task.tools)
        self.test_command = str(task.config.get("test_command") or gen.TEST_COMMAND)
        session = self.open_session(task.id, fixture, {k: _encode(v) for k, v in fixture.files.items()},
                                    f"exec bash -c {shlex.quote(fixture.setup)} >/dev/null\n")
        state = session.state
        self._session = session
        self._repo = _Repo(files={}, runner=None, owner=self)  # type: ignore[arg-type]
        self._adopt(state)
        self._repo.initial = dict(self._repo.files)  # what submit diffs against
        self._start_entries = self._entries()

    def call(self, name: str, arguments: str | dict[str, Any]) -> ToolResult:
        repo = self._require()
        self._failed_run = False
        try:
            args = _coerce(name, parse_arguments(arguments), self.tools())
        except ValueError as exc:
            content = f"Error: invalid arguments for {name}: {exc}\n{repo.footer()}"
        else:
            try:
                content = repo.call(name, args)
            except (ValueError, TypeError, KeyError, IndexError, UnicodeError) as exc:
                content = f"Error: {name} failed: {exc}\n{repo.footer()}"
        return ToolResult(content, error=content.startswith("Error:") or self._failed_run)

    def digest(self) -> str:
        self._require()
        now, start = self._entries(), self._start_entries
        changes = [[path, list(now[path]) if path in now else None]
                   for path in sorted(set(now) | set(start)) if now.get(path) != start.get(path)]
        return hashlib.sha256(json.dumps(changes, ensure_ascii=False).encode("utf-8", "surrogateescape")).hexdigest()

    def close(self) -> None:
        self._repo = self._session = None  # nothing runs between calls: every sandbox ended with its run

    def refusal(self, name: str, arguments: str | dict[str, Any]) -> str | None:
        """A ``bash`` call whose command ``bash -c`` cannot take (:func:`~pivot_envs.worlds.sandboxed.command_problem`)."""
        return command_refusal(name, arguments)

    # ------------------------------------------------------------------ task success

    def test_report(self) -> tuple[bool, str]:
        """Run ``test_command`` on the current repository (its writes are not kept): (exit status 0, output)."""
        self._require()
        argv = self._python_argv(self.test_command)
        if argv is not None:
            run = self._python(argv, commit=False)
            return run.rc == 0, run.output
        code, output = self._bash(self.test_command, commit=False)
        return code == 0, output

    def tests_pass(self) -> bool:
        """Whether the task's tests pass on the current repository."""
        return self.test_report()[0]

    # ------------------------------------------------------------------ views

    def files(self) -> dict[str, str]:
        """The repository's regular files (relative path -> text)."""
        return dict(self._require().files)

    def diff(self) -> str:
        """``git diff`` of the repository against the start state (what ``submit`` prints)."""
        repo = self._require()
        return gen.repo_diff(repo.initial, repo.files)

    # ------------------------------------------------------------------ running code (called by _Repo)

    def _run_tests(self, path: str | None) -> str:
        argv = self._python_argv(self.test_command)
        if argv is not None:
            return _shown(self._python(argv + ([path] if path is not None else [])).output)
        command = self.test_command + (f" {shlex.quote(path)}" if path is not None else "")
        return self._shell(command)

    @staticmethod
    def _python_argv(command: str) -> list[str] | None:
        """The arguments after ``python`` when ``command`` is a plain ``python ARGS`` command, else None."""
        try:
            words = shlex.split(command)
        except ValueError:
            return None
        if len(words) > 1 and words[0] in ("python", "python3") and not (set(command) & SHELL_SYNTAX):
            return words[1:]
        return None

    def _python(self, argv: Sequence[str], commit: bool = True) -> gen.RunResult:
        """``python ARGV`` in the sandbox: exit status and output as the generator's runner gave them."""
        repo = self._require()
        if any("\0" in a for a in argv):
            raise gen.ToolError("the command contains a NUL character, which cannot be run")
        script = posixpath.normpath(argv[0])
        if not argv[0].startswith("-") and script not in repo.files:
            where = posixpath.join(gen.WORKDIR, script)
            return gen.RunResult(2, f"python: can't open file {where!r}: [Errno 2] No such file or directory\n")
        words = " ".join(shlex.quote(a) for a in argv)
        code, raw = self._run(f"exec python3 -B -E -s -u {words} 2>&1\n", commit)
        return gen.RunResult(code, self._normalise(raw))

    def _shell(self, command: str) -> str:
        problem = command_problem(command)
        if problem:
            raise gen.ToolError(problem)
        return _shown(self._bash(command)[1])

    def _bash(self, command: str, commit: bool = True) -> tuple[int, str]:
        code, raw = self._run(f"{SHELL_PRELUDE}exec bash -c {shlex.quote(command)} 2>&1\n", commit)
        return code, self._normalise(raw)

    def _run(self, script: str, commit: bool) -> tuple[int, str]:
        """Run ``script`` on the current repository; (exit status, output). Keeps the resulting tree
        when the run completes and ``commit``; a negative status: killed (timeout, output cap)."""
        session = self._session
        assert session is not None
        session.replace(self._state())
        result = session.run(script, self.timeout_s, commit=commit)
        if result.error:
            raise WorldError(f"swe world: the sandbox failed: {result.error}")
        raw = result.stdout.decode("utf-8", "backslashreplace")
        if result.timed_out or result.killed:
            self._failed_run = True
            if len(raw) > SHOWN_CAP:
                raw = raw[:SHOWN_CAP] + f"\n[... {len(raw) - SHOWN_CAP} more characters not shown]"
            if result.timed_out:
                return -9, raw + f"\nError: command timed out after {self.timeout_s:g} seconds\n"
            return -9, raw + f"\nError: the command was stopped: {result.killed}\n"
        code = result.exit_code
        assert code is not None
        if code > 128 and code - 128 in KILLING_SIGNALS:
            self._failed_run = True
            sig = signal.Signals(code - 128)
            why = KILLING_SIGNALS[sig]
            limit = f" ({why}{f' of {self.cpu_time_s:g} s' if sig == signal.SIGXCPU else ''})" if why else ""
            raw += f"\nError: the command was killed by {sig.name}{limit}\n"
        if commit:
            self._adopt(session.state)
        return code, raw

    def _normalise(self, raw: str) -> str:
        workdir = self._session.workdir if self._session is not None else gen.WORKDIR
        if workdir != gen.WORKDIR:
            raw = raw.replace(workdir, gen.WORKDIR)
        return "\n".join(line for line in raw.split("\n") if not gen._CARET_LINE.match(line))

    # ------------------------------------------------------------------ state

    def _state(self) -> dict[str, Any]:
        """The repository as sandbox entries (files with contents, their folders, other entries)."""
        repo = self._require()
        state = files_state({p: _encode(t) for p, t in repo.files.items()},
                            {p: m for p, m in self._modes.items() if p in repo.files})
        for path, entry in self._others.items():
            if path not in state and not any(p.startswith(path + "/") for p in repo.files if entry.kind != "dir"):
                state[path] = entry
        return state

    def _adopt(self, state: dict[str, Any]) -> None:
        """Take a sandbox tree as the repository (regular files as text; the rest kept aside)."""
        repo = self._require()
        files = {p: _decode(e.data or b"") for p, e in state.items() if e.kind == "file"}
        repo.files.clear()
        repo.files.update(dict(sorted(files.items())))
        self._modes = {p: e.mode for p, e in state.items() if e.kind == "file" and e.mode != 0o644}
        self._others = {p: e for p, e in state.items() if e.kind != "file"}

    def _entries(self) -> dict[str, tuple[str, int, str]]:
        """Path -> (type, mode, contents hash or link target) of every non-directory entry."""
        repo = self._require()
        out = {p: ("file", self._modes.get(p, 0o644), hashlib.sha256(_encode(t)).hexdigest())
               for p, t in repo.files.items()}
        for path, entry in self._others.items():
            if entry.kind != "dir" and path not in out:
                out[path] = (entry.kind, entry.mode, entry.target)
        return out

    def _require(self) -> _Repo:
        if self._repo is None:
            raise WorldError("swe world: no episode (call start() first; close() ends it)")
        return self._repo


def _coerce(name: str, args: dict[str, Any], tools: list[dict[str, Any]]) -> dict[str, Any]:
    """Arguments checked against the tool's schema: integers as int (``"5"`` and ``5.0`` accepted),
    strings as str; unknown tools and arguments are left to the tool (which names them)."""
    spec = next((t["function"] for t in tools if t.get("function", {}).get("name") == name), None)
    props = ((spec or {}).get("parameters") or {}).get("properties") or {}
    out = dict(args)
    for key, value in args.items():
        kind = (props.get(key) or {}).get("type")
        if kind == "integer":
            if isinstance(value, bool):
                raise ValueError(f"{key} must be an integer, got {value!r}")
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            elif isinstance(value, str) and value.strip().lstrip("+-").isdigit():
                value = int(value.strip())
            if not isinstance(value, int):
                raise ValueError(f"{key} must be an integer, got {value!r}")
            out[key] = value
        elif kind == "string" and not isinstance(value, str):
            raise ValueError(f"{key} must be a string, got {value!r}")
    return out
