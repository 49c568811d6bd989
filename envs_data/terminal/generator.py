"""Terminal domain: shell tasks on small file-system fixtures, solved with one `bash` tool.

World: each episode starts from a :class:`~pivot_envs.types.Fixture` (a few text
files; a setup script that fixes modes and builds archives or large files; a
workdir such as ``/testbed``). The expert explores (``ls``/``head``/``cat``),
acts, checks the result and ends with a short text summary. About 10 % of the
episodes are failures (reward 0.0): the expert uses the wrong file, pattern or
flag and still reports success (``meta["failure"]`` says what went wrong).

Tool: ``bash(command)``. Every tool result is GENUINE: the generator writes the
fixture into a temporary folder, runs the setup and then each command in a
subshell of one driver ``bash`` there, as a replay of the episode does
(``LC_ALL=C``, ``HOME`` = that folder, ``umask 022``, stdin from ``/dev/null``),
and records the real stdout then stderr, with the exit status when it is not 0
(see :func:`tool_content`; a failing command with an error message gives an
``Error:`` result, followed by a corrected call). Commands use relative paths
only, so the temporary path never leaks (the generator checks it).

Task families: see :mod:`pivot_envs.envs_data.terminal.tasks` (log
analysis, access-log statistics, CSV sums and extraction, find-and-delete,
filing files by extension, large files, directory skeletons, sed replacement,
renaming a symbol, permissions, tar create/extract, word counts, diff, writing
config files, project cleanup, grep across a tree, sort/dedupe).

Extras in ``meta``: ``alternatives`` (``{"<message index>": [assistant message,
...]}``: other commands with the same stdout, stderr, exit status and resulting
files at that state, each checked by running it on a fresh copy of the state),
``near_misses`` (``{"<message index>": [{"message", "reason", "differs"}]}``:
commands that look right but print differently or leave other files;
``differs`` lists ``stdout``, ``stderr``, ``exit_code`` and/or ``files``), and
``failure`` for failed episodes.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import random
import re
import select
import shlex
import shutil
import signal
import stat
import subprocess
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from pivot_envs.fixture import write_files
from pivot_envs.types import Fixture, Message, Trajectory

from .tasks import FAMILIES, Outcome, Snapshot, Step, TaskPlan

DOMAIN = "terminal"
SOURCE = f"pivot-envs/{DOMAIN}"
FAIL_RATE = 0.1
"""Share of episodes where the expert gets the task wrong (reward 0.0)."""
EPISODE_TIMEOUT_S = 60.0
"""Wall-clock limit for running one episode's commands (all of them, with their candidates)."""
RAM_DISK = "/dev/shm"
"""Preferred parent of the temporary work folders when ``$TMPDIR`` is not set (if it exists)."""

BASH_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": (
            "Run a bash command in the task's working directory and return its stdout and stderr "
            "(with the exit code when it is not 0). Each call starts a fresh shell in the working "
            "directory: `cd` and variables do not carry over to the next call."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "command": {
                    "type": "string",
                    "description": "The shell command to run, e.g. `ls -R` or `grep -c ERROR app.log`.",
                }
            },
            "required": ["command"],
            "additionalProperties": False,
        },
    },
}

SYSTEM_PROMPTS = (
    "You are a careful shell assistant working in a Linux sandbox. The working directory is {workdir}. "
    "Use the `bash` tool to inspect and change files; run one command per call, check your work, "
    "and finish with a short summary for the user.",
    "You are an agent with access to a bash shell. You are in {workdir}. Solve the user's task with "
    "standard command-line tools (coreutils, grep, sed, awk, find, tar). Look before you change "
    "anything, verify the result, then reply with a brief summary.",
    "You operate a terminal on the user's behalf (cwd: {workdir}). Call the `bash` tool to run "
    "commands. Prefer simple, standard commands and relative paths. When the task is done, explain "
    "what you did in a few sentences.",
)


# --------------------------------------------------------------------------- execution

