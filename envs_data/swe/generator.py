"""SWE domain: SWE-agent-style repository-editing trajectories that fix one injected bug.

World: a small Python package under ``/testbed`` (3-8 files: the package's
``__init__``, two or three modules, one or two test files, the repository's own
stdlib-only ``run_tests.py`` and sometimes a README), built from the module
templates of :mod:`.repos` with per-seed package, module and identifier
names. One module carries ONE injected bug from a bug family (off-by-one,
wrong comparison, missing None check, wrong default, wrong dict key, swapped
arguments, missing return, integer division, wrong string method, exception
not raised, wrong method); its test file fails before the fix.

Tools (OpenAI function specs, SWE-agent's windowed editor of :data:`WINDOW`
lines): ``open_file``, ``goto``, ``scroll_down``, ``search_dir``,
``search_file``, ``find_file``, ``create``, ``edit`` (replace lines of the open
file; Python syntax is checked first), ``run_tests``, ``bash`` and ``submit``.
Every tool result is computed by :class:`World` on an in-memory copy of the
repository; ``bash python ...`` and ``run_tests`` really run Python on a
temporary copy (:class:`PythonRunner`) and record the output with the temporary
path replaced by ``/testbed``.

Task families = bug families (``meta["task"]``). The user message is a
paraphrased issue report (symptom, reproduction snippet, expected vs actual,
both obtained by running the snippet). The expert reproduces the bug or runs
the tests, locates the module (``find_file``/``search_dir``/``search_file``),
opens it (and navigates), edits the bug, runs the tests and submits; about 10%
of episodes apply a plausible edit that does not fix the bug and submit anyway
(reward 0.0), and about 20% contain a tool error followed by a corrected call.
The prompt wording follows SWE-agent's default templates (MIT, (c) 2024 John
Yang et al.).
"""

from __future__ import annotations

import difflib
import hashlib
import inspect
import json
import os
import posixpath
import random
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from string import Template
from typing import Any, Mapping, Sequence

from pivot_envs.fixture import write_files
from pivot_envs.types import Fixture, Message, Tool, Trajectory, stable_hash

from .repos import (
    FAMILIES,
    PACKAGE_NOUNS,
    PACKAGE_PREFIXES,
    RUN_TESTS,
    TEMPLATES,
    TEST_COMMAND,
    BugSite,
    ModuleTemplate,
)

DOMAIN = "swe"
WORKDIR = "/testbed"
WINDOW = 40
"""Lines shown by the file viewer at a time."""
FAILED_RATE = 0.10
ERROR_RATE = 0.22
MAX_TURNS = 10
RUN_TIMEOUT_S = 10

# --------------------------------------------------------------------------- tools


def _fn(name: str, description: str, properties: dict[str, Any], required: Sequence[str] = ()) -> Tool:
    params: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        params["required"] = list(required)
    return {"type": "function", "function": {"name": name, "description": description, "parameters": params}}


TOOLS: list[Tool] = [
    _fn(
        "open_file",
        "Opens the file at the given path in the editor. If line_number is provided, the window is moved to "
        f"include that line; otherwise it starts at the top. Shows {WINDOW} lines with their numbers.",
        {
            "path": {"type": "string", "description": "the path to the file to open"},
            "line_number": {"type": "integer", "minimum": 1, "description": "the line number to move the window to"},
        },
        ["path"],
    ),
    _fn(
        "goto",
        "Moves the window of the open file to show line_number.",
        {"line_number": {"type": "integer", "minimum": 1, "description": "the line number to move the window to"}},
        ["line_number"],
    ),
    _fn("scroll_down", f"Moves the window of the open file down {WINDOW} lines.", {}),
    _fn(
        "search_dir",
        "Searches for search_term in all files in dir (default: the current directory) and lists the files "
        "with the number of matching lines.",
        {
            "search_term": {"type": "string", "description": "the text to search for"},
            "dir": {"type": "string", "default": ".", "description": "the directory to search in"},
        },
        ["search_term"],
    ),
    _fn(
        "search_file",
        "Searches for search_term in file and prints the matching lines with their numbers. If file is not "
        "provided, searches the open file.",
        {
            "search_term": {"type": "string", "description": "the text to search for"},
            "file": {"type": "string", "description": "the file to search in (default: the open file)"},
        },
        ["search_term"],
    ),
    _fn(
        "find_file",
        "Finds all files with the given name (shell wildcards allowed) in dir (default: the current directory).",
        {
            "file_name": {"type": "string", "description": "the name of the file to search for"},
            "dir": {"type": "string", "default": ".", "description": "the directory to search in"},
        },
        ["file_name"],
    ),
    _fn(
        "create",
        "Creates a new, empty file with the given name and opens it in the editor.",
        {"filename": {"type": "string", "description": "the name of the file to create"}},
        ["filename"],
    ),
    _fn(
        "edit",
        "Replaces lines start_line through end_line (inclusive) of the open file with replacement. Python "
        "files are checked for syntax errors first; a failing edit is not applied. THE REPLACEMENT REQUIRES "
        "PROPER INDENTATION.",
        {
            "start_line": {"type": "integer", "minimum": 1, "description": "the first line to replace"},
            "end_line": {"type": "integer", "minimum": 1, "description": "the last line to replace (inclusive)"},
            "replacement": {"type": "string", "description": "the text to put in place of those lines"},
        },
        ["start_line", "end_line", "replacement"],
    ),
    _fn(
        "run_tests",
        f"Runs the repository's test-suite (`{TEST_COMMAND} [path]`) and prints every test and a summary.",
        {"path": {"type": "string", "default": "tests", "description": "a test file or folder"}},
    ),
    _fn(
        "bash",
        "Runs a shell command in the repository root, e.g. `python reproduce.py` or `rm reproduce.py`.",
        {"command": {"type": "string", "description": "the command to run"}},
        ["command"],
    ),
    _fn("submit", "Submits the current changes to the code base (prints the diff) and ends the episode.", {}),
]

SYSTEM_PROMPT = f"""SETTING: You are an autonomous programmer, and you're working directly in the command line with a special interface.

The special interface consists of a file editor that shows you {WINDOW} lines of a file at a time.
In addition to typical bash commands, you can also use the tools listed to help you navigate and edit files.

Please note that THE EDIT COMMAND REQUIRES PROPER INDENTATION.
If you'd like to add the line '        print(x)' you must fully write that out, with all those spaces before the code! Indentation is important and code that is not indented correctly will fail and require fixing before it can be run.

RESPONSE FORMAT:
Your shell prompt is formatted as follows:
(Open file: <path>)
(Current directory: <cwd>)
bash-$

First, you should _always_ include a general thought about what you're going to do next.
Then, for every response, you must include exactly _ONE_ tool call.
Remember, you should only include a _SINGLE_ command and then wait for a response from the shell before continuing with more discussion and commands.
However, the environment does NOT support interactive session commands (e.g. python, vim), so please do not invoke them."""

