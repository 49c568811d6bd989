"""NeMo Gym pivot rows <-> :class:`Pivot`, losslessly in both directions.

A NeMo Gym pivot row (the ``single_step_tool_use_with_argument_comparison``
resources server; datasets such as ``nvidia/Nemotron-RL-Agentic-*-Pivot-v1``)
looks like::

    {"responses_create_params": {"input": [...Responses input items...],
                                 "tools": [{"type": "function", "name", "description", "parameters", "strict"}],
                                 "parallel_tool_calls": false, ...},
     "expected_action": {"type": "function_call", "name", "arguments": "<json>"}
                     |  {"type": "function_call_batch", "calls": [{"type": "function_call", ...}, ...]}
                     |  {"type": "message", "content": "..."},
     "agent_ref": {"type": "responses_api_agents", "name": "..."},
     ...any other fields (trajectory_id, info, pass_rate, ...)}

Reading (:func:`pivot_from_row`): ``input`` becomes the chat ``context`` (see
:mod:`pivot_envs.formats.responses`; ``instructions``, if given, becomes a
leading system message), ``tools`` chat function specs, ``expected_action``
the expert assistant message (tool-call id ``call_0``, ``call_1``... unless the
row gives a ``call_id``). The pivot id is the row's ``id`` (or ``uuid``) field,
else a stable hash of the row; the domain is ``tool_use``; ``meta["source"] =
"nemo_gym"``.

Lossless both ways, with two small patches (:mod:`pivot_envs.formats.patch`):

* row -> Pivot -> row: whatever the plain conversion does not carry (other
  row fields, other request parameters, item ids, content given as parts,
  ...) is kept in ``pivot.meta["nemo_gym"] = {"patch", "hash",
  "content_parts"?}``. The writer re-applies it; the parts of it that concern
  the conversation are applied only while ``context``/``tools``/``expert``
  still hash to ``hash`` (edit the pivot and they give way to your edit).
* Pivot -> row -> Pivot: what a row cannot carry (domain, meta, fixture,
  profile, the ``name`` of a tool message, ...) goes into the extra row field
  ``pivot_envs = {"patch", "hash"}``; NeMo Gym ignores unknown fields.

Parallel-call reward modes: NeMo Gym sets them in its resources server's
config, ``tool_call_comparator_config`` (``parallel_tool_call_rewarding``,
``allow_subset``, ``allow_superset``, ``parallel_tool_call_reward_mode``:
``binary_strict | fractional | f1``), not in the rows. :func:`tool_call_params`
turns that object into the ``tool_call`` parameters that score as it does
(``parallel``, ``allow_fewer_calls``, ``allow_more_calls``). A row may carry
the same object under the same key (an extra field, which NeMo Gym ignores);
:func:`pivot_from_row` checks it (a bad one is a :class:`RowError` naming
it) and keeps it with the row's other fields, and ``pivot-envs serve``
scores such a row with it (:mod:`pivot_envs.serve.nemo_gym`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from pivot_envs.formats.patch import apply_patch, diff, touches
from pivot_envs.formats.responses import (
    expected_to_message,
    input_to_messages,
    message_to_expected,
    messages_to_input,
    tools_from_responses,
    tools_to_responses,
)
from pivot_envs.formats.validate import RowError, require_dict, require_list
from pivot_envs.jsonl import ReadReport, read_rows, write_jsonl
from pivot_envs.types import Pivot, stable_hash

SOURCE = "nemo_gym"
DEFAULT_DOMAIN = "tool_use"
META_KEY = "nemo_gym"
"""``pivot.meta`` key holding what a round trip back to the row needs."""
ROW_KEY = "pivot_envs"
"""Row field holding what a round trip back to the pivot needs."""
ID_FIELDS = ("id", "uuid")
DEFAULT_AGENT_TYPE = "responses_api_agents"

COMPARATOR_FIELD = "tool_call_comparator_config"
"""NeMo Gym's config key for its tool-call comparison, read from a row too (see the module doc)."""
REWARD_MODES = {"binary_strict": "all", "fractional": "fractional", "f1": "f1"}
"""NeMo Gym's ``parallel_tool_call_reward_mode`` -> ``tool_call``'s ``parallel``."""
_FLAGS = ("parallel_tool_call_rewarding", "allow_subset", "allow_superset")
_NOT_MAPPED = ("word_count_similarity_threshold", "floating_point_comparison_threshold")
"""Accepted and not mapped: NeMo Gym's own string and float comparison is not reimplemented."""

_ROW_GUARDED = (("responses_create_params", "input"), ("responses_create_params", "tools"),
                ("responses_create_params", "instructions"), ("expected_action",))
