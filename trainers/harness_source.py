"""A rollout source that runs an external harness: G rollouts per task, each against its own rollout endpoint.

::

    harness = HarnessSpec.build("python examples/harness_openai_agents.py --base-url {base_url} --mcp-url {mcp_url} "
                                "--task-file {task_file}", timeout_s=300)
    source = HarnessSource(server, harness, concurrency=8)        # server: a running HarnessServer
    groups, stats = source.play([{"task_id": t.id} for t in tasks], group_size=4)
    groups[i][j].turns[k].completion.token_ids       # the captured tokens: what the loss is taken over
    groups[i][j].turns[k].completion.logprobs        # the captured log-probs: the behaviour log-probs

For each task and each of the ``group_size`` rollouts: open a rollout on the endpoint, write the **task file**
(JSON: ``rollout_id``, ``task_id``, ``base_url``, ``mcp_url``, ``model``, ``messages`` (the task's opening, system
prompt included), ``tools``, ``system`` (the system prompt's text), ``task`` (the first user message's text)),
run the harness, then finish the rollout. All runs of a call go at once (at most ``concurrency`` in flight).

The harness is

* a **command template** (a string split like a shell, or a list): each argument is formatted with the
  placeholders ``{base_url}``, ``{mcp_url}``, ``{task_file}``, ``{rollout_id}``, ``{task_id}``, ``{task}``,
  ``{system}``, ``{model}`` and ``{workdir}`` (a fresh folder per run, holding the task file and the run's
  ``stdout.txt`` / ``stderr.txt``; the process runs in the caller's working directory). No
  shell: a placeholder's value is one argument whatever it holds. The process gets the caller's environment
  plus ``env`` and ``PIVOT_HARNESS_BASE_URL``, ``PIVOT_HARNESS_MCP_URL``, ``PIVOT_HARNESS_TASK_FILE``,
  ``PIVOT_HARNESS_ROLLOUT_ID``; one running past ``timeout_s`` is killed with its process group;
* or a **Python callable** ``fn(run: HarnessRun)``, called in a worker thread (``timeout_s`` is not enforced
  on it: a thread cannot be killed).

How a run ends: exit status 0, or any other (the harness gave up, hit its own step limit, crashed on the
model's output): the rollout is finished and the world scores what the harness did; the exit status and the
end of stderr are kept (``HarnessOutcome``; ``harness_failures`` counts the non-zero ones). Killed (timeout,
a signal): the rollout is **abandoned**, its world freed, and the run is an error (no reward). A rollout whose
world failed is an error too. Errors are left out of the group, never scored 0.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from pivot_envs.actions import parse_action
from pivot_envs.agents.base import Completion
from pivot_envs.trainers.episode_rollouts import Rollout, Turn
from pivot_envs.trainers.harness_http import HarnessEndpoint, HarnessServer
from pivot_envs.trainers.harness_policy import EnginePolicy
from pivot_envs.trainers.harness_rollouts import EpisodeEnvs, HarnessError, HarnessRollouts
from pivot_envs.types import content_text

__all__ = ["HarnessOutcome", "HarnessRun", "HarnessSource", "HarnessSpec", "HarnessStats", "PLACEHOLDERS",
           "local_harness_source", "to_rollouts"]

PLACEHOLDERS = ("base_url", "mcp_url", "task_file", "rollout_id", "task_id", "task", "system", "model", "workdir")
STDERR_TAIL = 2000


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
                "messages": self.messages, "tools": self.tools}


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
class HarnessOutcome:
    """One harness run: its rollout's finish answer (``result``), or why there is none.

    ``status``: ``finished`` (the world judged the episode), ``failed`` (the world failed), ``abandoned``
    (the harness was killed or timed out). ``exit_code``: the process's status (``None`` for a callable that
    returned; a negative number for a signal).
    """

    rollout_id: str
    task_id: str
    status: str
    result: dict[str, Any] | None = None
    exit_code: int | None = None
    error: str | None = None
    stderr_tail: str = ""
    seconds: float = 0.0


@dataclass
class HarnessStats:
    """Counters of one :meth:`HarnessSource.play` call."""

    runs: int = 0
    harness_failures: int = 0
    abandoned: int = 0
    failed: int = 0
    calls: int = 0
    retokenized_calls: int = 0
    uncaptured_tool_calls: int = 0
    unexecuted_tool_calls: int = 0
    untrainable_calls: int = 0
    overhead_ms: list[float] = field(default_factory=list)

    @property
    def capture_overhead_ms(self) -> float | None:
        return sum(self.overhead_ms) / len(self.overhead_ms) if self.overhead_ms else None


class HarnessSource:
    """Runs a harness against a :class:`~pivot_envs.trainers.harness_http.HarnessServer` (see the module docstring).

    Args:
        server: a started harness server (its ``endpoint`` opens rollouts; its ``url`` roots their URLs).
        harness: the harness.
        concurrency: runs in flight at once (``None``: all of a call's).
        workdir: where each run's folder is made (``None``: a temporary folder).
    """

    def __init__(self, server: Any, harness: HarnessSpec, *, concurrency: int | None = None,
                 workdir: str | Path | None = None, owns_server: bool = False):
        if concurrency is not None and concurrency < 1:
            raise ValueError(f"harness concurrency must be >= 1 or None, got {concurrency}")
        self.server = server
        self.owns_server = owns_server
        self.harness = harness
        self.concurrency = concurrency
        self._tmp = None if workdir is not None else tempfile.TemporaryDirectory(prefix="pivot-harness-")
        self.workdir = Path(workdir) if workdir is not None else Path(self._tmp.name)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._count = 0
        self._lock = threading.Lock()

    def play(self, opens: Sequence[dict[str, Any]], group_size: int) -> tuple[list[list[HarnessOutcome]], HarnessStats]:
        """``group_size`` runs of each open request (``{"task_id": ...}`` or the HTTP open body); outcomes per request."""
        jobs = [(i, spec) for i, spec in enumerate(opens) for _ in range(group_size)]
        workers = max(1, min(len(jobs), self.concurrency or len(jobs)))
        with ThreadPoolExecutor(workers, thread_name_prefix="harness-run") as pool:
            outcomes = list(pool.map(lambda job: self.run_one(job[1]), jobs))
        groups: list[list[HarnessOutcome]] = [[] for _ in opens]
        stats = HarnessStats()
        for (i, _), outcome in zip(jobs, outcomes):
            groups[i].append(outcome)
            _count(stats, outcome)
        return groups, stats

    def run_one(self, spec: dict[str, Any]) -> HarnessOutcome:
        """Open a rollout, run the harness on it, finish (or abandon) it."""
        endpoint = self.server.endpoint
        try:
            opened = endpoint.open(dict(spec), self.server.url)
        except HarnessError as exc:  # the task's world failed at its start, or a bad request: an error, no reward
            return HarnessOutcome(rollout_id="", task_id=str(spec.get("task_id", "")), status="failed",
                                  error=f"opening the rollout failed: {exc}")
        with self._lock:
            self._count += 1
            folder = self.workdir / f"run-{self._count:06d}"
        folder.mkdir(parents=True, exist_ok=True)
        task_file = folder / "task.json"
        run = HarnessRun(rollout_id=opened["rollout_id"], task_id=opened["task_id"], base_url=opened["base_url"],
                         mcp_url=opened["mcp_url"], task_file=str(task_file), workdir=str(folder),
                         messages=opened["messages"], tools=opened["tools"])
        task_file.write_text(json.dumps(run.task_document(), ensure_ascii=False, indent=1), encoding="utf-8")
        start = time.monotonic()
        exit_code, killed, error, tail = self._execute(run)
        rollouts = endpoint.rollouts
        outcome = HarnessOutcome(rollout_id=run.rollout_id, task_id=run.task_id, status="finished",
                                 exit_code=exit_code, error=error, stderr_tail=tail)
        if killed:
            rollouts.abandon(run.rollout_id, error or "the harness was killed")
            outcome.status = "abandoned"
        else:
            outcome.result = rollouts.finish(run.rollout_id)
            outcome.status = outcome.result["status"]
            if outcome.result["error"]:
                outcome.error = outcome.result["error"]
        outcome.seconds = time.monotonic() - start
        return outcome

    def _execute(self, run: HarnessRun) -> tuple[int | None, bool, str | None, str]:
        """``(exit code, killed, error, stderr tail)`` of one run."""
        if self.harness.fn is not None:
            try:
                self.harness.fn(run)
            except Exception as exc:  # noqa: BLE001 - a harness that raised: like a non-zero exit
                return 1, False, f"{type(exc).__name__}: {exc}", ""
            return None, False, None, ""
        argv = self.harness.argv(run)
        env = {**os.environ, **dict(self.harness.env), "PIVOT_HARNESS_BASE_URL": run.base_url,
               "PIVOT_HARNESS_MCP_URL": run.mcp_url, "PIVOT_HARNESS_TASK_FILE": run.task_file,
               "PIVOT_HARNESS_ROLLOUT_ID": run.rollout_id}
        stderr_path = Path(run.workdir) / "stderr.txt"
        try:
            with open(Path(run.workdir) / "stdout.txt", "wb") as out, open(stderr_path, "wb") as err:
                proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                        stderr=err, start_new_session=True)
        except OSError as exc:
            return None, True, f"the harness command could not start: {argv[0]}: {exc}", ""
        try:
            code = proc.wait(timeout=self.harness.timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            return proc.returncode, True, f"the harness ran past its timeout ({self.harness.timeout_s:g} s) and was " \
                                          "killed", _tail(stderr_path)
        if code < 0:
            return code, True, f"the harness was killed by signal {-code}", _tail(stderr_path)
        error = None if code == 0 else f"the harness exited with status {code}"
        return code, False, error, _tail(stderr_path) if code else ""

    def close(self) -> None:
        """Remove the runs' folders (a temporary workdir) and stop the server when this source started it."""
        if self.owns_server:
            self.server.close()
        if self._tmp is not None:
            self._tmp.cleanup()


def local_harness_source(agent: Any, make_env: Callable[[], Any], harness: HarnessSpec, *,
                         version: Callable[[], int], max_turns: int, score_turns: bool,
                         concurrency: int | None = None, seed: int = 0) -> HarnessSource:
    """A harness source on its own endpoint: ``agent`` (the trainer's sampler) answers the calls, ``make_env``
    makes the tasks' envs, ``version()`` is the policy version the agent samples with; the server runs on
    127.0.0.1 until :meth:`HarnessSource.close`."""
    policy = EnginePolicy(agent, version=version, seed=seed)
    rollouts = HarnessRollouts(policy, EpisodeEnvs(default=make_env), max_turns=max_turns, score_turns=score_turns,
                               idle_timeout_s=harness.timeout_s + 60.0)
    server = HarnessServer(HarnessEndpoint(rollouts)).start()
    return HarnessSource(server, harness, concurrency=concurrency, owns_server=True)


def to_rollouts(groups: Sequence[Sequence[HarnessOutcome]]) -> list[list[Rollout]]:
    """The trainer's rollouts of harness outcomes: one turn per captured call (its prompt ids, its completion
    tokens and log-probs, its turn reward); abandoned or failed runs, and runs with a call without token ids,
    are errors (no reward)."""
    out: list[list[Rollout]] = []
    for group in groups:
        rollouts = []
        for j, o in enumerate(group):
            r = Rollout(task_id=o.task_id, index=j, done=True)
            if o.result is None or o.status != "finished":
                r.error = o.error or f"the harness rollout was {o.status}"
                rollouts.append(r)
                continue
            res = o.result
            for call, reward in zip(res["calls"], res["turn_rewards"]):
                text = call["text"]
                completion = Completion(text=text, action=parse_action(text), token_ids=call["completion_token_ids"],
                                        logprobs=call["logprobs"])
                r.turns.append(Turn(prompt_ids=list(call["prompt_token_ids"] or []), completion=completion,
                                    reward=reward))
            missing = [c["index"] for c in res["calls"] if not c["prompt_token_ids"] or c["completion_token_ids"] is None]
            r.tool_calls = len(res["tool_calls"])
            r.truncated = bool(res["truncated"])
            if missing:
                r.error = f"calls {missing} carry no token ids (the policy backend returned none): not trainable"
            else:
                r.success = res["success"]
            rollouts.append(r)
        out.append(rollouts)
    return out


def _count(stats: HarnessStats, o: HarnessOutcome) -> None:
    stats.runs += 1
    stats.harness_failures += 1 if (o.exit_code not in (None, 0) and o.status != "abandoned") else 0
    stats.abandoned += 1 if o.status == "abandoned" else 0
    stats.failed += 1 if o.status == "failed" else 0
    if o.result is None:
        return
    res = o.result
    stats.calls += len(res["calls"])
    stats.retokenized_calls += int(res["retokenized_calls"])
    stats.uncaptured_tool_calls += int(res["uncaptured_tool_calls"])
    stats.unexecuted_tool_calls += int(res["unexecuted_tool_calls"])
    stats.untrainable_calls += int(res["capture"]["untrainable_calls"])
    stats.overhead_ms += [1000.0 * c["overhead_s"] for c in res["calls"]]


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
