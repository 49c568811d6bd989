"""A harness and one run of it: a command template (or a Python callable), its placeholders, the process.

::

    spec = HarnessSpec.build("python my_harness.py {task_file}", timeout_s=300, env={"MY_FLAG": "1"})
    spec = HarnessSpec.build(".venv-smol/bin/python my_harness.py {task_file}")   # a harness in its own venv
    end = run_harness(spec, run)       # run: a HarnessRun (the rollout's URLs, its task file)
    end.exit_code, end.killed, end.error, end.stderr_tail

The harness is

* a **command template** (a string split like a shell, or a list): each argument is formatted with the
  placeholders ``{base_url}``, ``{mcp_url}``, ``{task_file}``, ``{rollout_id}``, ``{task_id}``, ``{task}``,
  ``{system}``, ``{model}`` and ``{workdir}`` (a fresh folder per run, holding the task file and the run's
  ``stdout.txt`` / ``stderr.txt``; the process runs in the caller's working directory). No
  shell: a placeholder's value is one argument whatever it holds. The program is any executable: a harness with
  dependencies of its own (another ``mcp`` or ``openai`` major version) runs on its own venv's python. The
  process gets the caller's environment plus ``env`` and ``PIVOT_HARNESS_BASE_URL``, ``PIVOT_HARNESS_MCP_URL``,
  ``PIVOT_HARNESS_TASK_FILE``, ``PIVOT_HARNESS_ROLLOUT_ID``; one running past ``timeout_s`` is killed with its
  process group;
* or a **Python callable** ``fn(run: HarnessRun)``, called in a worker thread (``timeout_s`` is not enforced
  on it: a thread cannot be killed).

The **task file** is JSON: ``rollout_id``, ``task_id``, ``base_url``, ``mcp_url``, ``model``, ``messages`` (the
task's opening, system prompt included), ``tools``, ``system`` (the system prompt's text), ``task`` (the first
user message's text) and ``user`` (the user tool's name for a task with a user, else ``null``).
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from pivot_envs.types import content_text

__all__ = ["HarnessFn", "HarnessRun", "HarnessSpec", "PLACEHOLDERS", "ProcessEnd", "STDERR_TAIL", "run_harness"]

PLACEHOLDERS = ("base_url", "mcp_url", "task_file", "rollout_id", "task_id", "task", "system", "model", "workdir")
STDERR_TAIL = 2000
"""The most characters of a failed harness's stderr kept (its end)."""


@dataclass
class HarnessRun:
    """What one run of a harness gets: its rollout's URLs, its task file and the task itself."""

    rollout_id: str
    task_id: str
    base_url: str
    mcp_url: str
    task_file: str
    workdir: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    model: str = "policy"
    user: str | None = None

    @property
    def system(self) -> str:
        """The system prompt's text ('' without one)."""
        return next((content_text(m.get("content")) for m in self.messages if m.get("role") == "system"), "")

    @property
    def task(self) -> str:
        """The first user message's text."""
        return next((content_text(m.get("content")) for m in self.messages if m.get("role") == "user"), "")

    def values(self) -> dict[str, str]:
        return {"base_url": self.base_url, "mcp_url": self.mcp_url, "task_file": self.task_file,
                "rollout_id": self.rollout_id, "task_id": self.task_id, "task": self.task, "system": self.system,
                "model": self.model, "workdir": self.workdir}

    def task_document(self) -> dict[str, Any]:
        return {"rollout_id": self.rollout_id, "task_id": self.task_id, "base_url": self.base_url,
                "mcp_url": self.mcp_url, "model": self.model, "system": self.system, "task": self.task,
                "messages": self.messages, "tools": self.tools, "user": self.user}


HarnessFn = Callable[[HarnessRun], Any]