INSTANCE_TEMPLATE = """We're currently solving the following issue within our repository. Here's the issue text:
ISSUE:
{issue}

INSTRUCTIONS:
Now, you're going to solve this issue on your own. Your terminal session has started and you're in the repository's root directory. You can use any bash commands or the special interface to help you. Edit all the files you need to and run any checks or tests that you want; `run_tests` runs the test-suite.
Remember, YOU CAN ONLY ENTER ONE COMMAND AT A TIME. You should always wait for feedback after every command.
When you're satisfied with all of the changes you've made, you can submit your changes to the code base by simply running the submit command.
Note however that you cannot use any interactive session commands (e.g. python, vim) in this environment, but you can write scripts and run them. E.g. you can write a python script and then run it with `python <script_name>.py`.

(Open file: n/a)
(Current directory: /testbed)
bash-$"""

# --------------------------------------------------------------------------- running Python

_DRIVER = r'''
import io, json, os, signal, sys, traceback, types
import dataclasses, importlib.util, pathlib, re  # warm imports shared by every forked child

def child(job):
    fd = os.open(job["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", line_buffering=True)
    sys.stderr = io.TextIOWrapper(
        io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="backslashreplace", line_buffering=True
    )
    signal.alarm(job["timeout"])
    os.chdir(job["cwd"])
    script = os.path.abspath(job["argv"][0])
    sys.argv = list(job["argv"])
    sys.path[0] = os.path.dirname(script)
    try:
        with open(script, "rb") as f:
            source = f.read()
    except OSError as exc:
        print(f"python: can't open file {script!r}: [Errno {exc.errno}] {exc.strerror}", file=sys.stderr)
        return 2
    main = types.ModuleType("__main__")
    main.__file__ = script
    sys.modules["__main__"] = main
    try:
        exec(compile(source, script, "exec"), main.__dict__)
    except SystemExit as exc:
        if exc.code is None:
            return 0
        if isinstance(exc.code, int):
            return exc.code
        print(exc.code, file=sys.stderr)
        return 1
    except BaseException as exc:
        traceback.print_exception(type(exc), exc, exc.__traceback__.tb_next)
        return 1
    return 0

for line in sys.stdin:
    job = json.loads(line)
    pid = os.fork()
    if pid == 0:
        rc = 70
        try:
            rc = child(job)
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(rc & 0xFF)
    _, status = os.waitpid(pid, 0)
    rc = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    sys.stdout.write(json.dumps({"rc": rc}) + "\n")
    sys.stdout.flush()
'''
"""A long-lived driver: forks one fresh child per job that runs ``python <argv>`` semantics."""

_CARET_LINE = re.compile(r"^\s*[\^~]+\s*$")


@dataclass(frozen=True)
class RunResult:
    """Outcome of one real Python run: exit status and combined stdout/stderr (normalised)."""

    rc: int
    output: str