DRIVER_HEAD = (
    "umask 022\n"
    "run() {\n"
    "  __dir=$1 __name=$2 __cmd=$3\n"
    "  printf '\\0\\0<%s\\0' \"$__name\"\n"
    '  ( cd "$__dir" && HOME=$PWD && set -- && eval "$__cmd" ) 2>stderr </dev/null\n'
    "  printf '\\0\\0>%s %d\\0' \"$__name\" $?\n"
    "}\n"
)
"""The driver's helper: ``run DIR NAME COMMAND`` runs COMMAND in a subshell inside DIR (as the
replay of a trajectory does: each command in its own ``( ... )``, stdin from /dev/null),
frames its stdout and exit status with NUL-delimited markers on the driver's stdout and
leaves its stderr in the file ``stderr`` beside DIR."""
_RECORD = re.compile(rb"\0\0<([^\0]*)\0(.*?)\0\0>\1 (-?\d+)\0", re.DOTALL)
_SHELL_ERROR = re.compile(r"^(bash|environment): ", re.MULTILINE)

State = dict[str, tuple[Any, ...]]
"""A captured tree: relative path -> ``("dir", mode)``, ``("file", mode, bytes)`` or ``("link", target)``."""


@dataclass
class CommandRun:
    """What one command printed and its exit status."""

    stdout: str
    stderr: str
    code: int

    @property
    def output(self) -> str:
        """What the agent sees: stdout, then stderr."""
        return self.stdout + self.stderr


@dataclass
class CandidateRun:
    """A candidate command run on a fresh copy of the state before an expert step.

    Attributes:
        command: the candidate command.
        run: its output and exit status.
        differs: what differs from the expert's run: ``stdout``, ``stderr``, ``exit_code``, ``files``
            (empty: functionally equivalent at that state).
    """

    command: str
    run: CommandRun
    differs: list[str]


@dataclass
class StepRun:
    """The expert command of one step and the candidates tried beside it."""

    expert: CommandRun
    candidates: list[CandidateRun]


