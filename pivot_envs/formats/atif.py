"""ATIF, Harbor's Agent Trajectory Interchange Format (v1.7 and v1.8): read and written.

An ATIF document is one JSON object ``{"schema_version": "ATIF-v1.7", "session_id",
"trajectory_id", "agent": {"name", "version", "model_name", "tool_definitions"}, "steps":
[...], "extra": {...}}``. :func:`read_atif` takes a ``.json`` document, a folder of them
(searched recursively; JSON files that are not ATIF documents, such as a Harbor trial's
``config.json`` and ``result.json``, are passed over) or JSON lines, one document per line.

ATIF -> :class:`~pivot_envs.types.Trajectory` (one per document, and one per embedded
``subagent_trajectories`` entry, with id ``<parent id>/<its trajectory_id>``):

* a step of ``source`` ``system``/``user``/``agent`` -> a ``system``/``user``/``assistant``
  message whose content is the step's ``message`` (``text`` parts stay chat ``text`` parts,
  ``image`` and ``audio`` parts, which point at files, are kept as ATIF writes them); an
  agent step's empty message is ``None`` when the step calls tools or reasons (as OpenAI
  writes such a turn); ``reasoning_content`` stays on the assistant message;
* ``tool_calls[]`` ``{tool_call_id, function_name, arguments}`` -> ``{"id", "type":
  "function", "function": {"name", "arguments"}}`` with the arguments object JSON-encoded;
* ``observation.results[]`` ``{source_call_id, content}`` -> a ``tool`` message with that
  ``tool_call_id`` after the assistant message; a result without ``source_call_id`` (what a
  non-tool action got back, e.g. a terminal agent's keystrokes) -> a ``user`` message;
* ``agent.tool_definitions`` -> ``tools`` (flat Responses-style specs are nested); no
  definitions, no tools (nothing is inferred, as for OpenAI chat rows);
* ``extra.reward`` -> ``reward``;
* ``meta``: ``source: "atif"``, ``id`` (``trajectory_id``, else ``session_id``),
  ``session_id``, ``trajectory_id``; ``atif`` keeps the rest of the document (schema
  version, agent, notes, final metrics, extra) and ``atif_steps`` each step's other fields
  (``timestamp``, ``metrics``, ``is_copied_context``, ``extra`` ...) with the index of its
  message, so that nothing is lost and :func:`atif_from_trajectory` writes them back.

Trajectory -> ATIF (:func:`atif_from_trajectory`) is the inverse: a tool message joins the
observation of the agent step that made the call; what ATIF has no field for (a
``developer`` role, a tool message's ``name``, an arguments string that is not the plain
encoding) goes under ``extra.openai_chat`` of the step, result or call, and the reader
puts it back, so Trajectory -> ATIF -> Trajectory keeps the messages exactly. The
trajectory's ``meta`` and ``fixture`` go to ``extra.pivot_envs``. A pivot
(:func:`atif_from_pivot`) is written as its context followed by the expert's agent step,
with ``trajectory_id`` = the pivot id, ``session_id`` = its trajectory's id and
``extra.pivot_envs.pivot`` = the pivot's other fields. Documents are tagged
``ATIF-v1.7`` (``ATIF-v1.8`` when they hold an audio part) and are accepted by the
reference models of the ``atif`` package (``pip install pivot-envs[atif]``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterable, Iterator

from pivot_envs.formats.responses import tools_from_responses
from pivot_envs.formats.validate import (
    RowError,
    check_arguments,
    check_messages,
    check_reward,
    require_dict,
    require_list,
    require_str,
)
from pivot_envs.jsonl import BadRowError, ReadReport, as_bad_row, read_json_document, read_rows, write_jsonl
from pivot_envs.types import Fixture, Message, Pivot, Trajectory

SOURCE = "atif"
SCHEMA_VERSION = "ATIF-v1.7"
"""The tag written on documents without audio parts (v1.8 added audio; nothing else written here needs it)."""
SCHEMA_VERSION_AUDIO = "ATIF-v1.8"
CHAT_EXTRA = "openai_chat"
"""Key, in an ATIF ``extra``, of the chat-message fields ATIF has no place for."""
OURS_EXTRA = "pivot_envs"
"""Key, in the document's ``extra``, of a trajectory's meta and fixture, or a pivot's fields."""

