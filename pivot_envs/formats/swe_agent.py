"""SWE-agent trajectories (``.traj`` files, a folder of them, or a JSONL of them).

A ``.traj`` file is one JSON object with ``history`` (the messages the model
saw, OpenAI-style with ``tool_calls``, plus SWE-agent keys ``thought``,
``action``, ``agent``, ``message_type``, ``tool_call_ids``), and optionally
``info`` (``exit_status``, ``submission`` ...), ``trajectory`` (per-step
records), ``environment`` and ``replay_config`` (the run's config, a dict or
a JSON string). The reader makes one :class:`Trajectory` per file:

* **messages**: ``role``/``content``/``tool_calls``/``tool_call_id``/``name``
  of each history entry; a tool message gets ``tool_call_id =
  tool_call_ids[0]``.
* Nothing is lost: ``thought`` and ``action`` go to
  ``meta["swe_agent_actions"] = [{"index": i, "thought", "action"}, ...]`` and
  every other removed key to ``meta["swe_agent_message_extras"] = [{"index":
  i, ...}]`` (``index`` is the position in ``messages``/``history``;
  ``tool_call_id_added: true`` marks an id the reader copied from
  ``tool_call_ids``); :func:`swe_agent_history` puts them back.
* **reward**: ``1.0`` when ``info.exit_status == "submitted"``, ``0.0`` for
  any other exit status, ``None`` without one (an explicit boolean
  ``info.resolved`` wins). It says the agent submitted a patch, not that the
  tests pass; ``meta["exit_status"]`` keeps the raw status.
* **tools**: parsed from ``replay_config.agent.tools.command_docs`` (names,
  docstrings, typed arguments, required flags), ``meta["tools_source"] =
  "replay_config"``. Without a config they are inferred from the calls as for
  tau-bench (``meta["tools_inferred"] = True``); a called tool the config does
  not declare is added the same way.
* **meta** also holds ``source``, ``id`` (``swe-agent/<instance id>``),
  ``instance_id``, ``submission``, ``swe_agent_info`` (the rest of ``info``),
  ``swe_agent_config`` (image, repo, base commit, model) and
  ``swe_agent_states`` (each step's ``state``, e.g. open file and cwd). The
  ``trajectory`` steps otherwise repeat the history and are not kept.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pivot_envs.formats.infer_tools import infer_tools
from pivot_envs.formats.validate import RowError, check_messages, require_dict, require_list
from pivot_envs.jsonl import BadRowError, ReadReport, as_bad_row, read_json_document, read_rows
from pivot_envs.types import Message, Tool, Trajectory

SOURCE = "swe-agent"
MESSAGE_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name")
"""History-entry keys that stay in the chat message."""
ADDED_ID_KEY = "tool_call_id_added"
"""Marker in ``swe_agent_message_extras``: the reader set ``tool_call_id`` from ``tool_call_ids``."""

_ARG_LINE = re.compile(r"^\s*-\s*(?P<name>[^\s(]+)\s*\((?P<type>[^)]*)\)\s*(?:\[(?P<req>required|optional)\])?\s*:?\s*(?P<desc>.*)$")
_KEY_LINE = re.compile(r"^(docstring|signature|arguments):\s*(.*)$")
_DOC_TYPES = {"string": "string", "str": "string", "integer": "integer", "int": "integer", "number": "number",
              "float": "number", "boolean": "boolean", "bool": "boolean", "array": "array", "list": "array",
              "object": "object", "dict": "object"}


def trajectory_from_swe(data: Any, name_hint: str | None = None) -> Trajectory:
    """One SWE-agent trajectory object -> Trajectory (tools from the config, else left for inference)."""
    data = require_dict(data, "<row>", "a SWE-agent trajectory object with a 'history' list")
    if "history" not in data:
        raise RowError("history", "missing required field", "a SWE-agent trajectory needs its 'history' of messages")
    history = require_list(data["history"], "history", "a list of messages")
    messages: list[Message] = []
    actions: list[dict[str, Any]] = []
    extras: list[dict[str, Any]] = []
    for i, entry in enumerate(history):
        entry = require_dict(entry, f"history[{i}]", "a message object")
        message = {k: entry[k] for k in MESSAGE_KEYS if k in entry}
        rest = {k: v for k, v in entry.items() if k not in MESSAGE_KEYS}
        ids = rest.get("tool_call_ids")
        if message.get("role") == "tool" and "tool_call_id" not in message and ids is not None:
            ids = require_list(ids, f"history[{i}].tool_call_ids", "a list of tool-call ids")
            if ids:
                message["tool_call_id"] = ids[0]
                rest[ADDED_ID_KEY] = True
        if "thought" in rest or "action" in rest:
            actions.append({"index": i, "thought": rest.pop("thought", None), "action": rest.pop("action", None)})
        if rest:
            extras.append({"index": i, **rest})
        messages.append(message)
    check_messages(messages, "history")

    info = require_dict(data.get("info") or {}, "info")
    config = _replay_config(data.get("replay_config"))
    instance_id = _dig(config, "problem_statement", "id") or data.get("instance_id") or name_hint
    meta: dict[str, Any] = {"source": SOURCE}
    if instance_id is not None:
        meta["id"] = f"{SOURCE}/{instance_id}"
        meta["instance_id"] = instance_id
    if "exit_status" in info:
        meta["exit_status"] = info["exit_status"]
    if "submission" in info:
        meta["submission"] = info["submission"]
    rest_info = {k: v for k, v in info.items() if k not in ("exit_status", "submission")}
    if rest_info:
        meta["swe_agent_info"] = rest_info
    if data.get("environment") is not None:
        meta["environment"] = data["environment"]
    summary = _config_summary(config)
    if summary:
        meta["swe_agent_config"] = summary
    steps = data.get("trajectory")
    if isinstance(steps, list) and any(isinstance(s, dict) and "state" in s for s in steps):
        meta["swe_agent_states"] = [s.get("state") if isinstance(s, dict) else None for s in steps]
    meta["swe_agent_actions"] = actions
    meta["swe_agent_message_extras"] = extras

    docs = _dig(config, "agent", "tools", "command_docs")
    tools = tools_from_command_docs(docs) if isinstance(docs, str) else []
    meta["tools_source"] = "replay_config" if tools else "inferred"
    meta["tools_inferred"] = not tools
    return Trajectory(messages=messages, tools=tools, reward=reward_from_info(info), meta=meta)


def reward_from_info(info: dict[str, Any]) -> float | None:
    """``info.resolved`` (bool) if present, else 1.0 for exit status ``submitted``, 0.0 for another, None without."""
    if isinstance(info.get("resolved"), bool):
        return float(info["resolved"])
    status = info.get("exit_status")
    if status is None:
        return None
    return 1.0 if status == "submitted" else 0.0


def tools_from_command_docs(docs: str) -> list[Tool]:
    """Parse SWE-agent's ``command_docs`` (``name:`` / ``docstring:`` / ``arguments:`` blocks) into OpenAI specs."""
    specs: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    section = None
    for line in docs.splitlines():
        if not line.strip():
            continue
        if not line[0].isspace() and line.rstrip().endswith(":"):
            current = {"name": line.strip()[:-1].strip(), "description": "", "properties": {}, "required": []}
            specs.append(current)
            section = None
            continue
        if current is None:
            continue
        key = _KEY_LINE.match(line.strip())
        if key:
            section = key.group(1)
            if section == "docstring":
                current["description"] = key.group(2).strip()
            continue
        if section == "arguments":
            arg = _ARG_LINE.match(line)
            if arg:
                prop: dict[str, Any] = {"type": _DOC_TYPES.get(arg.group("type").strip().lower(), "string")}
                if arg.group("desc"):
                    prop["description"] = arg.group("desc").strip()
                current["properties"][arg.group("name")] = prop
                if arg.group("req") == "required":
                    current["required"].append(arg.group("name"))
        elif section == "docstring":
            current["description"] = (current["description"] + " " + line.strip()).strip()
    return [
        {"type": "function", "function": {
            "name": s["name"],
            "description": s["description"],
            "parameters": {"type": "object", "properties": s["properties"], "required": s["required"]},
        }}
        for s in specs if s["name"]
    ]


