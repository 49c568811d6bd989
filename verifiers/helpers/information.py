"""Does a command's output carry the information another command's output carried?

The terminal verifier's rule for look-ups (``exec`` with ``output="information"``): the agent at a pivot
needs what the expert's command *showed*, not its layout. Two outputs are compared as sets of
**information units**:

* an output is cut into tokens at whitespace and at the separators ``, ; : ( ) [ ] { } < > " ' = |``
  (``config/a.ini:2:host = x`` gives ``config/a.ini``, ``2``, ``host``, ``x``); a token loses a leading
  ``./``, the work directory's prefix, a leading ``+``/``-`` (diff markers) and a trailing ``/``, ``*`` or
  ``@`` (``ls -F`` markers);
* a unit that the command line itself holds tells nothing new (``wc -l f`` prints ``3 f``: ``f`` was
  given, ``3`` is the information), so each side's units lose its own command's tokens;
* the candidate's path tokens also count by every suffix (``logs/a.log`` gives ``a.log``), so a listing
  made from another directory or with another prefix shows the same names.

An expert path the candidate shows as a name under its folder's header (``ls -R``) is carried too.

The candidate **carries** the expert's information when every expert unit is among its units: ``ls -l``
carries what ``ls`` showed, ``tar -tzf a`` what ``tar -tzf a | sort`` showed, ``wc -l f`` what
``wc -l < f`` showed, ``grep p f | wc -l`` what ``grep -c p f`` showed. It is a **dump** when its output is
many times the expert's (:data:`DUMP_LINES`, :data:`DUMP_CHARS`: ``cat *`` for ``grep x f``) or names the
whole work tree where the expert's named a part of it (:data:`WHOLE_TREE`: ``find .`` or ``ls -R`` for ``ls`` or
``find . -name '*.log'``; trees of two files and more). A no-op (``true``, ``pwd``, ``echo ok``) carries none of a
non-empty output. An output that does not depend on the work tree, where the expert's does, is **typed in**
(:func:`typed_in`: ``exec`` runs both commands once more on an emptied tree; what the candidate prints there too
does not count): ``echo {0..12}`` where the expert counted, the expert's output hard-coded or obfuscated.

Exit statuses (:func:`status_difference`): where the expert succeeded (0) the candidate must succeed (exit 1 with
output and nothing on stderr is ``grep``'s and ``diff``'s "found nothing", not a failure); where
the expert failed without printing anything (an error, a negative test) the candidate must fail too; where
the expert failed *and* printed (``grep -c`` finding 0, ``diff`` finding differences) the output decides.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Sequence

_SEPARATORS = re.compile(r"[\s,;:()\[\]{}<>\"'=|]+")
_TRAILING_MARKS = "/*@"

DUMP_LINES = (4, 8)
"""A candidate output is a dump past ``max(4 x the expert's lines, the expert's lines + 8)`` lines."""

DUMP_CHARS = (16, 2000)
"""... or past ``max(16 x the expert's characters, the expert's characters + 2000)`` characters (``ls -l``
where the expert ran ``ls`` is about 8 x; a listing of the whole tree is more)."""

DUMP_UNITS = (4, 20)
"""... or with more than ``4 x the expert's units + 20`` distinct units: the information budget (``ls -l`` adds a
size or two per name where the expert ran ``ls``; ``ls -la`` where the expert printed one count is a page of
numbers in which the count may turn up by chance)."""

WHOLE_TREE = (0.9, 0.9, 2)
"""An output names the whole tree when it names 90 % of the work tree's files (by name) while the expert's
output named fewer than 90 % of them, in a tree of at least 2 files (small trees too: ``find .`` where the expert
listed one folder of three files)."""

MAX_NAMED = 3
"""Missing units named in a reason."""


def _unit(token: str, workdir: str) -> str:
    """One token as a unit: the work directory's prefix, ``./``, diff markers and ``ls -F`` marks dropped."""
    if workdir and token.startswith(workdir.rstrip("/") + "/"):
        token = token[len(workdir.rstrip("/")) + 1:]
    while token.startswith("./"):
        token = token[2:]
    if len(token) > 1 and token[0] in "+-" and token[1] not in "+-":
        token = token[1:]
    if len(token) > 1:
        token = token.rstrip(_TRAILING_MARKS) or token
    return token


