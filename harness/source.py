"""Running a harness G times per task, each run against its own rollout on a harness server.

::

    harness = HarnessSpec.build("python examples/harness_openai_agents.py {task_file}", timeout_s=300)
    source = HarnessSource(server, harness, concurrency=8)        # server: a running HarnessServer
    groups, stats = source.play([{"task_id": t.id} for t in tasks], group_size=4)
    groups[i][j].result["calls"]          # the captured calls of run j of task i (finish's answer)
    stats.harness_failures, stats.failures[0].stderr_tail

For each task and each of the ``group_size`` runs: open a rollout on the endpoint, write the task file, run the
harness (:mod:`pivot_envs.harness.command`), then finish the rollout. All runs of a call go at once (at most
``concurrency`` in flight).

How a run ends:

* exit status 0: the rollout is finished and the world scores what the harness did;
* any other status (the harness gave up, hit its own step limit, crashed on the model's output) after it made
  a model or tool call: the same, and the run counts as a **harness failure** (its exit status and the end of
  its stderr are kept in the outcome and in the rollout's result, ``harness``);
* a harness that failed before its first model or tool call (it could not start, crashed at import, refused
  its arguments), or was killed (timeout, a signal): the rollout is **abandoned**, its world freed, and the run is
  an error with no reward (``status`` ``failed`` or ``abandoned``; a harness failure too). It did nothing a world
  could score: a 0 would be a silent result.

A rollout whose world failed is an error too. Errors are left out of a group, never scored 0.
"""

from __future__ import annotations

import json
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from pivot_envs.harness.command import HarnessRun, HarnessSpec, ProcessEnd, run_harness
from pivot_envs.harness.envs import EpisodeEnvs
from pivot_envs.harness.http import HarnessEndpoint, HarnessServer
from pivot_envs.harness.policy import EnginePolicy
from pivot_envs.harness.rollouts import HarnessRollouts
from pivot_envs.harness.state import HarnessError

__all__ = ["HarnessOutcome", "HarnessSource", "HarnessStats", "local_harness_source"]


@dataclass
class HarnessOutcome:
    """One harness run: its rollout's finish answer (``result``), or why there is none.

    ``status``: ``finished`` (the world judged the episode), ``failed`` (the world failed, or the harness failed
    before doing anything), ``abandoned`` (the harness was killed or timed out). ``exit_code``: the process's
    status (``None`` for a callable that returned; a negative number for a signal). ``harness_failed``: the
    harness itself failed (see the module docstring).
    """

    rollout_id: str
    task_id: str
    status: str
    result: dict[str, Any] | None = None
    exit_code: int | None = None
    error: str | None = None
    stderr_tail: str = ""
    seconds: float = 0.0
    harness_failed: bool = False


@dataclass
class HarnessStats:
    """Counters of one :meth:`HarnessSource.play` call; ``failures``: the outcomes whose harness failed."""

    runs: int = 0
    harness_failures: int = 0
    abandoned: int = 0
    failed: int = 0
    calls: int = 0
    retokenized_calls: int = 0
    window_cut_calls: int = 0
    uncaptured_tool_calls: int = 0
    unexecuted_tool_calls: int = 0
    untrainable_calls: int = 0
    user_messages: int = 0
    cut_at_turn_limit: int = 0
    overhead_ms: list[float] = field(default_factory=list)
    failures: list[HarnessOutcome] = field(default_factory=list)

    @property
    def capture_overhead_ms(self) -> float | None:
        return sum(self.overhead_ms) / len(self.overhead_ms) if self.overhead_ms else None

    @property
    def failure_rate(self) -> float:
        """Runs whose harness failed, over all runs (0 without runs)."""
        return self.harness_failures / self.runs if self.runs else 0.0

    def add(self, outcome: HarnessOutcome) -> None:
        self.runs += 1
        self.abandoned += 1 if outcome.status == "abandoned" else 0
        self.failed += 1 if outcome.status == "failed" else 0
        if outcome.harness_failed:
            self.harness_failures += 1
            self.failures.append(outcome)
        if outcome.result is None:
            return
        res = outcome.result
        self.calls += len(res["calls"])
        self.retokenized_calls += int(res["retokenized_calls"])
        self.window_cut_calls += int(res["capture"].get("window_cut_calls", 0))
        self.uncaptured_tool_calls += int(res["uncaptured_tool_calls"])
        self.unexecuted_tool_calls += int(res["unexecuted_tool_calls"])
        self.untrainable_calls += int(res["capture"]["untrainable_calls"])
        self.user_messages += int(res.get("user_messages") or 0)
        self.cut_at_turn_limit += 1 if res.get("cut") == "turn_limit" else 0
        self.overhead_ms += [1000.0 * c["overhead_s"] for c in res["calls"]]


