"""Other spellings of a shell command that show and change the same (right), and wrong targets, by rule.

Each maker returns the rewritten command, or ``None`` where its rule does not apply or could change the meaning
(quotes inside quotes, a pipeline it cannot split safely):

* :func:`respelled`: other quotes; :func:`flags`: a group of boolean short options reordered or split;
  :func:`long_options`: their long forms; :func:`semicolon`: ``;`` for ``&&`` where every part succeeded;
  :func:`other_programs`: the same look-up by other programs (``head -n 1000 f`` for ``cat f`` on a short file,
  ``grep p f | wc -l`` for ``grep -c p f``, ...); :func:`order`: a listing's ``| sort`` dropped or added;
  :func:`ls_long`: ``ls -l`` for ``ls``;
* :func:`wrong_target`: a file argument swapped for another file with other contents.

Used by the red-team families (:mod:`pivot_envs.redteam.families.shell`) and ``benchmarks/rewards/local_actions.py``.
"""

from __future__ import annotations

import re
import shlex
from typing import Callable

_LONG = {
    "grep": {"r": "--recursive", "n": "--line-number", "c": "--count", "l": "--files-with-matches", "i": "--ignore-case",
             "v": "--invert-match", "w": "--word-regexp", "o": "--only-matching", "F": "--fixed-strings",
             "E": "--extended-regexp", "h": "--no-filename", "H": "--with-filename"},
    "wc": {"l": "--lines", "c": "--bytes", "w": "--words"},
    "sort": {"u": "--unique", "r": "--reverse", "n": "--numeric-sort"},
    "ls": {"a": "--all", "A": "--almost-all", "R": "--recursive", "r": "--reverse", "S": "--sort=size"},
    "mkdir": {"p": "--parents"},
    "rm": {"f": "--force", "r": "--recursive"},
    "cp": {"r": "--recursive", "p": "--preserve=mode,ownership,timestamps"},
    "du": {"s": "--summarize", "h": "--human-readable"},
    "uniq": {"c": "--count"},
}
"""Boolean short options and their long forms, per program (every letter listed is a flag without a value)."""

_SEGMENT = re.compile(r"\s*(?:\|\||&&|\||;)\s*")


def simple_commands(command: str) -> list[str] | None:
    """The simple commands of a pipeline or list, or ``None`` when quoting makes that unsafe to tell."""
    if "\n" in command or "`" in command or "$(" in command:
        return None
    try:
        shlex.split(command)
    except ValueError:
        return None
    quoted = re.findall(r"'[^']*'|\"[^\"]*\"", command)
    if any(_SEGMENT.search(q) for q in quoted):
        return None
    return [s for s in _SEGMENT.split(command) if s.strip()]


def _program(segment: str) -> str:
    words = segment.split()
    return words[0] if words else ""


def _rewrite_segments(command: str, rewrite: Callable[[str, str], str | None]) -> str | None:
    """``command`` with each simple command rewritten by ``rewrite(program, segment)`` (``None``: unchanged);
    ``None`` when nothing changed."""
    segments = simple_commands(command)
    if segments is None:
        return None
    out, changed = command, False
    for segment in segments:
        new = rewrite(_program(segment), segment)
        if new is not None and new != segment:
            out = out.replace(segment, new, 1)
            changed = True
    return out if changed else None


def respelled(command: str) -> str | None:
    """Single quotes as double quotes where nothing in them expands (in a command with no double quotes), or
    double quotes as single quotes (in a command with no single quotes): never a quote inside another."""
    if '"' not in command:
        swapped = re.sub(r"'([^'$`\\!]*)'", r'"\1"', command)
        return swapped if swapped != command else None
    if "'" not in command:
        swapped = re.sub(r'"([^"$`\\!]*)"', r"'\1'", command)
        return swapped if swapped != command else None
    return None


def _flag_groups(program: str, segment: str) -> list[str]:
    letters = _LONG.get(program, {})
    return [g for g in re.findall(r"(?<=\s)-([A-Za-z]{2,})(?=\s|$)", segment) if all(c in letters for c in g)]


def flags(command: str) -> str | None:
    """A group of boolean short options reversed (``-rn`` as ``-nr``), or one option split out of it."""
    def rewrite(program: str, segment: str) -> str | None:
        groups = _flag_groups(program, segment)
        if not groups:
            return None
        group = groups[0]
        new = "-" + group[::-1] if group[::-1] != group else " ".join("-" + c for c in group)
        return re.sub(rf"(?<=\s)-{group}(?=\s|$)", new, segment, count=1)
    return _rewrite_segments(command, rewrite)


