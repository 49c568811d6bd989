"""JSON-lines reading with errors a user can act on.

Every bad row is reported as a :class:`BadRow` that names the file, the line
number and the field; callers decide whether to stop (the default) or to skip
it and count it (``skip_bad=True``). A bad row never takes good rows with it.
"""

from __future__ import annotations

import errno
import gzip
import io
import json
import os
import re
import zlib
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


UTF8_FIX = "save the file as UTF-8, e.g. iconv -f latin1 -t utf-8 IN > OUT"
_BOM = b"\xef\xbb\xbf"


def _open_bytes(path: Path) -> io.BufferedIOBase:
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")  # type: ignore[return-value]


def utf8_problem(exc: UnicodeDecodeError, line_start: int = 0) -> str:
    """``not valid UTF-8: byte 0xe9 at column 12`` for a decode error in a line starting at byte ``line_start``."""
    bad = exc.object[exc.start:exc.start + 1]
    return f"not valid UTF-8: byte 0x{bad.hex()} at column {exc.start - line_start + 1}"


def iter_text_lines(path: str | Path) -> Iterator[tuple[int, str | BadRowError]]:
    """Yield ``(line_number, text_or_BadRowError)`` for each line of a plain or ``.gz`` file, without its line end.

    The file is read as bytes, split on ``\\n`` only, and each line decoded as
    UTF-8 on its own, so one undecodable line is one bad row (``not valid
    UTF-8: byte 0x.. at column N``) and the other lines are still read. A UTF-8
    byte-order mark on line 1 is dropped. A ``.gz`` file that ends early or is
    corrupt yields one bad row where the damage starts, after the lines read
    before it; one that is not gzip at all raises ``ValueError`` naming the file.
    """
    path = Path(path)
    number = 0
    with _open_bytes(path) as fh:
        try:
            for number, raw in enumerate(fh, start=1):
                raw = raw.rstrip(b"\n").rstrip(b"\r")
                if number == 1 and raw.startswith(_BOM):
                    raw = raw[len(_BOM):]
                try:
                    yield number, raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    yield number, BadRowError(str(path), number, "<line>", utf8_problem(exc), UTF8_FIX)
        except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
            if number == 0 and isinstance(exc, gzip.BadGzipFile):
                raise ValueError(f"{path}: not a gzip file, though its name ends in .gz ({exc}); "
                                 "rename it without .gz or compress it with gzip") from None
            problem = ("the compressed data ends early: the file is truncated" if isinstance(exc, EOFError)
                       else f"corrupt compressed data: {exc}")
            yield number + 1, BadRowError(str(path), number + 1, "<file>", problem,
                                          "download or compress the file again; the lines before this one were read")


def iter_json_lines(path: str | Path) -> Iterator[tuple[int, Any | BadRowError]]:
    """Yield ``(line_number, object_or_BadRowError)`` for each non-blank line (see :func:`iter_text_lines`)."""
    for number, line in iter_text_lines(path):
        if isinstance(line, BadRowError):
            yield number, line
            continue
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError as exc:  # the line has no line end, so pos is its column (0-based)
            yield number, BadRowError(str(path), number, "<line>", f"invalid JSON: {exc.msg} at column {exc.pos + 1}",
                                      "each line must hold one complete JSON object")
        except RecursionError:
            yield number, BadRowError(str(path), number, "<line>", "invalid JSON: nested too deeply",
                                      "each line must hold one JSON object of reasonable depth")


def read_json_document(path: str | Path) -> Any:
    """Parse a whole (plain or ``.gz``) file as one JSON value.

    Errors are :class:`BadRowError` naming the file, the line and the column
    (invalid UTF-8 or invalid JSON), or ``ValueError`` for a non-gzip ``.gz``.
    """
    path = Path(path)
    try:
        with _open_bytes(path) as fh:
            raw = fh.read()
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise ValueError(f"{path}: cannot decompress ({exc or 'the compressed data ends early'}); "
                         "download or compress the file again") from None
    if raw.startswith(_BOM):
        raw = raw[len(_BOM):]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line_start = raw.rfind(b"\n", 0, exc.start) + 1
        raise BadRowError(str(path), raw.count(b"\n", 0, exc.start) + 1, "<file>", utf8_problem(exc, line_start),
                          UTF8_FIX) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadRowError(str(path), exc.lineno, "<file>", f"invalid JSON: {exc.msg} at column {exc.colno}",
                          "the file must hold one complete JSON value") from None
    except RecursionError:
        raise BadRowError(str(path), 1, "<file>", "invalid JSON: nested too deeply") from None


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
    if Path(path).is_dir():
        raise IsADirectoryError(errno.EISDIR, "is a folder, not a JSON-lines file: give the file inside it", str(path))
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
    """Write dict rows as JSON lines (gzip when the name ends in ``.gz``); returns the count.

    A regular file is written to a temporary file beside it and renamed into
    place at the end, so a failure part-way (a bad row, a full disk) leaves an
    existing ``path`` as it was. A folder ``path`` raises ``IsADirectoryError``
    naming it; a special file (``/dev/stdout``, a pipe) is written in place.
    """
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR, "is a folder, not a file: give a file path", str(path))
    if path.is_symlink():
        path = path.resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    in_place = path.exists() and not path.is_file()
    target = path if in_place else path.with_name(f".{path.name}.{os.getpid()}.tmp")
    n = 0
    try:
        with _open_write(target, compress=path.suffix == ".gz") as fh:
            for row in rows:
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
                n += 1
        if not in_place:
            os.replace(target, path)
    except BaseException:
        if not in_place:
            target.unlink(missing_ok=True)
        raise
    return n


def _open_write(path: Path, compress: bool) -> io.TextIOBase:
    if not compress:
        return open(path, "w", encoding="utf-8")
    # mtime=0: byte-identical output for identical rows (reproducible bundled data)
    return _ClosingTextWrapper(gzip.GzipFile(filename="", mode="wb", fileobj=open(path, "wb"), mtime=0))