def capture(root: Path) -> State:
    """Every path under ``root`` with its type, permission bits and content (mtimes ignored)."""
    state: State = {}
    for dirpath, dirnames, filenames in os.walk(root):
        base = Path(dirpath)
        for name in dirnames + filenames:
            path = base / name
            rel = path.relative_to(root).as_posix()
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                state[rel] = ("link", os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                state[rel] = ("dir", stat.S_IMODE(st.st_mode))
            else:
                state[rel] = ("file", stat.S_IMODE(st.st_mode), path.read_bytes())
    return state


def restore(root: Path, current: State, target: State) -> None:
    """Turn the tree at ``root`` (captured as ``current``) back into ``target``, in place."""
    for rel in sorted(set(current) - set(target), reverse=True):  # children before parents
        path = root / rel
        if current[rel][0] == "dir":
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    for rel in sorted(target):  # parents before children
        want, have, path = target[rel], current.get(rel), root / rel
        if have is not None and have[0] != want[0]:
            shutil.rmtree(path) if have[0] == "dir" else path.unlink()
            have = None
        if want[0] == "dir":
            path.mkdir(exist_ok=True)
            path.chmod(0o755)  # writable while children are restored; final mode below
        elif want[0] == "link":
            if have != want:
                path.unlink(missing_ok=True)
                path.symlink_to(want[1])
        elif have != want:
            if have is None or have[2] != want[2]:
                if have is not None:
                    path.chmod(0o600)  # writable even if the candidate made it read-only
                path.write_bytes(want[2])
            path.chmod(want[1])
    for rel in sorted((r for r in target if target[r][0] == "dir"), reverse=True):
        (root / rel).chmod(target[rel][1])


def _normalized_blob(name: str, data: bytes) -> str:
    """A digest of a file's meaning: archives by their members, gzip files by their content."""
    if name.endswith((".tar", ".tar.gz", ".tgz")):
        try:
            with tarfile.open(fileobj=io.BytesIO(data)) as tar:
                members = []
                for m in tar.getmembers():
                    body = tar.extractfile(m).read() if m.isfile() else b""  # type: ignore[union-attr]
                    members.append((m.name.rstrip("/"), m.type.decode(), m.mode, hashlib.sha1(body).hexdigest()))
            return "tar:" + hashlib.sha1(json.dumps(sorted(members)).encode()).hexdigest()
        except (tarfile.TarError, OSError, EOFError):
            pass
    if name.endswith(".gz"):
        try:
            return "gz:" + hashlib.sha1(gzip.decompress(data)).hexdigest()
        except (OSError, EOFError):
            pass
    return hashlib.sha1(data).hexdigest()


def tree_key(state: State) -> list[tuple[Any, ...]]:
    """What "same resulting files" compares: paths, types, modes and contents, with archives
    compared by their members (their bytes embed times)."""
    out: list[tuple[Any, ...]] = []
    for rel in sorted(state):
        entry = state[rel]
        if entry[0] == "file":
            out.append((rel, "file", entry[1], _normalized_blob(rel, entry[2])))
        else:
            out.append((rel, *entry))
    return out


def snapshot(state: State) -> Snapshot:
    """The :class:`Snapshot` view of a captured tree."""
    return Snapshot(
        files={rel: e[2] for rel, e in state.items() if e[0] == "file"},
        modes={rel: e[1] for rel, e in state.items() if e[0] in ("file", "dir")},
    )


class Driver:
    """One long-lived ``bash`` that runs commands on request, each in a subshell inside the
    work folder (``cd``, variables and ``exit`` do not leak from one command to the next)."""

    def __init__(self, root: Path, label: str):
        self.root, self.label, self.count = root, label, 0
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LC_ALL": "C", "TZ": "UTC", "HOME": str(root)}
        self.proc = subprocess.Popen(
            ["bash", "--noprofile", "--norc", "-s"],
            cwd=root,
            env=env,
            start_new_session=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.deadline = time.monotonic() + EPISODE_TIMEOUT_S
        self.buffer = b""
        self._send(DRIVER_HEAD)

    def _send(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text.encode())
        self.proc.stdin.flush()

    def run(self, folder: str, command: str) -> CommandRun:
        """Run ``command`` inside ``root/folder``; its output and exit status."""
        self.count += 1
        name = f"c{self.count}"
        self._send(f"run {folder} {name} {shlex.quote(command)}\n")
        fd = self.proc.stdout.fileno()  # type: ignore[union-attr]
        while True:
            m = _RECORD.search(self.buffer)
            if m and m.group(1) == name.encode():
                self.buffer = self.buffer[m.end() :]
                break
            left = self.deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                self.close()
                raise RuntimeError(f"{self.label}: commands ran past {EPISODE_TIMEOUT_S} s (at `{command}`)")
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise RuntimeError(f"{self.label}: the driver shell died while running `{command}`")
            self.buffer += chunk
        out = m.group(2).decode("utf-8", errors="replace")
        err = (self.root / "stderr").read_bytes().decode("utf-8", errors="replace")
        if str(self.root) in out + err:
            raise RuntimeError(f"{self.label}: the output of `{command}` leaks the temporary path; use relative paths")
        return CommandRun(out, err, int(m.group(3)))

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()


def _scratch_root() -> str | None:
    """Where temporary work folders go: ``$TMPDIR`` if set, else a RAM disk when the system has
    one (ten times faster than a disk mounted with ``discard``), else the default."""
    if os.environ.get("TMPDIR"):
        return None
    return RAM_DISK if os.path.isdir(RAM_DISK) and os.access(RAM_DISK, os.W_OK) else None


def run_steps(
    fixture: Fixture, steps: Sequence[tuple[str, Sequence[str]]], label: str = "episode"
) -> tuple[list[StepRun], Snapshot]:
    """Run the fixture's setup, then each step's expert command in order. Every candidate of a
    step runs on a fresh copy of the state before that step (the work folder is restored in
    place between runs) and is compared with the expert's stdout, stderr, exit status and files.

    Returns the runs and a snapshot of the final tree. Raises RuntimeError naming ``label``
    when the setup fails, a command times out, prints a shell-level error (whose text depends
    on how the shell was started) or leaks the temporary path.
    """
    with tempfile.TemporaryDirectory(prefix="pivot-terminal-", dir=_scratch_root()) as tmp:
        root = Path(tmp)
        work = root / "w"
        work.mkdir()
        write_files(fixture, work)
        driver = Driver(root, label)
        try:
            setup = driver.run("w", fixture.setup)
            if setup.code != 0 or setup.output:
                raise RuntimeError(
                    f"{label}: setup exited {setup.code} and printed {setup.output!r}; it must be silent"
                )
            runs: list[StepRun] = []
            for expert_cmd, candidates in steps:
                before = capture(work) if candidates else {}
                expert = driver.run("w", expert_cmd)
                if _SHELL_ERROR.search(expert.output):
                    raise RuntimeError(f"{label}: `{expert_cmd}` printed a shell error: {expert.output[:200]}")
                cands: list[CandidateRun] = []
                if candidates:
                    after = capture(work)
                    after_key = tree_key(after)
                    now = after
                    for cand in candidates:
                        restore(work, now, before)
                        run = driver.run("w", cand)
                        now = capture(work)
                        differs = [
                            what
                            for what, same in (
                                ("stdout", run.stdout == expert.stdout),
                                ("stderr", run.stderr == expert.stderr),
                                ("exit_code", run.code == expert.code),
                                ("files", tree_key(now) == after_key),
                            )
                            if not same
                        ]
                        cands.append(CandidateRun(cand, run, differs))
                    restore(work, now, after)
                runs.append(StepRun(expert, cands))
            return runs, snapshot(capture(work))
        finally:
            driver.close()


# --------------------------------------------------------------------------- assembly


def tool_content(run: CommandRun) -> str:
    """The tool message text: stdout then stderr, and the exit status when it is not 0.

    A command that fails (non-zero status) with a message on stderr is a tool error: its
    text starts with ``Error: exit code N``. A non-zero status without stderr is
    informative rather than an error (``diff`` found differences, ``grep`` matched
    nothing): ``[exit code: N]`` follows the output.
    """
    if run.code == 0:
        return run.output
    if run.stderr:
        return f"Error: exit code {run.code}\n{run.output}"
    sep = "" if not run.output or run.output.endswith("\n") else "\n"
    return f"{run.output}{sep}[exit code: {run.code}]"


def _call(call_id: str, command: str, say: str | None) -> Message:
    return {
        "role": "assistant",
        "content": say,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": "bash", "arguments": json.dumps({"command": command})},
            }
        ],
    }


