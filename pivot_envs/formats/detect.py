"""Tell a file's format from its name and the keys of its first row.

==============  ==============================================================
format          recognised by
==============  ==============================================================
``swe_agent``   a folder of ``.traj`` files, a ``.traj`` file, or rows with ``history``
``atif``        a folder of ``.json`` files (and no ``.traj``), a ``.json`` object or rows with ``steps`` and
                ``schema_version`` or ``agent`` (Harbor's ATIF)
``tau2_tasks``  a ``.json`` list of tau2-bench tasks (``user_scenario`` and ``evaluation_criteria``)
``nemo_gym``    rows with ``responses_create_params`` or ``expected_action``
``pivots``      rows with ``context`` and ``expert``
``tau_bench``   rows with ``messages`` (or ``traj``) and ``task_id`` but no ``tools``
``openai``      rows with ``messages``
==============  ==============================================================
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from pivot_envs.formats.atif import looks_like_atif
from pivot_envs.jsonl import BadRowError, iter_json_lines, iter_text_lines, read_json_document

TRAJECTORY_FORMATS = ("openai", "tau_bench", "swe_agent", "tau2_tasks", "atif")
PIVOT_FORMATS = ("pivots", "nemo_gym")
_PEEK_LINES = 50


def detect_format(path: str | Path) -> str:
    """The format of ``path`` (one of :data:`TRAJECTORY_FORMATS` + :data:`PIVOT_FORMATS`); ValueError if unknown."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file or folder")
    if path.is_dir():
        if next(path.rglob("*.traj"), None) is not None:
            return "swe_agent"
        if any(f.name.lower().endswith((".json", ".json.gz")) for f in path.rglob("*.json*")):
            return "atif"
        raise ValueError(f"{path}: a folder is read as SWE-agent trajectories (.traj files) or ATIF documents "
                         "(.json files), but it holds neither")
    name = path.name.lower()
    if name.endswith((".traj", ".traj.gz")):
        return "swe_agent"
    if name.endswith((".json", ".json.gz")):
        data = read_json_document(path)
        if isinstance(data, dict) and "history" in data:
            return "swe_agent"
        if isinstance(data, dict) and looks_like_atif(data):
            return "atif"
        if (isinstance(data, list) and data and isinstance(data[0], dict)
                and "user_scenario" in data[0] and "evaluation_criteria" in data[0]):
            return "tau2_tasks"
        hint = (f" (this one holds a list: convert it with  jq -c '.[]' {path} > rows.jsonl)"
                if isinstance(data, list) else "")
        raise ValueError(f"{path}: a .json file is read as one SWE-agent trajectory (an object with 'history'), one "
                         "ATIF document (an object with 'schema_version' and 'steps') or a list of tau2-bench tasks; "
                         f"write other data as JSON lines (.jsonl), one row per line{hint}")
    keys = _first_row_keys(path)
    fmt = classify_keys(keys)
    if fmt is None:
        raise ValueError(f"{path}: cannot tell the format from the keys of the first row {sorted(keys)}; "
                         f"pass fmt= one of {', '.join(TRAJECTORY_FORMATS + PIVOT_FORMATS)}")
    return fmt


def classify_keys(keys: Iterable[str]) -> str | None:
    """The format that rows with these top-level keys have, or None."""
    keys = set(keys)
    if looks_like_atif(keys):
        return "atif"
    if "history" in keys:
        return "swe_agent"
    if "responses_create_params" in keys or "expected_action" in keys:
        return "nemo_gym"
    if "context" in keys and "expert" in keys:
        return "pivots"
    if ("messages" in keys or "traj" in keys) and "task_id" in keys and "tools" not in keys:
        return "tau_bench"
    if "messages" in keys:
        return "openai"
    return None


def _first_row_keys(path: Path) -> set[str]:
    """Keys of the first row that is a JSON object (looking at most at the first few lines).

    Raises ``ValueError`` naming the file when there is none: the file is
    empty, holds one JSON array or pretty-printed document instead of JSON
    lines, or its first lines are all bad (the first problem is quoted).
    """
    first_bad: BadRowError | None = None
    first_value: tuple[int, object] | None = None
    n = 0
    for n, (number, obj) in enumerate(iter_json_lines(path), start=1):
        if isinstance(obj, dict):
            return set(obj)
        if isinstance(obj, BadRowError):
            first_bad = first_bad or obj
        elif first_value is None:
            first_value = (number, obj)
        if n >= _PEEK_LINES:
            break
    if n == 0:
        raise ValueError(f"{path}: the file is empty (no rows); expected JSON lines, one object per line")
    if first_value is not None and isinstance(first_value[1], list):
        raise ValueError(f"{path}:{first_value[0]}: a JSON array, not JSON lines: write one object per line "
                         f"(e.g.  jq -c '.[]' {path} > rows.jsonl)")
    if first_bad is not None and first_value is None and _starts_document(path):
        raise ValueError(f"{path}: looks like one pretty-printed JSON document, not JSON lines: write one object "
                         f"per line (e.g.  jq -c '.[]' {path} > rows.jsonl  for an array)")
    if first_bad is not None:
        seen = f"first problem: {first_bad}"
    else:
        assert first_value is not None
        seen = f"line {first_value[0]} holds {json_kind(first_value[1])}"
    raise ValueError(f"{path}: no JSON object among the first {n} rows ({seen}); "
                     "expected JSON lines, one object per line")


def json_kind(value: object) -> str:
    """``a list``, ``a string``, ``a number``... for messages about a JSON value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return {list: "a list", str: "a string", int: "a number", float: "a number"}.get(type(value), "an object")


def _starts_document(path: Path) -> bool:
    """Whether the first non-blank line is a lone ``{`` or ``[`` (a pretty-printed JSON document)."""
    for _, line in iter_text_lines(path):
        if isinstance(line, str) and line.strip():
            return line.strip() in ("{", "[")
    return False
