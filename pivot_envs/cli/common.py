"""Shared CLI helpers: the console, user-facing errors, progress bars."""

from __future__ import annotations

import contextlib
from typing import Iterator, NoReturn

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.markup import escape
from rich.text import Text

console = Console()
err_console = Console(stderr=True)


def fail(message: str, code: int = 2) -> NoReturn:
    """Print an actionable error to stderr and exit with ``code``."""
    # the message is plain text (it may quote a user's data, e.g. '[/x]'): never read it as rich markup
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Turn the library's input errors into a one-line CLI error instead of a traceback.

    Catches ``ValueError`` (the library's bad-input errors, ``BadRowError`` and
    ``UnicodeDecodeError`` among them), ``KeyError``, the file-system errors a
    wrong path gives (missing file, folder given for a file, permission
    denied: the message names the path) and a truncated or non-gzip ``.gz``.
    Other ``OSError`` s (network, ...) are left alone unless they name a path.
    """
    try:
        yield
    except UnicodeDecodeError as exc:
        fail(f"input is not valid UTF-8 (byte 0x{exc.object[exc.start:exc.start + 1].hex()} at offset {exc.start}): "
             "save the file as UTF-8")
    except (ValueError, KeyError) as exc:
        fail(str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc))
    except OSError as exc:
        message = os_error_message(exc)
        if message is None:
            raise
        fail(message)
    except EOFError:
        fail("a compressed (.gz) input ends early: the file is truncated; download or compress it again")


_OS_HINTS: dict[type, str] = {
    FileNotFoundError: "no such file or folder",
    IsADirectoryError: "is a folder, not a file: give a file path",
    NotADirectoryError: "a part of this path is a file, not a folder",
    FileExistsError: "already exists as a file, so it cannot be made a folder: choose another path",
    PermissionError: "permission denied: choose a path you may read or write, or change its permissions",
}


def os_error_message(exc: OSError) -> str | None:
    """A one-line message naming the path of a file-system error, or None for an OSError that names no path."""
    import gzip

    if isinstance(exc, gzip.BadGzipFile):
        return f"a .gz input is not valid gzip ({exc}): rename it without .gz or compress it with gzip"
    if exc.filename is None:
        if isinstance(exc, (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)) and exc.args:
            return str(exc.args[-1] if len(exc.args) > 1 else exc.args[0])  # a library message naming the path
        return None
    hint = next((text for cls, text in _OS_HINTS.items() if isinstance(exc, cls)), exc.strerror or str(exc))
    if isinstance(exc, IsADirectoryError) and exc.strerror and exc.strerror.startswith("is a folder"):
        hint = exc.strerror  # the library's own wording
    where = f"{exc.filename} -> {exc.filename2}" if exc.filename2 else f"{exc.filename}"
    return f"{where}: {hint}"


class RateColumn(ProgressColumn):
    """Items per second."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text("  -- it/s" if speed is None else f"{speed:7.1f} it/s", style="cyan")


def progress(transient: bool = False) -> Progress:
    """A progress bar with items/s and ETA, written to stderr."""
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        RateColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        console=err_console,
        transient=transient,
    )