@dataclass(frozen=True)
class HarnessSpec:
    """A harness: a command template or a Python callable (see the module docstring)."""

    command: tuple[str, ...] | None = None
    fn: HarnessFn | None = None
    timeout_s: float = 300.0
    env: tuple[tuple[str, str], ...] = ()

    @classmethod
    def build(cls, harness: str | Sequence[str] | HarnessFn, *, timeout_s: float = 300.0,
              env: dict[str, str] | None = None) -> "HarnessSpec":
        """From a command string (split like a shell), an argument list or a callable; errors name the problem."""
        if not isinstance(timeout_s, (int, float)) or timeout_s <= 0:
            raise ValueError(f"harness timeout_s must be a positive number of seconds, got {timeout_s!r}")
        pairs = tuple(sorted((str(k), str(v)) for k, v in (env or {}).items()))
        if callable(harness):
            return cls(fn=harness, timeout_s=float(timeout_s), env=pairs)
        args = shlex.split(harness) if isinstance(harness, str) else [str(a) for a in harness]
        if not args:
            raise ValueError("the harness command is empty: give a command template such as "
                             "'python my_harness.py --base-url {base_url} --mcp-url {mcp_url}'")
        for arg in args:
            try:
                arg.format(**{p: "" for p in PLACEHOLDERS})
            except (KeyError, IndexError, ValueError) as exc:
                raise ValueError(f"harness command argument {arg!r}: unknown placeholder {exc}; the placeholders are "
                                 f"{', '.join('{' + p + '}' for p in PLACEHOLDERS)} (write {{{{ and }}}} for braces)") \
                    from None
        return cls(command=tuple(args), timeout_s=float(timeout_s), env=pairs)

    @property
    def name(self) -> str:
        """What the metrics call it: the command's program (the script for ``python script.py``) or the callable."""
        if self.fn is not None:
            return getattr(self.fn, "__qualname__", None) or type(self.fn).__name__
        assert self.command is not None
        words = [w for w in self.command if not w.startswith("-")]
        program = os.path.basename(words[0]) if words else self.command[0]
        if program.startswith("python") and len(words) > 1:
            return os.path.basename(words[1])
        return program

    def argv(self, run: HarnessRun) -> list[str]:
        assert self.command is not None
        values = run.values()
        return [arg.format(**values) for arg in self.command]


@dataclass
class ProcessEnd:
    """How one harness run ended: its exit status (``None`` for a callable that returned; negative: a signal),
    whether it was killed (timeout, a signal, or it never started), the error in words and the end of its stderr
    (a callable's traceback)."""

    exit_code: int | None
    killed: bool = False
    error: str | None = None
    stderr_tail: str = ""

    @property
    def failed(self) -> bool:
        """The harness itself failed: a non-zero exit, killed, never started, or the callable raised."""
        return self.killed or self.exit_code not in (None, 0)


def run_harness(spec: HarnessSpec, run: HarnessRun) -> ProcessEnd:
    """Run the harness once on ``run`` (see the module docstring)."""
    if spec.fn is not None:
        try:
            spec.fn(run)
        except Exception as exc:  # noqa: BLE001 - a harness that raised: like a non-zero exit
            return ProcessEnd(1, error=f"{type(exc).__name__}: {exc}",
                              stderr_tail=traceback.format_exc()[-STDERR_TAIL:])
        return ProcessEnd(None)
    argv = spec.argv(run)
    env = {**os.environ, **dict(spec.env), "PIVOT_HARNESS_BASE_URL": run.base_url,
           "PIVOT_HARNESS_MCP_URL": run.mcp_url, "PIVOT_HARNESS_TASK_FILE": run.task_file,
           "PIVOT_HARNESS_ROLLOUT_ID": run.rollout_id}
    stderr_path = Path(run.workdir) / "stderr.txt"
    try:
        with open(Path(run.workdir) / "stdout.txt", "wb") as out, open(stderr_path, "wb") as err:
            proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=err, start_new_session=True)
    except OSError as exc:
        return ProcessEnd(None, killed=True, error=f"the harness command could not start: {argv[0]}: {exc}")
    try:
        code = proc.wait(timeout=spec.timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        return ProcessEnd(proc.returncode, killed=True, stderr_tail=_tail(stderr_path),
                          error=f"the harness ran past its timeout ({spec.timeout_s:g} s) and was killed")
    if code < 0:
        return ProcessEnd(code, killed=True, error=f"the harness was killed by signal {-code}",
                          stderr_tail=_tail(stderr_path))
    if code == 0:
        return ProcessEnd(0)
    return ProcessEnd(code, error=f"the harness exited with status {code}", stderr_tail=_tail(stderr_path))


def _kill_group(proc: subprocess.Popen) -> None:
    """Kill the harness and everything it started (its own process group)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _tail(path: Path) -> str:
    try:
        return path.read_text(errors="replace")[-STDERR_TAIL:]
    except OSError:
        return ""
