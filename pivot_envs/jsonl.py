"""JSON-lines reading with errors a user can act on.

Every bad row is reported as a :class:`BadRow` that names the file, the line
number and the field; callers decide whether to stop (the default) or to skip
it and count it (``skip_bad=True``). A bad row never takes good rows with it.
"""

from __future__ import annotations

import gzip
import io
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

T = TypeVar("T")


class BadRowError(ValueError):
    """A row of an input file could not be read; the message names file, line, field and fix."""

    def __init__(self, path: str, line: int, field_name: str, problem: str, fix: str = ""):
        self.path, self.line, self.field, self.problem, self.fix = path, line, field_name, problem, fix
        msg = f"{path}:{line}: field '{field_name}': {problem}"
        if fix:
            msg += f" (fix: {fix})"
        super().__init__(msg)

    @property
    def reason(self) -> str:
        """A short key for counting skipped rows by reason."""
        field_shape = re.sub(r"\[\d+\]", "[]", self.field)  # messages[3].role -> messages[].role
        return f"{field_shape}: {self.problem.split(':')[0]}"


@dataclass
class ReadReport:
    """How many rows were read, and how many skipped by reason (with examples)."""

    read: int = 0
    skipped: Counter = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)

    def add_bad(self, err: BadRowError) -> None:
        self.skipped[err.reason] += 1
        self.examples.setdefault(err.reason, str(err))

    @property
    def n_skipped(self) -> int:
        return sum(self.skipped.values())

    def summary(self) -> str:
        lines = [f"read {self.read} rows, skipped {self.n_skipped}"]
        for reason, count in self.skipped.most_common():
            lines.append(f"  {count:6d}  {reason}   e.g. {self.examples[reason]}")
        return "\n".join(lines)


def open_text(path: str | Path, mode: str = "rt") -> io.TextIOBase:
    """Open a plain or gzip-compressed (``.gz``) text file as UTF-8."""
    path = Path(path)
    if path.suffix != ".gz":
        return open(path, mode, encoding="utf-8")
    if "w" in mode:  # mtime=0: byte-identical output for identical rows (reproducible bundled data)
        raw = gzip.GzipFile(filename="", mode="wb", fileobj=open(path, "wb"), mtime=0)
        return _ClosingTextWrapper(raw)
    return gzip.open(path, mode, encoding="utf-8")  # type: ignore[return-value]


class _ClosingTextWrapper(io.TextIOWrapper):
    """A UTF-8 text wrapper over a GzipFile that also closes the underlying file object."""

    def __init__(self, raw: gzip.GzipFile):
        super().__init__(raw, encoding="utf-8")  # type: ignore[arg-type]
        self._gz = raw

    def close(self) -> None:
        fileobj = self._gz.fileobj
        super().close()
        if fileobj is not None:
            fileobj.close()


def iter_json_lines(path: str | Path) -> Iterator[tuple[int, Any | BadRowError]]:
    """Yield ``(line_number, object_or_BadRowError)`` for each non-blank line."""
    with open_text(path) as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                yield number, json.loads(line)
            except json.JSONDecodeError as exc:
                yield number, BadRowError(str(path), number, "<line>", f"invalid JSON: {exc.msg} at column {exc.colno}",
                                          "each line must hold one complete JSON object")


def read_rows(
    path: str | Path,
    convert: Callable[[Any], T | list[T]],
    *,
    skip_bad: bool = False,
    report: ReadReport | None = None,
) -> list[T]:
    """Read a JSONL file, converting each row; ``convert`` raises ``ValueError``/``KeyError``/``TypeError`` on bad rows.

    ``convert`` may return one item or a list of items. With ``skip_bad`` the
    bad rows are counted in ``report``; otherwise the first one raises
    :class:`BadRowError`.
    """
    report = report if report is not None else ReadReport()
    out: list[T] = []
    for number, obj in iter_json_lines(path):
        err = obj if isinstance(obj, BadRowError) else None
        if err is None:
            try:
                item = convert(obj)
            except BadRowError as exc:
                err = BadRowError(str(path), number, exc.field, exc.problem, exc.fix)
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                err = as_bad_row(str(path), number, exc)
            else:
                report.read += 1
                out.extend(item if isinstance(item, list) else [item])
                continue
        if not skip_bad:
            raise err
        report.add_bad(err)
    return out


def as_bad_row(path: str, line: int, exc: Exception) -> BadRowError:
    """Wrap a conversion exception into a BadRowError, guessing the field from its message."""
    if isinstance(exc, KeyError):
        return BadRowError(path, line, str(exc.args[0]) if exc.args else "?", "missing required field",
                           "add the field or pass --skip-bad to skip such rows")
    text = str(exc)
    field_name = text.split(" ", 1)[0].strip("'\":") if text else "?"
    return BadRowError(path, line, field_name, text, "correct the row or pass --skip-bad to skip such rows")


def write_jsonl(path: str | Path, rows: list[dict[str, Any]] | Iterator[dict[str, Any]]) -> int:
    """Write dict rows as JSON lines (gzip when the name ends in ``.gz``); returns the count."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with open_text(path, "wt") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
            n += 1
    return n