class HarnessSource:
    """Runs a harness against a :class:`~pivot_envs.harness.http.HarnessServer` (see the module docstring).

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
            stats.add(outcome)
        return groups, stats

    def run_one(self, spec: dict[str, Any]) -> HarnessOutcome:
        """Open a rollout, run the harness on it, finish (or abandon) it."""
        endpoint = self.server.endpoint
        try:
            opened = endpoint.open(dict(spec), self.server.url)
        except HarnessError as exc:  # the task's world failed at its start, or a bad request: an error, no reward
            return HarnessOutcome(rollout_id="", task_id=str(spec.get("task_id", "")), status="failed",
                                  error=f"opening the rollout failed: {exc}")
        run = self._prepare(opened)
        start = time.monotonic()
        end = run_harness(self.harness, run)
        outcome = self._settle(run, end)
        outcome.seconds = time.monotonic() - start
        return outcome

    def _prepare(self, opened: dict[str, Any]) -> HarnessRun:
        """The run's folder and task file."""
        with self._lock:
            self._count += 1
            folder = self.workdir / f"run-{self._count:06d}"
        folder.mkdir(parents=True, exist_ok=True)
        task_file = folder / "task.json"
        run = HarnessRun(rollout_id=opened["rollout_id"], task_id=opened["task_id"], base_url=opened["base_url"],
                         mcp_url=opened["mcp_url"], task_file=str(task_file), workdir=str(folder),
                         messages=opened["messages"], tools=opened["tools"], user=opened.get("user"))
        task_file.write_text(json.dumps(run.task_document(), ensure_ascii=False, indent=1), encoding="utf-8")
        return run

    def _settle(self, run: HarnessRun, end: ProcessEnd) -> HarnessOutcome:
        """Finish the run's rollout, or abandon it (see the module docstring)."""
        rollouts = self.server.endpoint.rollouts
        record = {"exit_code": end.exit_code, "error": end.error, "stderr_tail": end.stderr_tail}
        outcome = HarnessOutcome(rollout_id=run.rollout_id, task_id=run.task_id, status="finished",
                                 exit_code=end.exit_code, error=end.error, stderr_tail=end.stderr_tail,
                                 harness_failed=end.failed)
        did_nothing = end.failed and _untouched(rollouts, run.rollout_id)
        if end.killed or did_nothing:
            why = end.error or "the harness failed"
            reason = f"{why} before its first model or tool call" if did_nothing and not end.killed else why
            rollouts.abandon(run.rollout_id, reason, harness=record)
            outcome.status, outcome.error = ("abandoned" if end.killed else "failed"), reason
            return outcome
        outcome.result = rollouts.finish(run.rollout_id, harness=record)
        outcome.status = outcome.result["status"]
        if outcome.result["error"]:
            outcome.error = outcome.result["error"]
        return outcome

    def close(self) -> None:
        """Remove the runs' folders (a temporary workdir) and stop the server when this source started it."""
        if self.owns_server:
            self.server.close()
        if self._tmp is not None:
            self._tmp.cleanup()


def _untouched(rollouts: HarnessRollouts, rollout_id: str) -> bool:
    """The rollout saw no model call and no tool call."""
    try:
        rollout = rollouts.get(rollout_id)
    except HarnessError:
        return False
    return not rollout.calls and not rollout.events and not rollout.closing_answers


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