def swe_agent_history(traj: Trajectory) -> list[dict[str, Any]]:
    """Rebuild the SWE-agent ``history`` entries (messages plus the keys the reader moved into meta)."""
    history = [dict(m) for m in traj.messages]
    for item in traj.meta.get("swe_agent_actions") or []:
        entry = history[item["index"]]
        for key in ("thought", "action"):
            if item.get(key) is not None:
                entry[key] = item[key]
    for item in traj.meta.get("swe_agent_message_extras") or []:
        history[item["index"]].update({k: v for k, v in item.items() if k != "index"})
    for entry in history:
        if entry.pop(ADDED_ID_KEY, False):
            entry.pop("tool_call_id", None)
    return history


def read_swe_agent(path: str | Path, *, skip_bad: bool = False, report: ReadReport | None = None) -> list[Trajectory]:
    """Read a ``.traj`` file, a folder holding ``.traj`` files (recursively) or a JSONL of trajectory objects."""
    path = Path(path)
    report = report if report is not None else ReadReport()
    if path.is_dir():
        files = sorted(f for f in path.rglob("*.traj") if f.is_file())
        if not files:
            raise FileNotFoundError(f"{path}: no .traj files in this folder")
        trajectories = [t for f in files for t in _read_document(f, skip_bad, report)]
    elif _is_jsonl(path):
        trajectories = read_rows(path, trajectory_from_swe, skip_bad=skip_bad, report=report)
    else:
        trajectories = _read_document(path, skip_bad, report)
    _fill_tools(trajectories)
    return trajectories