class PythonRunner:
    """Runs ``python <script> [args]`` for real against snapshots of a repository.

    Each run materialises the files with :func:`pivot_envs.fixture.write_files` in a
    temporary directory and executes the script in a fresh process: a forked
    child of one long-lived interpreter where ``os.fork`` exists (fast), else a
    new ``python`` subprocess. Output is normalised so that it is identical on
    every machine: the temporary path becomes ``/testbed`` and the ``^^^^``
    marker lines of Python >= 3.11 tracebacks are dropped. Results are cached
    per (files, argv) for the runner's lifetime. Use as a context manager.
    """

    def __init__(self, timeout: int = RUN_TIMEOUT_S, use_fork: bool | None = None):
        self.timeout = timeout
        self.use_fork = hasattr(os, "fork") if use_fork is None else use_fork
        self._base = Path(tempfile.mkdtemp(prefix="pivot-swe-"))
        self._cache: dict[str, RunResult] = {}
        self._on_disk: dict[str, str] = {}
        self._driver: subprocess.Popen[str] | None = None
        self.runs = 0

    def __enter__(self) -> "PythonRunner":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Stop the driver process and delete the temporary directory."""
        if self._driver is not None:
            assert self._driver.stdin is not None
            self._driver.stdin.close()
            try:
                self._driver.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._driver.kill()
                self._driver.wait()
            if self._driver.stdout is not None:
                self._driver.stdout.close()
            self._driver = None
        shutil.rmtree(self._base, ignore_errors=True)

    def run(self, files: Mapping[str, str], argv: Sequence[str]) -> RunResult:
        """Run ``python *argv`` in a fresh copy of ``files``; returns the normalised result."""
        key = stable_hash(sorted(files.items()), list(argv), length=40)
        if key in self._cache:
            return self._cache[key]
        root = self._sync(files)
        script = posixpath.normpath(argv[0]) if argv else ""
        if script not in files:
            where = posixpath.join(WORKDIR, script) if script and not argv[0].startswith("-") else " ".join(argv)
            rc, raw = 2, f"python: can't open file {where!r}: [Errno 2] No such file or directory\n"
        elif self.use_fork:
            rc, raw = self._run_fork(root, argv)
        else:
            rc, raw = self._run_subprocess(root, argv)
        result = RunResult(rc=rc, output=self._normalise(raw, root))
        self._cache[key] = result
        self.runs += 1
        return result

    def _sync(self, files: Mapping[str, str]) -> Path:
        """Make the run directory hold exactly ``files`` (rewriting only what changed since the last run)."""
        root = self._base / "testbed"
        root.mkdir(exist_ok=True)
        for rel in set(self._on_disk) - set(files):
            (root / rel).unlink()
        changed = {rel: text for rel, text in files.items() if self._on_disk.get(rel) != text}
        write_files(Fixture(files=changed, workdir=WORKDIR), root)
        self._on_disk = dict(files)
        return root

    def _run_fork(self, root: Path, argv: Sequence[str]) -> tuple[int, str]:
        if self._driver is None:
            self._driver = subprocess.Popen(
                [sys.executable, "-B", "-E", "-s", "-c", _DRIVER],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                encoding="utf-8",
            )
        out = self._base / "out.txt"
        job = {"cwd": str(root), "argv": list(argv), "out": str(out), "timeout": self.timeout}
        assert self._driver.stdin is not None and self._driver.stdout is not None
        self._driver.stdin.write(json.dumps(job) + "\n")
        self._driver.stdin.flush()
        line = self._driver.stdout.readline()
        if not line:
            raise RuntimeError(
                "the swe generator's Python driver process died; rerun, or use PythonRunner(use_fork=False)"
            )
        rc = int(json.loads(line)["rc"])
        raw = out.read_text(encoding="utf-8", errors="backslashreplace")
        if rc < 0:
            raw += f"\nError: command timed out after {self.timeout} seconds\n"
        return rc, raw

    def _run_subprocess(self, root: Path, argv: Sequence[str]) -> tuple[int, str]:
        try:
            proc = subprocess.run(
                [sys.executable, "-B", "-E", "-s", "-u", *argv],
                cwd=root,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                timeout=self.timeout,
            )
        except subprocess.TimeoutExpired as exc:
            raw = (exc.output or b"").decode("utf-8", "backslashreplace")
            return -9, raw + f"\nError: command timed out after {self.timeout} seconds\n"
        return proc.returncode, proc.stdout.decode("utf-8", "backslashreplace")

    @staticmethod
    def _normalise(raw: str, root: Path) -> str:
        for prefix in sorted({str(root), os.path.realpath(root)}, key=len, reverse=True):
            raw = raw.replace(prefix, WORKDIR)
        lines = [line for line in raw.split("\n") if not _CARET_LINE.match(line)]
        return "\n".join(lines)


# --------------------------------------------------------------------------- the world (tools)


class ToolError(Exception):
    """A tool call the tool itself rejects; its result starts with ``Error:``."""


def split_lines(content: str) -> list[str]:
    """Lines of a file (a trailing newline does not start a new line)."""
    lines = content.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def join_lines(lines: Sequence[str]) -> str:
    return "".join(line + "\n" for line in lines)


def window_start(line: int, total: int) -> int:
    """0-based first line of the window that shows ``line`` (SWE-agent puts it 1/6 from the top)."""
    return max(0, min(line - 1 - WINDOW // 6, total - WINDOW))


@dataclass
class World:
    """A repository under ``/testbed`` plus SWE-agent's editor state; executes the tools.

    Attributes:
        files: relative path -> content (the current state).
        runner: runs Python for ``bash python ...`` and ``run_tests``.
        initial: the state at the start (``submit`` diffs against it).
        open_path: the file open in the editor, if any.
        first: 0-based first line of the editor window.
    """

    files: dict[str, str]
    runner: PythonRunner
    initial: dict[str, str] = field(default_factory=dict)
    open_path: str | None = None
    first: int = 0

    def __post_init__(self) -> None:
        if not self.initial:
            self.initial = dict(self.files)

    def copy(self) -> "World":
        return World(dict(self.files), self.runner, dict(self.initial), self.open_path, self.first)

    def footer(self) -> str:
        opened = f"{WORKDIR}/{self.open_path}" if self.open_path else "n/a"
        return f"(Open file: {opened})\n(Current directory: {WORKDIR})\nbash-$"

    def call(self, name: str, args: Mapping[str, Any]) -> str:
        """Execute one tool call; returns the tool message content (errors start with ``Error:``)."""
        method = getattr(self, f"tool_{name}", None)
        if method is None:
            body = f"Error: unknown tool {name!r}"
        else:
            try:
                inspect.signature(method).bind(**dict(args))
            except TypeError as exc:
                body = f"Error: invalid arguments for {name}: {exc}"
            else:
                try:
                    body = method(**dict(args))
                except ToolError as exc:
                    body = f"Error: {exc}"
        return f"{body}\n{self.footer()}"

    # -- helpers

    @staticmethod
    def rel(path: str) -> str:
        """Normalise a user path to a path relative to ``/testbed`` (``"."`` for the root)."""
        path = path.strip()
        if path == WORKDIR or path.startswith(WORKDIR + "/"):
            path = path[len(WORKDIR) :].lstrip("/") or "."
        if path.startswith("/"):
            raise ToolError(f"{path} is outside the repository ({WORKDIR})")
        norm = posixpath.normpath(path or ".")
        if norm == ".." or norm.startswith("../"):
            raise ToolError(f"{path} is outside the repository ({WORKDIR})")
        return norm

    @staticmethod
    def absolute(rel: str) -> str:
        return WORKDIR if rel == "." else f"{WORKDIR}/{rel}"

    def files_under(self, directory: str) -> list[str]:
        rel = self.rel(directory)
        found = sorted(p for p in self.files if rel == "." or p.startswith(rel + "/"))
        if not found and rel != ".":
            raise ToolError(f"Directory {directory} not found")
        return found

    def _lines(self, path: str) -> list[str]:
        return split_lines(self.files[path])

    def view(self, path: str, first: int, lines: Sequence[str] | None = None) -> str:
        lines = self._lines(path) if lines is None else lines
        total = len(lines)
        last = min(total, first + WINDOW)
        out = [f"[File: {self.absolute(path)} ({total} lines total)]"]
        if first > 0:
            out.append(f"({first} more lines above)")
        out.extend(f"{i + 1}:{lines[i]}" for i in range(first, last))
        if last < total:
            out.append(f"({total - last} more lines below)")
        return "\n".join(out)

    def _require_open(self) -> str:
        if self.open_path is None or self.open_path not in self.files:
            raise ToolError("No file open. Use the open_file command first.")
        return self.open_path

    # -- tools

    def tool_open_file(self, path: str, line_number: int | None = None) -> str:
        rel = self.rel(path)
        if rel not in self.files:
            raise ToolError(f"File {path} not found")
        total = len(self._lines(rel))
        if line_number is not None and not 1 <= line_number <= max(total, 1):
            raise ToolError(f"<line_number> must be between 1 and {total}")
        self.open_path = rel
        self.first = 0 if line_number is None else window_start(line_number, total)
        return self.view(rel, self.first)

    def tool_goto(self, line_number: int) -> str:
        path = self._require_open()
        total = len(self._lines(path))
        if not 1 <= line_number <= total:
            raise ToolError(f"<line_number> must be between 1 and {total}")
        self.first = window_start(line_number, total)
        return self.view(path, self.first)

    def tool_scroll_down(self) -> str:
        path = self._require_open()
        total = len(self._lines(path))
        self.first = max(0, min(self.first + WINDOW, total - WINDOW))
        return self.view(path, self.first)

    def tool_find_file(self, file_name: str, dir: str = ".") -> str:
        import fnmatch

        where = self.absolute(self.rel(dir))
        matches = [p for p in self.files_under(dir) if fnmatch.fnmatchcase(posixpath.basename(p), file_name)]
        if not matches:
            return f'No matches found for "{file_name}" in {where}'
        listing = "\n".join(self.absolute(p) for p in matches)
        return f'Found {len(matches)} matches for "{file_name}" in {where}:\n{listing}'

    def tool_search_dir(self, search_term: str, dir: str = ".") -> str:
        where = self.absolute(self.rel(dir))
        counts = []
        for path in self.files_under(dir):
            hits = sum(1 for line in self._lines(path) if search_term in line)
            if hits:
                counts.append((path, hits))
        if not counts:
            return f'No matches found for "{search_term}" in {where}'
        total = sum(c for _, c in counts)
        listing = "\n".join(f"{self.absolute(p)} ({c} matches)" for p, c in counts)
        return (
            f'Found {total} matches for "{search_term}" in {where}:\n{listing}\n'
            f'End of matches for "{search_term}" in {where}'
        )

    def tool_search_file(self, search_term: str, file: str | None = None) -> str:
        if file is None:
            path = self._require_open()
        else:
            path = self.rel(file)
            if path not in self.files:
                raise ToolError(f"File name {file} not found. Please provide a valid file name.")
        where = self.absolute(path)
        hits = [(i + 1, line) for i, line in enumerate(self._lines(path)) if search_term in line]
        if not hits:
            return f'No matches found for "{search_term}" in {where}'
        listing = "\n".join(f"Line {n}:{line}" for n, line in hits)
        return (
            f'Found {len(hits)} matches for "{search_term}" in {where}:\n{listing}\n'
            f'End of matches for "{search_term}" in {where}'
        )

    def tool_create(self, filename: str) -> str:
        rel = self.rel(filename)
        if rel in self.files:
            raise ToolError(f"File '{filename}' already exists.")
        self.files[rel] = "\n"
        self.open_path, self.first = rel, 0
        return self.view(rel, 0)

    def tool_edit(self, start_line: int, end_line: int, replacement: str) -> str:
        path = self._require_open()
        lines = self._lines(path)
        if not 1 <= start_line <= end_line <= len(lines):
            raise ToolError(f"start_line and end_line must satisfy 1 <= start_line <= end_line <= {len(lines)}")
        new_lines = lines[: start_line - 1] + split_lines(replacement) + lines[end_line:]
        first = window_start(start_line, len(new_lines))
        if path.endswith(".py"):
            problem = syntax_problem(join_lines(new_lines), path)
            if problem:
                orig_first = window_start(start_line, len(lines))
                rule = "-" * 49
                return (
                    "Error: Your proposed edit has introduced new syntax error(s). Please read this error "
                    f"message carefully and then retry editing the file.\n\nERRORS:\n- E999 {problem}\n\n"
                    f"This is how your edit would have looked if applied\n{rule}\n"
                    f"{self.view(path, first, new_lines)}\n{rule}\n\n"
                    f"This is the original code before your edit\n{rule}\n"
                    f"{self.view(path, orig_first, lines)}\n{rule}\n"
                    "Your changes have NOT been applied. Please fix your edit command and try again."
                )
        self.files[path] = join_lines(new_lines)
        self.first = first
        return (
            f"{self.view(path, first)}\nFile updated. Please review the changes and make sure they are correct "
            "(correct indentation, no duplicate lines, etc). Edit the file again if necessary."
        )

    def tool_run_tests(self, path: str | None = None) -> str:
        argv = ["run_tests.py"] + ([path] if path is not None else [])
        return self._python(argv)

    def tool_bash(self, command: str) -> str:
        try:
            words = shlex.split(command)
        except ValueError as exc:
            raise ToolError(f"cannot parse command: {exc}") from exc
        if not words:
            return "Your command ran successfully and did not produce any output."
        prog, args = words[0], words[1:]
        if prog in ("python", "python3") and args:
            return self._python(args)
        if prog == "rm":
            return self._rm(args)
        if prog == "cat" and args:
            return self._cat(args)
        if prog == "ls":
            return self._ls(args)
        if prog == "grep":
            return self._grep(args)
        if prog == "find":
            return self._find(args)
        raise ToolError(f"the swe world supports python, rm, cat, ls, grep and find commands, not {prog!r}")

    def tool_submit(self) -> str:
        return "\n" + repo_diff(self.initial, self.files)

    # -- bash helpers

    def _python(self, argv: list[str]) -> str:
        result = self.runner.run(self.files, argv)
        output = result.output.rstrip("\n")
        return output if output.strip() else "Your command ran successfully and did not produce any output."

    def _rm(self, args: list[str]) -> str:
        force = any(a.startswith("-") and "f" in a for a in args)
        errors = []
        for arg in (a for a in args if not a.startswith("-")):
            rel = self.rel(arg)
            if rel in self.files:
                del self.files[rel]
                if self.open_path == rel:
                    self.open_path = None
            elif not force:
                errors.append(f"rm: cannot remove '{arg}': No such file or directory")
        return "\n".join(errors) or "Your command ran successfully and did not produce any output."

    def _cat(self, args: list[str]) -> str:
        out = []
        for arg in args:
            rel = self.rel(arg)
            if rel not in self.files:
                out.append(f"cat: {arg}: No such file or directory")
            else:
                out.append(self.files[rel].rstrip("\n"))
        return "\n".join(out)

    def _grep(self, args: list[str]) -> str:
        flags = "".join(a[1:] for a in args if a.startswith("-"))
        rest = [a for a in args if not a.startswith("-")]
        if not rest:
            raise ToolError("usage: grep [-rn] PATTERN [PATH ...]")
        pattern, targets = rest[0], rest[1:] or ["."]
        paths: list[str] = []
        for target in targets:
            rel = self.rel(target)
            if rel in self.files:
                paths.append(rel)
            elif "r" in flags:
                paths += self.files_under(target)
            else:
                return f"grep: {target}: Is a directory" if rel == "." else f"grep: {target}: No such file or directory"
        out = []
        for path in paths:
            for number, line in enumerate(self._lines(path), start=1):
                if pattern in line:
                    where = f"{self._shown(path, targets)}:" if len(paths) > 1 or "r" in flags else ""
                    out.append(f"{where}{number}:{line}" if "n" in flags else f"{where}{line}")
        return "\n".join(out) or "Your command ran successfully and did not produce any output."

    @staticmethod
    def _shown(path: str, targets: list[str]) -> str:
        return f"./{path}" if targets in ([], ["."]) else path

    def _find(self, args: list[str]) -> str:
        import fnmatch

        start = args[0] if args and not args[0].startswith("-") else "."
        name = args[args.index("-name") + 1] if "-name" in args and args.index("-name") + 1 < len(args) else "*"
        rel = self.rel(start)
        base = "." if rel == "." else rel
        hits = [p for p in self.files_under(start) if fnmatch.fnmatchcase(posixpath.basename(p), name)]
        shown = [f"./{p}" if base == "." and start in (".", "./") else p for p in hits]
        return "\n".join(shown) or "Your command ran successfully and did not produce any output."

    def _ls(self, args: list[str]) -> str:
        target = self.rel(next((a for a in args if not a.startswith("-")), "."))
        prefix = "" if target == "." else target + "/"
        names = sorted({p[len(prefix) :].split("/")[0] for p in self.files if p.startswith(prefix)})
        if not names:
            return f"ls: cannot access '{target}': No such file or directory"
        return "\n".join(names)


def syntax_problem(source: str, path: str) -> str | None:
    """``"IndentationError: unexpected indent"`` style text when ``source`` does not compile, else None.

    Only the stable head of CPython's message is kept (e.g. ``expected an indented block``), so the text
    is the same on every Python version.
    """
    try:
        compile(source, path, "exec")
    except SyntaxError as exc:
        msg = str(exc.msg).split(" after ")[0].split(" (")[0]
        return f"{type(exc).__name__}: {msg}"
    return None


def _blob(content: str) -> str:
    data = content.encode("utf-8")
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()[:7]


def repo_diff(before: Mapping[str, str], after: Mapping[str, str]) -> str:
    """``git diff`` of two repository states (new, deleted and modified files, sorted by path)."""
    chunks = []
    for path in sorted(set(before) | set(after)):
        old, new = before.get(path), after.get(path)
        if old == new:
            continue
        head = [f"diff --git a/{path} b/{path}"]
        if old is None:
            head += ["new file mode 100644", f"index 0000000..{_blob(new or '')}"]
            names = ("/dev/null", f"b/{path}")
        elif new is None:
            head += ["deleted file mode 100644", f"index {_blob(old)}..0000000"]
            names = (f"a/{path}", "/dev/null")
        else:
            head += [f"index {_blob(old)}..{_blob(new)} 100644"]
            names = (f"a/{path}", f"b/{path}")
        body = difflib.unified_diff(
            (old or "").splitlines(), (new or "").splitlines(), names[0], names[1], lineterm=""
        )
        chunks.append("\n".join(head + list(body)))
    return "\n".join(chunks) + "\n" if chunks else ""


# --------------------------------------------------------------------------- repositories


@dataclass
class Repo:
    """A generated repository with one injected bug.

    Attributes:
        pkg: package (and repository) name.
        template: the module template that carries the bug.
        site: the injected bug.
        names: placeholder -> identifier for the buggy module (with ``pkg`` and ``mod``).
        path: path of the buggy module.
        test_path: path of the buggy module's test file.
        fixed: the correct repository.
        buggy: the repository with the bug (the episode's fixture).
        wrong: the buggy repository after the expert's non-fixing edit (failed episodes).
        version: the package's ``__version__``.
    """

    pkg: str
    template: ModuleTemplate
    site: BugSite
    names: dict[str, str]
    path: str
    test_path: str
    fixed: dict[str, str]
    buggy: dict[str, str]
    wrong: dict[str, str]
    version: str

    def fill(self, text: str) -> str:
        """Substitute the buggy module's identifiers into ``text``."""
        return Template(text).substitute(self.names)

    @property
    def func(self) -> str:
        """Identifier of the function or method that holds the bug."""
        return self.names[self.site.func]


def _replace_once(text: str, old: str, new: str, what: str) -> str:
    count = text.count(old)
    if count != 1:
        raise ValueError(f"swe_repos: {what}: expected exactly one occurrence of {old!r}, found {count}")
    return text.replace(old, new)


def _init_source(pkg: str, blurb: str, modules: list[tuple[str, list[str]]], version: str) -> str:
    lines = [f'"""{pkg}: {blurb}."""', ""]
    exported: list[str] = []
    for stem, names in modules:
        lines.append(f"from .{stem} import {', '.join(names)}")
        exported += names
    lines += ["", "__all__ = ["] + [f'    "{n}",' for n in exported] + ["]", f'__version__ = "{version}"']
    return join_lines(lines)


def _readme(pkg: str, blurb: str, modules: list[tuple[str, str]]) -> str:
    lines = [f"# {pkg}", "", f"{blurb[0].upper()}{blurb[1:]}.", "", "Modules:", ""]
    lines += [f"- `{pkg}.{stem}`: {text}" for stem, text in modules]
    lines += ["", "## Tests", "", f"    {TEST_COMMAND}"]
    return join_lines(lines)


def build_repo(rng: random.Random, template: ModuleTemplate | None = None, site: BugSite | None = None) -> Repo:
    """A repository of 2-3 modules built from templates, with ``site`` (or a sampled bug) injected."""
    if template is None or site is None:
        family = rng.choice(FAMILIES)
        template, site = rng.choice([(t, s) for t in TEMPLATES for s in t.sites if s.family == family])
    others = rng.sample([t for t in TEMPLATES if t is not template], k=rng.choice((1, 1, 1, 2)))
    pkg = rng.choice(PACKAGE_PREFIXES) + rng.choice(PACKAGE_NOUNS)
    version = f"0.{rng.randint(1, 9)}.{rng.randint(0, 12)}"
    modules = sorted([template] + others, key=lambda t: t.key)
    fixed: dict[str, str] = {}
    init_modules: list[tuple[str, list[str]]] = []
    readme_modules: list[tuple[str, str]] = []
    bug_names: dict[str, str] = {}
    for tpl in modules:
        stem = rng.choice(tpl.stems)
        names = {key: rng.choice(pool) for key, pool in tpl.names.items()}
        names.update(pkg=pkg, mod=stem)
        fixed[f"{pkg}/{stem}.py"] = Template(tpl.source).substitute(names)
        if tpl is template or rng.random() < 0.2:
            fixed[f"tests/test_{stem}.py"] = Template(tpl.tests).substitute(names)
        init_modules.append((stem, [names[e] for e in tpl.exports]))
        readme_modules.append((stem, rng.choice(tpl.blurbs)))
        if tpl is template:
            bug_names = names
    blurb = readme_modules[0][1] if len(readme_modules) == 1 else f"{readme_modules[0][1]}, and more"
    fixed[f"{pkg}/__init__.py"] = _init_source(pkg, blurb, init_modules, version)
    fixed["run_tests.py"] = RUN_TESTS
    if len(fixed) < 8 and rng.random() < 0.6:
        fixed["README.md"] = _readme(pkg, blurb, readme_modules)
    fixed = dict(sorted(fixed.items()))
    path = f"{pkg}/{bug_names['mod']}.py"
    fill = lambda text: Template(text).substitute(bug_names)  # noqa: E731
    what = f"{template.key}/{site.family}/{site.func}"
    buggy_src = _replace_once(fixed[path], fill(site.correct), fill(site.buggy), what)
    wrong_src = _replace_once(buggy_src, fill(site.wrong[0]), fill(site.wrong[1]), what + " (wrong fix)")
    return Repo(
        pkg=pkg,
        template=template,
        site=site,
        names=bug_names,
        path=path,
        test_path=f"tests/test_{bug_names['mod']}.py",
        fixed=fixed,
        buggy={**fixed, path: buggy_src},
        wrong={**fixed, path: wrong_src},
        version=version,
    )


def edit_for(before: str, after: str) -> tuple[int, int, str]:
    """The single ``edit(start_line, end_line, replacement)`` that turns ``before`` into ``after``."""
    a, b = split_lines(before), split_lines(after)
    ops = [op for op in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes() if op[0] != "equal"]
    if not ops:
        raise ValueError("edit_for: the two versions are identical")
    i1, i2, j1, j2 = ops[0][1], ops[-1][2], ops[0][3], ops[-1][4]
    if i1 == i2:  # a pure insertion: replace the line above together with the new lines
        i1, j1 = i1 - 1, j1 - 1
    return i1 + 1, i2, "\n".join(b[j1:j2])


# --------------------------------------------------------------------------- issue reports

_ISSUE_TEMPLATES = (
    "{title}\n\n{symptom}\n\n```python\n{snippet}```\n\n{observed}",
    "### {title}\n\n**Describe the bug**\n{symptom}\n\n**To Reproduce**\n```python\n{snippet}```\n\n"
    "**Expected behavior**\n{expected_sentence}\n\n**Actual behavior**\n{actual_sentence}\n\n"
    "`{pkg}` version: {version}",
    "{title}\n\nHi! I think I found a bug in `{pkg}.{mod}`. {symptom}\n\nMinimal example:\n```python\n{snippet}```\n"
    "{observed}\n\nThanks!",
    "{symptom}\n\nRepro:\n\n```python\n{snippet}```\n\n{observed}",
    "{title}\n\nSteps to reproduce:\n1. Save the snippet below as `example.py`.\n2. Run `python example.py`.\n\n"
    "```python\n{snippet}```\n\n{observed} {symptom}",
)
_OBSERVED = (
    "This prints `{actual}`, but I expected `{expected}`.",
    "Output: `{actual}`. Expected: `{expected}`.",
    "I get `{actual}` instead of `{expected}`.",
)
_OBSERVED_EXC = (
    "This raises `{actual}` instead of printing `{expected}`.",
    "It fails with `{actual}`; I expected it to print `{expected}`.",
    "Instead of `{expected}` I get an exception: `{actual}`.",
)


@dataclass
class Observation:
    """What the reproduction snippet does before and after the fix (from real runs)."""

    buggy: RunResult
    fixed: RunResult

    @property
    def actual(self) -> str:
        """The buggy output in one line (the exception line for a traceback)."""
        lines = [ln for ln in self.buggy.output.strip().split("\n") if ln.strip()]
        return lines[-1] if lines else ""

    @property
    def expected(self) -> str:
        return self.fixed.output.strip()

    @property
    def crashed(self) -> bool:
        return self.buggy.rc != 0


def observe(repo: Repo, runner: PythonRunner) -> Observation:
    """Run the issue's snippet as ``reproduce.py`` on the buggy and the fixed repository."""
    snippet = repo.fill(repo.site.snippet)
    buggy = runner.run({**repo.buggy, "reproduce.py": snippet}, ["reproduce.py"])
    fixed = runner.run({**repo.fixed, "reproduce.py": snippet}, ["reproduce.py"])
    return Observation(buggy=buggy, fixed=fixed)


def issue_text(rng: random.Random, repo: Repo, obs: Observation) -> str:
    """A paraphrased issue report: title, symptom, the snippet, expected vs actual."""
    values = {"actual": obs.actual, "expected": obs.expected}
    observed = rng.choice(_OBSERVED_EXC if obs.crashed else _OBSERVED).format(**values)
    actual_sentence = f"It raises `{obs.actual}`." if obs.crashed else f"It prints `{obs.actual}`."
    return rng.choice(_ISSUE_TEMPLATES).format(
        title=repo.fill(rng.choice(repo.site.titles)),
        symptom=repo.fill(rng.choice(repo.site.symptoms)),
        snippet=repo.fill(repo.site.snippet),
        observed=observed,
        expected_sentence=f"The snippet should print `{obs.expected}`.",
        actual_sentence=actual_sentence,
        pkg=repo.pkg,
        mod=repo.names["mod"],
        version=repo.version,
    )


# --------------------------------------------------------------------------- the expert


def _call(name: str, args: Mapping[str, Any]) -> dict[str, Any]:
    return {"name": name, "args": dict(args)}


def failed_tests(output: str) -> list[str]:
    """Test ids that the repository's runner reported as FAILED."""
    return [line[: -len(" FAILED")] for line in output.split("\n") if line.endswith(" FAILED")]


class _Episode:
    """Records the expert's turns: assistant tool calls, tool results and alternatives."""

    def __init__(self, world: World, id_seed: str):
        self.world = world
        self.id_seed = id_seed
        self.messages: list[Message] = []
        self.alternatives: dict[str, list[Message]] = {}
        self.error_turns: list[int] = []

    @property
    def turns(self) -> int:
        return sum(1 for m in self.messages if m["role"] == "assistant")

    def _message(self, thought: str, call: Mapping[str, Any], call_id: str) -> Message:
        arguments = json.dumps(call["args"], ensure_ascii=False)
        return {
            "role": "assistant",
            "content": thought,
            "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": call["name"], "arguments": arguments}}
            ],
        }

    def step(
        self,
        thought: str,
        call: Mapping[str, Any],
        alternatives: Sequence[Mapping[str, Any]] = (),
        same: str = "",
    ) -> str:
        """Run one expert call. ``same``: "output" or "files" -> check each alternative has that same effect."""
        call_id = "call_" + stable_hash(self.id_seed, len(self.messages), length=24)
        before = self.world.copy()
        index = len(self.messages)
        self.messages.append(self._message(thought, call, call_id))
        output = self.world.call(call["name"], call["args"])
        self.messages.append({"role": "tool", "tool_call_id": call_id, "name": call["name"], "content": output})
        if output.startswith("Error:"):
            self.error_turns.append(index)
        kept = []
        for alt in alternatives:
            # bash spellings (cat, grep, find) print the same facts in another format: checked by the tests
            if same and (alt["name"] != "bash" or same == "files"):
                trial = before.copy()
                alt_output = trial.call(alt["name"], alt["args"])
                if same == "output" and (alt_output != output or trial.files != self.world.files):
                    raise AssertionError(f"alternative {alt} differs from {call['name']}: {alt_output!r} vs {output!r}")
                if same == "files" and trial.files != self.world.files:
                    raise AssertionError(f"alternative {alt} leaves different files than {call}")
            kept.append(self._message(thought, alt, call_id))
        if kept:
            self.alternatives[str(index)] = kept
        return output