_PIVOT_GUARDED = (("context",), ("tools",), ("expert",))


def pivot_from_row(row: Any, *, domain: str | None = None) -> Pivot:
    """One NeMo Gym pivot row -> Pivot (raises :class:`RowError` naming the field).

    ``domain`` overrides the domain of rows that do not carry one of their own
    (writing such a pivot back then records the domain in ``pivot_envs``).
    """
    row = require_dict(row, "<row>", "a JSON object with responses_create_params and expected_action")
    base = {k: v for k, v in row.items() if k != ROW_KEY}
    pivot = plain_pivot_from_row(base)
    stored = row.get(ROW_KEY)
    if stored is not None:
        stored = require_dict(stored, ROW_KEY, 'an object {"patch", "hash"} written by pivot-envs')
        ops = require_list(stored.get("patch") or [], f"{ROW_KEY}.patch")
        intact = stored.get("hash") == _row_hash(base)
        try:
            data = apply_patch(pivot.to_dict(), ops, None if intact else (lambda p: touches(p, _PIVOT_GUARDED)))
            pivot = Pivot.from_dict(data)
        except (ValueError, KeyError, TypeError) as exc:
            raise RowError(f"{ROW_KEY}.patch", f"does not fit this row: {exc}",
                           f"remove the '{ROW_KEY}' field to read the row as plain NeMo Gym") from None
    own_domain = stored is not None and any(isinstance(op, list) and op[1:2] == [["domain"]] for op in ops)
    if domain is not None and not own_domain:
        pivot.domain = domain
    if COMPARATOR_FIELD in row:
        tool_call_params(row[COMPARATOR_FIELD])
    extras = _row_extras(base, pivot)
    if extras:
        pivot.meta[META_KEY] = extras
    return pivot


def tool_call_params(config: Any, field_name: str = COMPARATOR_FIELD) -> dict[str, Any]:
    """NeMo Gym's ``tool_call_comparator_config`` -> the ``tool_call`` parameters scoring parallel calls as it does.

    ``parallel_tool_call_rewarding`` off (NeMo Gym's default) counts only whether every expected call was
    made, surplus calls free: ``{"parallel": "all", "allow_fewer_calls": False, "allow_more_calls": True}``.
    On, ``allow_subset``/``allow_superset`` map to ``allow_fewer_calls``/``allow_more_calls`` and the reward
    mode by :data:`REWARD_MODES`. A bad or unknown setting is a :class:`RowError` naming it.
    """
    config = require_dict(config, field_name, "an object like NeMo Gym's tool_call_comparator_config")
    for key in config:
        if key not in _FLAGS + _NOT_MAPPED + ("parallel_tool_call_reward_mode",):
            raise RowError(f"{field_name}.{key}", "unknown setting",
                           f"NeMo Gym's settings are {', '.join(_FLAGS)} and parallel_tool_call_reward_mode")
    flags = {key: config.get(key, False) for key in _FLAGS}
    for key, value in flags.items():
        if not isinstance(value, bool):
            raise RowError(f"{field_name}.{key}", f"must be true or false: got {value!r}")
    mode = config.get("parallel_tool_call_reward_mode", "binary_strict")
    if mode not in REWARD_MODES:
        raise RowError(f"{field_name}.parallel_tool_call_reward_mode", f"unknown mode {mode!r}",
                       f"use one of {', '.join(REWARD_MODES)}")
    if not flags["parallel_tool_call_rewarding"]:
        return {"parallel": "all", "allow_fewer_calls": False, "allow_more_calls": True}
    return {"parallel": REWARD_MODES[mode], "allow_fewer_calls": flags["allow_subset"],
            "allow_more_calls": flags["allow_superset"]}


def row_from_pivot(pivot: Pivot, *, agent_ref: str | dict[str, Any] | None = None,
                   content_parts: bool | None = None) -> dict[str, Any]:
    """Pivot -> one NeMo Gym pivot row.

    Args:
        pivot: the pivot; a pivot read from a row gives that row back (see module doc).
        agent_ref: the row's ``agent_ref`` (a name, or a full ``{"type", "name"}``); None keeps the
            pivot's own (if it came from a row) or writes none.
        content_parts: write message content as a list of ``input_text``/``output_text`` parts
            instead of a string; None follows the pivot's source row (default: strings).
    """
    extras = pivot.meta.get(META_KEY) or {}
    core = _core(pivot)
    parts = bool(extras.get("content_parts")) if content_parts is None else content_parts
    row = plain_row_from_pivot(core, content_parts=parts)
    ops = extras.get("patch") or []
    if ops:
        intact = extras.get("hash") == _pivot_hash(core)
        row = apply_patch(row, ops, None if intact else (lambda p: touches(p, _ROW_GUARDED)))
    back = plain_pivot_from_row(row)
    missing = diff(core.to_dict(), back.to_dict())
    if missing:
        row[ROW_KEY] = {"patch": missing, "hash": _row_hash(row)}
    if agent_ref is not None:
        row["agent_ref"] = {"type": DEFAULT_AGENT_TYPE, "name": agent_ref} if isinstance(agent_ref, str) else dict(agent_ref)
    return row


