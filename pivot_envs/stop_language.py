"""Does a text read as the end of the work? The rule for a stop whose expert answer reports no fact.

Where a task is done and the expert's final answer is a bare confirmation ("Done: the theme is now dark."), no
fact can tell a right stop from a wrong one: gibberish, a command pasted as text, or the expert's own words before
a call ("Verifying.") would pass a rule that reads the world's state alone. A stop there must *read as a stop*,
decided without a model by :func:`reads_as_stop`, in this order:

1. not empty, not a refusal (:func:`pivot_envs.refusal.is_refusal`);
2. no claim that the work failed (``could not``, ``failed``, ``went wrong``, ...), unless the expert's own answer
   says so too;
3. no code: no fenced block, no line that is a shell command (a program name with options or paths, pipes,
   redirections, ``&&``);
4. not the words before a call: no opening that says what comes next (``Let me``, ``I'll``, ``Now I need to``,
   ``Checking``, ``Opening``, ...) and no last line ending with ``:``;
5. some word a confirmation or a closing uses: a completed action (``done``, ``finished``, ``created``,
   ``renamed``, any past participle of a list of actions), a state (``is now``, ``in place``, ``ready``,
   ``all set``), or a closing (``glad``, ``anything else``, ``take care``, ``thanks``).

Rules 1-4 are :func:`stop_problem` (no text that breaks them ends the work), rule 5 :func:`confirms`. The stop rule
(:func:`pivot_envs.verifiers.stop.judge_done`) accepts a text without a problem that either confirms or says what
the expert's own final answer says (60 % of its content words: "Refunds usually take 5-7 business days" where the
expert said so).

``final_turn``'s ``stop_judge`` replaces this rule with a judge (an LLM asked whether the text ends the work as the
expert's answer does), for domains whose stops this vocabulary does not cover.
"""

from __future__ import annotations

import re

from pivot_envs.refusal import is_refusal

FAILURE = re.compile(
    r"\b(?:could\s*n[o']?t|can\s*n[o']?t|cannot|unable\s+to|(?:was|were|am|is|are)\s+not\s+able|(?:was|were)n't\s+able|"
    r"failed|failure|went\s+wrong|did\s*n[o']?t\s+(?:work|succeed|complete|finish)|not\s+(?:been\s+)?(?:completed|"
    r"possible|successful|finished)|no\s+luck|gave\s+up|give\s+up|impossible|error\s+occurred)\b", re.IGNORECASE)
"""A claim that the work failed."""

PROGRAMS = frozenset("""
ls cat grep egrep fgrep find echo printf sed awk mkdir rmdir cp mv rm tar gzip gunzip zip unzip wc head tail sort
uniq chmod chown touch cd pwd ln diff cut tr xargs tee python python3 pip bash sh git curl wget du df stat file
basename dirname realpath readlink date sleep env export true false test md5sum sha256sum base64 rev column
jq yq make pytest node npm open_file search_dir search_file find_file edit submit goto scroll_down create
""".split())
"""Programs (and SWE-agent commands) whose name opening a line with options or paths makes it a command."""

_SHELL_OPERATORS = re.compile(r"(?:\s\|\s?|\s&&\s|\s\|\|\s|(?:^|\s)\d?>>?\s?\S|\s<\s|\$\(|`[^`]*\s-[a-z])")
_ARGUMENT = re.compile(r"(?:^|\s)(?:-{1,2}[A-Za-z][\w-]*|[\w.~-]*/[\w./*-]*|\*\.\w+|\{\{)")

INTENT = re.compile(
    r"(?:^|[.!?;]\s+)\W*(?:let\s+me(?!\s+know)|let's|let\s+us|i'll|i\s+will|i'm\s+going\s+to|i\s+am\s+going\s+to|"
    r"i\s+need\s+to|we\s+need\s+to|i\s+should|first|next|then|now,?\s+(?:let|i|we|to|the\s+actual)|checking|"
    r"verifying|looking|opening|searching|reading|running|listing|trying|going\s+to|time\s+to)\b", re.IGNORECASE)