def _first_line_with(lines: Sequence[str], text: str) -> int:
    for i, line in enumerate(lines):
        if text in line:
            return i + 1
    raise ValueError(f"{text!r} not found")


def _same_window_lines(line: int, total: int, limit: int = 2) -> list[int]:
    """Other line numbers whose window equals the window of ``line`` (nearest first)."""
    target = window_start(line, total)
    others = sorted((abs(k - line), k) for k in range(1, total + 1) if k != line and window_start(k, total) == target)
    return [k for _, k in others[:limit]]


@dataclass
class _Plan:
    start: str  # "reproduce", "tests" or "direct"
    locate: str  # "search_dir", "find_file" or "search_file"
    nav: str  # "none", "open_at", "scroll", "search_goto"
    error: str  # "", "open_missing" or "bad_indent"
    rerun: bool
    cleanup: bool

    def turns(self) -> int:
        n = {"reproduce": 3, "tests": 1, "direct": 0}[self.start]
        n += 1 + 1  # locate, open
        n += {"none": 0, "open_at": 0, "scroll": 1, "search_goto": 2}[self.nav]
        n += 1 + 1 + 1  # fix, tests, submit
        return n + (self.error != "") + self.rerun + self.cleanup


def _plan(
    rng: random.Random, repo: Repo, fix: tuple[int, int, str], edit: tuple[int, int, str], failed: bool
) -> _Plan:
    """Choose the episode's optional steps; ``edit`` is the edit the expert will make (``fix`` or a wrong one)."""
    start = rng.choices(("reproduce", "tests", "direct"), weights=(0.5, 0.2, 0.3))[0]
    locate = rng.choice(("search_dir", "find_file", "search_file"))
    lines = split_lines(repo.buggy[repo.path])
    total, (s, e, _) = len(lines), edit
    if e <= WINDOW:
        nav = "open_at" if locate == "search_file" and rng.random() < 0.5 else "none"
    elif locate == "search_file":
        nav = "open_at"
    else:
        scrolled = max(0, min(WINDOW, total - WINDOW))
        options = ["search_goto"] + (["scroll"] if scrolled < s and e <= scrolled + WINDOW else [])
        nav = rng.choice(options)
    error = ""
    if rng.random() < ERROR_RATE:
        options = ["bad_indent"] if not failed and _bad_indent(fix, lines, repo.path) else []
        if locate != "search_file":
            options.append("open_missing")
        error = rng.choice(options) if options else ""
    plan = _Plan(start, locate, nav, error, rerun=False, cleanup=False)
    if start == "reproduce":
        plan.rerun = not failed and rng.random() < 0.6
        plan.cleanup = rng.random() < 0.5
    for attr in ("cleanup", "rerun"):
        if plan.turns() > MAX_TURNS:
            setattr(plan, attr, False)
    if plan.turns() > MAX_TURNS:
        plan.error = ""
    return plan