def plain_pivot_from_row(row: dict[str, Any]) -> Pivot:
    """The plain conversion row -> Pivot (no patches): context, tools, expert, id."""
    if "responses_create_params" not in row:
        raise RowError("responses_create_params", "missing required field",
                       'a NeMo Gym row needs "responses_create_params": {"input": [...], "tools": [...]}')
    params = require_dict(row["responses_create_params"], "responses_create_params")
    if "input" not in params:
        raise RowError("responses_create_params.input", "missing required field", "give the model-call input items")
    raw = params["input"]
    items = [{"role": "user", "content": raw}] if isinstance(raw, str) else require_list(raw, "responses_create_params.input")
    context = []
    instructions = params.get("instructions")
    if isinstance(instructions, str) and instructions:
        context.append({"role": "system", "content": instructions})
    context.extend(input_to_messages(items, "responses_create_params.input"))
    tools = tools_from_responses(params.get("tools") or [], "responses_create_params.tools")
    if "expected_action" not in row:
        raise RowError("expected_action", "missing required field",
                       'a NeMo Gym pivot row needs "expected_action": {"type": "function_call"|"message", ...}')
    expert = expected_to_message(row["expected_action"], "expected_action")
    return Pivot(id=_row_id(row), domain=DEFAULT_DOMAIN, context=context, expert=expert, tools=tools,
                 meta={"source": SOURCE})


def plain_row_from_pivot(pivot: Pivot, *, content_parts: bool = False) -> dict[str, Any]:
    """The plain conversion Pivot -> row (no patches): id, responses_create_params, expected_action."""
    params: dict[str, Any] = {"input": messages_to_input(pivot.context, content_parts)}
    if pivot.tools:
        params["tools"] = tools_to_responses(pivot.tools)
    return {"id": pivot.id, "responses_create_params": params, "expected_action": message_to_expected(pivot.expert)}


def read_nemo_gym(path: str | Path, *, skip_bad: bool = False, report: ReadReport | None = None,
                  domain: str | None = None) -> list[Pivot]:
    """Read a NeMo Gym pivot JSONL file (``.gz`` allowed)."""
    return read_rows(path, lambda row: pivot_from_row(row, domain=domain), skip_bad=skip_bad, report=report)


def write_nemo_gym(pivots: Iterable[Pivot], path: str | Path, *, agent_ref: str | dict[str, Any] | None = None,
                   content_parts: bool | None = None) -> int:
    """Write pivots as NeMo Gym pivot rows (``.gz`` compresses); returns the count."""
    return write_jsonl(path, (row_from_pivot(p, agent_ref=agent_ref, content_parts=content_parts) for p in pivots))


def _row_extras(base: dict[str, Any], pivot: Pivot) -> dict[str, Any]:
    """What turns the plain rebuild of ``pivot`` into ``base`` (the smaller of the string/parts styles)."""
    best: tuple[int, bool, list[Any]] | None = None
    for parts in (False, True):
        ops = diff(base, plain_row_from_pivot(pivot, content_parts=parts))
        size = len(json.dumps(ops, ensure_ascii=False))
        if best is None or size < best[0]:
            best = (size, parts, ops)
    assert best is not None
    _, parts, ops = best
    extras: dict[str, Any] = {}
    if ops:
        extras["patch"] = ops
        extras["hash"] = _pivot_hash(pivot)
    if parts:
        extras["content_parts"] = True
    return extras


def _core(pivot: Pivot) -> Pivot:
    meta = {k: v for k, v in pivot.meta.items() if k != META_KEY}
    return Pivot(id=pivot.id, domain=pivot.domain, context=pivot.context, expert=pivot.expert, tools=pivot.tools,
                 fixture=pivot.fixture, meta=meta, profile=pivot.profile)


def _row_id(row: dict[str, Any]) -> str:
    for key in ID_FIELDS:
        if row.get(key) is not None:
            return str(row[key])
    return stable_hash(row)


def _row_hash(row: dict[str, Any]) -> str:
    params = row.get("responses_create_params") or {}
    return stable_hash(params.get("input"), params.get("tools"), params.get("instructions"), row.get("expected_action"))


def _pivot_hash(pivot: Pivot) -> str:
    return stable_hash(pivot.context, pivot.tools, pivot.expert)