def _read_document(path: Path, skip_bad: bool, report: ReadReport) -> list[Trajectory]:
    """One whole-file JSON trajectory; errors name the file, line 1 (or the JSON error's line) and the field."""
    try:
        data = read_json_document(path)
    except BadRowError as exc:
        err = exc
    else:
        try:
            traj = trajectory_from_swe(data, _stem(path))
        except BadRowError as exc:
            err = BadRowError(str(path), 1, exc.field, exc.problem, exc.fix)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            err = as_bad_row(str(path), 1, exc)
        else:
            report.read += 1
            return [traj]
    if not skip_bad:
        raise err
    report.add_bad(err)
    return []


def _fill_tools(trajectories: list[Trajectory]) -> None:
    """Infer specs (over all trajectories without a config) and add called tools a config did not declare."""
    inferred = {t["function"]["name"]: t for t in infer_tools(t.messages for t in trajectories)}
    for traj in trajectories:
        if traj.meta.get("tools_inferred"):
            names = {c["function"]["name"] for m in traj.messages for c in m.get("tool_calls") or []}
            traj.tools = [json.loads(json.dumps(inferred[n])) for n in sorted(names) if n in inferred]
            continue
        declared = {t["function"]["name"] for t in traj.tools}
        missing = sorted({c["function"]["name"] for m in traj.messages for c in m.get("tool_calls") or []} - declared)
        if missing:
            own = {t["function"]["name"]: t for t in infer_tools([traj.messages])}
            traj.tools = traj.tools + [own[n] for n in missing if n in own]
            traj.meta["tools_inferred"] = True
            traj.meta["tools_source"] = "replay_config+inferred"


def _replay_config(raw: Any) -> dict[str, Any]:
    if raw is None:
        return {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise RowError("replay_config", f"invalid JSON string: {exc.msg} at column {exc.colno}") from None
    return require_dict(raw, "replay_config", "an object or a JSON string of one")


def _config_summary(config: dict[str, Any]) -> dict[str, Any]:
    fields = {
        "image": _dig(config, "env", "deployment", "image"),
        "repo_name": _dig(config, "env", "repo", "repo_name"),
        "base_commit": _dig(config, "env", "repo", "base_commit"),
        "model": _dig(config, "agent", "model", "name"),
    }
    return {k: v for k, v in fields.items() if v is not None}


def _dig(data: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def _is_jsonl(path: Path) -> bool:
    name = path.name.lower()
    return name.endswith((".jsonl", ".jsonl.gz", ".ndjson"))


def _stem(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".traj", ".json"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name
