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
from rich.text import Text

console = Console()
err_console = Console(stderr=True)


def fail(message: str, code: int = 2) -> NoReturn:
    """Print an actionable error to stderr and exit with ``code``."""
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Turn the library's input errors into a one-line CLI error instead of a traceback."""
    try:
        yield
    except (ValueError, FileNotFoundError, KeyError) as exc:
        fail(str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc))


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
