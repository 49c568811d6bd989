"""Tell a file's format from its name and the keys of its first row.

=============  ==============================================================
format         recognised by
=============  ==============================================================
``swe_agent``  a folder of ``.traj`` files, a ``.traj`` file, or rows with ``history``
``nemo_gym``   rows with ``responses_create_params`` or ``expected_action``
``pivots``     rows with ``context`` and ``expert``
``tau_bench``  rows with ``messages`` (or ``traj``) and ``task_id`` but no ``tools``
``openai``     rows with ``messages``
=============  ==============================================================
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

from pivot_envs.jsonl import BadRowError, iter_json_lines, open_text

TRAJECTORY_FORMATS = ("openai", "tau_bench", "swe_agent")
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
        raise ValueError(f"{path}: a folder is read as SWE-agent trajectories, but it holds no .traj files")
    name = path.name.lower()
    if name.endswith((".traj", ".traj.gz")):
        return "swe_agent"
    if name.endswith((".json", ".json.gz")):
        with open_text(path) as fh:
            try:
                data = json.load(fh)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{exc.lineno}: invalid JSON: {exc.msg}") from None
        if isinstance(data, dict) and "history" in data:
            return "swe_agent"
        raise ValueError(f"{path}: a .json file is read only as one SWE-agent trajectory (an object with 'history'); "
                         "write other data as JSON lines (.jsonl), one row per line")
    keys = _first_row_keys(path)
    if not keys:
        raise ValueError(f"{path}: no JSON object among the first {_PEEK_LINES} lines; "
                         "expected JSON lines, one object per line")
    fmt = classify_keys(keys)
    if fmt is None:
        raise ValueError(f"{path}: cannot tell the format from the keys of the first row {sorted(keys)}; "
                         f"pass fmt= one of {', '.join(TRAJECTORY_FORMATS + PIVOT_FORMATS)}")
    return fmt


def classify_keys(keys: Iterable[str]) -> str | None:
    """The format that rows with these top-level keys have, or None."""
    keys = set(keys)
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
    """Keys of the first row that is a JSON object (looking at most at the first few lines)."""
    for n, (_, obj) in enumerate(iter_json_lines(path)):
        if isinstance(obj, dict):
            return set(obj)
        if n + 1 >= _PEEK_LINES:
            break
        if isinstance(obj, BadRowError):
            continue
    return set()
