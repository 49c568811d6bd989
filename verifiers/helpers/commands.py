"""Extract the shell command an assistant action asks to run.

Sources, in order:

1. tool calls whose name is a shell tool (``bash``, ``shell``, ``run``, ...;
   case-insensitive) and whose arguments hold the command under one of the
   argument keys (``command``, ``cmd``, ...). A list value (an argv) is
   shell-quoted and joined. The command is kept as written, but for spaces,
   tabs and newlines at its ends: a carriage return is part of it, as the shell
   that runs it sees it. Several such calls become one script that runs each in
   a subshell of its own, in order (a ``cd`` or a variable of one call does not
   reach the next, as in a world that starts a fresh shell per call), and exits
   with the status of the last call that failed (0 when none did). When the
   action has tool calls but none of them is a shell call, there is no command
   (the content is not consulted);
2. with ``content="fenced"`` or ``"plain"``: fenced code blocks in the content
   labelled ``bash``/``sh``/``shell``/``console``/``zsh`` (else unlabelled
   ones), joined with newlines; ``$ `` prompts of ``console`` blocks are removed;
3. with ``content="plain"`` only: the whole content, stripped: a plain-text
   message *is* the command, as NL2Bash or tldr store commands (the exec
   verifier's default; the terminal domain keeps ``"fenced"``, where a text
   reply is an answer to the user, not a command).

>>> CommandExtractor().extract({"role": "assistant", "tool_calls": [
...     {"type": "function", "function": {"name": "bash", "arguments": '{"command": "ls -la"}'}}]})
'ls -la'
>>> CommandExtractor().extract({"role": "assistant", "content": "Run:\\n```bash\\nwc -l f\\n```"})
'wc -l f'
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from pivot_envs.types import Message

SHELL_TOOLS = ("bash", "shell", "sh", "run", "run_command", "run_shell_command", "run_bash", "execute_bash",
               "execute_command", "execute_shell", "exec", "terminal", "cmd", "command")
"""Default tool names treated as "run this shell command"."""

COMMAND_KEYS = ("command", "cmd", "script", "commands", "shell_command")
"""Default argument keys holding the command, in order of preference."""

CONTENT_MODES = ("none", "fenced", "plain")

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.DOTALL)
_SHELL_LANGS = {"bash", "sh", "shell", "console", "zsh", "shell-session", "shellsession"}


@dataclass
class CommandExtractor:
    """Find the shell command in an assistant message.

    Attributes:
        tools: tool names that run shell commands (compared case-insensitively).
        keys: argument keys that may hold the command, in order of preference.
        content: what to do with text content when there are no tool calls:
            ``"none"`` (ignore it), ``"fenced"`` (fenced shell blocks) or
            ``"plain"`` (fenced blocks, else the whole content).
    """

    tools: list[str] = field(default_factory=lambda: list(SHELL_TOOLS))
    keys: list[str] = field(default_factory=lambda: list(COMMAND_KEYS))
    content: str = "fenced"

    def __post_init__(self) -> None:
        if self.content not in CONTENT_MODES:
            raise ValueError(f"content must be one of {', '.join(CONTENT_MODES)}, got {self.content!r}")
        self._tools = {t.lower() for t in self.tools}

    def extract(self, message: Message) -> str | None:
        """The command ``message`` asks to run, or None when it asks for none."""
        calls = message.get("tool_calls") or []
        if calls:
            commands = [c for c in (self._from_call(call) for call in calls) if c is not None]
            return one_script(commands) if commands else None
        text = message.get("content")
        if not isinstance(text, str) or self.content == "none":
            return None
        fenced = fenced_commands(text)
        if fenced is not None:
            return fenced
        if self.content == "plain" and text.strip():
            return text.strip()
        return None

    def _from_call(self, call: Any) -> str | None:
        if not isinstance(call, dict):
            return None
        fn = call.get("function", call)
        if not isinstance(fn, dict) or str(fn.get("name", "")).lower() not in self._tools:
            return None
        args = fn.get("arguments", {})
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except json.JSONDecodeError:
                return None
        if isinstance(args, str):
            return args.strip(_ENDS) or None
        if not isinstance(args, dict):
            return None
        for key in self.keys:
            value = args.get(key)
            if isinstance(value, str) and value.strip(_ENDS):
                return value.strip(_ENDS)
            if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
                return shlex.join(value)
        return None


_ENDS = " \t\n"
"""What is stripped from a command's ends: what the shell itself ignores there (not a carriage return)."""


def one_script(commands: list[str]) -> str:
    """One command as it is; several as a script running each in its own subshell, in order, that exits with the
    status of the last one that failed (see the module docstring)."""
    if len(commands) == 1:
        return commands[0]
    parts = ["__pivot_rc=0"] + [f"(\n{command}\n) || __pivot_rc=$?" for command in commands]
    return "\n".join(parts + ["exit $__pivot_rc"])


def fenced_commands(text: str) -> str | None:
    """The shell fenced blocks of ``text`` joined by newlines (unlabelled blocks when no labelled one)."""
    labelled, unlabelled = [], []
    for lang, body in _FENCE.findall(text):
        lang = lang.lower()
        if lang in _SHELL_LANGS:
            labelled.append(_strip_prompts(body) if lang in ("console", "shell-session", "shellsession") else body)
        elif not lang:
            unlabelled.append(body)
    blocks = [b.strip() for b in (labelled or unlabelled) if b.strip()]
    return "\n".join(blocks) if blocks else None


def _strip_prompts(body: str) -> str:
    lines = [line[2:] for line in body.splitlines() if line.startswith("$ ")]
    return "\n".join(lines) if lines else body
