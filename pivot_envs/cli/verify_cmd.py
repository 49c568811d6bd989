"""``pivot-envs verify``: run verifiers standalone, in batch or one-off, and the miss-rate report.

A user's mistake is one line naming the file (and line, flag or key), what is wrong and the fix, and a
non-zero exit; it is caught before any row is verified where it can be (the verifier name and config,
the input and output paths). A bad input row (invalid JSON or UTF-8, a missing field) is an error row
naming ``FILE:LINE``; the other rows are verified.
"""

from __future__ import annotations

import gzip
import json
import math
import zlib
from collections import Counter
from pathlib import Path
from typing import Any, Optional, cast

import typer
from rich.markup import escape
from rich.table import Table

from pivot_envs.cli.common import WORLD_HELP, console, fail, progress, user_errors, world_option
from pivot_envs.config import ConfigError, read_config_file
from pivot_envs.jsonl import write_jsonl
from pivot_envs.verifiers import build_verifier, verifier_names
from pivot_envs.verifiers.rows import miss_rate_report, parse_row, verify_file, verify_rows
from pivot_envs.verifiers.world_exec import WorldExecVerifier


def verify_command(
    input: Optional[Path] = typer.Option(None, "--input", "-i", help="JSONL of {id, expected, action, tools?, context?, fixture?, domain?, meta?, verifier?}; a row naming the command's verifier keeps its parameters (a clash is an error row)."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="JSONL of {id, reward, passed, verifier, reason, error}, in input order."),
    verifier: Optional[str] = typer.Option(None, "--verifier", "-v", help="Verifier name (see `pivot-envs list`)."),
    config: Optional[Path] = typer.Option(None, "--config", help="Verifier config file (YAML, TOML or JSON: {name: ..., params...}); checked before any row is read."),
    workers: int = typer.Option(1, "--workers", "-w", min=1, help="Processes verifying chunks of rows in parallel."),
    expected: Optional[str] = typer.Option(None, "--expected", help="One-off: the expert action (text or assistant-message JSON)."),
    action: Optional[str] = typer.Option(None, "--action", help="One-off: the candidate action (text or assistant-message JSON)."),
    tools: Optional[Path] = typer.Option(None, "--tools", help="One-off: a JSON file with the OpenAI tool specs."),
    world: Optional[str] = typer.Option(None, "--world", help="With --verifier world_exec: the world that executes the calls. " + WORLD_HELP + " Each row's world settings (meta.world.config) and context tool calls are replayed first; a row naming world_exec keeps this world."),
    report: bool = typer.Option(False, "--report", help="Print strict vs functional pass rates and the miss rate P[strict=0 | functional=1]."),
) -> None:
    """Verify actions against expected actions, standalone (batch JSONL or one-off)."""
    if world is not None:
        if verifier != "world_exec":
            fail(f"--world {world}: only with --verifier world_exec (or put 'world' in a --config file)")
        verifier = None
        spec = world_exec_spec(world)
    else:
        spec = verifier_spec(verifier, config)
    if expected is not None or action is not None:
        _one_off(spec, expected, action, tools)
        return
    if input is None:
        fail("give --input FILE (batch) or --expected and --action (one-off)")
    _check_input(input)
    if output is None and not report:
        fail("give --output FILE for the results (or --report for the miss-rate summary)")
    if output is not None:
        _check_output(output)
    n_rows = _count_rows(input)
    functional = _run(input, spec, workers, n_rows, output, "verifying")
    if output is not None:
        console.print(f"wrote {len(functional)} results to {output}")
    if report:
        strict = _run(input, "strict", workers, n_rows, None, "strict baseline", show_bad=False)
        _print_report(miss_rate_report(functional, strict), functional)


def verifier_spec(verifier: Optional[str], config: Optional[Path]) -> Any:
    """The verifier spec of ``--verifier`` or ``--config``, checked by building it (before any row is read)."""
    if verifier and config:
        fail("give either --verifier or --config, not both")
    if config is None:
        if verifier is not None:
            try:
                build_verifier(verifier)
            except ValueError as exc:
                fail(f"--verifier {verifier}: {exc}")
        return verifier
    try:
        source = read_config_file(config)
    except ConfigError as exc:
        fail(f"--config {exc}" if str(exc).startswith(str(config)) else f"--config {config}: {exc}")
    if "name" not in source.data:
        fail(f"--config {config}: a verifier config is a mapping with a 'name' field (one of "
             f"{', '.join(verifier_names())}) and the verifier's parameters, e.g. name: fuzzy")
    try:
        build_verifier(source.data)
    except ValueError as exc:
        where = source.locate(exc) if isinstance(exc, ConfigError) else str(config)
        fail(f"--config {where}: {exc}")
    return source.data


