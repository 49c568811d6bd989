"""NeMo Gym's resources-server protocol: ``POST /seed_session``, ``POST /verify``, ``POST /verify_batch``.

The request body is exactly NeMo Gym's (``nemo_gym/base_resources_server.py`` ``BaseVerifyRequest``
plus ``expected_action`` of
``resources_servers/single_step_tool_use_with_argument_comparison``)::

    {"responses_create_params": {"input": [...Responses input items...], "tools": [...flat function tools...], ...},
     "response": {"output": [{"type": "function_call", "name", "arguments", "call_id"},
                             {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text"}]}, ...], ...},
     "expected_action": {"type": "function_call", "name", "arguments"}
                      | {"type": "function_call_batch", "calls": [...]}
                      | {"type": "message", "content"},
     ...any other fields}

The answer is the request body (every field, unchanged) plus ``reward`` (NeMo Gym's
``BaseVerifyResponse``) and our ``passed``, ``reason``, ``error`` and ``verifier``. A verifier failure
(an infrastructure error) sets ``error`` (``reward`` is then 0.0 and means nothing: mask it), never a
silent 0. A malformed body is a 422 whose ``detail`` names the field.

Parallel-call reward modes: NeMo Gym sets them in its server config, ``tool_call_comparator_config``
(``parallel_tool_call_rewarding``, ``allow_subset``, ``allow_superset``, ``parallel_tool_call_reward_mode``:
``binary_strict | fractional | f1``). Here the server's verifier decides (``--config`` a ``tool_call`` with
``parallel``, ``allow_fewer_calls``, ``allow_more_calls``; see :mod:`pivot_envs.verifiers.tool_call`), and a
row that carries NeMo Gym's object under that key is scored with it (:func:`row_verifier`;
:func:`pivot_envs.formats.nemo_gym.tool_call_params` maps it), on top of the server's ``tool_call`` verifier.

The action is read from ``response.output`` as NeMo Gym's ``extract_action`` reads it: every
``function_call`` item is a tool call (tool calls take precedence over text); else the first
``output_text`` of the first assistant ``message`` item is the reply text.

Per-turn rewards: a row that carries the expert's whole continuation (``expected_output``, Responses
output items) is an episode row: each assistant turn of its ``response.output`` is scored against the
expert's turn while the response stays on the expert's path, and the answer gains ``step_rewards`` and
``step_errors`` (:mod:`pivot_envs.serve.verify_episodes`).

Speed: :class:`~pivot_envs.serve.row_reader.RowReader` turns rows into (pivot, action) with caches
that never change an answer (a tools list's text decoded and converted once, expert messages
converted once, digest-based pivot ids; see :mod:`pivot_envs.serve.row_reader`).

Answers reuse each row's own text (:func:`verify_rows_text`, :func:`encode_answer`): the body is never
re-encoded, the result fields are appended to it (spliced from the request's bytes when it is ASCII).
:func:`verify_body_text` and :func:`verify_rows_text` are the whole work of ``/verify`` and
``/verify_batch`` (bytes in, bytes out), so they can be measured without HTTP (``benchmarks/serving/serve.py``).
"""

from __future__ import annotations

import json
import math
from typing import Any, Sequence

from pivot_envs.actions import parse_action
from pivot_envs.formats.nemo_gym import COMPARATOR_FIELD, tool_call_params
from pivot_envs.jsonl import BadRowError
from pivot_envs.serve.row_reader import (INPUT_FIELD, READER, TOOLS_FIELD, BodyError, RowInfo, RowReader, JSON_WHITESPACE,
                                         body_error, action_from_response, decode_with_spans)
from pivot_envs.serve.verify_episodes import STEP_FIELDS, episode_pivot, is_episode_row, score_episode, step_fields
from pivot_envs.types import Message, Pivot, VerifyResult
from pivot_envs.verifiers.base import Verifier
from pivot_envs.verifiers.batch import verify_batch

__all__ = ["RESULT_FIELDS", "TOOLS_FIELD", "INPUT_FIELD", "BodyError", "RowInfo", "RowReader", "READER",
           "action_from_response", "pivot_from_body", "parse_verify_body", "row_verifier", "answer", "error_answer",
           "verify_rows", "verify_episode_row",
           "verify_body_text", "verify_rows_text", "decode_with_spans", "encode_answer"]

RESULT_FIELDS = ("reward", "passed", "reason", "error", "verifier")
_ANSWER_FIELDS = RESULT_FIELDS + ("field",) + STEP_FIELDS


def pivot_from_body(body: Any, domain: str = "tool_use") -> Pivot:
    """The pivot of a verify body (``responses_create_params`` + ``expected_action``)."""
    return READER.pivot(body, domain)


def parse_verify_body(body: Any, domain: str = "tool_use") -> tuple[Pivot, Message]:
    """(pivot, action) of one verify body; :class:`BodyError` names the bad field."""
    return READER.parse(body, domain)