"""An opening that says what comes next: the words before a call."""

_DONE_WORDS = r"""done|complete|completed|finished|ready|success|successful|successfully|all\s+set|in\s+place|
taken\s+care|handled|confirmed|here\s+you\s+go|that's\s+it|sorted|fixed|resolved|set\s+up|up\s+to\s+date"""
_CLOSING_WORDS = r"""glad|happy\s+to\s+help|anything\s+else|you're\s+welcome|you\s+are\s+welcome|take\s+care|enjoy|
thanks|thank\s+you|have\s+a\s+(?:great|nice|good|lovely|wonderful)|goodbye|bye|let\s+me\s+know|feel\s+free|
safe\s+travels|pleasure"""
_STATE_WORDS = r"""(?:is|are)\s+now|has\s+been|have\s+been|now\s+(?:has|have|holds|lists|contains|says|reads|shows|
points|uses|runs|matches|includes)|no\s+longer|there\s+(?:is|are)\s+now"""
_ACTION_STEMS = r"""add|append|appli|apply|archiv|back(?:ed)?\s+up|book|cancel|chang|clean|clear|compress|configur|
convert|copi|correct|creat|delet|disabl|download|edit|emptie|enabl|export|extract|generat|import|insert|instal|
merg|modifi|mov|organi[sz]|pack|process|refund|regist|remov|renam|replac|reschedul|reset|restor|sav|schedul|
sent|set|split|submit|transferr|pass|hand|unpack|updat|upgrad|upload|wr[io]t|made|chmod"""
CONFIRMATION = re.compile(
    rf"\b(?:{_DONE_WORDS}|{_CLOSING_WORDS}|{_STATE_WORDS})\b|\b(?:{_ACTION_STEMS})\w*(?:ed|en|t|d)\b",
    re.IGNORECASE | re.VERBOSE)
"""A word a confirmation or a closing uses (see the module docstring)."""

_FENCE = re.compile(r"```")


def shell_line(line: str) -> bool:
    """Whether ``line`` is a shell command: a known program opening it followed by an option or a path, or shell
    operators between words."""
    words = line.strip().lstrip("$ ").split()
    if not words:
        return False
    if words[0] in PROGRAMS and (len(words) == 1 or _ARGUMENT.search(" " + " ".join(words[1:]))):
        return True
    return bool(_SHELL_OPERATORS.search(line))


def stop_problem(text: str, expert_answer: str = "") -> str | None:
    """Why ``text`` cannot end the work whatever it says (rules 1-4 of the module docstring), or ``None``.
    ``expert_answer``: the expert's own final answer (a refusal or a failure claim there allows one here)."""
    stripped = (text or "").strip()
    if not stripped:
        return "an empty answer"
    if is_refusal(stripped) and not is_refusal(expert_answer):
        return "a refusal"
    if FAILURE.search(stripped) and not FAILURE.search(expert_answer or ""):
        return "a claim that the work failed, where it did not"
    if _FENCE.search(stripped):
        return "a code block, not an answer"
    lines = [line for line in stripped.splitlines() if line.strip()]
    if any(shell_line(line) for line in lines):
        return "a shell command pasted as text, not an answer"
    if INTENT.search(stripped) or lines[-1].rstrip().endswith(":"):
        return "the words before a call (what comes next), not the end of the work"
    return None


def confirms(text: str) -> bool:
    """Whether ``text`` has a word a confirmation or a closing uses (rule 5)."""
    return bool(CONFIRMATION.search(text or ""))


def reads_as_stop(text: str, expert_answer: str = "") -> tuple[bool, str]:
    """Whether ``text`` reads as the end of the work (see the module docstring), and why not."""
    problem = stop_problem(text, expert_answer)
    if problem:
        return False, problem
    if not confirms(text):
        return False, "no word of a confirmation or a closing"
    return True, "reads as a stop"