def _bad_indent(fix: tuple[int, int, str], lines: list[str], path: str) -> str | None:
    """The fix with its indentation stripped, when that really is a syntax error (else None)."""
    s, e, replacement = fix
    stripped = "\n".join(line.lstrip() for line in replacement.split("\n"))
    if stripped == replacement:
        return None
    if syntax_problem(join_lines(lines[: s - 1] + split_lines(stripped) + lines[e:]), path) is None:
        return None
    return stripped


def _pick(rng: random.Random, options: Sequence[str], **values: Any) -> str:
    return rng.choice(options).format(**values)


def _lines_phrase(s: int, e: int) -> str:
    return f"line {s}" if s == e else f"lines {s}-{e}"


def run_episode(seed: int, index: int, runner: PythonRunner) -> Trajectory:
    """One expert episode (deterministic in ``seed`` and ``index``)."""
    rng = random.Random(f"pivot-envs/swe/{seed}/{index}")
    repo = build_repo(rng)
    failed = rng.random() < FAILED_RATE
    obs = observe(repo, runner)
    issue = issue_text(rng, repo, obs)
    fix = edit_for(repo.buggy[repo.path], repo.fixed[repo.path])
    bad_fix = edit_for(repo.buggy[repo.path], repo.wrong[repo.path])
    plan = _plan(rng, repo, fix, bad_fix if failed else fix, failed)

    world = World(dict(repo.buggy), runner)
    ep = _Episode(world, f"{seed}/{index}")
    func, path, mod, pkg = repo.func, repo.path, repo.names["mod"], repo.pkg
    snippet = repo.fill(repo.site.snippet)
    def_term = f"def {func}"
    module_lines = split_lines(repo.buggy[path])
    def_line = _first_line_with(module_lines, f"def {func}(")
    found_by = ""  # how the previous turn left the expert: what to say next

    # 1. reproduce the bug, or run the tests first
    if plan.start == "reproduce":
        ep.step(
            _pick(rng, (
                "Let's first start by reproducing the results of the issue. The issue includes some example code "
                "for reproduction, which we can use. We'll create a new file called `reproduce.py` and paste the "
                "example code into it.",
                "I'll start by reproducing the bug with the snippet from the issue, so let's create `reproduce.py`.",
                "First, let's reproduce the problem. I'll put the code from the report into a new script.",
            )),
            _call("create", {"filename": "reproduce.py"}),
            [_call("create", {"filename": "./reproduce.py"})],
            same="output",
        )
        ep.step(
            _pick(rng, (
                "Now let's paste in the example code from the issue.",
                "Adding the reproduction snippet to the file.",
                "Let me put the issue's example into `reproduce.py`.",
            )),
            _call("edit", {"start_line": 1, "end_line": 1, "replacement": snippet.rstrip("\n")}),
            [_call("edit", {"start_line": 1, "end_line": 1, "replacement": snippet})],
            same="output",
        )
        ep.step(
            _pick(rng, (
                "Now let's run the code to see if we see the same output as the issue.",
                "Let's run the script to confirm the bug.",
                "Running the reproduction script.",
            )),
            _call("bash", {"command": "python reproduce.py"}),
            [_call("bash", {"command": "python3 reproduce.py"}), _call("bash", {"command": "python ./reproduce.py"})],
        )
        found_by = (
            f"The script fails with the same error as in the issue (`{obs.actual}`)."
            if obs.crashed
            else f"We are indeed seeing the same output as the issue: `{obs.actual}` instead of `{obs.expected}`."
        )
    elif plan.start == "tests":
        output = ep.step(
            _pick(rng, (
                "Before changing anything, let's run the test-suite to see which tests fail.",
                "Let's run the tests first to get a picture of the failure.",
            )),
            _call("run_tests", {}),
            _run_tests_alternatives(world),
        )
        failing = failed_tests(output)
        found_by = (
            f"`{failing[0]}` fails, which matches the issue."
            if failing
            else "The test-suite does not catch this bug yet."
        )

    # 2. locate the module
    if plan.error == "open_missing":
        ep.step(
            f"{found_by} The issue imports from `{pkg}.{mod}`; let's try to open `{mod}.py` directly.".strip(),
            _call("open_file", {"path": f"{mod}.py"}),
        )
        found_by = f"There is no `{mod}.py` at the top level; it must live inside the `{pkg}` package."
    lead = f"{found_by} " if found_by else ""
    if plan.locate == "search_dir":
        ep.step(
            lead + _pick(rng, (
                "Let's search the repository for the definition of `{func}`.",
                "Next, let's find where `{func}` is defined.",
                "I need to find the code of `{func}`; let's search for its definition.",
            ), func=func),
            _call("search_dir", {"search_term": def_term}),
            [
                _call("search_dir", {"search_term": def_term, "dir": "."}),
                _call("search_dir", {"dir": pkg, "search_term": def_term}),
                _call("find_file", {"file_name": f"{mod}.py"}),
                _call("bash", {"command": f"grep -rn '{def_term}' ."}),
            ],
        )
        found_by = f"`{func}` is defined in `{path}`."
    elif plan.locate == "find_file":
        ep.step(
            lead + _pick(rng, (
                "The issue imports from `{pkg}.{mod}`, so let's find the `{mod}.py` file.",
                "Let's locate `{mod}.py`, where `{func}` should be defined.",
                "First we should find the `{mod}.py` module in the repository.",
            ), pkg=pkg, mod=mod, func=func),
            _call("find_file", {"file_name": f"{mod}.py"}),
            [
                _call("find_file", {"file_name": f"{mod}.py", "dir": "."}),
                _call("find_file", {"dir": pkg, "file_name": f"{mod}.py"}),
                _call("search_dir", {"search_term": def_term}),
                _call("bash", {"command": f"find . -name {mod}.py"}),
            ],
        )
        found_by = f"The module is `{path}`."
    else:
        ep.step(
            lead + _pick(rng, (
                "The import `from {pkg}.{mod} import ...` points to `{path}`. "
                "Let's find the line where `{func}` is defined.",
                "`{func}` comes from `{path}`; let's search that file for its definition.",
            ), pkg=pkg, mod=mod, path=path, func=func),
            _call("search_file", {"search_term": def_term, "file": path}),
            [
                _call("search_file", {"file": path, "search_term": def_term}),
                _call("bash", {"command": f"grep -n '{def_term}' {path}"}),
            ],
            same="output",
        )
        found_by = f"`{func}` is defined at line {def_line} of `{path}`."

    # 3. open the module (and navigate to the bug)
    total = len(module_lines)
    if plan.nav == "open_at":
        ep.step(
            f"{found_by} Let's open the file at that line.",
            _call("open_file", {"path": path, "line_number": def_line}),
            [_call("open_file", {"path": path, "line_number": k}) for k in _same_window_lines(def_line, total)]
            + [_call("open_file", {"line_number": def_line, "path": path})],
            same="output",
        )
    else:
        ep.step(
            f"{found_by} " + _pick(rng, ("Let's open it.", "Let's open the file and look at `{func}`."), func=func),
            _call("open_file", {"path": path}),
            [
                _call("open_file", {"path": f"./{path}"}),
                _call("open_file", {"path": path, "line_number": 1}),
                _call("bash", {"command": f"cat {path}"}),
            ],
        )
        if plan.nav == "scroll":
            same_view = max(0, min(WINDOW, total - WINDOW)) + 1 + WINDOW // 6  # goto this line == scroll_down
            ep.step(
                (f"`{func}` continues below line {WINDOW}." if def_line <= WINDOW else f"`{func}` is further down.")
                + " Let's scroll down.",
                _call("scroll_down", {}),
                [
                    _call("goto", {"line_number": same_view}),
                    _call("open_file", {"path": path, "line_number": same_view}),
                ],
                same="output",
            )
        elif plan.nav == "search_goto":
            ep.step(
                (
                    f"The body of `{func}` is cut off at the bottom of the window."
                    if def_line <= WINDOW
                    else f"`{func}` is not in the first {WINDOW} lines."
                )
                + " Let's search the open file for its definition.",
                _call("search_file", {"search_term": def_term}),
                [_call("search_file", {"search_term": def_term, "file": path})],
                same="output",
            )
            ep.step(
                f"`{func}` starts at line {def_line}. Let's go there.",
                _call("goto", {"line_number": def_line}),
                [_call("goto", {"line_number": k}) for k in _same_window_lines(def_line, total, 1)]
                + [_call("open_file", {"path": path, "line_number": def_line})],
                same="output",
            )

    # 4. the edit
    s, e, replacement = bad_fix if failed else fix
    diagnosis = repo.fill(repo.site.wrong_diagnosis if failed else repo.site.diagnosis)
    if plan.error == "bad_indent":
        stripped = _bad_indent(fix, module_lines, path)
        assert stripped is not None
        ep.step(
            f"{diagnosis} Let's edit {_lines_phrase(s, e)}.",
            _call("edit", {"start_line": s, "end_line": e, "replacement": stripped}),
        )
        diagnosis = _pick(rng, (
            "Oh no! My edit command did not use the proper indentation. "
            "Let's fix that and keep the original indentation.",
            "The edit lost its indentation. Let me redo it with the indentation of the surrounding code.",
        ))
    ep.step(
        f"{diagnosis} "
        + _pick(rng, ("Let's edit {at}.", "I'll fix {at}.", "Let's update {at} accordingly."), at=_lines_phrase(s, e)),
        _call("edit", {"start_line": s, "end_line": e, "replacement": replacement}),
        _edit_alternatives(world, s, e, replacement),
        same="files",
    )

    # 5. check, clean up, submit
    if plan.rerun:
        ep.step(
            _pick(rng, (
                "The code has been updated. "
                "Let's run reproduce.py again to make sure the change has the desired effect.",
                "Now let's rerun the reproduction script to check the fix.",
            )),
            _call("bash", {"command": "python reproduce.py"}),
            [_call("bash", {"command": "python3 reproduce.py"})],
        )
        check_lead = f"The script now prints `{obs.expected}`, as expected. "
    else:
        check_lead = ""
    output = ep.step(
        check_lead + _pick(rng, (
            "Let's run the test-suite to make sure the fix works and nothing else broke.",
            "Now let's run the tests.",
            "Let's verify the change with the repository's tests.",
        )),
        _call("run_tests", {}),
        _run_tests_alternatives(world),
    )
    failing = failed_tests(output)
    if failed and not failing:
        raise AssertionError(f"{repo.template.key}/{repo.site.family}: the wrong fix passes the tests")
    if not failed and failing:
        raise AssertionError(f"{repo.template.key}/{repo.site.family}: the fix fails {failing}")
    if plan.cleanup:
        ep.step(
            ("All tests pass. " if not failing else "")
            + "Let's remove reproduce.py since it is no longer needed.",
            _call("bash", {"command": "rm reproduce.py"}),
            [_call("bash", {"command": "rm -f reproduce.py"}), _call("bash", {"command": "rm ./reproduce.py"})],
            same="files",
        )
    if failing:
        thought = _pick(rng, (
            "`{test}` still fails, but it seems to test behaviour outside the scope of this issue. "
            "I'm confident in the change, so let's submit.",
            "One test still fails (`{test}`); I believe the edit addresses the reported problem, so I'll submit it.",
        ), test=failing[0])
    else:
        thought = _pick(rng, (
            "All tests pass. Let's submit the change.",
            "The fix is verified and the test-suite passes, so let's submit.",
            "Everything passes now; submitting.",
        ))
    ep.step(thought, _call("submit", {}))

    messages: list[Message] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": INSTANCE_TEMPLATE.format(issue=issue)},
    ]
    offset = len(messages)
    return Trajectory(
        messages=messages + ep.messages,
        tools=TOOLS,
        reward=0.0 if failed else 1.0,
        meta={
            "source": f"pivot-envs/{DOMAIN}",
            "id": f"{DOMAIN}-{seed}-{index}",
            "task": repo.site.family,
            "bug_family": repo.site.family,
            "repo_name": pkg,
            "test_command": TEST_COMMAND,
            "bug_file": path,
            "bug_function": func,
            "alternatives": {str(int(k) + offset): v for k, v in ep.alternatives.items()},
            "error_turns": [i + offset for i in ep.error_turns],
        },
        fixture=Fixture(files=dict(repo.buggy), setup="", workdir=WORKDIR),
    )