def row_verifier(body: dict[str, Any], pivot: Pivot, resolver: Any) -> Verifier:
    """The verifier of one verify body: the resolver's, with the body's ``tool_call_comparator_config`` (NeMo
    Gym's parallel-call settings) applied when it has one; :class:`BodyError` names a bad one."""
    verifier = resolver.for_pivot(pivot)
    if COMPARATOR_FIELD not in body:
        return verifier
    try:
        params = tool_call_params(body[COMPARATOR_FIELD])
    except BadRowError as exc:
        raise body_error(exc) from None
    spec, found = _with_tool_call_params(verifier.config(), params)
    if not found:
        raise BodyError(COMPARATOR_FIELD, f"sets tool_call's parallel-call reward, but this server scores the row "
                                          f"with {verifier.name!r}, which has no tool_call in it (serve a tool_call "
                                          "verifier, or drop the field)")
    return resolver.get(spec)


def _with_tool_call_params(spec: Any, params: dict[str, Any]) -> tuple[Any, int]:
    """``spec`` with ``params`` set on every ``tool_call`` in it (the verifier itself, or a child of
    ``final_turn``, ``cascade``, ``by_tool``...), and how many there were. A ``final_turn`` around them leaves the
    count of a turn's calls to them (``whole_turn: false``): the row's settings are NeMo Gym's rule for it."""
    if spec == "tool_call":
        return {"name": "tool_call", **params}, 1
    if isinstance(spec, list):
        pairs = [_with_tool_call_params(v, params) for v in spec]
        return [v for v, _ in pairs], sum(n for _, n in pairs)
    if not isinstance(spec, dict):
        return spec, 0
    is_tool_call = spec.get("name") == "tool_call"
    out = {**spec, **params} if is_tool_call else dict(spec)
    found = int(is_tool_call)
    for key, value in spec.items():
        if key != "name" and not (is_tool_call and key in params):
            out[key], n = _with_tool_call_params(value, params)
            found += n
    if spec.get("name") == "final_turn" and found:
        out["whole_turn"] = False  # the row's parallel-call settings say how many calls a turn may make
    return out, found


def answer(body: dict[str, Any], result: VerifyResult) -> dict[str, Any]:
    """The verify answer: the body plus reward, passed, reason, error, verifier."""
    out = dict(body)
    out.update(reward=0.0 if result.error else float(result.reward), passed=bool(result.passed) and not result.error,
               reason=result.reason, error=result.error, verifier=result.verifier)
    return out


def verify_episode_row(body: dict[str, Any], resolver: Any, domain: str = "tool_use", reader: RowReader | None = None,
                       info: RowInfo | None = None) -> dict[str, Any]:
    """The answer to an episode row (``expected_output``): the first turn's result plus ``step_rewards`` and
    ``step_errors`` (:mod:`pivot_envs.serve.verify_episodes`); :class:`BodyError` names a bad field."""
    pivot, expert = episode_pivot(body, domain, reader, info)
    if "response" not in body:
        raise BodyError("response", "missing required field (a Responses API response with output items)")
    action_from_response(body["response"])  # the response's items are checked (errors name their index)
    results = score_episode(body, pivot, expert, row_verifier(body, pivot, resolver))
    out = answer(body, results[0])  # the first turn is always scored (it is the row's pivot)
    out.update(step_fields(results))
    return out


def error_answer(body: Any, exc: BodyError) -> dict[str, Any]:
    """The entry of a bad row in ``/verify_batch``: the row (when an object), reward 0, ``error`` naming the field."""
    out = dict(body) if isinstance(body, dict) else {"row": body}
    out.update(reward=0.0, passed=False, reason="", error=str(exc), verifier=None, field=exc.field)
    return out


def verify_rows(rows: Sequence[Any], resolver: Any, domain: str = "tool_use",
                infos: Sequence[RowInfo | None] | None = None, reader: RowReader | None = None) -> list[dict[str, Any]]:
    """Score many verify bodies, in order: the good rows in one :func:`verify_batch`, the bad ones as error entries.

    ``infos`` (from :meth:`RowReader.decode_rows`) lets the reader skip what decoding already knows.
    """
    reader = reader or READER
    out: list[dict[str, Any] | None] = [None] * len(rows)
    good: list[int] = []
    pivots: list[Pivot] = []
    actions: list[Any] = []
    verifiers: list[Verifier] = []
    for i, row in enumerate(rows):
        try:
            if is_episode_row(row):
                out[i] = verify_episode_row(row, resolver, domain, reader, infos[i] if infos is not None else None)
                continue
            pivot, action = reader.parse(row, domain, infos[i] if infos is not None else None)
            verifier = row_verifier(row, pivot, resolver)
        except BodyError as exc:
            out[i] = error_answer(row, BodyError(f"[{i}].{exc.field}" if exc.field != "<body>" else f"[{i}]", exc.problem))
            continue
        good.append(i)
        pivots.append(pivot)
        actions.append(parse_action(action))
        verifiers.append(verifier)
    if good:
        results = verify_batch(actions, pivots, verifiers)
        for i, result in zip(good, results):
            out[i] = answer(rows[i], result)
    return out  # type: ignore[return-value]


