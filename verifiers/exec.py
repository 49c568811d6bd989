"""``exec``: run the expert's and the candidate's shell commands in sandboxes and compare their effects.

Both commands run in two identical fresh copies of the pivot's fixture (its
files, then its setup script, at ``fixture.workdir``); the candidate passes
when its effects equal the expert's:

* the exit code (``compare_exit_code``);
* stdout, normalised: ``\\r\\n`` -> ``\\n``, trailing spaces of each line and
  blank lines at both ends dropped (``compare_stdout``), compared by ``output``:
  ``"exact"`` (the same text), ``"sorted"`` (the same lines in any order) or
  ``"information"`` (the candidate's output carries what the expert's showed, up to
  order, whitespace and layout, and is no dump: :mod:`~pivot_envs.verifiers.helpers.information`;
  the exit statuses then only need to agree on success, see there); stderr the same
  way when ``compare_stderr``;
* the file-system diff against the post-setup state: added, removed and
  changed paths, with contents (sha256), modes, symlink targets
  (``compare_files``; ``ignore_paths`` globs are left out).

With ``output="information"``, a candidate that passes is run once more on an
emptied work tree (and the expert's command too, once per pivot): where the
expert's output depends on the files and the candidate prints what it showed
there as well, the candidate typed it in (``echo {0..12}``, a hard-coded or
encoded answer) and fails (:func:`~pivot_envs.verifiers.helpers.information.typed_in`).

Commands. The expert's and the candidate's command is a ``bash``-style tool
call (``command``/``cmd`` argument), a fenced ```bash block, or (by default,
``command_from_content="plain"``) the whole text of a message without tool
calls, as NL2Bash or tldr store commands (see
:mod:`~pivot_envs.verifiers.helpers.commands`).

Setup. A fixture's setup runs once, in its own sandbox; the resulting tree,
its final working directory and exported variables become the seed every run
starts from (cached per ``fixture.key()``; measured in
``benchmarks/verifier_speed/exec_verifier.py``, this is cheaper than replaying the setup in
every run). A setup that ``cd``s or ``export``s therefore affects the
commands, as in a terminal session; what it leaves outside the workdir
(``/tmp``), shell variables it does not export and background processes it
starts do not carry over. A setup's exit status is not checked (a replayed
episode may contain failing commands); its stdout is discarded.

Sandbox. Every command sees a fresh copy of the seed at the workdir (a
size-limited tmpfs), ``HOME`` = the workdir, ``LC_ALL=C``, ``TZ=UTC``, no
network, uid 65534, and the host's ``/usr`` read-only (see
:mod:`~pivot_envs.verifiers.sandbox.bwrap`). Background processes are killed
when the command's shell exits; files are compared after that.

Budgets. ``cpu_time_s`` (CPU seconds per process, RLIMIT_CPU) is what stops
a runaway command; the wall-clock ``timeout_s`` only stops a hang (``sleep``,
a blocked read) and is kept generous, since a loaded machine stretches wall
time but not CPU time. A command's duration is taken from the sandbox's own
clock (:mod:`~pivot_envs.verifiers.sandbox.base`), so a verifier process that is
scheduled late neither cuts a command short nor lets it overrun its budget. An
expert or setup run that times out is run once more with ``RETRY_FACTOR`` times
the budget; candidates then get the budget the expert needed.

Caching. The post-setup seeds (per ``fixture.key()``) and the expert's
effects (per pivot id, ``fixture.key()``, expert command) are cached in
bounded LRUs owned by the verifier object, so a group of candidates at one
pivot runs the setup and the expert once; concurrent requests for one key
run it once. A failed setup or expert run is remembered for
``FAILURE_TTL_S`` seconds (the rest of the group gets the same error without
running it again), then tried afresh.

Errors. ``error`` is set (reward 0, masked by trainers) when no sandbox
backend works (the verifier refuses; it never runs commands on the host), the
sandbox fails, the setup or the expert command does not complete (a timeout
even on the retry, an output cap, SIGXCPU from the CPU limit), or the expert
action holds no shell command. A candidate that times out (the expert did
not: it completed within the same budget), is killed for its resource use or
breaks its sandbox is an ordinary failure (reward 0, the reason says so).

Usage::

    verifier = build_verifier({"name": "exec", "cpu_time_s": 5, "workers": 2})
    verifier(bash_call("grep x f | wc -l"), pivot)  # pivot's expert ran `grep -c x f`
    # VerifyResult(reward=1.0, passed=True, reason='same effects as the expert (exit code, stdout, files)')
    verifier.verify_many(actions, pivot)            # a group: 2 sandboxes at a time
"""

