"""A shell command in a canonical spelling that keeps its meaning: the ``shell_words`` normaliser.

Two commands with the same canonical spelling run the same program with the same arguments, so a
similarity stage may accept them without running anything (the terminal cascade's cheap accept):

* runs of spaces and tabs between words become one space, and the ends are stripped;
* a quoted part whose text has no character the shell treats specially is written bare, and any other
  quoted part is single-quoted (``grep "ERROR" f``, ``grep 'ERROR' f`` and ``grep ERROR f`` are one spelling;
  ``"*.log"`` and ``'*.log'`` are one spelling, ``*.log`` bare is another: the shell expands it);
* a double-quoted part with ``$``, a backquote, ``\\`` or ``!`` is kept as it is (it expands, a single-quoted
  one does not).

Nothing else is rewritten: options keep their order and grouping (``tar -czf`` is not ``tar -cfz``), and
operators keep their spacing (``2>/dev/null`` is not ``2 > /dev/null``). A command with an unbalanced quote
comes back stripped.

>>> shell_words("grep  -rn \\"ERROR\\"   logs ")
'grep -rn ERROR logs'
>>> shell_words("find . -name \\"*.log\\"") == shell_words("find . -name '*.log'") != shell_words("find . -name *.log")
True
"""

from __future__ import annotations

import re

_SAFE = re.compile(r"[A-Za-z0-9_./,:@%+=^-]*")
_EXPANDS_IN_DOUBLE = set("$`\\!")


def _canonical_quoted(text: str) -> str:
    if _SAFE.fullmatch(text) and text:
        return text
    return "'" + text.replace("'", "'\\''") + "'"


def _read_quoted(command: str, i: int) -> tuple[str, int] | None:
    """The canonical spelling of the quoted part starting at ``command[i]`` and the index after it."""
    quote = command[i]
    end = command.find(quote, i + 1)
    if quote == '"':
        while end != -1 and command[end - 1] == "\\":  # an escaped quote inside double quotes
            end = command.find(quote, end + 1)
    if end == -1:
        return None
    text = command[i + 1:end]
    if quote == '"' and _EXPANDS_IN_DOUBLE & set(text):
        return command[i:end + 1], end + 1
    return _canonical_quoted(text), end + 1


def shell_words(command: str) -> str:
    """The canonical spelling of ``command`` (see the module docstring)."""
    out: list[str] = []
    i, n = 0, len(command)
    pending_space = False
    while i < n:
        ch = command[i]
        if ch in " \t":
            pending_space = bool(out)
            i += 1
            continue
        if pending_space:
            out.append(" ")
            pending_space = False
        if ch in "'\"":
            quoted = _read_quoted(command, i)
            if quoted is None:
                return command.strip()
            part, i = quoted
            out.append(part)
        elif ch == "\\" and i + 1 < n:
            out.append(command[i:i + 2])
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)
