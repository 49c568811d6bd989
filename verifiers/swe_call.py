"""``swe_call``: a SWE-agent call judged by its content where that is cheap, not only by its tool.

The paper's SWE verifier (``tool_name`` with the ``swe`` alias categories) is right about *which* tool: another read
for a read, another search for a search. It was never meant to credit destroying the repository: ``bash rm -rf
./*`` is in the edit category, ``cat /etc/passwd`` in the read one, ``python -c "print('all tests passed')"`` in the
run one. ``swe_call`` keeps the categories and judges what each call does:

==============  =====================================================================================================
expert          the action passes when
==============  =====================================================================================================
an edit         an ``edit`` of the same lines (within ``line_slack``) whose replacement and replaced text are both
                at least ``similarity`` alike (rapidfuzz ``ratio`` / 100, whitespace collapsed), or any call
                (an ``edit`` elsewhere, ``sed -i``, a python one-liner) that leaves the repository as the expert's
                edit does (the world's digest, :meth:`~pivot_envs.worlds.World.digest`)
a read          a read (``open_file``, ``goto``, ``cat``, ``head``, ``sed -n``, ...) of the expert's file, every path of
                it inside the repository (``tool_name``'s target rule for the editor's reads)
a search        a search (``search_dir``, ``find_file``, ``grep``, ``find``, ...), every path inside the repository
a test run      ``run_tests``, the task's test command, a test runner (``pytest``, ``unittest``) or the script the
                expert ran; never ``python -c``
any other call  the same category, as ``tool_name``
==============  =====================================================================================================

A shell command is judged by all its programs (:mod:`~pivot_envs.verifiers.helpers.shell_programs`): one that writes or
destroys (``rm``, ``sed -i``, a redirection into a file) counts only where the world shows it leaves the repository as
the expert's call does (``rm reproduce.py`` for ``rm -f reproduce.py``); it never counts as a read, a search or a
test run. Executions run in the pivot's world (``world``, else the domain's), each in a fresh copy at the pivot.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from rapidfuzz import fuzz

from pivot_envs.types import Action, Pivot, VerifyResult, stable_hash
from pivot_envs.verifiers.base import Verifier, register_verifier
from pivot_envs.verifiers.helpers.call_targets import last_path
from pivot_envs.cache import LRUCache
from pivot_envs.verifiers.helpers.normalize import BadArguments, message_calls, parse_arguments
from pivot_envs.verifiers.helpers.pivot_worlds import PivotWorlds
from pivot_envs.verifiers.helpers.shell_programs import command_kind, command_paths, outside, programs
from pivot_envs.verifiers.tool_name import SWE_ALIASES, ToolNameVerifier
from pivot_envs.worlds import WorldError, WorldTask

EDITOR_KINDS = {name: kind for kind, names in SWE_ALIASES.items() for name in names if ":" not in name}
"""SWE-agent's editor tools by category (read, search, edit, run, submit)."""
TEST_RUNNERS = re.compile(r"^(?:pytest|py\.test|tox|nosetests)$|^-m$")
WORKDIR = "/testbed"
"""Where SWE-agent's repositories live (absolute paths under it are inside the repository)."""


def call_kind(name: str, arguments: dict[str, Any]) -> str:
    """A call's kind: the editor's category, or a ``bash`` command's (its programs')."""
    if name == "bash":
        command = arguments.get("command")
        return command_kind(command) if isinstance(command, str) else "other"
    return EDITOR_KINDS.get(name, name)