def _checked_candidates(
    step: Step, run: StepRun, call_id: str, where: str, stats: dict[str, Any]
) -> tuple[list[Message], list[dict[str, Any]]]:
    """The step's alternatives that proved equivalent and its near misses that proved different
    (as assistant messages); the others are dropped and counted in ``stats``."""
    n_alt = len(step.alternatives)
    alts = []
    for cand in run.candidates[:n_alt]:
        if cand.differs:
            stats["alternatives_dropped"] += 1
            stats["dropped"].append(f"{where}: alternative `{cand.command}` differs in {cand.differs}")
        else:
            alts.append(_call(call_id, cand.command, step.say))
    misses = []
    for cand, (_, reason) in zip(run.candidates[n_alt:], step.near_misses, strict=True):
        if cand.differs:
            misses.append(
                {"message": _call(call_id, cand.command, step.say), "reason": reason, "differs": cand.differs}
            )
        else:
            stats["near_misses_dropped"] += 1
            stats["dropped"].append(f"{where}: near miss `{cand.command}` is equivalent")
    return alts, misses


def build_trajectory(
    plan: TaskPlan, rng: random.Random, ident: str, task: str, stats: dict[str, Any]
) -> Trajectory | None:
    """Run a plan and assemble its trajectory; None when a planned failure turned out to solve the task.

    Raises RuntimeError when a command exits with another status than the plan expects or a
    correct plan does not solve its task (both are generator bugs).
    """
    flat = [step for seg in plan.segments for step in seg.steps]
    labels = [step.label or f"s{i}" for i, step in enumerate(flat)]
    if len(set(labels)) != len(labels):
        raise RuntimeError(f"{ident} ({task}): step labels must be unique, got {labels}")
    runs, final = run_steps(
        plan.fixture,
        [(step.command, [*step.alternatives, *(c for c, _ in step.near_misses)]) for step in flat],
        label=ident,
    )
    for step, run in zip(flat, runs, strict=True):
        if step.expect_rc is not None and run.expert.code != step.expect_rc:
            raise RuntimeError(
                f"{ident} ({task}): `{step.command}` exited {run.expert.code}, the plan expects "
                f"{step.expect_rc}; output: {run.expert.output[:300]}"
            )
    outcome = Outcome(
        outputs={lab: r.expert.output for lab, r in zip(labels, runs, strict=True)},
        codes={lab: r.expert.code for lab, r in zip(labels, runs, strict=True)},
        final=final,
    )
    done = plan.finish(outcome)
    if plan.failure is None and not done.solved:
        raise RuntimeError(f"{ident} ({task}): the expert's plan does not solve the task")
    if plan.failure is not None and done.solved:
        return None

    messages: list[Message] = [
        {"role": "system", "content": rng.choice(SYSTEM_PROMPTS).format(workdir=plan.fixture.workdir)}
    ]
    alternatives: dict[str, list[Message]] = {}
    near_misses: dict[str, list[dict[str, Any]]] = {}
    step_runs = iter(zip(flat, runs, strict=True))
    for seg, summary in zip(plan.segments, done.summaries, strict=True):
        messages.append({"role": "user", "content": seg.user})
        for step, run in (next(step_runs) for _ in seg.steps):
            call_id = f"call_{rng.getrandbits(48):012x}"
            index = str(len(messages))
            messages.append(_call(call_id, step.command, step.say))
            messages.append(
                {"role": "tool", "tool_call_id": call_id, "name": "bash", "content": tool_content(run.expert)}
            )
            alts, misses = _checked_candidates(step, run, call_id, f"{ident} ({task})", stats)
            if alts:
                alternatives[index] = alts
            if misses:
                near_misses[index] = misses
        messages.append({"role": "assistant", "content": summary})
    meta: dict[str, Any] = {"source": SOURCE, "id": ident, "task": task}
    if plan.failure is not None:
        meta["failure"] = plan.failure
    if alternatives:
        meta["alternatives"] = alternatives
    if near_misses:
        meta["near_misses"] = near_misses
    return Trajectory(
        messages=messages, tools=[BASH_TOOL], reward=0.0 if plan.failure else 1.0, meta=meta, fixture=plan.fixture
    )