def world_exec_spec(world: str) -> dict[str, Any]:
    """The ``world_exec`` verifier on ``world`` (a name, mcp:COMMAND, a config file or inline JSON), checked by
    building it (the world is built and closed)."""
    spec = {"name": "world_exec", "world": world_option(world)}
    try:
        cast(WorldExecVerifier, build_verifier(spec)).close()  # the spec names world_exec
    except (ValueError, TypeError) as exc:
        fail(f"--world {world}: {exc}")
    return spec


def _check_input(input: Path) -> None:
    if not input.exists():
        fail(f"-i {input}: no such file")
    if input.is_dir():
        fail(f"-i {input}: is a folder; give the JSONL file of rows inside it")


def _check_output(output: Path) -> None:
    if output.is_dir():
        fail(f"-o {output}: is a folder; give a file path for the results, e.g. {output / 'results.jsonl'}")
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        fail(f"-o {output}: cannot create its folder {output.parent} ({exc.strerror or exc})")


def _count_rows(input: Path) -> int | None:
    """Non-blank lines of the input (the progress bar's total), counted as bytes: no decoding errors here."""
    try:
        with (gzip.open(input, "rb") if input.suffix == ".gz" else input.open("rb")) as fh:
            return sum(1 for line in fh if line.strip())
    except (EOFError, zlib.error, gzip.BadGzipFile):
        return None  # reading reports a damaged .gz, naming the line where the damage starts
    except OSError as exc:
        fail(f"-i {input}: cannot read it ({exc.strerror or exc})")


def _run(input: Path, spec, workers: int, n_rows: int | None, output: Optional[Path], label: str,
         show_bad: bool = True) -> list[dict]:
    rows: list[dict] = []
    with progress() as bar:
        task = bar.add_task(label, total=n_rows)
        with user_errors():
            for row in verify_file(input, spec, workers, on_done=lambda n: bar.advance(task, n)):
                rows.append(row)
    if output is not None:
        try:
            write_jsonl(output, rows)
        except OSError as exc:
            fail(f"-o {output}: cannot write the results ({exc.strerror or exc})")
    bad = [r for r in rows if r.get("reason") == "bad input row"] if show_bad else []
    for r in bad[:10]:
        console.print(f"[yellow]bad row[/] {escape(str(r['error']))}", highlight=False)
    if len(bad) > 10:
        console.print(f"[yellow]... and {len(bad) - 10} more bad rows[/]")
    return rows


def _one_off(spec, expected: Optional[str], action: Optional[str], tools: Optional[Path]) -> None:
    if expected is None or action is None:
        fail("the one-off form needs both --expected and --action")
    row = {"id": "cli", "expected": _maybe_json(expected), "action": _maybe_json(action)}
    if tools is not None:
        try:
            row["tools"] = json.loads(tools.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            fail(f"--tools {tools}: cannot read it as UTF-8 text ({getattr(exc, 'strerror', None) or exc})")
        except json.JSONDecodeError as exc:
            fail(f"--tools {tools}:{exc.lineno}: not valid JSON ({exc.msg} at column {exc.colno}); "
                 "give a JSON list of OpenAI tool specs")
    parsed = parse_row(row, 1, "<command line>")
    result = verify_rows([parsed], spec)[0]
    console.print_json(json.dumps(result))
    if result.get("error"):
        raise typer.Exit(1)


def _maybe_json(text: str):
    stripped = text.strip()
    if stripped.startswith("{") and '"role"' in stripped:
        try:
            return json.loads(stripped)
        except json.JSONDecodeError:
            pass
    return text


def _print_report(rep, functional: list[dict]) -> None:
    data = rep.to_dict()
    used = Counter(str(r.get("verified_by") or r.get("verifier") or "?") for r in functional if not r.get("error"))
    name = ", ".join(f"{v}: {n} rows" for v, n in used.most_common()) if len(used) > 1 else next(iter(used), "?")
    table = Table(title="miss-rate report")
    table.add_column("")
    table.add_column("value", justify="right")
    fmt = lambda x: "-" if isinstance(x, float) and math.isnan(x) else (f"{x:.3f}" if isinstance(x, float) else str(x))  # noqa: E731
    table.add_row("pairs", fmt(data["pairs"]))
    table.add_row("verifier errors (excluded)", fmt(data["errors"]))
    table.add_row(f"functional pass rate ({name})", fmt(data["functional_pass_rate"]))
    table.add_row("strict pass rate", fmt(data["strict_pass_rate"]))
    table.add_row("miss rate P\\[strict=0 | functional=1]", fmt(data["miss_rate"]))
    console.print(table)


def register(app: typer.Typer) -> None:
    app.command("verify")(verify_command)
