"""Shared CLI helpers: the console, user-facing errors, progress bars."""

from __future__ import annotations

import contextlib
import difflib
import gzip
import inspect
import json
import re
import shlex
from pathlib import Path
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

from pivot_envs.config import ConfigError, read_config_file
from pivot_envs.worlds import build_world, world_factory, world_names
from pivot_envs.worlds.tau2_servers import preset_for_command

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


WORLD_HELP = ("World: a built-in, preset or registered world's name (see `pivot-envs list`; tau2-airline, "
              "tau2-retail), mcp:COMMAND [ARGS], a world config file (YAML, TOML or JSON: {name: ..., params...}) "
              "or inline JSON ('{\"name\": \"mcp\", \"command\": [...]}').")


def world_option(text: str | None, flag: str = "--world") -> object:
    """The world spec of a ``--world`` value, checked by building the world once (no server is started).

    ``text``: a world's name, ``mcp:COMMAND [ARGS]``, inline JSON (an object with a ``name``) or a
    ``.yaml``/``.yml``/``.toml``/``.json`` file holding such a mapping. Errors name the flag, the file
    (and line of the key, where it is known) and the fix; ``None`` stays ``None``.
    """
    if text is None:
        return None
    value = text.strip()
    if not value:
        fail(f"{flag}: give a world name, mcp:COMMAND [ARGS], a world config file or inline JSON")
    source = None
    where = f"{flag} {text}"
    if value.startswith("{"):
        try:
            spec = json.loads(value)
        except json.JSONDecodeError as exc:
            fail(f"{flag}: inline JSON is not valid at column {exc.colno}: {exc.msg} "
                 "(quote it for the shell: --world '{\"name\": \"tau2-retail\"}')")
        where = f"{flag} (inline JSON)"
    elif Path(value).suffix.lower() in (".yaml", ".yml", ".toml", ".json"):
        try:
            source = read_config_file(value)
        except ConfigError as exc:
            fail(f"{flag} {exc}")
        spec = source.data
        where = f"{flag} {value}"
    else:
        spec = value
    if isinstance(spec, dict) and not isinstance(spec.get("name"), str):
        fail(f"{where}: a world config is a mapping with a 'name' (one of {', '.join(world_names())}) and the "
             "world's parameters, e.g. {\"name\": \"mcp\", \"command\": [\"my-server\"], \"isolation\": \"process\"}")
    if not isinstance(spec, (dict, str)):
        fail(f"{where}: a world config must be a JSON object with a 'name', got {type(spec).__name__}")
    try:
        build_world(spec).close()
    except (ValueError, TypeError, ImportError) as exc:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        named = re.search(r"unexpected keyword argument '(\w+)'", message)
        if named and isinstance(spec, dict):
            key = named.group(1)
            if source is not None and key in source.origins:
                where = f"{flag} {source.origins[key]}"
            message = f"world {spec['name']!r} has no parameter {key!r}{_parameters_hint(spec['name'], key)}"
        fail(f"{where}: {message}")
    if isinstance(spec, str) and spec.startswith("mcp:"):
        _note_preset(spec)
    return spec


def _parameters_hint(name: str, key: str) -> str:
    """`` (did you mean 'X'?; its parameters: ...)`` for a world's factory, or ``""`` when they cannot be read."""
    try:
        factory = world_factory(name)
        params = [p for p in inspect.signature(factory).parameters if p not in ("self", "params")]
    except (ValueError, TypeError):
        return ""
    close = difflib.get_close_matches(key, params, n=1)
    guess = f"; did you mean {close[0]!r}?" if close else ""
    return f"{guess} (its parameters: {', '.join(params)})" if params else guess


def _note_preset(spec: str) -> None:
    """A note on stderr when a bare ``mcp:`` command is a server a preset knows better."""
    try:
        preset = preset_for_command(shlex.split(spec[len("mcp:"):]))
    except ValueError:
        return
    if preset:
        err_console.print(
            f"note: {spec} is tau2-bench's server: each episode runs a fresh server with its own state folder "
            "(it keeps its state in a folder shared by every process unless told otherwise), its admin tools "
            "(reset_state, get_call_log) are hidden and the agent sees tau2's own tool messages, not the "
            "server's envelope. Its digest reads only the task's probes (else the list of successful calls); "
            f"--world {preset} also digests the records the episode's writes changed, with no probes",
            highlight=False, soft_wrap=True)