_VERSION = re.compile(r"^ATIF-v1\.\d+$")
_ROLE = {"system": "system", "user": "user", "agent": "assistant"}
_SOURCE = {"system": "system", "developer": "system", "user": "user", "assistant": "agent"}
_STEP_KEYS = ("step_id", "source", "message", "reasoning_content", "tool_calls", "observation")
"""Step fields that become chat messages; the others are kept in ``meta["atif_steps"]``."""
_MESSAGE_KEYS: dict[Any, tuple[str, ...]] = {  # looked up by a message's role, whatever the message holds
    "system": ("role", "content"), "user": ("role", "content"),
    "assistant": ("role", "content", "reasoning_content", "tool_calls"),
    "tool": ("role", "content", "tool_call_id")}
_STEP_FIELDS = ("timestamp", "model_name", "reasoning_effort", "metrics", "llm_call_count", "is_copied_context")
"""Other step fields of ATIF v1.8, which the writer puts back from ``meta["atif_steps"]``."""
_AGENT_ONLY = ("model_name", "reasoning_effort", "metrics")
_DOCUMENT_FIELDS = ("notes", "final_metrics", "continued_trajectory_ref")
_AGENT_FIELDS = ("name", "version", "model_name", "extra")
_IMAGE_TYPES = {"jpg": "image/jpeg", "jpeg": "image/jpeg", "png": "image/png", "gif": "image/gif", "webp": "image/webp"}
_JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".ndjson")
_DOCUMENT_FIX = 'an ATIF document is an object {"schema_version": "ATIF-v1.7", "agent": {...}, "steps": [...]}'


def looks_like_atif(keys: Iterable[str]) -> bool:
    """Whether an object with these top-level keys is an ATIF document (``steps`` with ``schema_version`` or ``agent``)."""
    keys = set(keys)
    return "steps" in keys and ("schema_version" in keys or "agent" in keys)


