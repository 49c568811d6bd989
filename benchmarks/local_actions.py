"""Labelled actions at a pivot, for ``benchmarks/local_rewards.py``: actions that do what the expert's did
(*interchangeable*) and actions that do not (*wrong*), each made by a rule whose outcome is known.

Every maker returns ``[(kind, label, message), ...]`` (``label``: ``"right"`` or ``"wrong"``), and makes
nothing where its rule does not apply or could make an equivalent action by accident (a no-op where the
expert's command printed and changed nothing; a "wrong target" whose file has the same contents).

Terminal, interchangeable: ``respelled`` (other quotes), ``flags`` (short options regrouped or reordered),
``long_options``, ``semicolon`` (``;`` for ``&&`` where the expert's command succeeded), ``other_program``
(``head -n 1000 f``, ``awk 1 f`` or ``sed -n p f`` for ``cat f`` on a short file; ``grep p f | wc -l`` for
``grep -c p f``; ``wc -l f`` or ``cat f | wc -l`` for ``wc -l < f`` and back; ``head -N f`` / ``sed -n 1,Np f``
for ``head -n N f``), ``order`` (a listing's ``| sort`` dropped or added), ``ls_long`` (``ls -l`` for ``ls``) and
``recorded`` (the generator's recorded alternatives). Wrong: ``other_task`` (another task's command),
``wrong_target`` (a file argument swapped for another file of the tree with other contents), ``destructive``,
``noop`` (``true``, ``pwd``, ``echo ok``), ``dump`` (every line of every file, where that is many times the
expert's output).

Tool calls (tool_use, swe, tau2), interchangeable: ``key_order``, ``number_spelling`` (``5`` as ``5.0``),
``caseless`` (e-mails and names upper-cased where the tools ignore case), ``recorded``; wrong: ``other_task``,
``other_value`` (an argument set to the value another task used for it), ``other_tool``. Search: ``reworded``
(the query's words in another order and case) and ``recorded``; wrong: ``other_task`` and ``wrong_doc``.

Stops and answers (every domain with answers), made by :func:`stop_actions` from where the task stands
(:class:`Where`, read off the world with the episode API, not the verifier's own code): ``stop_done`` (right:
the expert's final answer at a call pivot where the world already holds the task's final state), ``stop_early``
(wrong: that answer where work or look-ups are left), ``stop_ready`` (right: that answer in an information task
whose answer's facts the tools had all returned by then), ``done_text`` ("Done." wherever that is wrong),
``refusal``, ``other_answer`` (another task's final answer) and ``call_when_done`` (a tool call at the expert's
final answer).
"""

from __future__ import annotations

import copy
import json
import random
import re
import shlex
from dataclasses import dataclass
from typing import Any, Callable

from pivot_envs.types import Message, Pivot

Labelled = list[tuple[str, str, Message]]
REFUSAL = "I'm sorry, but I can't help with that."


# --------------------------------------------------------------------------- messages


def call(name: str, arguments: dict[str, Any] | str, call_id: str = "call_b1") -> Message:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}]}


def text(content: str) -> Message:
    return {"role": "assistant", "content": content}


def expert_call(pivot: Pivot) -> tuple[str, dict[str, Any]] | None:
    """The expert's (first) call at ``pivot`` as ``(name, arguments)``, or ``None``."""
    calls = pivot.expert.get("tool_calls") or []
    if not calls:
        return None
    fn = calls[0]["function"]
    try:
        args = json.loads(fn.get("arguments") or "{}")
    except json.JSONDecodeError:
        return None
    return (fn["name"], args) if isinstance(args, dict) else None


# --------------------------------------------------------------------------- terminal: interchangeable


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


def _segments(command: str) -> list[str] | None:
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
    segments = _segments(command)
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
    return command.replace(" && ", "; ") if succeeded and " && " in command and _segments(command) else None


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
    segments = _segments(command)
    if not segments or any(_writes(s) for s in segments):
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


def _writes(segment: str) -> bool:
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


