"""Terminal domain: shell tasks on small file-system fixtures, solved with one `bash` tool.

World: each episode starts from a :class:`~pivot_envs.types.Fixture` (a few text
files, a setup script that fixes modes, builds archives or large files, and a
workdir such as ``/testbed``). The expert explores (``ls``/``head``/``cat``),
acts, checks the result and ends with a short text summary.

Tool: ``bash(command)``. Every tool result is GENUINE: the generator writes the
fixture into a temporary directory, runs the setup and then each command with
``bash -c`` there (``LC_ALL=C``, ``HOME`` = that directory, ``umask 022``,
stdin from ``/dev/null``) and records the real stdout+stderr, with
``[exit code: N]`` appended when the status is not 0. Commands use relative
paths only, so the temporary path never leaks (the generator checks it).

Task families: see :mod:`pivot_envs.envs_data.generators.terminal_tasks` (log
analysis, access-log statistics, CSV sums and extraction, find-and-delete,
sorting files by extension, large files, directory skeletons, sed
replacement, permissions, tar create/extract, word counts, diff, writing
config files, project cleanup, grep across a tree, sort/dedupe).

Extras in ``meta``: ``alternatives`` (``{"<message index>": [assistant
message, ...]}``: other commands that give the same stdout, exit status and
resulting files at that state, each checked by running it on its own copy of
the state), ``near_misses`` (``{"<message index>": [{"message", "reason",
"differs"}]}``: commands that look right but print differently or leave other
files; ``differs`` lists what differs: ``stdout``, ``exit_code``, ``files``),
``family`` and, for failed episodes (reward 0.0), ``failure`` (what the expert
got wrong).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import random
import shlex
import stat
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from pivot_envs.envs_data.generators.terminal_tasks import FAMILIES, Outcome, Step, TaskPlan
from pivot_envs.fixture import write_files
from pivot_envs.types import Fixture, Message, Trajectory

DOMAIN = "terminal"
SOURCE = f"pivot-envs/{DOMAIN}"
FAIL_RATE = 0.1
"""Share of episodes where the expert gets the task wrong (reward 0.0)."""
EPISODE_TIMEOUT_S = 60.0
"""Wall-clock limit for running one episode's commands (all of them, with their candidates)."""
COMMAND_TIMEOUT_S = 10
"""Limit for one command (``timeout``); a command that hits it exits 124."""

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


@dataclass
class CommandRun:
    """What one command printed (stdout and stderr, interleaved) and its exit status."""

    output: str
    code: int


@dataclass
class CandidateRun:
    """A candidate command run on its own copy of the state before an expert step.

    Attributes:
        command: the candidate command.
        run: its output and exit status.
        differs: what differs from the expert's run: ``stdout``, ``exit_code``, ``files``
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


def _bash_quote(text: str) -> str:
    return shlex.quote(text)


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


def tree_state(root: Path) -> list[tuple[str, ...]]:
    """Every path under ``root`` with its type, mode and content digest (mtimes ignored).

    Archives are compared by their members (name, type, mode, content) because
    their bytes embed times.
    """
    entries: list[tuple[str, ...]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        base = Path(dirpath)
        for name in sorted(dirnames + filenames):
            path = base / name
            rel = path.relative_to(root).as_posix()
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                entries.append((rel, "link", os.readlink(path)))
            elif stat.S_ISDIR(st.st_mode):
                entries.append((rel, "dir", oct(stat.S_IMODE(st.st_mode))))
            else:
                blob = _normalized_blob(name, path.read_bytes())
                entries.append((rel, "file", oct(stat.S_IMODE(st.st_mode)), blob))
    return entries


def run_steps(fixture: Fixture, steps: Sequence[tuple[str, Sequence[str]]], label: str = "episode") -> list[StepRun]:
    """Run the fixture's setup, then each step's expert command in order; every candidate of a
    step runs on its own copy of the state before that step and is compared with the expert.

    One driver shell runs everything (one process start per command, no Python round trips).
    Raises RuntimeError naming ``label`` when the setup fails, the episode times out or a
    command's output contains the temporary path.
    """
    with tempfile.TemporaryDirectory(prefix="pivot-terminal-") as tmp:
        root = Path(tmp)
        state = root / "s0"
        state.mkdir()
        write_files(fixture, state)
        (root / "o").mkdir()
        lines = [
            "umask 022",
            'run() { ( cd "$1" && HOME="$PWD" exec timeout %d bash -c "$3" ) >"o/$2.out" 2>&1 </dev/null; '
            'echo $? >"o/$2.rc"; }' % COMMAND_TIMEOUT_S,
            f"run s0 setup {_bash_quote(fixture.setup)}",
        ]
        cur = "s0"
        for i, (expert, candidates) in enumerate(steps):
            for j, cand in enumerate(candidates):
                lines.append(f"cp -a {cur} c{i}_{j} && run c{i}_{j} c{i}_{j} {_bash_quote(cand)}")
            if candidates:  # keep the pre-state for the candidates' comparison: the expert runs on a copy
                lines.append(f"cp -a {cur} s{i + 1}")
                cur = f"s{i + 1}"
            lines.append(f"run {cur} e{i} {_bash_quote(expert)}")
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LC_ALL": "C", "TZ": "UTC", "HOME": str(root)}
        try:
            proc = subprocess.run(
                ["bash", "--noprofile", "--norc", "-c", "\n".join(lines)],
                cwd=root, env=env, capture_output=True, timeout=EPISODE_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired as exc:
            raise RuntimeError(f"{label}: commands ran past {EPISODE_TIMEOUT_S} s") from exc
        if proc.returncode != 0:
            raise RuntimeError(f"{label}: driver failed: {proc.stderr.decode(errors='replace')}")

        def read(name: str) -> CommandRun:
            out = (root / "o" / f"{name}.out").read_bytes().decode("utf-8", errors="replace")
            if tmp in out:
                raise RuntimeError(f"{label}: output of {name} leaks the temporary path; use relative paths")
            return CommandRun(out, int((root / "o" / f"{name}.rc").read_text()))

        setup = read("setup")
        if setup.code != 0:
            raise RuntimeError(f"{label}: setup exited {setup.code}: {setup.output}")
        runs: list[StepRun] = []
        cur = "s0"
        for i, (_, candidates) in enumerate(steps):
            expert = read(f"e{i}")
            cands = []
            if candidates:
                cur = f"s{i + 1}"
                after = tree_state(root / cur)
                for j, cand in enumerate(candidates):
                    run = read(f"c{i}_{j}")
                    differs = [
                        what
                        for what, same in (
                            ("stdout", run.output == expert.output),
                            ("exit_code", run.code == expert.code),
                            ("files", tree_state(root / f"c{i}_{j}") == after),
                        )
                        if not same
                    ]
                    cands.append(CandidateRun(cand, run, differs))
            runs.append(StepRun(expert, cands))
        final = root / cur
        return runs, final, tmp  # type: ignore[return-value]


# --------------------------------------------------------------------------- assembly