# ---------------------------------------------------------------- ATIF -> Trajectory
def trajectories_from_atif(doc: Any, prefix: str = "", parent_id: str | None = None) -> list[Trajectory]:
    """One ATIF document -> its trajectory, then those of its embedded subagents (raises :class:`RowError`).

    ``prefix`` starts every field an error names (``subagent_trajectories[0].`` for a subagent).
    """
    doc = require_dict(doc, prefix.rstrip(".") or "<row>", _DOCUMENT_FIX)
    version = doc.get("schema_version")
    if version is None:
        raise RowError(f"{prefix}schema_version", "missing required field", 'add "schema_version": "ATIF-v1.7"')
    if not isinstance(version, str) or not _VERSION.match(version):
        raise RowError(f"{prefix}schema_version", f"not an ATIF v1 version: {version!r}",
                       'ATIF documents are tagged "ATIF-v1.N" (this reader follows v1.7 and v1.8)')
    agent = require_dict(doc.get("agent"), f"{prefix}agent", 'an object {"name", "version", ...}')
    if "steps" not in doc:
        raise RowError(f"{prefix}steps", "missing required field", "an ATIF document needs its list of steps")
    steps = require_list(doc["steps"], f"{prefix}steps", "a list of step objects")
    if not steps:
        raise RowError(f"{prefix}steps", "is empty", "a trajectory needs at least one step")
    messages, step_records = _messages_from_steps(steps, f"{prefix}steps")
    try:
        check_messages(messages, "chat messages")
    except RowError as exc:  # a backstop: the step checks above should have named the step already
        raise RowError(f"{prefix}steps -> {exc.field}", exc.problem, exc.fix) from None
    tool_defs = agent.get("tool_definitions")
    tools = tools_from_responses(tool_defs, f"{prefix}agent.tool_definitions") if tool_defs is not None else []
    extra = dict(require_dict(doc.get("extra") or {}, f"{prefix}extra"))
    reward = check_reward(extra.pop("reward", None), f"{prefix}extra.reward")
    ours = require_dict(extra.pop(OURS_EXTRA, None) or {}, f"{prefix}extra.{OURS_EXTRA}")

    meta: dict[str, Any] = {"source": SOURCE}
    meta.update(require_dict(ours.get("meta") or {}, f"{prefix}extra.{OURS_EXTRA}.meta"))
    own_id = doc.get("trajectory_id") if doc.get("trajectory_id") is not None else doc.get("session_id")
    if own_id is not None:
        meta["id"] = f"{parent_id}/{own_id}" if parent_id is not None else own_id
    for key in ("session_id", "trajectory_id"):
        if doc.get(key) is not None:
            meta[key] = doc[key]
    if parent_id is not None:
        meta["atif_parent_id"] = parent_id
    document = {k: v for k, v in doc.items()
                if k not in ("steps", "agent", "extra", "session_id", "trajectory_id", "subagent_trajectories") and v is not None}
    document["agent"] = {k: v for k, v in agent.items() if k != "tool_definitions" and v is not None}
    if extra:
        document["extra"] = extra
    meta["atif"] = document
    if step_records:
        meta["atif_steps"] = step_records
    try:
        fixture = Fixture.from_dict(ours.get("fixture"))
    except ValueError as exc:
        raise RowError(f"{prefix}extra.{OURS_EXTRA}.fixture", str(exc)) from None
    out = [Trajectory(messages=messages, tools=tools, reward=reward, meta=meta, fixture=fixture)]
    subagents = require_list(doc.get("subagent_trajectories") or [], f"{prefix}subagent_trajectories")
    for k, sub in enumerate(subagents):
        out += trajectories_from_atif(sub, f"{prefix}subagent_trajectories[{k}].",
                                      None if meta.get("id") is None else str(meta["id"]))
    return out


def _messages_from_steps(steps: list[Any], field: str) -> tuple[list[Message], list[dict[str, Any]]]:
    """Steps -> chat messages, and each step's unmapped fields as ``{"index": message index, "source", ...}``."""
    messages: list[Message] = []
    records: list[dict[str, Any]] = []
    for k, step in enumerate(steps):
        f = f"{field}[{k}]"
        step = require_dict(step, f, "a step object")
        source = step.get("source")
        if source not in _ROLE:
            raise RowError(f"{f}.source", f"unknown step source: {source!r}", "use system, user or agent")
        if "message" not in step:
            raise RowError(f"{f}.message", "missing required field", 'give the step a "message" (a string, "" if none)')
        calls = step.get("tool_calls")
        if calls is not None and source != "agent":
            raise RowError(f"{f}.tool_calls", f"only agent steps carry tool calls: source is {source!r}")
        index = len(messages)
        record: dict[str, Any] = {"index": index, "source": source}
        tool_calls = [_tool_call_from_atif(c, f"{f}.tool_calls[{j}]", record)
                      for j, c in enumerate(require_list(calls or [], f"{f}.tool_calls", "a list of tool calls"))]
        reasoning = step.get("reasoning_content")
        acts = bool(tool_calls) or reasoning is not None
        message: Message = {"role": _ROLE[source],
                            "content": _message_content(step["message"], f"{f}.message", source, acts)}
        if reasoning is not None:
            message["reasoning_content"] = require_str(reasoning, f"{f}.reasoning_content")
        if tool_calls:
            message["tool_calls"] = tool_calls
        step_extra = _split_chat_extra(step.get("extra"), f"{f}.extra", message)
        messages.append(message)
        record.update({key: value for key, value in step.items()
                       if key not in _STEP_KEYS and key != "extra" and value is not None})
        if step_extra:
            record["extra"] = step_extra
        observation = step.get("observation")
        if observation is not None:
            observation = require_dict(observation, f"{f}.observation", 'an object {"results": [...]}')
            call_ids = {c["id"] for c in tool_calls}
            results = require_list(observation.get("results"), f"{f}.observation.results", "a list of results")
            for j, result in enumerate(results):
                messages.append(_result_message(result, f"{f}.observation.results[{j}]", source, call_ids, record, len(messages)))
        if len(record) > 2:
            records.append(record)
    return messages, records