from __future__ import annotations

import asyncio
import fnmatch
import shlex
import signal
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from typing import Any, Sequence

from pivot_envs.cache import LRUCache
from pivot_envs.types import Action, Fixture, Pivot, VerifyResult
from pivot_envs.verifiers.base import Verifier, register_verifier
from pivot_envs.verifiers.helpers import information
from pivot_envs.verifiers.helpers.commands import COMMAND_KEYS, CONTENT_MODES, SHELL_TOOLS, CommandExtractor
from pivot_envs.verifiers.sandbox import (
    BACKENDS,
    FileEntry,
    SandboxBackend,
    SandboxLimits,
    SandboxRequest,
    SandboxResult,
    SandboxUnavailable,
    Seed,
    check_workdir,
    describe_exit,
    get_backend,
)
from pivot_envs.verifiers.sandbox.base import SETUP_PREFIX, check_shell
from pivot_envs.verifiers.sandbox.docker_backend import DEFAULT_IMAGE

DEFAULT_IGNORE = ["__pycache__", "*.pyc", ".pytest_cache"]
"""Paths that differ between runs for reasons unrelated to the command (bytecode caches)."""

SEED_CACHE_SIZE = 16
"""Post-setup seeds kept per verifier (each holds a fixture's files in memory)."""

MAX_LISTED = 5
"""Differences named in a reason before ``(+N more)``."""

RETRY_FACTOR = 3.0
"""An expert or setup run that times out is retried once with this many times its wall-clock budget."""

FAILURE_TTL_S = 60.0
"""Seconds a failed setup or expert run is remembered (not re-run for every candidate of a group)."""


OUTPUT_MODES = ("exact", "sorted", "information")
"""How ``exec`` compares the outputs (see the module docstring)."""

COMMAND_NOT_FOUND = 127
"""The shell's exit code for a program it cannot find: an expert that exits so cannot be verified."""


class _Refusal(Exception):
    """An infrastructure failure: becomes ``VerifyResult(error=...)``."""


@dataclass(frozen=True)
class Effects:
    """What one command did: exit code, normalised output and changes of the work directory.

    ``changes`` maps a path to its new entry, or to None when the command removed it.
    """

    exit_code: int
    stdout: str
    stderr: str
    changes: dict[str, FileEntry | None]