def units(text: str, workdir: str = "") -> set[str]:
    """The information units of an output (see the module docstring), before the command's own are removed."""
    out = set()
    for token in _SEPARATORS.split(text):
        unit = _unit(token, workdir)
        if unit and unit not in (".", ".."):
            out.add(unit)
    return out


_REDIRECTION = re.compile(r"(?<![\w-])\d*(?:>>?|<)&?(?:\d+\b)?")
"""A redirection operator with its descriptor numbers (``2>``, ``>&1``): the ``2`` of ``2>/dev/null`` is no word of
the command that an output could repeat."""


def command_units(command: str, workdir: str = "") -> set[str]:
    """The units a command line holds (its words, unquoted, and their parts; redirection operators and their
    descriptor numbers left out): what its output cannot tell."""
    command = _REDIRECTION.sub(" ", command)
    try:
        words = shlex.split(command, comments=False)
    except ValueError:
        words = command.split()
    out = set()
    for word in words:
        out |= units(word, workdir) | {_unit(word, workdir)}
    return out


def _with_suffixes(found: set[str]) -> set[str]:
    """Every unit, and every path suffix of a unit with ``/`` (``a/b/c`` gives ``b/c`` and ``c``)."""
    out = set(found)
    for unit in found:
        parts = [p for p in unit.split("/") if p]
        for i in range(1, len(parts)):
            out.add("/".join(parts[i:]))
    return out


@dataclass(frozen=True)
class Information:
    """What the comparison found: the expert's units that the candidate's output lacks, and why it is a dump."""

    missing: tuple[str, ...]
    dump: str | None

    @property
    def carried(self) -> bool:
        return not self.missing and self.dump is None

    def reason(self, expert_units: int) -> str:
        if self.dump:
            return self.dump
        if self.missing:
            named = ", ".join(repr(m) for m in self.missing[:MAX_NAMED])
            more = f" (+{len(self.missing) - MAX_NAMED} more)" if len(self.missing) > MAX_NAMED else ""
            return (f"the output lacks {len(self.missing)} of the {expert_units} things the expert's output "
                    f"showed: {named}{more}")
        return f"the output carries the {expert_units} things the expert's output showed"


def compare(expert_output: str, candidate_output: str, expert_command: str, candidate_command: str,
            workdir: str = "", tree: Sequence[str] = ()) -> tuple[Information, int]:
    """Whether ``candidate_output`` carries ``expert_output``'s information and is no dump; also the number of
    expert units (for the reason). ``tree``: the work tree's files (paths relative to ``workdir``)."""
    expert_all, candidate_all = units(expert_output, workdir), units(candidate_output, workdir)
    expert = expert_all - command_units(expert_command, workdir)
    candidate = _with_suffixes(candidate_all - command_units(candidate_command, workdir))
    headers = _with_suffixes(candidate_all)  # a folder header may be a word of the candidate's own command
    missing = tuple(sorted(u for u in expert - candidate if not _listed_under(u, candidate, headers)))
    dump = (dump_reason(expert_output, candidate_output) or units_reason(len(expert), len(candidate_all))
            or spray_reason(expert, candidate_all) or tree_reason(expert_all, candidate_all, tree))
    return Information(missing, dump), len(expert)


def _listed_under(unit: str, candidate: set[str], headers: set[str] | None = None) -> bool:
    """A path the candidate shows as its name under a header of its folder (``ls -R`` prints ``a/b:`` then ``c`` where
    ``find`` prints ``a/b/c``); ``headers``: where the folder may be (default: ``candidate``)."""
    folder, _, name = unit.rstrip("/").rpartition("/")
    return bool(folder and name) and name in candidate and folder in (headers if headers is not None else candidate)


_NUMBER = re.compile(r"^[+-]?\d+(?:[.,]\d+)?$")

SPRAY = (4, 2)
"""Where the expert's output is numbers only, a candidate output with more than ``4 x their count + 2`` numbers is a
spray (``echo {0..12}`` where the expert counted one thing)."""


def spray_reason(expert_units: set[str], candidate_units: set[str]) -> str | None:
    """Why the candidate's output is a spray of numbers where the expert's output is numbers only, or None."""
    numbers = [u for u in expert_units if _NUMBER.match(u)]
    if not numbers or len(numbers) != len(expert_units):
        return None
    sprayed = sum(1 for u in candidate_units if _NUMBER.match(u))
    if sprayed > SPRAY[0] * len(numbers) + SPRAY[1]:
        return f"a spray: {sprayed} numbers in the output where the expert's showed {len(numbers)}"
    return None