@register_verifier("swe_call", accepted_by="tool name")
@dataclass
class SweCallVerifier(Verifier):
    """A SWE-agent call judged by its category and content (see the module docstring)."""

    version = 2  # 2: an edit passes by similarity only over as many lines as the expert's

    similarity: float = 0.8
    """An edit elsewhere than the expert's passes when both its replacement and the text it replaces are at least
    this alike to the expert's (NeMo Gym's ``swe_pivot`` threshold)."""
    line_slack: int = 2
    """An edit's first and last lines may be this far from the expert's."""
    world: Any = None
    """The world edits and writes run in; ``None``: the pivot's domain world."""
    workdir: str = WORKDIR
    """The repository's folder as absolute paths name it."""

    _names: ToolNameVerifier = field(init=False, repr=False, compare=False)
    _worlds: PivotWorlds = field(init=False, repr=False, compare=False)
    _outcomes: Any = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not 0.0 < float(self.similarity) <= 1.0:
            raise ValueError(f"swe_call: similarity must be in (0, 1], got {self.similarity!r}")
        self._names = ToolNameVerifier(aliases="swe", same_target=True)
        self._worlds = PivotWorlds(self.world)
        self._outcomes = LRUCache(2048)

    def __getstate__(self) -> dict[str, Any]:
        return {"similarity": self.similarity, "line_slack": self.line_slack, "world": self.world,
                "workdir": self.workdir}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]  # unpickling: the config rebuilds the derived state

    # ------------------------------------------------------------------ verifying

    def verify(self, action: Action, pivot: Pivot) -> VerifyResult:
        mine, theirs = _one_call(action.message), _one_call(pivot.expert)
        if mine is None or theirs is None:
            return self._renamed(self._names.verify(action, pivot))
        expert_kind, kind = call_kind(*theirs), call_kind(*mine)
        try:
            if kind in ("write", "destroy") or expert_kind in ("edit", "write", "destroy"):
                return self._changes(action, pivot, theirs, mine, expert_kind, kind)
            if kind != expert_kind:
                return self._fail(f"a {kind} where the expert's call is a {expert_kind}")
            if expert_kind == "run":
                return self._run(pivot, theirs, mine)
            if mine[0] == "bash":
                return self._shell_look(pivot, theirs, mine, kind)
            return self._renamed(self._names.verify(action, pivot))
        except (WorldError, ValueError) as exc:
            return VerifyResult.failure(self.name, f"pivot {pivot.id}: world: {exc}")

    def _renamed(self, result: VerifyResult) -> VerifyResult:
        return VerifyResult(result.reward, result.passed, self.name, result.reason, result.error)

    def _fail(self, reason: str) -> VerifyResult:
        return VerifyResult(0.0, False, self.name, reason)

    def _pass(self, reason: str) -> VerifyResult:
        return VerifyResult(1.0, True, self.name, reason)

    # ------------------------------------------------------------------ edits and writes

    def _changes(self, action: Action, pivot: Pivot, theirs: tuple[str, dict], mine: tuple[str, dict],
                 expert_kind: str, kind: str) -> VerifyResult:
        """A call that changes the repository, or one where the expert's did: the same change, or a close edit."""
        if expert_kind not in ("edit", "write", "destroy"):
            return self._fail(f"a {kind} where the expert's call is a {expert_kind}: a command that writes or "
                              "destroys never counts as a read, a search or a test run")
        if theirs[0] == "edit" and mine[0] == "edit" and self._same_edit(theirs[1], mine[1]):
            return self._pass("the same edit as the expert's")
        if kind not in ("edit", "write", "destroy"):
            return self._fail(f"a {kind} where the expert changed the repository")
        expert, candidate = self._outcome(pivot, pivot.expert), self._outcome(pivot, action.message)
        if expert[0] == candidate[0]:
            return self._pass("leaves the repository as the expert's call does")
        if theirs[0] == "edit" and mine[0] == "edit":
            close = self._close_edit(pivot, theirs[1], mine[1])
            if close is not None:
                return close
        return self._fail(f"a {kind} that leaves another repository than the expert's {expert_kind}")

    def _same_edit(self, expert: dict[str, Any], mine: dict[str, Any]) -> bool:
        return (expert.get("start_line"), expert.get("end_line"), expert.get("replacement")) == \
            (mine.get("start_line"), mine.get("end_line"), mine.get("replacement"))

    def _close_edit(self, pivot: Pivot, expert: dict[str, Any], mine: dict[str, Any]) -> VerifyResult | None:
        """An edit of nearly the expert's lines with a nearly equal replacement and replaced text; None otherwise."""
        try:
            e_lines = (int(expert["start_line"]), int(expert["end_line"]))
            m_lines = (int(mine["start_line"]), int(mine["end_line"]))
        except (KeyError, TypeError, ValueError):
            return None
        if max(abs(e_lines[0] - m_lines[0]), abs(e_lines[1] - m_lines[1])) > self.line_slack or \
                e_lines[1] - e_lines[0] != m_lines[1] - m_lines[0]:
            return None  # another span: only its effect can tell (a wider edit that writes the same file passes so)
        new = _alike(str(expert.get("replacement", "")), str(mine.get("replacement", "")))
        text = self._file_at(pivot)
        if text is None:
            return None
        lines = text.split("\n")
        old = _alike("\n".join(lines[e_lines[0] - 1:e_lines[1]]), "\n".join(lines[m_lines[0] - 1:m_lines[1]]))
        if min(new, old) >= self.similarity:
            return self._pass(f"an edit of lines {m_lines[0]}-{m_lines[1]} close to the expert's (replacement "
                              f"{new:.2f}, replaced text {old:.2f} alike)")
        return self._fail(f"an edit of lines {m_lines[0]}-{m_lines[1]} unlike the expert's (replacement {new:.2f}, "
                          f"replaced text {old:.2f} alike; at least {self.similarity:g} each)")

    def _outcome(self, pivot: Pivot, message: dict[str, Any]) -> tuple[str, str]:
        """The repository's digest after ``message``'s calls at the pivot, and the open file's text before them."""
        spec = self._worlds.spec(pivot)
        if spec is None:
            raise ValueError(f"domain {pivot.domain!r} has no world to run the call in (give world=...)")
        key = stable_hash(PivotWorlds.key(spec), pivot.id, pivot.context, pivot.meta.get("world"),
                          json.dumps(message.get("tool_calls") or [], sort_keys=True))
        return self._outcomes.get_or_compute(key, lambda: self._run_in_world(spec, pivot, message))[0]

    def _run_in_world(self, spec: Any, pivot: Pivot, message: dict[str, Any]) -> tuple[str, str]:
        with self._worlds.using(spec) as world:
            world.at_pivot(WorldTask.from_pivot(pivot), pivot.context)
            path = last_path(pivot.context)
            files = getattr(world, "files", None)
            text = str(files().get(_relative(path or "", self.workdir), "")) if files is not None and path else ""
            world.execute(message)
            return world.digest(), text

    def _file_at(self, pivot: Pivot) -> str | None:
        """The open file's text at the pivot (before the expert's call), or None where no file is open."""
        if last_path(pivot.context) is None:
            return None
        return self._outcome(pivot, {"role": "assistant", "content": None, "tool_calls": []})[1]

    # ------------------------------------------------------------------ reads, searches and runs

    def _shell_look(self, pivot: Pivot, theirs: tuple[str, dict], mine: tuple[str, dict], kind: str) -> VerifyResult:
        """A ``bash`` read or search: every path inside the repository, and a read names the expert's file."""
        command = str(mine[1].get("command", ""))
        paths = command_paths(command)
        away = [p for p in paths if outside(p, self.workdir)]
        if away:
            return self._fail(f"a {kind} outside the repository ({away[0]})")
        if kind == "read":
            want = _target_file(pivot, theirs)
            if want and not any(_same_path(want, p, self.workdir) for p in paths):
                return self._fail(f"a read of {', '.join(paths) or 'no file'} where the expert read {want}")
        return self._pass(f"a {kind} of the repository, as the expert's call")

    def _run(self, pivot: Pivot, theirs: tuple[str, dict], mine: tuple[str, dict]) -> VerifyResult:
        """A test run: ``run_tests`` (or another run tool of the editor), the task's test command, a test runner, or
        the script the expert ran."""
        if mine[0] != "bash":
            return self._pass(f"runs the tests ({mine[0]})")
        command = str(mine[1].get("command", ""))
        ran = programs(command)
        if not ran:
            return self._fail("no program runs")
        test_command = str(((pivot.meta.get("world") or {}).get("config") or {}).get("test_command") or
                           "python run_tests.py")
        if " ".join(command.split()) == " ".join(test_command.split()) or any(
                TEST_RUNNERS.match(name) or (name == "python" and _test_module(args)) for name, args in ran):
            return self._pass("runs the tests")
        scripts = {_script(args) for name, args in ran if name == "python"}
        if not scripts or None in scripts:
            return self._fail("a python program given inline (-c), or another program, is no test run")
        allowed = {_script(test_command.split()[1:]), _expert_script(theirs)}
        shown = ", ".join(sorted(str(s) for s in scripts))
        if scripts <= allowed:
            return self._pass(f"runs {shown}, as the expert did")
        return self._fail(f"runs {shown}, not the tests or the expert's script")


