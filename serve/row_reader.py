"""Fast decoding of NeMo Gym verify rows into (pivot, action): :class:`RowReader`, the process's :data:`READER`.

A row is mostly its tools list (a tool_use row is ~11 kB, 7 kB of it tools) and a dataset's rows usually
share one, so the reader keeps caches that never change an answer:

* a ``"tools": [...]`` text already seen (keyed on the exact text) is not decoded again: it is swapped
  for a marker string before ``json.loads`` and the cached list put back where the marker landed (only
  at ``responses_create_params.tools`` and ``response.tools``; a marker anywhere else, or a row that
  does not decode, falls back to the row's own text, so a body is accepted or refused as ``json.loads``
  would);
* a tools list's chat specs are converted once per distinct list (by its text, or for rows given as
  dicts by equal value), the expert message once per distinct ``expected_action``;
* a row without ``id``/``uuid`` gets a digest of its input, tools and expected action as pivot id, so
  verifiers' per-pivot caches hit for every sample of a pivot (and never mix two pivots);
* every cache is bounded (by count, and the tools cache by characters), so distinct rows cannot grow memory.

The conversation (``input`` -> chat context) is still converted and validated for every row.
:class:`BodyError` and :func:`action_from_response` live here (re-exported by
:mod:`pivot_envs.serve.nemo_gym`) so the reader needs no import of the protocol module.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import threading
from dataclasses import dataclass
from typing import Any

from pivot_envs.formats.responses import expected_to_message, input_to_messages, tools_from_responses
from pivot_envs.formats.validate import RowError, require_dict, require_list
from pivot_envs.jsonl import BadRowError
from pivot_envs.types import Message, Pivot, stable_hash

TOOLS_FIELD = "responses_create_params.tools"
INPUT_FIELD = "responses_create_params.input"


class BodyError(ValueError):
    """A malformed request body; ``field`` names the offending field (dotted path, ``[i]`` indexes)."""

    def __init__(self, field: str, problem: str):
        super().__init__(f"field '{field}': {problem}")
        self.field, self.problem = field, problem

    def detail(self) -> dict[str, Any]:
        return {"field": self.field, "error": self.problem, "message": str(self)}


def body_error(exc: BadRowError) -> BodyError:
    return BodyError(exc.field, exc.problem + (f" (fix: {exc.fix})" if exc.fix else ""))


def action_from_response(response: Any, field: str = "response") -> Message:
    """A Responses API response -> the assistant message it represents (see :mod:`pivot_envs.serve.nemo_gym`)."""
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
JSON_WHITESPACE = " \t\n\r"
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
        text = raw.strip(JSON_WHITESPACE)
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
            while p < n and text[p] in JSON_WHITESPACE:
                p += 1
            if p < n and text[p] == ":":
                p += 1
                while p < n and text[p] in JSON_WHITESPACE:
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
            raise body_error(exc) from None
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


def _decode_list(text: str) -> tuple[list[Any], list[tuple[int, int]]]:
    """A JSON list (``text`` stripped, starting with ``[``): its elements and each one's (start, end) in ``text``."""
    items: list[Any] = []
    bounds: list[tuple[int, int]] = []
    i, n = 1, len(text)
    ws = JSON_WHITESPACE
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
