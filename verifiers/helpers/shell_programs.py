"""What a shell command does, told by every program of it: read, search, run, write or destroy.

A chain (``a && b``, ``a; b``, ``a | b``) is judged by all its programs, not the first: ``cat f && rm -rf ./*``
destroys. :func:`command_kind` gives the strongest kind among its programs, in this order:

* ``destroy``: ``rm``, ``rmdir``, ``shred``, ``truncate``, ``dd``, ``git clean`` / ``reset`` / ``checkout``,
  ``find ... -delete`` or ``-exec rm``;
* ``write``: a redirection into a file (``>``, ``>>``, not ``2>/dev/null``), ``sed -i``, ``tee``, ``touch``,
  ``mkdir``, ``cp``, ``mv``, ``patch``, ``chmod``, ``ln``, a ``python -c`` program that opens a file for writing;
* ``run``: ``python``, ``pytest``, ``tox``, ``make``, ``node``, ...;
* ``search``: ``grep``, ``rg``, ``find``, ...;
* ``read``: ``cat``, ``head``, ``tail``, ``sed -n`` (any ``sed`` without ``-i``), ``nl``, ``less``, ``ls``, ``wc``, ...;
* ``other``: anything else (``echo``, ``printf``: nothing of the repository).

:func:`command_paths` lists the paths a command names, to tell a read of the repository from a read elsewhere.
"""

from __future__ import annotations

import re
import shlex

DESTROY = frozenset({"rm", "rmdir", "shred", "truncate", "dd", "unlink", "srm", "wipe"})
WRITE = frozenset({"tee", "touch", "mkdir", "cp", "mv", "patch", "chmod", "chown", "ln", "install", "rsync"})
RUN = frozenset({"python", "pytest", "tox", "nosetests", "make", "node", "npm", "go", "cargo", "bash", "sh",
                 "ruby", "perl", "java", "unittest"})
SEARCH = frozenset({"grep", "egrep", "fgrep", "rg", "ag", "ack", "find", "locate", "git-grep"})
READ = frozenset({"cat", "head", "tail", "sed", "nl", "less", "more", "ls", "tree", "wc", "awk", "pwd", "cd", "file",
                  "stat", "diff", "sort", "uniq", "cut", "tr", "column", "xxd", "od", "git-diff", "git-show",
                  "git-log", "git-status"})
ORDER = ("destroy", "write", "run", "search", "read", "other")
"""Kinds from the strongest: a chain's kind is the strongest of its programs'."""

_OPERATORS = {"&&", "||", ";", "|", "&", "\n", ";;", "|&"}
_REDIRECTS = {">", ">>", "<", ">|", "&>", "&>>", ">&", "<<", "<<<"}
_SKIP = {"sudo", "env", "time", "nohup", "exec", "command", "builtin", "xargs"}
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_VERSIONED = re.compile(r"(python|pip|pytest|ipython|perl|ruby|php|node)[0-9.]*")
_WRITES_IN_PYTHON = re.compile(r"open\([^)]*,\s*['\"][wax+]|write_text|os\.(?:remove|unlink|rename|system)|shutil\.|"
                               r"\.unlink\(|rmtree")


def _tokens(command: str) -> list[str]:
    """Shell tokens, quotes removed, operators and redirections as tokens of their own (newlines are ``;``)."""
    lexer = shlex.shlex(command.replace("\n", " ; "), posix=True, punctuation_chars=";&|<>")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        return list(lexer)
    except ValueError:
        return command.split()


def _segments(command: str) -> tuple[list[list[str]], list[str]]:
    """The simple commands of ``command`` (their words, redirections left out) and the files it redirects output
    into (``/dev/null`` and descriptor copies left out)."""
    segments: list[list[str]] = [[]]
    targets: list[str] = []
    tokens = _tokens(command)
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token in _OPERATORS:
            segments.append([])
        elif token in _REDIRECTS or (token.isdigit() and i + 1 < len(tokens) and tokens[i + 1] in _REDIRECTS):
            if token.isdigit():
                i += 1
                token = tokens[i]
            target = tokens[i + 1] if i + 1 < len(tokens) else ""
            if token.startswith((">", "&>")) and target and target != "/dev/null" and not target.startswith("&") \
                    and not target.isdigit():
                targets.append(target)
            i += 1
        else:
            segments[-1].append(token)
        i += 1
    return [seg for seg in segments if seg], targets


def _program(words: list[str]) -> tuple[str, list[str]]:
    """The program of a simple command and its arguments (``VAR=x``, ``sudo``, ``env`` skipped; ``git grep`` as
    ``git-grep``; versioned interpreters without their version)."""
    while words and (words[0] in _SKIP or _ASSIGNMENT.match(words[0])):
        words = words[1:]
    if not words:
        return "", []
    name = words[0].rsplit("/", 1)[-1]
    if name == "git" and len(words) > 1:
        return "git-" + words[1], words[2:]
    versioned = _VERSIONED.fullmatch(name)
    return (versioned.group(1) if versioned else name), words[1:]


def program_kind(name: str, args: list[str]) -> str:
    """The kind of one simple command (see the module docstring)."""
    if name in DESTROY or name in ("git-clean", "git-reset", "git-checkout", "git-rm"):
        return "destroy"
    if name == "find" and any(a in ("-delete", "-exec", "-execdir") for a in args):
        return "destroy" if "-delete" in args or "rm" in args else "write"
    if name == "sed":
        return "write" if any(a.startswith("-i") or a == "--in-place" for a in args) else "read"
    if name == "python" and "-c" in args and _WRITES_IN_PYTHON.search(" ".join(args)):
        return "write"
    for kind, names in (("write", WRITE), ("run", RUN), ("search", SEARCH), ("read", READ)):
        if name in names:
            return kind
    return "other"


def programs(command: str) -> list[tuple[str, list[str]]]:
    """Every simple command of ``command``: ``(program, arguments)``."""
    out = []
    for words in _segments(command)[0]:
        name, args = _program(words)
        if name:
            out.append((name, args))
    return out


def command_kind(command: str) -> str:
    """The kind of a whole command: the strongest kind of its programs, ``write`` where it redirects into a file."""
    kinds = {program_kind(name, args) for name, args in programs(command)}
    if _segments(command)[1]:
        kinds.add("write")
    return next((k for k in ORDER if k in kinds), "other")


def command_paths(command: str) -> list[str]:
    """The arguments of ``command`` that name paths (with a ``/`` or a file extension, not options), and the files
    it redirects output into."""
    out = []
    for name, args in programs(command):
        operands = [a for a in args if not a.startswith("-")]
        if name in ("sed", "awk", "grep", "egrep", "rg") and operands and not {"-e", "-f"} & set(args):
            operands = operands[1:]  # the script or pattern, not a path
        out += [a for a in operands if "/" in a or re.search(r"\.\w{1,5}$", a)]
    return out + _segments(command)[1]


def outside(path: str, workdir: str) -> bool:
    """Whether ``path`` (as a command names it, from ``workdir``) leaves the work directory."""
    if path.startswith("~"):
        return True
    if path.startswith("/"):
        return not (path == workdir or path.startswith(workdir.rstrip("/") + "/"))
    depth = 0
    for part in path.split("/"):
        if part == "..":
            depth -= 1
            if depth < 0:
                return True
        elif part not in ("", "."):
            depth += 1
    return False