def terminal_actions(pivot: Pivot, others: list[str], tree: dict[str, str | None], rng: random.Random,
                     succeeded: bool, expert_lines: int, differs: Callable[[str], bool]) -> Labelled:
    """The labelled commands at a terminal call pivot (see the module docstring). ``others``: other tasks'
    commands; ``tree``: the work tree at the pivot (path -> text, ``None`` for binary files); ``succeeded``: the
    expert's command exited 0; ``expert_lines``: lines of its recorded output; ``differs(command)``: the command
    run at the pivot prints or leaves something else than the expert's (checks a wrong target by construction)."""
    found = expert_call(pivot)
    if found is None or not isinstance(found[1].get("command"), str):
        return []
    name, command = found[0], found[1]["command"]
    out: Labelled = []

    def add(kind: str, label: str, cmd: str | None) -> None:
        if cmd and cmd.strip() != command.strip():
            out.append((kind, label, call(name, {"command": cmd})))

    def lines_of(path: str) -> int | None:
        contents = tree.get(path)
        return None if contents is None else len(contents.splitlines())

    add("respelled", "right", respelled(command))
    add("flags", "right", flags(command))
    add("long_options", "right", long_options(command))
    add("semicolon", "right", semicolon(command, succeeded))
    for alternative in other_programs(command, lines_of):
        add("other_program", "right", alternative)
    add("order", "right", order(command))
    add("ls_long", "right", ls_long(command))
    for alt in (pivot.meta.get("alternatives") or [])[:2]:
        found_alt = expert_call(Pivot(id="", domain="", context=[], expert=alt))
        if found_alt and isinstance(found_alt[1].get("command"), str):
            add("recorded", "right", found_alt[1]["command"])
    distinct = [c for c in others if c.strip() != command.strip()]
    if distinct:
        add("other_task", "wrong", rng.choice(distinct))
    target = wrong_target(command, tree)
    if target is not None and differs(target):
        add("wrong_target", "wrong", target)
    if "rm " not in command:
        add("destructive", "wrong", DESTRUCTIVE)
    if expert_lines > 0 or _writes(command):
        for noop in NOOPS:
            add("noop", "wrong", noop)
    total = sum(len(c.splitlines()) for c in tree.values() if c is not None)
    if total >= 4 * expert_lines + 8:
        add("dump", "wrong", DUMP)
    return out


# --------------------------------------------------------------------------- tool calls


def _integer_keys(pivot: Pivot, name: str) -> set[str]:
    """The arguments of tool ``name`` whose schema type is ``integer`` (``5.0`` is another JSON type there)."""
    for tool in pivot.tools:
        fn = tool.get("function", tool)
        if fn.get("name") == name:
            props = (fn.get("parameters") or {}).get("properties") or {}
            return {k for k, v in props.items() if isinstance(v, dict) and v.get("type") == "integer"}
    return set()


def _numbers_respelled(args: dict[str, Any], integers: set[str]) -> dict[str, Any] | None:
    """Whole numbers written with a decimal point, where the schema says ``number``."""
    out, changed = {}, False
    for key, value in args.items():
        if isinstance(value, int) and not isinstance(value, bool) and key not in integers:
            out[key], changed = float(value), True
        else:
            out[key] = value
    return out if changed else None


def call_actions(pivot: Pivot, others: list[tuple[str, dict[str, Any]]], rng: random.Random,
                 caseless: tuple[str, ...] = (), category: Callable[[str], str] = lambda name: name) -> Labelled:
    """The labelled calls at a call pivot (see the module docstring). ``others``: other tasks' calls;
    ``caseless``: argument keys the tools compare without case; ``category(tool)``: the tool's kind (swe's alias
    categories: another tool of the same kind is no wrong action there)."""
    found = expert_call(pivot)
    if found is None:
        return []
    name, args = found
    out: Labelled = []
    single = len(pivot.expert.get("tool_calls") or []) == 1  # a maker rewrites one call: the expert's only one
    if single and len(args) >= 2:
        out.append(("key_order", "right", call(name, dict(reversed(list(args.items()))))))
    respelled_numbers = _numbers_respelled(args, _integer_keys(pivot, name))
    if single and respelled_numbers is not None:
        out.append(("number_spelling", "right", call(name, respelled_numbers)))
    upper = {k: (v.upper() if k in caseless and isinstance(v, str) else v) for k, v in args.items()}
    if single and upper != args:
        out.append(("caseless", "right", call(name, upper)))
    out += recorded_and_other_task(pivot, (name, args), others, rng)
    for key, value in args.items():
        values = [a[key] for n, a in others if n == name and key in a and a[key] != value
                  and not (isinstance(a[key], str) and isinstance(value, str) and a[key].lower() == value.lower())]
        if values:
            out.append(("other_value", "wrong", call(name, {**args, key: rng.choice(values)})))
            break
    tools = [t["function"]["name"] for t in pivot.tools if category(t["function"]["name"]) != category(name)]
    if tools:
        out.append(("other_tool", "wrong", call(rng.choice(sorted(tools)), args)))
    return out


