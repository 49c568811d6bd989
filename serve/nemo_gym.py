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

The action is read from ``response.output`` as NeMo Gym's ``extract_action`` reads it: every
``function_call`` item is a tool call (tool calls take precedence over text); else the first
``output_text`` of the first assistant ``message`` item is the reply text.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from pivot_envs.formats.nemo_gym import plain_pivot_from_row
from pivot_envs.formats.validate import RowError
from pivot_envs.jsonl import BadRowError
from pivot_envs.types import Message, Pivot, VerifyResult

RESULT_FIELDS = ("reward", "passed", "reason", "error", "verifier")


class BodyError(ValueError):
    """A malformed request body; ``field`` names the offending field (dotted path, ``[i]`` indexes)."""

    def __init__(self, field: str, problem: str):
        super().__init__(f"field '{field}': {problem}")
        self.field, self.problem = field, problem

    def detail(self) -> dict[str, Any]:
        return {"field": self.field, "error": self.problem, "message": str(self)}


def action_from_response(response: Any, field: str = "response") -> Message:
    """A Responses API response -> the assistant message it represents (see module doc)."""
    if not isinstance(response, dict):
        raise BodyError(field, f"must be a Responses API response object, got {type(response).__name__}")
    output = response.get("output")
    if not isinstance(output, list):
        raise BodyError(f"{field}.output", "missing or not a list of output items")
    calls: list[dict[str, Any]] = []
    text: str | None = None
    for i, item in enumerate(output):
        f = f"{field}.output[{i}]"
        if not isinstance(item, dict):
            raise BodyError(f, "an output item must be an object")
        kind = item.get("type")
        if kind == "function_call":
            name, args = item.get("name"), item.get("arguments", "{}")
            if not isinstance(name, str) or not name:
                raise BodyError(f"{f}.name", "a function_call needs a string name")
            if isinstance(args, dict):
                args = json.dumps(args, ensure_ascii=False)
            elif not isinstance(args, str):
                raise BodyError(f"{f}.arguments", "must be a JSON string")
            calls.append({"id": str(item.get("call_id") or item.get("id") or f"call_{len(calls)}"),
                          "type": "function", "function": {"name": name, "arguments": args}})
        elif kind == "message" and item.get("role", "assistant") == "assistant" and text is None:
            content = item.get("content")
            if isinstance(content, str):
                text = content
            elif isinstance(content, list):
                for part in content:
                    if isinstance(part, dict) and part.get("type") == "output_text" and isinstance(part.get("text"), str):
                        text = part["text"]
                        break
    if calls:
        return {"role": "assistant", "content": None, "tool_calls": calls}
    return {"role": "assistant", "content": text if text is not None else ""}


def pivot_from_body(body: Any, domain: str = "tool_use") -> Pivot:
    """The pivot of a verify body (``responses_create_params`` + ``expected_action``)."""
    if not isinstance(body, dict):
        raise BodyError("<body>", f"must be a JSON object, got {type(body).__name__}")
    try:
        # an id of our own: the row's stable hash (its default id) costs more than the verification
        pivot = plain_pivot_from_row(body if "id" in body or "uuid" in body else {**body, "id": "verify"})
    except (RowError, BadRowError) as exc:
        raise BodyError(exc.field, exc.problem + (f" (fix: {exc.fix})" if exc.fix else "")) from None
    pivot.domain = domain
    return pivot


def parse_verify_body(body: Any, domain: str = "tool_use") -> tuple[Pivot, Message]:
    """(pivot, action) of one verify body; :class:`BodyError` names the bad field."""
    pivot = pivot_from_body(body, domain)
    if "response" not in body:
        raise BodyError("response", "missing required field (a Responses API response with output items)")
    return pivot, action_from_response(body["response"])


def answer(body: dict[str, Any], result: VerifyResult) -> dict[str, Any]:
    """The verify answer: the body plus reward, passed, reason, error, verifier."""
    out = dict(body)
    out.update(reward=0.0 if result.error else float(result.reward), passed=bool(result.passed) and not result.error,
               reason=result.reason, error=result.error, verifier=result.verifier)
    return out


def error_answer(body: Any, exc: BodyError) -> dict[str, Any]:
    """The entry of a bad row in ``/verify_batch``: the row (when an object), reward 0, ``error`` naming the field."""
    out = dict(body) if isinstance(body, dict) else {"row": body}
    out.update(reward=0.0, passed=False, reason="", error=str(exc), verifier=None, field=exc.field)
    return out


def verify_rows(rows: Sequence[Any], resolver: Any, domain: str = "tool_use") -> list[dict[str, Any]]:
    """Score many verify bodies, in order: the good rows in one :func:`verify_batch`, the bad ones as error entries."""
    from pivot_envs.verifiers.batch import verify_batch

    out: list[dict[str, Any] | None] = [None] * len(rows)
    good: list[int] = []
    pivots: list[Pivot] = []
    actions: list[Message] = []
    for i, row in enumerate(rows):
        try:
            pivot, action = parse_verify_body(row, domain)
        except BodyError as exc:
            out[i] = error_answer(row, BodyError(f"[{i}].{exc.field}" if exc.field != "<body>" else f"[{i}]", exc.problem))
            continue
        good.append(i)
        pivots.append(pivot)
        actions.append(action)
    if good:
        from pivot_envs.actions import parse_action

        parsed = [parse_action(a) for a in actions]
        results = verify_batch(parsed, pivots, resolver.for_pivot)
        for i, result in zip(good, results):
            out[i] = answer(rows[i], result)
    return out  # type: ignore[return-value]


_DECODER = json.JSONDecoder()


def decode_with_spans(raw: str) -> tuple[Any, list[str] | None]:
    """Decode a JSON body; for a list, also each element's own text (so answers can reuse it)."""
    text = raw.strip()
    if not text.startswith("["):
        return json.loads(text), None
    items: list[Any] = []
    spans: list[str] = []
    i, n = 1, len(text)
    ws = " \t\n\r"
    while i < n and text[i] in ws:
        i += 1
    if i < n and text[i] == "]":
        if text[i + 1:].strip():
            raise json.JSONDecodeError("extra data", text, i + 1)
        return [], []
    while True:
        obj, end = _DECODER.raw_decode(text, i)
        items.append(obj)
        spans.append(text[i:end])
        i = end
        while i < n and text[i] in ws:
            i += 1
        if i < n and text[i] == ",":
            i += 1
            while i < n and text[i] in ws:
                i += 1
            continue
        if i < n and text[i] == "]" and not text[i + 1:].strip():
            return items, spans
        raise json.JSONDecodeError("expected ',' or ']'", text, i)


def encode_answer(answer_: dict[str, Any], row: Any, span: str | None) -> str:
    """The JSON of one answer: the row's own text with our fields spliced in when that is exact, else a dump."""
    extra = [k for k in ("reward", "passed", "reason", "error", "verifier", "field") if k in answer_]
    if span is not None and isinstance(row, dict) and row and span.endswith("}") and not any(k in row for k in extra):
        return span[:-1] + ", " + json.dumps({k: answer_[k] for k in extra}, ensure_ascii=False)[1:]
    return json.dumps(answer_, ensure_ascii=False)