def _run_tests_alternatives(world: World) -> list[dict[str, Any]]:
    alts = [_call("bash", {"command": TEST_COMMAND}), _call("run_tests", {"path": "tests"})]
    test_files = [p for p in world.files if p.startswith("tests/test_")]
    if len(test_files) == 1:
        alts.append(_call("run_tests", {"path": test_files[0]}))
    return alts


def _edit_alternatives(world: World, s: int, e: int, replacement: str) -> list[dict[str, Any]]:
    """The same change spelled with a wider line range (keeping the extra lines as they are)."""
    path = world.open_path
    assert path is not None
    lines = split_lines(world.files[path])
    alts = []
    if s > 1:
        wider = lines[s - 2] + "\n" + replacement
        alts.append(_call("edit", {"start_line": s - 1, "end_line": e, "replacement": wider}))
    if e < len(lines) and lines[e].strip():
        alts.append(_call("edit", {"start_line": s, "end_line": e + 1, "replacement": replacement + "\n" + lines[e]}))
    return alts


def generate(n: int, seed: int = 0) -> list[Trajectory]:
    """``n`` SWE expert trajectories; episode ``i`` depends only on ``(seed, i)``."""
    with PythonRunner() as runner:
        return [run_episode(seed, i, runner) for i in range(n)]