def recorded_and_other_task(pivot: Pivot, expert: tuple[str, dict[str, Any]], others: list[tuple[str, dict[str, Any]]],
                            rng: random.Random) -> Labelled:
    """The generator's recorded alternatives (right, at most two) and another task's call (wrong)."""
    out: Labelled = [("recorded", "right", copy.deepcopy(alt)) for alt in (pivot.meta.get("alternatives") or [])[:2]]
    distinct = [(n, a) for n, a in others if (n, a) != expert]
    if distinct:
        other_name, other_args = rng.choice(distinct)
        out.append(("other_task", "wrong", call(other_name, other_args)))
    return out


def search_actions(pivot: Pivot, others: list[tuple[str, dict[str, Any]]], rng: random.Random,
                   doc_ids: list[str]) -> Labelled:
    """The labelled calls at a search pivot: a reworded query, recorded alternatives, another task's call, and
    another document where the expert opened one (``doc_ids``: documents the corpus holds)."""
    found = expert_call(pivot)
    if found is None:
        return []
    name, args = found
    out: Labelled = []
    if name == "search" and isinstance(args.get("query"), str):
        words = args["query"].split()
        if len(words) >= 2:
            out.append(("reworded", "right", call(name, {"query": " ".join(reversed(words)).lower()})))
    out += recorded_and_other_task(pivot, (name, args), others, rng)
    if name == "open":
        docs = [d for d in doc_ids if d != args.get("doc_id")]
        if docs:
            out.append(("wrong_doc", "wrong", call(name, {"doc_id": rng.choice(docs)})))
    return out


# --------------------------------------------------------------------------- stops and answers


@dataclass(frozen=True)
class Where:
    """Where a task stands at a pivot, read off its world by the benchmark: ``changes_state`` (the expert's calls
    change the world), ``done`` (the world at the pivot already holds the expert's final state), ``final`` (the
    expert's final answer), ``final_has_facts`` (it reports values a tool returned), ``facts_found`` (every such
    value had been returned before the pivot) and ``facts_returned`` (some had: a stop that leaves them out is
    wrong; at a text pivot, the facts of the expert's own answer there)."""

    changes_state: bool
    done: bool
    final: str | None
    final_has_facts: bool
    facts_found: bool
    facts_returned: bool


def stop_actions(pivot: Pivot, where: Where | None, other_answers: list[str], rng: random.Random,
                 last_call: Message | None) -> Labelled:
    """The labelled stops at ``pivot`` (see the module docstring). ``where``: ``None`` without a world;
    ``last_call``: the expert's last call before a final answer (for ``call_when_done``)."""
    out: Labelled = [("refusal", "wrong", text(REFUSAL))]
    expert_called = bool(pivot.expert.get("tool_calls"))
    final = where.final if where is not None else None
    bare_done = where is not None and where.changes_state and where.done and not where.facts_returned
    others = [a for a in other_answers if a and a != final]
    if others and not bare_done:  # a bare confirmation where the task is done: any answer but a refusal is right
        out.append(("other_answer", "wrong", text(rng.choice(others))))
    if not expert_called:
        if last_call is not None:
            out.append(("call_when_done", "wrong", copy.deepcopy(last_call)))
        if not bare_done:
            out.append(("done_text", "wrong", text("Done.")))
        return out
    if where is None or not final:
        return out
    state_done = where.changes_state and where.done
    if state_done:
        out.append(("stop_done", "right", text(final)))
    elif not where.changes_state and where.facts_found and where.final_has_facts:
        out.append(("stop_ready", "right", text(final)))
    else:
        out.append(("stop_early", "wrong", text(final)))
    if not bare_done:
        out.append(("done_text", "wrong", text("Done.")))
    return out