@register_verifier("exec", accepted_by="effect")
@dataclass
class ExecVerifier(Verifier):
    """Functional equivalence by execution: same exit code, stdout and file-system effects as the expert.

    Attributes:
        backend: sandbox backend: ``"bwrap"`` (bubblewrap), ``"docker"`` or ``"auto"``
            (bwrap when it works here, else docker when an engine answers, else refuse).
        timeout_s: wall-clock limit of one command, against hangs (generous: a loaded machine
            stretches wall time); an expert past it is retried once with ``RETRY_FACTOR`` times
            the budget and is an error past that too; a candidate past the expert's budget fails
            ("timed out").
        cpu_time_s: CPU seconds each process of a run (setup, expert, candidate) may use, against
            runaway computations: past it the process is killed by SIGXCPU (an expert so killed is
            an error; a candidate's exit code 152 differs from the expert's).
        setup_timeout_s: wall-clock limit of a fixture's setup script (retried like the expert's).
        memory_mb: address-space limit of each process in the sandbox.
        max_processes: processes (and threads) a sandbox may have at once.
        max_file_size_mb: largest file a command may write.
        max_output_bytes: stdout/stderr bytes read per command; more kills the command.
        max_disk_mb: size of the sandbox's work directory (and of its ``/tmp``).
        compare_exit_code: the exit codes must be equal.
        compare_stdout: compare the stdouts (by ``output``).
        output: ``"exact"`` (equal normalised text), ``"sorted"`` (equal as sorted lines) or
            ``"information"`` (the candidate's output carries the expert's information and is no dump;
            the exit statuses need only agree on success: :mod:`~pivot_envs.verifiers.helpers.information`).
        stdout_order_insensitive: the older spelling of ``output="sorted"``.
        compare_stderr: the normalised stderrs must be equal.
        compare_files: the file-system diffs must be equal.
        ignore_paths: globs of workdir paths left out of the diff; a glob without ``/`` matches
            any path component (``__pycache__``), one with ``/`` the path from the workdir
            (``out/*.log``) and everything below a matching directory.
        workers: sandbox runs in parallel in :meth:`verify_many` (a thread pool).
        docker_image: image of the docker backend.
        shell: program that runs the commands inside the sandbox (``bash`` or ``sh``).
        command_tools: tool names whose calls carry a shell command.
        command_keys: argument keys holding the command.
        command_from_content: for actions without tool calls: ``"plain"`` (fenced blocks, else
            the whole content is the command), ``"fenced"`` (```bash blocks only; the terminal
            domain's default, where a text reply is not a command) or ``"none"``.
        skip_identical: a candidate command identical to the expert's passes without running.
        cache_size: expert effects kept in the LRU cache.
    """

    version = 2  # 2: output typed in fails; 4 x + 20 units; small-tree dumps; redirections; raw commands; turns in subshells

    backend: str = "auto"
    timeout_s: float = 30.0
    cpu_time_s: float = 10.0
    setup_timeout_s: float = 120.0
    memory_mb: int = 1024
    max_processes: int = 64
    max_file_size_mb: int = 16
    max_output_bytes: int = 1_000_000
    max_disk_mb: int = 64
    compare_exit_code: bool = True
    compare_stdout: bool = True
    output: str = "exact"
    stdout_order_insensitive: bool = False
    compare_stderr: bool = False
    compare_files: bool = True
    ignore_paths: list[str] = field(default_factory=lambda: list(DEFAULT_IGNORE))
    workers: int = 1
    docker_image: str = DEFAULT_IMAGE
    shell: str = "bash"
    command_tools: list[str] = field(default_factory=lambda: list(SHELL_TOOLS))
    command_keys: list[str] = field(default_factory=lambda: list(COMMAND_KEYS))
    command_from_content: str = "plain"
    skip_identical: bool = True
    cache_size: int = 256
    _rt: "_Runtime | None" = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"exec verifier: backend must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        if self.output not in OUTPUT_MODES:
            raise ValueError(f"exec verifier: output must be one of {', '.join(OUTPUT_MODES)}, got {self.output!r}")
        if self.stdout_order_insensitive and self.output == "exact":
            self.output = "sorted"
        self.stdout_order_insensitive = self.output == "sorted"
        if self.command_from_content not in CONTENT_MODES:
            raise ValueError(f"exec verifier: command_from_content must be one of {', '.join(CONTENT_MODES)}, "
                             f"got {self.command_from_content!r}")
        for name in ("timeout_s", "cpu_time_s", "setup_timeout_s"):
            if not isinstance(getattr(self, name), (int, float)) or getattr(self, name) <= 0:
                raise ValueError(f"exec verifier: {name} must be a positive number, got {getattr(self, name)!r}")
        for name in ("workers", "cache_size"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"exec verifier: {name} must be an integer >= 1, got {getattr(self, name)!r}")
        if not isinstance(self.ignore_paths, (list, tuple)) or not all(isinstance(g, str) for g in self.ignore_paths):
            raise ValueError(f"exec verifier: ignore_paths must be a list of glob strings, got {self.ignore_paths!r}")
        self.ignore_paths = list(self.ignore_paths)
        self._limits = SandboxLimits(memory_mb=self.memory_mb, max_processes=self.max_processes,
                                     max_file_size_mb=self.max_file_size_mb, max_output_bytes=self.max_output_bytes,
                                     max_disk_mb=self.max_disk_mb)
        check_shell(self.shell)
        self._extractor = CommandExtractor(tools=list(self.command_tools), keys=list(self.command_keys),
                                           content=self.command_from_content)
        self._rt = _Runtime(self.cache_size)

    # ------------------------------------------------------------------ pickling: config only

    def __getstate__(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.init}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._rt = None
        self.__post_init__()

    # ------------------------------------------------------------------ public helpers

    def sandbox(self) -> SandboxBackend:
        """The working backend (probed once, then cached); raises SandboxUnavailable saying what to install."""
        assert self._rt is not None
        return self._rt.backend(self.backend, self.docker_image)

    def stats(self) -> dict[str, int]:
        """Counters of this verifier object: sandbox runs by kind (retries included), retries and expert-cache hits."""
        assert self._rt is not None
        with self._rt.lock:
            return dict(self._rt.counts)

    def seed(self, fixture: Fixture) -> Seed:
        """The post-setup state every run on ``fixture`` starts from (cached, like the verifier's own).

        Raises SandboxUnavailable without a backend, RuntimeError when the fixture or its setup fails.
        """
        try:
            return self._seed(fixture, fixture.key())
        except _Refusal as exc:
            raise RuntimeError(str(exc)) from None

    def command(self, message: dict[str, Any]) -> str | None:
        """The shell command an assistant message asks to run (see :mod:`~pivot_envs.verifiers.helpers.commands`)."""
        return self._extractor.extract(message)

    # ------------------------------------------------------------------ verifying

    def verify(self, action: Action, pivot: Pivot) -> VerifyResult:
        try:
            return self._verify(action, pivot)
        except _Refusal as exc:
            return VerifyResult.failure(self.name, str(exc))

    def verify_many(self, actions: Sequence[Action], pivots: Sequence[Pivot] | Pivot) -> list[VerifyResult]:
        """Verify a batch in order, ``workers`` sandbox runs at a time."""
        pivot_list = [pivots] * len(actions) if isinstance(pivots, Pivot) else list(pivots)
        if len(pivot_list) != len(actions):
            raise ValueError(f"verify_many got {len(actions)} actions but {len(pivot_list)} pivots")
        if self.workers <= 1 or len(actions) <= 1:
            return [self.safe_verify(a, p) for a, p in zip(actions, pivot_list)]
        with ThreadPoolExecutor(max_workers=min(self.workers, len(actions)), thread_name_prefix="exec-verify") as pool:
            return list(pool.map(self.safe_verify, actions, pivot_list))

    async def averify_many(self, actions: Sequence[Action], pivots: Sequence[Pivot] | Pivot) -> list[VerifyResult]:
        return await asyncio.to_thread(self.verify_many, actions, pivots)

    def _verify(self, action: Action, pivot: Pivot) -> VerifyResult:
        expert_cmd = self.command(pivot.expert)
        if expert_cmd is None:
            in_content = {"plain": ", a fenced bash block or plain text", "fenced": ", or a fenced bash block"}
            raise _Refusal(f"pivot {pivot.id}: the expert action holds no shell command (tools "
                           f"{', '.join(self.command_tools)} with an argument {'/'.join(self.command_keys)}"
                           f"{in_content.get(self.command_from_content, '')}); the exec verifier does not apply "
                           f"to this pivot")
        fixture = pivot.fixture or Fixture()
        try:
            check_workdir(fixture.workdir)
        except ValueError as exc:
            raise _Refusal(f"pivot {pivot.id}: {exc}") from None
        self._backend()  # refuse without a sandbox, whatever the candidate is
        candidate_cmd = self.command(action.message)
        if candidate_cmd is None:
            return self._result(False, "no shell command in the action")
        if self.skip_identical and candidate_cmd == expert_cmd:
            return self._result(True, "same command as the expert")
        fixture_key = fixture.key()
        seed = self._seed(fixture, fixture_key)
        expert, budget = self._expert((pivot.id, fixture_key, expert_cmd), seed)
        run = self._run(seed, candidate_cmd, "candidate", timeout_s=budget)
        if run.error:
            raise _Refusal(f"sandbox failure on the candidate command: {run.error}")
        if run.timed_out:  # the expert completed within this budget
            return self._result(False, f"timed out after {budget:g} s")
        if run.killed:
            return self._result(False, f"killed: {run.killed}")
        cand = self._effects(run, seed)
        if self.output == "information":
            verdict = self._judge_information(expert, cand, expert_cmd, candidate_cmd, seed)
            if verdict.passed and self.compare_stdout and expert.stdout:
                typed = self._typed_in(expert, cand, (pivot.id, fixture_key, expert_cmd), seed, candidate_cmd, budget)
                if typed:
                    return self._result(False, typed)
            return verdict
        differences = self._compare(expert, cand)
        if differences:
            return self._result(False, "; ".join(differences))
        checked = [name for name, on in (("exit code", self.compare_exit_code), ("stdout", self.compare_stdout),
                                         ("stderr", self.compare_stderr), ("files", self.compare_files)) if on]
        return self._result(True, f"same effects as the expert ({', '.join(checked) or 'nothing compared'})")

    def _judge_information(self, expert: Effects, cand: Effects, expert_cmd: str, candidate_cmd: str,
                           seed: Seed) -> VerifyResult:
        """``output="information"``: the same file changes, agreeing exit statuses, and an output that carries
        the expert's information without being a dump."""
        differences = file_differences(expert.changes, cand.changes) if self.compare_files else []
        status = information.status_difference(expert.exit_code, expert.stdout, cand.exit_code, bool(expert.changes),
                                               cand.stdout, cand.stderr)
        if self.compare_exit_code and status:
            differences.insert(0, status)
        if differences:
            return self._result(False, "; ".join(differences))
        if not self.compare_stdout:
            return self._result(True, "same file changes as the expert")
        tree = [path for path, entry in seed.files.items() if entry.kind != "dir"]
        found, count = information.compare(expert.stdout, cand.stdout, expert_cmd, candidate_cmd, seed.workdir, tree)
        what = "same file changes as the expert; " if expert.changes else ""
        return self._result(found.carried, what + found.reason(count))

    def _typed_in(self, expert: Effects, cand: Effects, key: tuple[str, str, str], seed: Seed, candidate_cmd: str,
                  budget: float) -> str | None:
        """Why the candidate's output is typed in rather than found (:func:`information.typed_in`), or None: both
        commands run once more on an emptied work tree, and what the candidate prints there too, without a complaint
        on stderr (a command that read files complains when they are gone), carries nothing. Skipped where the
        expert's output does not depend on the tree (it prints the same there)."""
        empty = Seed(seed.workdir, {}, seed.prelude)
        expert_empty = self._expert_empty(key, empty)
        if expert_empty is None or expert_empty == expert.stdout:
            return None
        run = self._run(empty, candidate_cmd, "typed", timeout_s=budget)
        if not run.completed or run.error or run.stderr.strip():
            return None  # a candidate that complains without its files read them (``grep x f | wc -l`` prints 0 there)
        cand_empty = normalize_output(run.stdout, self.stdout_order_insensitive)
        missing = information.typed_in(expert.stdout, cand.stdout, expert_empty, cand_empty, key[2], candidate_cmd,
                                       seed.workdir)
        if not missing:
            return None
        named = ", ".join(repr(m) for m in missing[:information.MAX_NAMED])
        return (f"typed in, not found: the output shows {named} as it does without the work tree (the expert's "
                "output depends on the files, this one does not)")

    def _expert_empty(self, key: tuple[str, str, str], empty: Seed) -> str | None:
        """The expert command's output on an emptied work tree (cached like its effects), or None where it did not
        complete there."""
        assert self._rt is not None

        def run() -> str | None:
            result = self._run(empty, key[2], "typed")
            if not result.completed or result.error:
                return None
            return normalize_output(result.stdout, self.stdout_order_insensitive)

        return self._rt.empties.get_or_compute(key, run)[0]

    def _result(self, ok: bool, reason: str) -> VerifyResult:
        return VerifyResult(reward=float(ok), passed=ok, verifier=self.name, reason=reason)

    def _backend(self) -> SandboxBackend:
        try:
            return self.sandbox()
        except SandboxUnavailable as exc:
            raise _Refusal(str(exc)) from None

    def _run(self, seed: Seed, script: str, kind: str, *, timeout_s: float | None = None,
             keep_contents: bool = False) -> SandboxResult:
        assert self._rt is not None
        self._rt.count(f"{kind}_runs")
        request = SandboxRequest(script=script, seed=seed, limits=self._limits, timeout_s=timeout_s or self.timeout_s,
                                 shell=self.shell, keep_contents=keep_contents, cpu_time_s=self.cpu_time_s)
        return self._backend().run(request)

    def _run_with_retry(self, seed: Seed, script: str, kind: str, timeout_s: float,
                        keep_contents: bool = False) -> tuple[SandboxResult, float]:
        """A setup or expert run, and once more with ``RETRY_FACTOR`` times the budget if it timed out
        (a loaded machine, more likely than a hang of a recorded command); returns the run and its budget."""
        assert self._rt is not None
        run = self._run(seed, script, kind, timeout_s=timeout_s, keep_contents=keep_contents)
        if run.timed_out:
            self._rt.count("retries")
            timeout_s *= RETRY_FACTOR
            run = self._run(seed, script, kind, timeout_s=timeout_s, keep_contents=keep_contents)
        return run, timeout_s

    @staticmethod
    def _incomplete(run: SandboxResult, budget: float, setting: str) -> str | None:
        """Why a setup or expert run (see :meth:`_run_with_retry`) did not complete, or None when it did."""
        if run.completed:
            return None
        if run.timed_out:
            return f"timed out after {budget / RETRY_FACTOR:g} s and, on a retry, after {budget:g} s ({setting})"
        return run.error or f"killed: {run.killed}"

    # ------------------------------------------------------------------ seeds and the expert

    def _seed(self, fixture: Fixture, fixture_key: str) -> Seed:
        assert self._rt is not None
        seed, _ = self._rt.seeds.get_or_compute(fixture_key, lambda: self._build_seed(fixture))
        return seed

    def _build_seed(self, fixture: Fixture) -> Seed:
        try:
            base = Seed.from_fixture_files(fixture.workdir, fixture.files)
        except ValueError as exc:
            raise _Refusal(f"bad fixture: {exc}") from None
        if not fixture.setup.strip():
            return base
        run, budget = self._run_with_retry(base, SETUP_PREFIX + fixture.setup, "setup", self.setup_timeout_s,
                                           keep_contents=True)
        why = self._incomplete(run, budget, "setup_timeout_s")
        if why:
            tail = run.stderr.decode("utf-8", "replace").strip()[-500:]
            raise _Refusal(f"fixture setup did not complete: {why}" + (f"; stderr: {tail}" if tail else ""))
        return Seed(fixture.workdir, run.files, _prelude(run.control))

    def _expert(self, key: tuple[str, str, str], seed: Seed) -> tuple[Effects, float]:
        """The expert's effects and the wall-clock budget it completed within, cached per
        (pivot id, fixture key, expert command)."""
        assert self._rt is not None
        value, hit = self._rt.experts.get_or_compute(key, lambda: self._run_expert(seed, key[2]))
        if hit:
            self._rt.count("expert_cache_hits")
        return value

    def _run_expert(self, seed: Seed, command: str) -> tuple[Effects, float]:
        run, budget = self._run_with_retry(seed, command, "expert", self.timeout_s)
        why = self._incomplete(run, budget, "timeout_s")
        if why is None and run.exit_code == 128 + signal.SIGXCPU:
            why = f"killed by SIGXCPU after {self.cpu_time_s:g} CPU seconds (cpu_time_s)"
        if why:
            raise _Refusal(f"the expert command did not complete: {why}")
        if run.exit_code == COMMAND_NOT_FOUND:  # any candidate that also fails to start would "match"
            tail = run.stderr.decode("utf-8", "replace").strip()[-200:]
            raise _Refusal(f"the expert command could not start in the sandbox (exit 127, command not found: "
                           f"{tail or 'no stderr'}); install its program in the sandbox image or drop this pivot")
        return self._effects(run, seed), budget

    # ------------------------------------------------------------------ effects and comparison

    def _effects(self, run: SandboxResult, seed: Seed) -> Effects:
        assert run.exit_code is not None
        before = seed.files
        changes: dict[str, FileEntry | None] = {}
        for path, entry in run.files.items():
            if before.get(path) != entry and not self._ignored(path):
                changes[path] = entry
        for path in before:
            if path not in run.files and not self._ignored(path):
                changes[path] = None
        return Effects(exit_code=run.exit_code, stdout=normalize_output(run.stdout, self.stdout_order_insensitive),
                       stderr=normalize_output(run.stderr, self.stdout_order_insensitive), changes=changes)

    def _ignored(self, path: str) -> bool:
        parts = path.split("/")
        for glob in self.ignore_paths:
            if "/" in glob:
                if any(fnmatch.fnmatchcase("/".join(parts[:i]), glob.strip("/")) for i in range(1, len(parts) + 1)):
                    return True
            elif any(fnmatch.fnmatchcase(part, glob) for part in parts):
                return True
        return False

    def _compare(self, expert: Effects, cand: Effects) -> list[str]:
        out = []
        if self.compare_exit_code and expert.exit_code != cand.exit_code:
            out.append(f"exit code differs: expert {describe_exit(expert.exit_code)}, "
                       f"candidate {describe_exit(cand.exit_code)}")
        if self.compare_stdout and expert.stdout != cand.stdout:
            out.append("stdout differs: " + text_difference(expert.stdout, cand.stdout))
        if self.compare_stderr and expert.stderr != cand.stderr:
            out.append("stderr differs: " + text_difference(expert.stderr, cand.stderr))
        if self.compare_files:
            out += file_differences(expert.changes, cand.changes)
        return out