def _text_of(data: bytes | str) -> str:
    if isinstance(data, str):
        return data
    try:
        return data.decode()
    except UnicodeDecodeError as exc:
        raise BodyError("<body>", f"not valid JSON: {exc}") from None


def verify_body_text(data: bytes | str, resolver: Any, domain: str = "tool_use",
                     reader: RowReader | None = None) -> tuple[dict[str, Any], bytes]:
    """``POST /verify``: (answer, its JSON) for one body; :class:`BodyError` (a 422) names a bad field."""
    reader = reader or READER
    text = _text_of(data)
    try:
        body, info = reader.decode_body(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise BodyError("<body>", f"not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise BodyError("<body>", f"must be a JSON object, got {type(body).__name__}")
    if is_episode_row(body):
        out = verify_episode_row(body, resolver, domain, reader, info)
    else:
        pivot, action = reader.parse(body, domain, info)
        out = answer(body, verify_batch([parse_action(action)], [pivot], [row_verifier(body, pivot, resolver)])[0])
    start = len(text) - len(text.lstrip(JSON_WHITESPACE))
    return out, _join_answers([out], [body], data, text, [(start, start + len(text.strip(JSON_WHITESPACE)))], listed=False)


def verify_rows_text(data: bytes | str, resolver: Any, domain: str = "tool_use",
                     reader: RowReader | None = None) -> tuple[list[dict[str, Any]], bytes]:
    """``POST /verify_batch``: (answers, their JSON list) for a body (a list of rows or ``{"rows": [...]}``)."""
    reader = reader or READER
    text = _text_of(data)
    try:
        body, bounds, infos = reader.decode_rows_at(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise BodyError("<body>", f"not valid JSON: {exc}") from None
    if isinstance(body, dict) and isinstance(body.get("rows"), list):
        body, bounds, infos = body["rows"], None, None
    if not isinstance(body, list):
        raise BodyError("<body>", "must be a JSON list of verify rows (or {\"rows\": [...]})")
    out = verify_rows(body, resolver, domain, infos, reader)
    return out, _join_answers(out, body, data, text, bounds)


def _join_answers(answers: list[dict[str, Any]], rows: list[Any], data: bytes | str, text: str,
                  bounds: list[tuple[int, int]] | None, listed: bool = True) -> bytes:
    """The answers' JSON (a list, or the one answer): each row's own text (``bounds`` in ``text``) with
    the result fields appended when that is exact (as :func:`encode_answer`), else a dump. An ASCII body
    is spliced from its bytes (positions in ``text`` are byte positions then), so the rows are copied once."""
    if isinstance(data, bytes) and len(data) == len(text):
        src: Any = memoryview(data)
        close: Any = ord("}")
        enc = str.encode
    else:
        src, close, enc = text, "}", None
    pieces: list[Any] = []
    for k, (a, row) in enumerate(zip(answers, rows)):
        if k:
            pieces.append(", ")
        extra = [f for f in _ANSWER_FIELDS if f in a]
        if bounds is not None and type(row) is dict and row and not any(f in row for f in extra):
            start, end = bounds[k]
            if src[end - 1] == close:
                pieces.append(src[start:end - 1])
                pieces.append(", " + ", ".join(f'"{f}": {_json_value(a[f])}' for f in extra) + "}")
                continue
        pieces.append(json.dumps(a, ensure_ascii=False))
    if listed:
        pieces.insert(0, "[")
        pieces.append("]")
    if enc is None:
        return "".join(pieces).encode()
    return b"".join(p if type(p) is memoryview else enc(p) for p in pieces)


_encode_str = json.encoder.encode_basestring  # the C encoder of json.dumps(..., ensure_ascii=False)


def _json_value(value: Any) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if type(value) is str:
        return _encode_str(value)
    if type(value) is float and math.isfinite(value):
        return float.__repr__(value)
    return json.dumps(value, ensure_ascii=False)


def encode_answer(answer_: dict[str, Any], row: Any, span: str | None) -> str:
    """The JSON of one answer: the row's own text with our fields spliced in when that is exact, else a dump."""
    extra = [k for k in _ANSWER_FIELDS if k in answer_]
    if span is not None and type(row) is dict and row and span.endswith("}") and not any(k in row for k in extra):
        return span[:-1] + ", " + ", ".join(f'"{k}": {_json_value(answer_[k])}' for k in extra) + "}"
    return json.dumps(answer_, ensure_ascii=False)
