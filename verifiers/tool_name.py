"""``tool_name``: the same tool(s), by name or by alias category (the paper's SWE verifier).

Each tool call of a turn is mapped to a *key*, and the action passes when the
multiset of its keys equals the expert's (call order and arguments do not
matter). The key of a call is:

- for a shell tool (``shell_tools``, default ``bash``) with ``classify_shell``
  on: ``"<tool>:<word>"``, ``word`` being the command's program name (path and
  version digits of common interpreters stripped: ``/usr/bin/python3.11`` -> ``python``; leading
  ``VAR=x``, ``sudo``, ``env``, ``time`` and ``cd <dir> &&`` are skipped), then
  mapped to its category when ``aliases`` lists that ``"<tool>:<word>"``.
  So ``bash: cat a.py`` and ``open_file`` are both ``read`` under the SWE
  map, and two unclassified commands match when their program is the same;
- for any other tool: its category when ``aliases`` lists it, else its name.

``aliases`` maps a category to tool names (and ``"bash:<word>"`` entries),
e.g. ``{"read": ["open", "open_file", "view", "bash:cat"]}``, or is the string
``"swe"`` for :data:`SWE_ALIASES`. When the expert made no call, the action
passes when it makes none either. With ``same_target`` a one-call turn must also
act on what the expert's call acted on (the same file, overlapping lines, a search
for the same words: :mod:`~pivot_envs.verifiers.helpers.call_targets`).
"""

from __future__ import annotations

import re
import shlex
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from pivot_envs.types import Action, Pivot, VerifyResult
from pivot_envs.verifiers.base import Verifier, register_verifier
from pivot_envs.verifiers.helpers.call_targets import call_targets, last_path, target_difference
from pivot_envs.verifiers.compose import PicklesByConfig
from pivot_envs.verifiers.helpers.normalize import BadArguments, PivotCache, message_calls, parse_arguments

SWE_ALIASES: dict[str, list[str]] = {
    "read": [
        "open", "open_file", "goto", "scroll_down", "scroll_up", "view", "view_file", "read_file",
        "bash:cat", "bash:head", "bash:tail", "bash:less", "bash:more", "bash:nl", "bash:ls", "bash:tree",
        "bash:pwd", "bash:cd", "bash:wc",
    ],
    "search": [
        "search_dir", "search_file", "find_file", "grep", "find",
        "bash:grep", "bash:egrep", "bash:rg", "bash:ag", "bash:find", "bash:locate", "bash:git-grep",
    ],
    "edit": [
        "edit", "create", "insert", "str_replace", "write_file", "append",
        "bash:touch", "bash:mkdir", "bash:cp", "bash:mv", "bash:rm", "bash:patch", "bash:tee",
    ],
    "run": [
        "run_tests", "run", "execute", "python",
        "bash:python", "bash:pytest", "bash:tox", "bash:nosetests", "bash:make", "bash:node", "bash:npm",
        "bash:go", "bash:cargo", "bash:bash", "bash:sh",
    ],
    "submit": ["submit", "finish", "bash:submit"],
}
"""The default alias map for SWE agents (SWE-agent's tools and common shell programs)."""

PRESETS: dict[str, dict[str, list[str]]] = {"swe": SWE_ALIASES}
"""Named alias maps that ``aliases`` may name."""

_SKIP_WORDS = {"sudo", "env", "time", "nohup", "exec", "command", "builtin"}
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_SEPARATORS = re.compile(r"&&|\|\||;|\n")
_VERSIONED = re.compile(r"(python|pip|pytest|ipython|perl|ruby|php|lua|node|gcc|g\+\+|clang|java)[0-9.]+")


def command_word(command: str) -> str:
    """The program name of a shell command line (see the module docstring); '' when none."""
    segments = [s.strip() for s in _SEPARATORS.split(command) if s.strip()]
    for k, segment in enumerate(segments):
        words = _split(segment)
        while words and (words[0] in _SKIP_WORDS or _ASSIGNMENT.match(words[0])):
            words.pop(0)
        if not words:
            continue
        word = words[0].rsplit("/", 1)[-1]
        if word == "cd" and k + 1 < len(segments):
            continue
        if word == "git" and len(words) > 1 and words[1] == "grep":
            return "git-grep"
        versioned = _VERSIONED.fullmatch(word)
        return versioned.group(1) if versioned else word
    return ""