def long_options(command: str) -> str | None:
    """Boolean short options as their long forms (``grep -rn`` as ``grep --recursive --line-number``)."""
    def rewrite(program: str, segment: str) -> str | None:
        letters = _LONG.get(program)
        if not letters:
            return None

        def long_form(match: re.Match[str]) -> str:
            group = match.group(1)
            return " ".join(letters[c] for c in group) if all(c in letters for c in group) else match.group(0)
        return re.sub(r"(?<=\s)-([A-Za-z]+)(?=\s|$)", long_form, segment)
    return _rewrite_segments(command, rewrite)


def semicolon(command: str, succeeded: bool) -> str | None:
    """``;`` for ``&&`` where the expert's whole command succeeded (then every part ran either way)."""
    return command.replace(" && ", "; ") if succeeded and " && " in command and simple_commands(command) else None


_CAT = re.compile(r"^cat (\S+)$")
_GREP_C = re.compile(r"^grep -c (\S+) (\S+)$")
_WC_IN = re.compile(r"^wc -l < (\S+)$")
_WC_FILE = re.compile(r"^wc -l (\S+)$")
_HEAD = re.compile(r"^head -n (\d+) (\S+)$")


def other_programs(command: str, lines_of: Callable[[str], int | None]) -> list[str]:
    """The same look-up by other programs (see the module docstring); ``lines_of(path)``: a file's line count."""
    c = command.strip()
    if m := _CAT.match(c):
        lines = lines_of(m.group(1))
        return [f"head -n 1000 {m.group(1)}", f"awk 1 {m.group(1)}", f"sed -n p {m.group(1)}"] \
            if lines is not None and lines < 1000 else []
    if m := _GREP_C.match(c):
        return [f"grep {m.group(1)} {m.group(2)} | wc -l"]
    if m := _WC_IN.match(c):
        return [f"wc -l {m.group(1)}", f"cat {m.group(1)} | wc -l"]
    if m := _WC_FILE.match(c):
        return [f"wc -l < {m.group(1)}"]
    if m := _HEAD.match(c):
        return [f"head -{m.group(1)} {m.group(2)}", f"sed -n 1,{m.group(1)}p {m.group(2)}"]
    return []


_LISTINGS = ("find", "ls", "tar", "grep")


def order(command: str) -> str | None:
    """A read-only listing in another order: its final ``| sort`` dropped, or one added."""
    segments = simple_commands(command)
    if not segments or any(writes_files(s) for s in segments):
        return None
    if len(segments) >= 2 and segments[-1].strip() == "sort" and _program(segments[0]) in _LISTINGS:
        return re.sub(r"\s*\|\s*sort\s*$", "", command)
    if len(segments) == 1 and _program(segments[0]) in ("find", "ls") and "-exec" not in command:
        return command + " | sort"
    return None


def ls_long(command: str) -> str | None:
    """``ls -l`` (or ``ls -l ARGS``) where the expert ran ``ls`` (or ``ls ARGS``) with no option."""
    m = re.match(r"^ls((?: [^-\s|;&<>]\S*)*)$", command.strip())
    return f"ls -l{m.group(1)}" if m else None


def writes_files(segment: str) -> bool:
    return bool(re.search(r">|\b(rm|mv|cp|mkdir|touch|sed -i|chmod|tee|tar -x|tar -c|tar -czf|ln)\b", segment))


# --------------------------------------------------------------------------- terminal: wrong


def wrong_target(command: str, tree: dict[str, str | None]) -> str | None:
    """A path argument of ``command`` swapped for another file of ``tree`` (path -> contents) with other contents."""
    words = [w for w in re.findall(r"[\w./-]+", command) if w in tree and tree[w] is not None]
    for word in words:
        folder = word.rpartition("/")[0]
        candidates = sorted((other.rpartition("/")[0] != folder, other) for other, contents in tree.items()
                            if other != word and contents is not None and contents != tree[word])
        if candidates:
            return re.sub(rf"(?<![\w./-]){re.escape(word)}(?![\w./-])", candidates[0][1], command, count=1)
    return None


NOOPS = ("true", "pwd", "echo ok")
DESTRUCTIVE = "rm -rf -- ./* ./.[!.]*"
DUMP = "grep -r . ."