def _one_call(message: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    calls = message_calls(message)
    if len(calls) != 1:
        return None
    args = parse_arguments(calls[0][1])
    return (calls[0][0], {} if isinstance(args, BadArguments) else args)


def _alike(a: str, b: str) -> float:
    return fuzz.ratio(" ".join(a.split()), " ".join(b.split())) / 100.0


def _relative(path: str, workdir: str) -> str:
    path = path.strip()
    if path.startswith(workdir.rstrip("/") + "/"):
        path = path[len(workdir.rstrip("/")) + 1:]
    while path.startswith("./"):
        path = path[2:]
    return path


def _same_path(want: str, got: str, workdir: str) -> bool:
    a, b = _relative(want, workdir), _relative(got, workdir)
    return a == b or a.endswith("/" + b) or b.endswith("/" + a)


def _target_file(pivot: Pivot, theirs: tuple[str, dict]) -> str | None:
    """The file the expert's read acts on: its ``path``, else the file open in the editor."""
    path = theirs[1].get("path") or theirs[1].get("file")
    return str(path) if isinstance(path, str) and path.strip() else last_path(pivot.context)


def _script(args: list[str]) -> str | None:
    """The script a ``python ARGS`` command runs (``None`` for ``-c``, ``-m`` or none)."""
    for arg in args:
        if arg in ("-c", "-m"):
            return None
        if not arg.startswith("-"):
            return _relative(arg, WORKDIR)
    return None


def _expert_script(theirs: tuple[str, dict]) -> str | None:
    """The script the expert's ``bash python SCRIPT`` call ran (``None`` for another call)."""
    ran = programs(str(theirs[1].get("command", ""))) if theirs[0] == "bash" else []
    return _script(ran[0][1]) if ran and ran[0][0] == "python" else None


def _test_module(args: list[str]) -> bool:
    return "-m" in args and args[args.index("-m") + 1:args.index("-m") + 2] in (["pytest"], ["unittest"])
