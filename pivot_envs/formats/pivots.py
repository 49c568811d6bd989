"""pivot-envs' own pivot JSONL: one :meth:`Pivot.to_dict` per line.

The reader validates what :meth:`Pivot.from_dict` needs and the chat format
of ``context``/``expert``/``tools``, so a bad row names its field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from pivot_envs.formats.validate import RowError, check_message, check_messages, check_tools, require_dict
from pivot_envs.jsonl import ReadReport, read_rows, write_jsonl
from pivot_envs.types import Fixture, Pivot, Profile


def pivot_from_dict(row: Any) -> Pivot:
    """Validate one pivot row and build the Pivot (raises :class:`RowError` naming the field)."""
    row = require_dict(row, "<row>", "a JSON object written by Pivot.to_dict()")
    for key in ("id", "context", "expert"):
        if key not in row:
            raise RowError(key, "missing required field", "each pivot row needs id, context and expert")
    check_messages(row["context"], "context", allow_empty=True)
    expert = check_message(row["expert"], "expert", None)
    if expert.get("role") != "assistant":
        raise RowError("expert.role", f"the expert message must be an assistant message: got {expert.get('role')!r}")
    check_tools(row.get("tools") or [])
    require_dict(row.get("meta") or {}, "meta")
    for key, cls in (("fixture", Fixture), ("profile", Profile)):
        try:
            cls.from_dict(row.get(key))
        except (ValueError, KeyError, TypeError) as exc:
            problem = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
            raise RowError(key, problem) from None
    return Pivot.from_dict(row)


def read_pivot_jsonl(path: str | Path, *, skip_bad: bool = False, report: ReadReport | None = None) -> list[Pivot]:
    """Read a pivot JSONL file (``.gz`` allowed)."""
    return read_rows(path, pivot_from_dict, skip_bad=skip_bad, report=report)


def write_pivot_jsonl(pivots: Iterable[Pivot], path: str | Path) -> int:
    """Write pivots as JSONL (``.gz`` compresses); returns the count."""
    return write_jsonl(path, (p.to_dict() for p in pivots))