def _tool_call_from_atif(call: Any, f: str, record: dict[str, Any]) -> dict[str, Any]:
    """An ATIF tool call -> an OpenAI one; its ``extra`` (but a saved arguments string) goes to ``record``."""
    call = require_dict(call, f, 'a tool call object {"tool_call_id", "function_name", "arguments"}')
    call_id = call.get("tool_call_id")
    if not isinstance(call_id, str) or not call_id:
        raise RowError(f"{f}.tool_call_id", "tool call without tool_call_id", "give every tool call a unique string id")
    name = call.get("function_name")
    if not isinstance(name, str) or not name:
        raise RowError(f"{f}.function_name", "missing function name")
    arguments = call.get("arguments")
    if isinstance(arguments, str):  # some writers store the OpenAI string; accept it when it encodes an object
        arguments = check_arguments(arguments, f"{f}.arguments")
    arguments = require_dict(arguments, f"{f}.arguments", 'a JSON object of arguments ({} when there are none)')
    extra = dict(require_dict(call.get("extra") or {}, f"{f}.extra"))
    chat = require_dict(extra.pop(CHAT_EXTRA, None) or {}, f"{f}.extra.{CHAT_EXTRA}")
    encoded = chat.get("arguments")
    if not isinstance(encoded, str):
        encoded = json.dumps(arguments, ensure_ascii=False)
    if extra:
        record.setdefault("tool_call_extra", {})[call_id] = extra
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": encoded}}


def _result_message(result: Any, f: str, source: str, call_ids: set[str], record: dict[str, Any], index: int) -> Message:
    """One observation result -> a tool message (or, without ``source_call_id``, a message of the step's side)."""
    result = require_dict(result, f, 'a result object {"source_call_id", "content"}')
    call_id = result.get("source_call_id")
    if call_id is not None:
        call_id = require_str(call_id, f"{f}.source_call_id")
        if call_id not in call_ids:
            raise RowError(f"{f}.source_call_id", f"answers no tool call of this step: {call_id!r}",
                           "set source_call_id to the tool_call_id of a call in the same step, or null for a "
                           "result of a non-tool action")
        message: Message = {"role": "tool", "tool_call_id": call_id}
    else:
        message = {"role": "user" if source == "agent" else _ROLE[source]}
    content = _content_from_atif(result.get("content"), f"{f}.content")
    message["content"] = "" if content is None else content
    rest = {k: v for k, v in result.items() if k not in ("source_call_id", "content", "extra") and v is not None}
    extra = _split_chat_extra(result.get("extra"), f"{f}.extra", message)
    if extra:
        rest["extra"] = extra
    if rest:
        record.setdefault("results", []).append({"index": index, **rest})
    return message


def _split_chat_extra(extra: Any, f: str, message: Message) -> dict[str, Any]:
    """Put the saved chat fields of an ATIF ``extra`` back on ``message``; returns the rest of ``extra``."""
    if extra is None:
        return {}
    extra = dict(require_dict(extra, f))
    chat = extra.pop(CHAT_EXTRA, None)
    if chat is not None:
        message.update(require_dict(chat, f"{f}.{CHAT_EXTRA}"))
    return extra


def _message_content(value: Any, f: str, source: str, acts: bool) -> Any:
    """A step's ``message`` as chat content: an agent step's ``""`` is ``None`` when it calls tools or reasons."""
    content = _content_from_atif(value, f)
    if content is None:
        raise RowError(f, "is null", 'give the step a string message ("" if none)')
    return None if source == "agent" and acts and content == "" else content