def _prelude(control: dict[str, bytes]) -> str:
    """Shell lines that restore the exported variables and the cwd a setup ended with."""
    lines = []
    env = control.get("env", b"").decode("utf-8", "replace").strip()
    if env:
        lines.append(env)
    cwd = control.get("cwd", b"").decode("utf-8", "replace").strip()
    if cwd:
        lines.append(f"cd -- {shlex.quote(cwd)} 2>/dev/null")
    return "\n".join(lines)


def normalize_output(data: bytes, order_insensitive: bool = False) -> str:
    """Decode, ``\\r\\n`` -> ``\\n``, strip trailing spaces per line and blank lines at both ends."""
    lines = [line.rstrip() for line in data.decode("utf-8", "replace").replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    while lines and not lines[0]:
        lines.pop(0)
    if order_insensitive:
        lines.sort()
    return "\n".join(lines)


def text_difference(expert: str, cand: str) -> str:
    """Where two normalised outputs first differ, shortly."""
    a, b = expert.split("\n") if expert else [], cand.split("\n") if cand else []
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"line {i + 1}: expert {_short(x)}, candidate {_short(y)}"
    if len(a) > len(b):
        return f"candidate has {len(b)} lines, expert {len(a)} (next expert line {_short(a[len(b)])})"
    return f"candidate has {len(b)} lines, expert {len(a)} (extra candidate line {_short(b[len(a)])})"


def _short(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


def file_differences(expert: dict[str, FileEntry | None], cand: dict[str, FileEntry | None]) -> list[str]:
    """``file changed: PATH (expert: ..., candidate: ...)`` for each path whose change differs (at most MAX_LISTED)."""
    paths = sorted(p for p in set(expert) | set(cand) if expert.get(p, _MISSING) != cand.get(p, _MISSING))
    out = []
    for path in paths[:MAX_LISTED]:
        e, c = expert.get(path, _MISSING), cand.get(path, _MISSING)
        what_e, what_c = _change(e), _change(c)
        if what_e == what_c:  # same kind, size and mode: the contents or target differ
            what_e, what_c = what_e + ", other contents", what_c + ", other contents"
        out.append(f"file changed: {path} (expert: {what_e}; candidate: {what_c})")
    if len(paths) > MAX_LISTED:
        out.append(f"(+{len(paths) - MAX_LISTED} more differing paths)")
    return out


def _change(entry: Any) -> str:
    if entry is _MISSING:
        return "unchanged"
    if entry is None:
        return "removed"
    return entry.describe()


_MISSING: Any = object()


class _Runtime:
    """A verifier object's runtime state: backend, caches and counters (never pickled)."""

    def __init__(self, cache_size: int) -> None:
        self.lock = threading.Lock()
        self.experts: LRUCache[tuple[str, str, str], tuple[Effects, float]] = LRUCache(cache_size, FAILURE_TTL_S)
        self.seeds: LRUCache[str, Seed] = LRUCache(SEED_CACHE_SIZE, FAILURE_TTL_S)
        self.empties: LRUCache[tuple[str, str, str], str | None] = LRUCache(cache_size)
        self.counts = {"setup_runs": 0, "expert_runs": 0, "candidate_runs": 0, "expert_cache_hits": 0, "retries": 0,
                       "typed_runs": 0}
        self._backend: SandboxBackend | None = None
        self._unavailable: str | None = None

    def count(self, name: str) -> None:
        with self.lock:
            self.counts[name] = self.counts.get(name, 0) + 1

    def backend(self, name: str, image: str) -> SandboxBackend:
        with self.lock:
            if self._backend is None and self._unavailable is None:
                try:
                    self._backend = get_backend(name, docker_image=image)
                except SandboxUnavailable as exc:
                    self._unavailable = str(exc)
            if self._backend is None:
                raise SandboxUnavailable(self._unavailable or "no sandbox backend")
            return self._backend
