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

Speed (the tools list is most of a row: a tool_use row is ~11 kB, 7 kB of it tools, and every row of
a dataset usually carries the same list). :class:`RowReader` turns rows into (pivot, action) with
caches that never change an answer:

* the text of a ``"tools": [...]`` value already seen is not decoded again: it is swapped for a
  marker string before ``json.loads`` and the cached decoded list put back where the marker landed
  (only at ``responses_create_params.tools`` and ``response.tools``; a marker anywhere else, or a
  row that does not decode, falls back to decoding the row's own text, so a body is accepted or
  refused exactly as ``json.loads`` would);
* the chat tool specs of a tools list are converted once per distinct list (keyed by that text, or
  for rows given as dicts by equal value), the expert message once per distinct ``expected_action``;
* the pivot id of a row without ``id``/``uuid`` is a digest of its input, tools and expected action,
  so verifiers' per-pivot caches hit for every sample of the same pivot (and never mix two pivots);
* the conversation (``input`` -> chat context) is still converted and validated for every row.

Answers reuse each row's own text (:func:`verify_rows_text`, :func:`encode_answer`): the body is never
re-encoded, the result fields are appended to it (spliced from the request's bytes when it is ASCII).
:func:`verify_body_text` and :func:`verify_rows_text` are the whole work of ``/verify`` and
``/verify_batch`` (bytes in, bytes out), so they can be measured without HTTP (``benchmarks/serve.py``).
"""

from __future__ import annotations

import hashlib
import json
import math
import secrets
import threading
from dataclasses import dataclass
from typing import Any, Sequence

from pivot_envs.formats.responses import expected_to_message, input_to_messages, tools_from_responses
from pivot_envs.formats.validate import RowError, require_dict, require_list
from pivot_envs.jsonl import BadRowError
from pivot_envs.types import Message, Pivot, VerifyResult, stable_hash

RESULT_FIELDS = ("reward", "passed", "reason", "error", "verifier")
_ANSWER_FIELDS = RESULT_FIELDS + ("field",)
TOOLS_FIELD = "responses_create_params.tools"
INPUT_FIELD = "responses_create_params.input"


class BodyError(ValueError):
    """A malformed request body; ``field`` names the offending field (dotted path, ``[i]`` indexes)."""

    def __init__(self, field: str, problem: str):
        super().__init__(f"field '{field}': {problem}")
        self.field, self.problem = field, problem

    def detail(self) -> dict[str, Any]:
        return {"field": self.field, "error": self.problem, "message": str(self)}


def _body_error(exc: BadRowError) -> BodyError:
    return BodyError(exc.field, exc.problem + (f" (fix: {exc.fix})" if exc.fix else ""))


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


# ------------------------------------------------------------------------------------- caches
@dataclass(eq=False)
class _ToolsEntry:
    """One distinct tools list: its decoded value (owned by the cache), its text when known, its chat specs."""

    raw: list[Any]
    text: str | None
    key: Any  # its key in the cache's index: the text's prefix, or the tool names of a value
    size: int  # characters of its JSON text
    serial: int
    chat: list[Any] | None = None

    def convert(self) -> list[Any]:
        chat = self.chat
        if chat is None:  # two threads may both convert once; either result is the same
            chat = self.chat = tools_from_responses(self.raw, TOOLS_FIELD)  # RowError names the field
        return chat


def _tool_names(tools: list[Any]) -> tuple:
    return tuple(t.get("name") if type(t) is dict else None for t in tools)


class _ToolsCache:
    """Distinct tools lists, first in first out, bounded by count and by characters (a hot list that
    was dropped is learned back at no extra cost: the text that is decoded anyway becomes the entry)."""

    PREFIX = 48
    """Characters of a tools text that index it (then ``startswith`` confirms the whole text)."""

    def __init__(self, max_entries: int = 256, max_total_chars: int = 8 << 20, min_chars: int = 256,
                 max_chars: int = 1 << 20):
        self.max_entries, self.max_total_chars = max_entries, max_total_chars
        self.min_chars, self.max_chars = min_chars, max_chars
        self._lock = threading.Lock()
        self._serial = self._chars = 0
        self._entries: dict[int, _ToolsEntry] = {}  # serial -> entry, oldest first
        self._by_prefix: dict[str, list[_ToolsEntry]] = {}
        self._by_names: dict[tuple, list[_ToolsEntry]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def at(self, text: str, pos: int) -> _ToolsEntry | None:
        """The entry whose text starts at ``text[pos]``."""
        for entry in self._by_prefix.get(text[pos:pos + self.PREFIX], ()):
            if text.startswith(entry.text, pos):  # type: ignore[arg-type]
                return entry
        return None

    def learn_text(self, text: str, value: list[Any]) -> _ToolsEntry | None:
        """A new entry for the tools list ``value`` decoded from ``text`` (None: too small or too large to keep)."""
        if not self.min_chars <= len(text) <= self.max_chars:
            return None
        return self._add(self._by_prefix, text[:self.PREFIX], value, text, len(text))

    def of_value(self, tools: list[Any]) -> _ToolsEntry | None:
        """The entry of a decoded tools list (an equal value; the cache keeps a private copy).

        Equal as Python values: ``true == 1`` is the one JSON difference this does not see (harmless in
        tool specs). ``TypeError``/``ValueError`` for what is not JSON."""
        key = _tool_names(tools)
        for entry in self._by_names.get(key, ()):
            if entry.raw == tools:
                return entry
        text = json.dumps(tools)
        if len(text) > self.max_chars:
            return None
        return self._add(self._by_names, key, json.loads(text), None, len(text))

    def _add(self, index: dict, key: Any, raw: list[Any], text: str | None, size: int) -> _ToolsEntry:
        with self._lock:
            self._serial += 1
            entry = _ToolsEntry(raw, text, key, size, self._serial)
            self._entries[entry.serial] = entry
            index.setdefault(key, []).append(entry)
            self._chars += size
            while len(self._entries) > 1 and (len(self._entries) > self.max_entries or self._chars > self.max_total_chars):
                old = self._entries.pop(next(iter(self._entries)))
                self._chars -= old.size
                old_index = self._by_prefix if old.text is not None else self._by_names
                bucket = [e for e in old_index.get(old.key, ()) if e is not old]  # a new list: readers iterate the old one
                if bucket:
                    old_index[old.key] = bucket
                else:
                    old_index.pop(old.key, None)
            return entry


_MISSING = object()


def _call_key(item: Any) -> tuple | None:
    """What ``expected_to_message`` reads of one function_call (None: not cached, convert directly)."""
    if type(item) is not dict:
        return None
    name, args, call_id, id_ = item.get("name"), item.get("arguments", _MISSING), item.get("call_id"), item.get("id")
    if type(name) is not str or (args is not _MISSING and type(args) is not str):
        return None
    if (call_id is not None and type(call_id) is not str) or (id_ is not None and type(id_) is not str):
        return None
    return (name, None if args is _MISSING else args, call_id, id_)


def _expected_key(action: Any) -> tuple | None:
    if type(action) is not dict:
        return None
    kind = action.get("type")
    if kind == "function_call":
        key = _call_key(action)
        return None if key is None else ("f", key)
    if kind == "function_call_batch":
        calls = action.get("calls")
        if type(calls) is not list or not calls:
            return None
        keys = tuple(_call_key(c) for c in calls)
        return None if None in keys else ("b", keys)
    if kind == "message":
        content = action.get("content")
        return ("m", content) if type(content) is str else None
    return None


def _key_chars(key: Any) -> int:
    if type(key) is str:
        return len(key)
    if type(key) is tuple:
        return sum(_key_chars(k) for k in key)
    return 1


@dataclass
class RowInfo:
    """What decoding a row's text already knows: its tools entry and the text of its input."""

    tools: _ToolsEntry | None = None
    input_text: str | None = None


@dataclass
class _Sub:
    """One value cut out of a body's text before decoding (its marker's place, its original place)."""

    pos: int  # of the marker in the substituted text
    marker_len: int
    orig_pos: int
    orig_len: int
    kind: str  # "tools" | "input"
    value: Any
    entry: _ToolsEntry | None = None
    text: str | None = None


_DECODER = json.JSONDecoder()
_WS = " \t\n\r"
_HASH_CHUNK = 2047
"""hashlib lets go of the GIL for 2048 bytes or more; handing it back and forth with the event loop's
thread costs far more than the hash (up to the 5 ms switch interval), so rows are hashed in smaller pieces."""


def _digest(*texts: str) -> str:
    h = hashlib.blake2b(digest_size=12)
    for text in texts:
        data = memoryview(text.encode("utf-8", "surrogatepass"))
        for i in range(0, len(data), _HASH_CHUNK):
            h.update(data[i:i + _HASH_CHUNK])
    return h.hexdigest()


class RowReader:
    """NeMo Gym verify rows -> (pivot, action), with the caches of the module doc (thread-safe)."""

    def __init__(self, max_tools: int = 256, max_experts: int = 8192, max_expert_chars: int = 4096):
        self.tools = _ToolsCache(max_tools)
        self.max_experts, self.max_expert_chars = max_experts, max_expert_chars
        self._experts: dict[tuple, tuple[int, Message]] = {}
        self._expert_serial = 0
        self._lock = threading.Lock()
        self._nonce = "\x00pivot-envs:" + secrets.token_hex(12) + ":"
        self._marker = json.dumps(self._nonce)[:-1]  # the JSON text of the nonce, without its closing quote

    # ---- text -> rows
    def decode_body(self, raw: str) -> tuple[Any, RowInfo | None]:
        """One JSON body (``/verify``); ``json.JSONDecodeError`` exactly when ``json.loads(raw)`` raises."""
        text = raw.strip(_WS)
        cut, subs = self._cut(text)
        if subs:
            try:
                body = json.loads(cut)
            except (json.JSONDecodeError, RecursionError):
                body = None
            else:
                info = self._restore(body, subs, 0, len(subs))
                if info is not None:
                    return body, info
        return json.loads(raw), None

    def decode_rows(self, text: str) -> tuple[Any, list[str] | None, list[RowInfo | None] | None]:
        """A ``/verify_batch`` body: (decoded, each list element's own text, each element's :class:`RowInfo`)."""
        body, bounds, infos = self.decode_rows_at(text)
        return body, None if bounds is None else [text[a:b] for a, b in bounds], infos

    def decode_rows_at(self, text: str) -> tuple[Any, list[tuple[int, int]] | None, list[RowInfo | None] | None]:
        """:meth:`decode_rows` with each list element's (start, end) in ``text`` instead of its text."""
        stripped = text.strip()
        off = len(text) - len(text.lstrip())
        cut, subs = self._cut(stripped)
        if subs and cut.startswith("["):
            try:
                items, bounds = _decode_list(cut)
            except (json.JSONDecodeError, RecursionError):
                items = None
            if items is not None:
                out = self._restore_list(stripped, items, bounds, subs, off)
                if out is not None:
                    return out
        if not stripped.startswith("["):
            return json.loads(stripped), None, None
        items, bounds = _decode_list(stripped)
        return items, [(a + off, b + off) for a, b in bounds], None

    def _cut(self, text: str) -> tuple[str, list[_Sub]]:
        """``text`` with each ``"tools"``/``"input"`` list value replaced by a marker string."""
        n = len(text)
        ti, ii = text.find('"tools"'), text.find('"input"')
        if ti < 0 and ii < 0:
            return text, []
        pieces: list[str] = []
        subs: list[_Sub] = []
        last = size = 0
        while ti >= 0 or ii >= 0:
            if ti >= 0 and (ii < 0 or ti < ii):
                i, kind = ti, "tools"
            else:
                i, kind = ii, "input"
            p = resume = i + 7
            while p < n and text[p] in _WS:
                p += 1
            if p < n and text[p] == ":":
                p += 1
                while p < n and text[p] in _WS:
                    p += 1
                if p < n and text[p] == "[":
                    end = self._take(text, p, kind, pieces, subs, last, size)
                    if end > p:
                        size = subs[-1].pos + subs[-1].marker_len
                        last = resume = end
            if ti >= 0 and ti < resume:  # the next occurrences after what was cut out
                ti = text.find('"tools"', resume)
            if ii >= 0 and ii < resume:
                ii = text.find('"input"', resume)
        if not subs:
            return text, []
        pieces.append(text[last:])
        return "".join(pieces), subs

    def _take(self, text: str, p: int, kind: str, pieces: list[str], subs: list[_Sub], last: int, size: int) -> int:
        """Cut out the list value at ``text[p]``: its end, or ``p`` when it is left in place."""
        entry = self.tools.at(text, p) if kind == "tools" else None
        if entry is not None:
            end, value = p + len(entry.text), entry.raw  # type: ignore[arg-type]
        else:
            try:
                value, end = _DECODER.raw_decode(text, p)
            except (json.JSONDecodeError, RecursionError):
                return p
            if type(value) is not list:
                return p
            if kind == "tools":
                entry = self.tools.learn_text(text[p:end], value)
        marker = f'{self._marker}{len(subs)}"'
        pieces.append(text[last:p])
        subs.append(_Sub(size + p - last, len(marker), p, end - p, kind, value, entry,
                         text[p:end] if kind == "input" else None))
        pieces.append(marker)
        return end

    def _sub(self, value: Any, subs: list[_Sub], lo: int, hi: int, kind: str) -> _Sub | None | bool:
        """The cut-out value a marker stands for; None: no marker; False: a marker out of place."""
        if type(value) is not str or not value.startswith(self._nonce):
            return None
        try:
            j = int(value[len(self._nonce):])
        except ValueError:
            return False
        if not lo <= j < hi or subs[j].kind != kind:
            return False
        return subs[j]

    def _restore(self, row: Any, subs: list[_Sub], lo: int, hi: int) -> RowInfo | None:
        """Put the cut-out values back into ``row``; None unless markers ``lo..hi-1`` all sat at known places."""
        info = RowInfo()
        if lo == hi:
            return info
        if type(row) is not dict:
            return None
        found = 0
        params = row.get("responses_create_params")
        if type(params) is dict:
            for key in ("tools", "input"):
                sub = self._sub(params.get(key), subs, lo, hi, key)
                if sub is False:
                    return None
                if sub is not None:
                    params[key] = sub.value
                    found += 1
                    if key == "tools":
                        info.tools = sub.entry
                    else:
                        info.input_text = sub.text
        response = row.get("response")
        if type(response) is dict:
            sub = self._sub(response.get("tools"), subs, lo, hi, "tools")
            if sub is False:
                return None
            if sub is not None:
                response["tools"] = sub.value
                found += 1
        return info if found == hi - lo else None

    def _restore_list(self, text: str, items: list[Any], bounds: list[tuple[int, int]], subs: list[_Sub],
                      off: int) -> tuple[list[Any], list[tuple[int, int]], list[RowInfo | None]] | None:
        spans: list[tuple[int, int]] = []
        infos: list[RowInfo | None] = []
        j = shift = 0  # subs before the current item; how much longer the original text is up to there
        for k, (a, b) in enumerate(bounds):
            lo = j
            start = a + shift
            while j < len(subs) and subs[j].pos < b:
                shift += subs[j].orig_len - subs[j].marker_len
                j += 1
            end = b + shift
            info = self._restore(items[k], subs, lo, j)
            if info is None:  # a marker out of place: this row from its own text
                try:
                    items[k] = json.loads(text[start:end])
                except (json.JSONDecodeError, RecursionError):
                    return None
            spans.append((start + off, end + off))
            infos.append(info)
        return items, spans, infos

    # ---- row -> pivot, action
    def pivot(self, body: Any, domain: str = "tool_use", info: RowInfo | None = None) -> Pivot:
        """The pivot of a verify body, as :func:`pivot_envs.formats.nemo_gym.plain_pivot_from_row` reads it
        (same checks, same field names), with the id of the module doc."""
        if not isinstance(body, dict):
            raise BodyError("<body>", f"must be a JSON object, got {type(body).__name__}")
        try:
            if "responses_create_params" not in body:
                raise RowError("responses_create_params", "missing required field",
                               'a NeMo Gym row needs "responses_create_params": {"input": [...], "tools": [...]}')
            params = require_dict(body["responses_create_params"], "responses_create_params")
            if "input" not in params:
                raise RowError(INPUT_FIELD, "missing required field", "give the model-call input items")
            raw = params["input"]
            items = [{"role": "user", "content": raw}] if isinstance(raw, str) else require_list(raw, INPUT_FIELD)
            context: list[Message] = []
            instructions = params.get("instructions")
            if isinstance(instructions, str) and instructions:
                context.append({"role": "system", "content": instructions})
            context.extend(input_to_messages(items, INPUT_FIELD))
            tools, tools_key = self._tools(params.get("tools") or [], info)
            if "expected_action" not in body:
                raise RowError("expected_action", "missing required field",
                               'a NeMo Gym pivot row needs "expected_action": {"type": "function_call"|"message", ...}')
            expert, expert_key = self._expert(body["expected_action"])
        except BadRowError as exc:
            raise _body_error(exc) from None
        if "id" in body or "uuid" in body:  # the row's own id, as plain_pivot_from_row reads it
            pivot_id = next((str(body[k]) for k in ("id", "uuid") if body.get(k) is not None), None)
            if pivot_id is None:
                pivot_id = stable_hash(body)
        else:
            text = info.input_text if info is not None and info.input_text is not None else None
            if text is None:
                text = json.dumps(raw, ensure_ascii=False)
            pivot_id = "verify-" + _digest(text, f"\x00{instructions!r}\x00{tools_key}\x00{expert_key}")
        return Pivot(id=pivot_id, domain=domain, context=context, expert=expert, tools=tools,
                     meta={"source": "nemo_gym"})

    def parse(self, body: Any, domain: str = "tool_use", info: RowInfo | None = None) -> tuple[Pivot, Message]:
        """(pivot, action) of one verify body; :class:`BodyError` names the bad field."""
        pivot = self.pivot(body, domain, info)
        if "response" not in body:
            raise BodyError("response", "missing required field (a Responses API response with output items)")
        return pivot, action_from_response(body["response"])

    def _tools(self, tools: Any, info: RowInfo | None) -> tuple[list[Any], str]:
        entry = info.tools if info is not None else None
        if entry is None or entry.raw is not tools:
            try:
                entry = self.tools.of_value(tools) if type(tools) is list and tools else None
            except (TypeError, ValueError, RecursionError):  # not JSON (an in-process caller's objects): no cache
                entry = None
            if entry is None:
                return tools_from_responses(tools, TOOLS_FIELD), json.dumps(tools, sort_keys=True, default=repr)
        return entry.convert(), f"t{entry.serial}"

    def _expert(self, action: Any) -> tuple[Message, str]:
        key = _expected_key(action)
        if key is not None and _key_chars(key) > self.max_expert_chars:
            key = None  # a large action (a file written by a call): converted every time, not kept
        if key is None:
            return expected_to_message(action, "expected_action"), json.dumps(action, sort_keys=True, default=repr)
        hit = self._experts.get(key)
        if hit is None:
            message = expected_to_message(action, "expected_action")
            with self._lock:
                if len(self._experts) >= self.max_experts:
                    self._experts.clear()
                self._expert_serial += 1
                hit = self._experts[key] = (self._expert_serial, message)
        return hit[1], f"e{hit[0]}"


READER = RowReader()
"""The process's reader (its caches are shared by every app of the process)."""


def pivot_from_body(body: Any, domain: str = "tool_use") -> Pivot:
    """The pivot of a verify body (``responses_create_params`` + ``expected_action``)."""
    return READER.pivot(body, domain)


def parse_verify_body(body: Any, domain: str = "tool_use") -> tuple[Pivot, Message]:
    """(pivot, action) of one verify body; :class:`BodyError` names the bad field."""
    return READER.parse(body, domain)


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


def verify_rows(rows: Sequence[Any], resolver: Any, domain: str = "tool_use",
                infos: Sequence[RowInfo | None] | None = None, reader: RowReader | None = None) -> list[dict[str, Any]]:
    """Score many verify bodies, in order: the good rows in one :func:`verify_batch`, the bad ones as error entries.

    ``infos`` (from :meth:`RowReader.decode_rows`) lets the reader skip what decoding already knows.
    """
    from pivot_envs.actions import parse_action
    from pivot_envs.verifiers.batch import verify_batch

    reader = reader or READER
    out: list[dict[str, Any] | None] = [None] * len(rows)
    good: list[int] = []
    pivots: list[Pivot] = []
    actions: list[Any] = []
    for i, row in enumerate(rows):
        try:
            pivot, action = reader.parse(row, domain, infos[i] if infos is not None else None)
        except BodyError as exc:
            out[i] = error_answer(row, BodyError(f"[{i}].{exc.field}" if exc.field != "<body>" else f"[{i}]", exc.problem))
            continue
        good.append(i)
        pivots.append(pivot)
        actions.append(parse_action(action))
    if good:
        results = verify_batch(actions, pivots, resolver.for_pivot)
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
    from pivot_envs.actions import parse_action
    from pivot_envs.verifiers.batch import verify_batch

    reader = reader or READER
    text = _text_of(data)
    try:
        body, info = reader.decode_body(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise BodyError("<body>", f"not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise BodyError("<body>", f"must be a JSON object, got {type(body).__name__}")
    pivot, action = reader.parse(body, domain, info)
    result = verify_batch([parse_action(action)], [pivot], resolver.for_pivot)[0]
    out = answer(body, result)
    start = len(text) - len(text.lstrip(_WS))
    return out, _join_answers([out], [body], data, text, [(start, start + len(text.strip(_WS)))], listed=False)


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


def _decode_list(text: str) -> tuple[list[Any], list[tuple[int, int]]]:
    """A JSON list (``text`` stripped, starting with ``[``): its elements and each one's (start, end) in ``text``."""
    items: list[Any] = []
    bounds: list[tuple[int, int]] = []
    i, n = 1, len(text)
    ws = _WS
    while i < n and text[i] in ws:
        i += 1
    if i < n and text[i] == "]":
        if text[i + 1:].strip():
            raise json.JSONDecodeError("extra data", text, i + 1)
        return items, bounds
    while True:
        obj, end = _DECODER.raw_decode(text, i)
        items.append(obj)
        bounds.append((i, end))
        i = end
        while i < n and text[i] in ws:
            i += 1
        if i < n and text[i] == ",":
            i += 1
            while i < n and text[i] in ws:
                i += 1
            continue
        if i < n and text[i] == "]" and not text[i + 1:].strip():
            return items, bounds
        raise json.JSONDecodeError("expected ',' or ']'", text, i)


def decode_with_spans(raw: str) -> tuple[Any, list[str] | None]:
    """Decode a JSON body; for a list, also each element's own text (so answers can reuse it)."""
    text = raw.strip()
    if not text.startswith("["):
        return json.loads(text), None
    items, bounds = _decode_list(text)
    return items, [text[a:b] for a, b in bounds]


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