def _content_from_atif(value: Any, f: str) -> Any:
    """A string, ``None``, or a list of parts (``text`` -> chat text part; ``image``/``audio`` kept as they are)."""
    if value is None or isinstance(value, str):
        return value
    parts = require_list(value, f, "a string or a list of content parts")
    out = []
    for k, part in enumerate(parts):
        part = require_dict(part, f"{f}[{k}]", "a content part object")
        kind = part.get("type")
        if kind == "text":
            out.append({"type": "text", "text": require_str(part.get("text"), f"{f}[{k}].text")})
        elif kind in ("image", "audio"):
            source = require_dict(part.get("source"), f"{f}[{k}].source", 'an object {"media_type", "path"}')
            require_str(source.get("path"), f"{f}[{k}].source.path")
            out.append(dict(part))
        else:
            raise RowError(f"{f}[{k}].type", f"unknown content part type: {kind!r}", "use text, image or audio")
    return out


# ---------------------------------------------------------------- reading files
def read_atif(path: str | Path, *, skip_bad: bool = False, report: ReadReport | None = None) -> list[Trajectory]:
    """Read an ATIF ``.json`` document, a folder of them (recursively) or JSON lines of documents (``.jsonl``)."""
    path = Path(path)
    report = report if report is not None else ReadReport()
    if path.is_dir():
        return _read_folder(path, skip_bad, report)
    if path.name.lower().endswith(_JSONL_SUFFIXES):
        return read_rows(path, trajectories_from_atif, skip_bad=skip_bad, report=report)
    try:
        data = read_json_document(path)
    except BadRowError as exc:
        return _bad(exc, skip_bad, report)
    return _read_document(path, data, skip_bad, report)


def _read_folder(folder: Path, skip_bad: bool, report: ReadReport) -> list[Trajectory]:
    """Every ATIF document among the folder's ``.json``/``.json.gz`` files, in path order."""
    files = sorted(f for f in folder.rglob("*") if f.is_file() and f.name.lower().endswith((".json", ".json.gz")))
    if not files:
        raise FileNotFoundError(f"{folder}: no .json files in this folder (ATIF documents) and no .traj files "
                                "(SWE-agent); give a folder of trajectories or one file")
    out: list[Trajectory] = []
    found = bad = 0
    passed_over: str | None = None
    for file in files:
        try:
            data = read_json_document(file)
        except BadRowError as exc:
            bad += 1
            out += _bad(exc, skip_bad, report)
            continue
        if not (isinstance(data, dict) and looks_like_atif(data)):
            passed_over = passed_over or f"{file} holds {_shape(data)}"
            continue
        found += 1
        out += _read_document(file, data, skip_bad, report)
    if not found and not bad:
        raise ValueError(f"{folder}: none of its {len(files)} .json files is an ATIF document (e.g. {passed_over}); "
                         f"{_DOCUMENT_FIX}")
    return out


def _read_document(path: Path, data: Any, skip_bad: bool, report: ReadReport) -> list[Trajectory]:
    """One parsed whole-file document; errors name the file, line 1 and the field."""
    try:
        trajectories = trajectories_from_atif(data)
    except BadRowError as exc:
        fix = exc.fix
        if exc.field == "<row>" and isinstance(data, list):
            fix = f"several documents go one per line in a .jsonl file, e.g.  jq -c '.[]' {path} > docs.jsonl"
        return _bad(BadRowError(str(path), 1, exc.field, exc.problem, fix), skip_bad, report)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return _bad(as_bad_row(str(path), 1, exc), skip_bad, report)
    report.read += 1
    return trajectories


def _bad(err: BadRowError, skip_bad: bool, report: ReadReport) -> list[Trajectory]:
    if not skip_bad:
        raise err
    report.add_bad(err)
    return []


def _shape(data: Any) -> str:
    if isinstance(data, dict):
        return f"an object with keys {sorted(data)[:6]}"
    return "a list" if isinstance(data, list) else f"a {type(data).__name__} value"