def generate_with_stats(n: int, seed: int = 0) -> tuple[list[Trajectory], dict[str, Any]]:
    """:func:`generate` plus counters: alternatives or near misses dropped by the checks (with
    a line each under ``dropped``) and retries of planned failures that solved the task anyway."""
    names = sorted(FAMILIES)
    order = random.Random(f"{DOMAIN}-order-{seed}").sample(names, len(names))
    stats: dict[str, Any] = {"alternatives_dropped": 0, "near_misses_dropped": 0, "retries": 0, "dropped": []}
    out: list[Trajectory] = []
    for i in range(n):
        rng = random.Random(f"{DOMAIN}-{seed}-{i}")
        task = order[i % len(order)]
        fail = rng.random() < FAIL_RATE
        ident = f"{DOMAIN}-{seed}-{i}"
        for _ in range(20):
            traj = build_trajectory(FAMILIES[task](rng, fail), rng, ident, task, stats)
            if traj is not None:
                out.append(traj)
                break
            stats["retries"] += 1
        else:
            raise RuntimeError(f"{ident} ({task}): 20 planned failures in a row solved the task")
    return out, stats


def generate(n: int, seed: int = 0) -> list[Trajectory]:
    """``n`` terminal-domain trajectories, deterministic in ``seed`` (about 10 % failed, reward 0.0)."""
    return generate_with_stats(n, seed)[0]
