"""Labelled actions at a pivot, for ``benchmarks/rewards/local_rewards.py``: actions that do what the expert's did
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


from pivot_envs.redteam.families.shell_spellings import (  # noqa: E402,F401 - the makers live in the package
    DESTRUCTIVE,
    DUMP,
    NOOPS,
    writes_files,
    flags,
    long_options,
    ls_long,
    order,
    other_programs,
    respelled,
    semicolon,
    wrong_target,
)


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
    if expert_lines > 0 or writes_files(command):
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
                 last_call: Message | None, labels: str = "new") -> Labelled:
    """The labelled stops at ``pivot`` (see the module docstring). ``where``: ``None`` without a world;
    ``last_call``: the expert's last call before a final answer (for ``call_when_done``); ``labels``: ``old`` (issue
    35's rule) or ``new`` (issue 48's: a stop must come after the values the user asked for are known, and another
    task's answer is never this task's stop)."""
    if labels == "old":
        return _stop_actions_old(pivot, where, other_answers, rng, last_call)
    out: Labelled = [("refusal", "wrong", text(REFUSAL))]
    expert_called = bool(pivot.expert.get("tool_calls"))
    final = where.final if where is not None else None
    pending = where is not None and where.final_has_facts and not where.facts_found
    bare_done = where is not None and where.changes_state and where.done and not where.facts_returned and not pending
    others = [a for a in other_answers if a and a != final]
    if others:
        out.append(("other_answer", "wrong", text(rng.choice(others))))
    if not expert_called:
        if last_call is not None:
            out.append(("call_when_done", "wrong", copy.deepcopy(last_call)))
        out.append(("confirmation" if bare_done else "done_text", "right" if bare_done else "wrong", text("Done.")))
        return out
    if where is None or not final:
        return out
    state_done = where.changes_state and where.done
    if state_done and not pending:
        out.append(("stop_done", "right", text(final)))
    elif not where.changes_state and where.facts_found and where.final_has_facts:
        out.append(("stop_ready", "right", text(final)))
    else:
        out.append(("stop_early", "wrong", text(final)))
    if bare_done and not where.final_has_facts:
        out.append(("confirmation", "right", text("Done.")))
    else:
        out.append(("done_text", "wrong", text("Done.")))
    return out


def _stop_actions_old(pivot: Pivot, where: Where | None, other_answers: list[str], rng: random.Random,
                      last_call: Message | None) -> Labelled:
    """Issue 35's labels: a stop where the world holds the final state is right whatever values are still to be
    found; where the expert's answer is a bare confirmation, any answer but a refusal is right."""
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