# ---------------------------------------------------------------- Trajectory / Pivot -> ATIF
def atif_from_trajectory(traj: Trajectory) -> dict[str, Any]:
    """A trajectory as one ATIF document (see the module docstring); ValueError names a message ATIF cannot hold."""
    meta = dict(traj.meta)
    read = meta.pop("atif", None)
    read = read if isinstance(read, dict) else {}
    records = meta.pop("atif_steps", None)
    steps, at_index = _steps_from_messages(traj.messages)
    _restore_step_fields(records if isinstance(records, list) else [], at_index)
    read_agent = read.get("agent")
    read_agent = read_agent if isinstance(read_agent, dict) else {}
    agent = {k: read_agent[k] for k in _AGENT_FIELDS if read_agent.get(k) is not None}
    agent.setdefault("name", str(meta.get("source") or "unknown"))
    agent.setdefault("version", "unknown")
    if traj.tools:
        agent["tool_definitions"] = traj.tools
    session_id, trajectory_id = meta.pop("session_id", None), meta.pop("trajectory_id", None)
    own_id = meta.pop("id", None)
    meta.pop("atif_parent_id", None)
    document = {k: read[k] for k in _DOCUMENT_FIELDS if read.get(k) is not None}
    extra = dict(read["extra"]) if isinstance(read.get("extra"), dict) else {}
    if traj.reward is not None:
        extra["reward"] = traj.reward
    ours: dict[str, Any] = {}
    if meta and meta != {"source": SOURCE}:
        ours["meta"] = meta
    if traj.fixture is not None:
        ours["fixture"] = traj.fixture.to_dict()
    if ours:
        extra[OURS_EXTRA] = ours
    doc: dict[str, Any] = {"schema_version": _version_for(steps)}
    doc["session_id"] = str(session_id) if session_id is not None else None
    doc["trajectory_id"] = str(next(i for i in (trajectory_id, own_id, traj.id) if i is not None))
    doc.update({"agent": agent, "steps": steps, **document})
    if extra:
        doc["extra"] = extra
    return {k: v for k, v in doc.items() if v is not None}


def atif_from_pivot(pivot: Pivot) -> dict[str, Any]:
    """A pivot as one ATIF document: its context, then the expert's agent step (the last step)."""
    messages = [*pivot.context, pivot.expert]
    steps, _ = _steps_from_messages(messages, f"pivot {pivot.id}: messages")
    rest = {k: v for k, v in pivot.to_dict().items() if k not in ("context", "expert", "tools")}
    extra: dict[str, Any] = {}
    if pivot.meta.get("trajectory_reward") is not None:
        extra["reward"] = pivot.meta["trajectory_reward"]
    extra[OURS_EXTRA] = {"pivot": rest}
    source = pivot.meta.get("source")
    agent: dict[str, Any] = {"name": str(source) if source and source != SOURCE else "unknown", "version": "unknown"}
    if pivot.tools:
        agent["tool_definitions"] = pivot.tools
    doc: dict[str, Any] = {"schema_version": _version_for(steps)}
    if pivot.meta.get("trajectory_id") is not None:
        doc["session_id"] = str(pivot.meta["trajectory_id"])
    doc.update({"trajectory_id": pivot.id, "agent": agent, "steps": steps, "extra": extra})
    return doc