def _split(segment: str) -> list[str]:
    try:
        return shlex.split(segment, comments=True)
    except ValueError:
        return segment.split()


@register_verifier("tool_name", accepted_by="tool name")
@dataclass
class ToolNameVerifier(PicklesByConfig, Verifier):
    """Same multiset of tool names or alias categories (see the module docstring)."""

    aliases: dict[str, list[str]] | str | None = None
    """Category -> tool names (and ``"bash:<word>"`` entries), a preset name (``"swe"``), or None (exact names)."""
    classify_shell: bool = True
    """Key shell-tool calls by their command's program name (``bash:cat``)."""
    shell_tools: list[str] = field(default_factory=lambda: ["bash"])
    """Tool names whose calls run a shell command."""
    shell_argument: str = "command"
    """The argument holding the command line of a shell-tool call."""
    same_target: bool = False
    """Also require a one-call turn to act on what the expert's call acted on: the same file, overlapping lines,
    a search for the same words (:mod:`pivot_envs.verifiers.helpers.call_targets`)."""

    _category: dict[str, str] = field(init=False, repr=False, compare=False)
    _cache: PivotCache = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        aliases = self.aliases
        if isinstance(aliases, str):
            if aliases not in PRESETS:
                raise ValueError(f"aliases: unknown preset {aliases!r}; known: {', '.join(sorted(PRESETS))}")
            aliases = PRESETS[aliases]
        self._category = {}
        for category, names in (aliases or {}).items():
            if isinstance(names, str) or not isinstance(names, list):
                raise ValueError(f"aliases[{category!r}] must be a list of tool names, got {names!r}")
            for name in names:
                other = self._category.setdefault(str(name), str(category))
                if other != category:
                    raise ValueError(f"aliases: {name!r} is listed under both {other!r} and {category!r}")
        self._cache = PivotCache()

    def key(self, name: str, arguments: Any) -> str:
        """The comparison key of one call (its category, shell program or name)."""
        if self.classify_shell and name in self.shell_tools:
            args = parse_arguments(arguments)
            command = "" if isinstance(args, BadArguments) else args.get(self.shell_argument)
            if isinstance(command, str):
                keyed = f"{name}:{command_word(command)}"
                return self._category.get(keyed, keyed)
        return self._category.get(name, name)

    def _target_difference(self, pivot: Pivot, action: dict) -> str | None:
        """How the action's one call acts on something else than the expert's one call (None: the same, or not
        one call on each side)."""
        expert_calls, action_calls = message_calls(pivot.expert), message_calls(action)
        if len(expert_calls) != 1 or len(action_calls) != 1:
            return None
        if self.classify_shell and (expert_calls[0][0] in self.shell_tools or action_calls[0][0] in self.shell_tools):
            return None  # a shell call is keyed by its program
        want, got = parse_arguments(expert_calls[0][1]), parse_arguments(action_calls[0][1])
        if isinstance(want, BadArguments) or isinstance(got, BadArguments):
            return None
        return target_difference(call_targets(want), call_targets(got), expert_calls[0][0] == action_calls[0][0],
                                 last_path(pivot.context))

    def _keys(self, message: dict) -> Counter:
        return Counter(self.key(name, raw) for name, raw in message_calls(message))

    def _expert_keys(self, pivot: Pivot) -> Counter:
        return self._keys(pivot.expert)

    def verify(self, action: Action, pivot: Pivot) -> VerifyResult:
        expected = self._cache.get(pivot, self._expert_keys)
        got = self._keys(action.message)
        if got == expected:
            what = ", ".join(sorted(expected.elements())) or "no tool call"
            differs = self._target_difference(pivot, action.message) if self.same_target else None
            if differs:
                return VerifyResult(0.0, False, self.name, f"same tools: [{what}], but {differs}")
            return VerifyResult(1.0, True, self.name, f"same tools: [{what}]" + (" on the same target" if self.same_target else ""))
        return VerifyResult(
            0.0, False, self.name, f"tools differ: expected [{', '.join(sorted(expected.elements()))}], "
            f"got [{', '.join(sorted(got.elements()))}]"
        )