def dump_reason(expert_output: str, candidate_output: str) -> str | None:
    """Why the candidate's output is a dump (many times longer than the expert's), or None."""
    e_lines, c_lines = _lines(expert_output), _lines(candidate_output)
    line_cap = max(DUMP_LINES[0] * e_lines, e_lines + DUMP_LINES[1])
    if c_lines > line_cap:
        return f"a dump: {c_lines} lines of output where the expert's had {e_lines}"
    char_cap = max(DUMP_CHARS[0] * len(expert_output), len(expert_output) + DUMP_CHARS[1])
    if len(candidate_output) > char_cap:
        return f"a dump: {len(candidate_output)} characters of output where the expert's had {len(expert_output)}"
    return None


def units_reason(expert_units: int, candidate_units: int) -> str | None:
    """Why the candidate's output has too many distinct units for the expert's (:data:`DUMP_UNITS`), or None."""
    if candidate_units > DUMP_UNITS[0] * expert_units + DUMP_UNITS[1]:
        return (f"a dump: {candidate_units} distinct values in the output where the expert's showed {expert_units} "
                f"(at most {DUMP_UNITS[0]} x + {DUMP_UNITS[1]})")
    return None


def tree_reason(expert_units: set[str], candidate_units: set[str], tree: Sequence[str]) -> str | None:
    """Why the candidate's output is the whole work tree where the expert's was a part of it, or None."""
    names = [path.rstrip("/").rsplit("/", 1)[-1] for path in tree]
    if len(names) < WHOLE_TREE[2]:
        return None
    candidate, expert = _with_suffixes(candidate_units), _with_suffixes(expert_units)
    share = sum(n in candidate for n in names) / len(names)
    expert_share = sum(n in expert for n in names) / len(names)
    if share >= WHOLE_TREE[0] and expert_share < WHOLE_TREE[1] and share > expert_share:
        return (f"a dump: the output names {share:.0%} of the work tree's {len(names)} files, where the expert's "
                f"named {expert_share:.0%}")
    return None


def typed_in(expert_output: str, candidate_output: str, expert_empty: str, candidate_empty: str, expert_command: str,
             candidate_command: str, workdir: str = "") -> tuple[str, ...]:
    """The expert's units that the candidate shows only as it would without the work tree: what it typed in, not found.

    ``expert_empty`` / ``candidate_empty``: the two outputs on an emptied work tree. A unit the expert's command also
    prints there does not depend on the files and is left out; a candidate unit printed there too does not count as
    carried (``echo {0..12}``, a base64 text decoded, ``printf`` of the answer)."""
    expert = units(expert_output, workdir) - command_units(expert_command, workdir) - units(expert_empty, workdir)
    own = command_units(candidate_command, workdir)
    found = _with_suffixes(units(candidate_output, workdir) - own - units(candidate_empty, workdir))
    headers = _with_suffixes(units(candidate_output, workdir))
    return tuple(sorted(u for u in expert - found if not _listed_under(u, found, headers)))


def _lines(text: str) -> int:
    return len(text.splitlines()) if text.strip() else 0


def status_difference(expert_exit: int, expert_output: str, candidate_exit: int, expert_wrote: bool = False,
                      candidate_output: str = "", candidate_errors: str = "") -> str | None:
    """Why the exit statuses disagree (see the module docstring), or None. ``expert_wrote``: the expert's command
    changed files (then a failing status without output, as ``diff a b > d`` gives, is for the files to decide).
    A candidate that exits 1 with output and nothing on stderr found nothing (``grep -c`` counting 0 everywhere,
    ``diff`` finding differences): the output decides, as for the expert."""
    found_nothing = candidate_exit == 1 and candidate_output.strip() and not candidate_errors.strip()
    if expert_exit == 0 and candidate_exit != 0 and not found_nothing:
        return f"the command failed (exit {candidate_exit}) where the expert's succeeded"
    if expert_exit != 0 and not expert_output.strip() and not expert_wrote and candidate_exit == 0:
        return f"the command succeeded where the expert's failed (exit {expert_exit}) without output"
    return None