def _steps_from_messages(messages: list[Message], where: str = "messages") -> tuple[list[dict[str, Any]], dict[int, Any]]:
    """Chat messages -> ATIF steps; also each message index -> the step (or result) it became."""
    steps: list[dict[str, Any]] = []
    at_index: dict[int, dict[str, Any]] = {}
    agent_step: dict[str, Any] | None = None
    for i, m in enumerate(messages):
        role = m.get("role")
        chat = {k: v for k, v in m.items() if k not in _MESSAGE_KEYS.get(role, ("role", "content"))}
        if role == "tool":
            call_id = m.get("tool_call_id")
            called = {c["tool_call_id"] for c in (agent_step or {}).get("tool_calls") or []}
            if call_id not in called:
                raise ValueError(f"{where}[{i}]: a tool message answering {call_id!r}, which the assistant message "
                                 "before it did not call; ATIF keeps a tool result in the agent step that made the call")
            result: dict[str, Any] = {"source_call_id": call_id}
            result["content"] = _content_to_atif(m.get("content"), f"{where}[{i}].content", chat, "tool", False)
            if chat:
                result["extra"] = {CHAT_EXTRA: chat}
            assert agent_step is not None  # it made the call
            agent_step["observation"]["results"].append(result)
            at_index[i] = result
            continue
        if role not in _SOURCE:
            raise ValueError(f"{where}[{i}].role: {role!r} has no ATIF step source (system, developer, user, "
                             "assistant and tool messages do)")
        source = _SOURCE[role]
        if role == "developer":
            chat["role"] = "developer"
        step: dict[str, Any] = {"step_id": len(steps) + 1, "source": source}
        calls = [_tool_call_to_atif(c, f"{where}[{i}].tool_calls[{j}]") for j, c in enumerate(m.get("tool_calls") or [])]
        acts = bool(calls) or m.get("reasoning_content") is not None
        step["message"] = _content_to_atif(m.get("content"), f"{where}[{i}].content", chat, source, acts)
        if source == "agent":
            if m.get("reasoning_content") is not None:
                step["reasoning_content"] = m["reasoning_content"]
            if calls:
                step["tool_calls"] = calls
                step["observation"] = {"results": []}
        if chat:
            step["extra"] = {CHAT_EXTRA: chat}
        steps.append(step)
        at_index[i] = step
        agent_step = step if source == "agent" else None
    for step in steps:
        if step.get("observation") == {"results": []}:
            del step["observation"]
    return steps, at_index


def _tool_call_to_atif(call: dict[str, Any], f: str) -> dict[str, Any]:
    """An OpenAI tool call -> ATIF; an arguments string that is not the plain encoding is kept in ``extra``."""
    fn = call.get("function") or {}
    encoded = fn.get("arguments") or "{}"
    try:
        arguments = json.loads(encoded) if isinstance(encoded, str) else encoded
    except json.JSONDecodeError as exc:
        raise ValueError(f"{f}.function.arguments: invalid JSON ({exc.msg}); ATIF stores the arguments as an object") from None
    if not isinstance(arguments, dict):
        raise ValueError(f"{f}.function.arguments: must encode a JSON object; ATIF stores the arguments as an object")
    out: dict[str, Any] = {"tool_call_id": call.get("id"), "function_name": fn.get("name"), "arguments": arguments}
    if encoded != json.dumps(arguments, ensure_ascii=False):
        out["extra"] = {CHAT_EXTRA: {"arguments": encoded}}
    return out


def _content_to_atif(content: Any, f: str, chat: dict[str, Any], source: str, acts: bool) -> Any:
    """Chat content -> an ATIF message or result content; what would not read back the same is saved in ``chat``."""
    if content is None:
        out: Any = ""
    elif isinstance(content, str):
        out = content
    else:
        out = [_part_to_atif(part, f"{f}[{k}]") for k, part in enumerate(content)]
    back = _content_from_atif(out, f)
    if source in _ROLE:  # a step message (not a tool result): the reader's "" -> None rule applies
        back = None if source == "agent" and acts and back == "" else back
    elif back is None:
        back = ""
    if back != content:
        chat["content"] = content
    return out


def _part_to_atif(part: Any, f: str) -> dict[str, Any]:
    """A chat content part -> an ATIF one (text, image with its media type, or an ATIF image/audio part)."""
    kind = part.get("type") if isinstance(part, dict) else None
    if kind == "text":
        return {"type": "text", "text": str(part.get("text", ""))}
    if kind in ("image", "audio") and isinstance(part.get("source"), dict):
        return dict(part)
    if kind == "image_url":
        url = (part.get("image_url") or {}).get("url") if isinstance(part.get("image_url"), dict) else part.get("image_url")
        media = _image_media_type(str(url or ""))
        if media is None:
            raise ValueError(f"{f}: cannot tell the media type of image {str(url)[:60]!r}; ATIF image parts need "
                             "jpeg, png, gif or webp (a data: URL or a file name with that extension)")
        return {"type": "image", "source": {"media_type": media, "path": str(url)}}
    raise ValueError(f"{f}: a {kind!r} content part has no ATIF form (ATIF parts are text, image and audio)")


def _image_media_type(url: str) -> str | None:
    if url.startswith("data:"):
        media = url[5:].split(";", 1)[0].split(",", 1)[0]
        return media if media in _IMAGE_TYPES.values() else None
    ext = url.split("?", 1)[0].rsplit(".", 1)[-1].lower() if "." in url else ""
    return _IMAGE_TYPES.get(ext)


def _restore_step_fields(records: list[Any], at_index: dict[Any, Any]) -> None:
    """Put the step fields the reader kept in ``meta["atif_steps"]`` back on the steps they came from (a record's
    ``index`` is whatever the file held: any key looks up ``at_index``)."""
    for record in records:
        if not isinstance(record, dict):
            continue
        step = at_index.get(record.get("index"))
        if step is None or step.get("source") != record.get("source"):
            continue  # the messages changed since they were read: the record no longer fits
        for key, value in record.items():
            if key in _STEP_FIELDS and (key not in _AGENT_ONLY or step["source"] == "agent"):
                step[key] = value
            elif key == "extra" and isinstance(value, dict):
                step["extra"] = {**value, **(step.get("extra") or {})}
            elif key == "tool_call_extra" and isinstance(value, dict):
                for call in step.get("tool_calls") or []:
                    if call["tool_call_id"] in value:
                        call["extra"] = {**value[call["tool_call_id"]], **(call.get("extra") or {})}
            elif key == "results" and isinstance(value, list):
                for item in (v for v in value if isinstance(v, dict)):
                    result = at_index.get(item.get("index"))
                    if result is None or "source_call_id" not in result:
                        continue
                    if isinstance(item.get("extra"), dict):
                        result["extra"] = {**item["extra"], **(result.get("extra") or {})}
                    if item.get("subagent_trajectory_ref") is not None:
                        result["subagent_trajectory_ref"] = item["subagent_trajectory_ref"]


def _version_for(steps: list[dict[str, Any]]) -> str:
    """``ATIF-v1.8`` when an audio part appears (v1.8 added them), else ``ATIF-v1.7``."""
    def has_audio(content: Any) -> bool:
        return isinstance(content, list) and any(isinstance(p, dict) and p.get("type") == "audio" for p in content)

    for step in steps:
        results = (step.get("observation") or {}).get("results") or []
        if has_audio(step.get("message")) or any(has_audio(r.get("content")) for r in results):
            return SCHEMA_VERSION_AUDIO
    return SCHEMA_VERSION


def iter_atif_documents(items: Iterable[Trajectory | Pivot]) -> Iterator[dict[str, Any]]:
    """Trajectories and pivots as ATIF documents, one each; errors name the trajectory or pivot."""
    for item in items:
        try:
            yield atif_from_pivot(item) if isinstance(item, Pivot) else atif_from_trajectory(item)
        except ValueError as exc:
            kind = "pivot" if isinstance(item, Pivot) else "trajectory"
            text = str(exc)
            raise ValueError(text if text.startswith(kind) else f"{kind} {item.id}: {text}") from None


def write_atif(items: Iterable[Trajectory | Pivot], path: str | Path) -> int:
    """Write trajectories or pivots as JSON lines, one ATIF document per line (``.gz`` compresses); returns the count."""
    name = Path(path).name.lower()
    if name.endswith((".json", ".json.gz")):
        raise ValueError(f"{path}: ATIF output is JSON lines, one document per line: name the file .jsonl "
                         f"(e.g. {Path(path).name.split('.')[0]}.jsonl)")
    return write_jsonl(path, iter_atif_documents(items))
