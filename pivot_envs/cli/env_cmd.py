"""``pivot-envs env show``: render a pivot."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from pivot_envs.cli.common import console, err_console, fail, user_errors
from pivot_envs.jsonl import BadRowError, ReadReport
from pivot_envs.render import render_pivot
from pivot_envs.sources import resolve_pivots

env_app = typer.Typer(help="Inspect pivot envs.", no_args_is_help=True)


@env_app.command("show")
def show_command(
    domain: str = typer.Option("tool_use", "--domain", "-d", help="Domain (its bundled data unless --pivots)."),
    pivots: Optional[Path] = typer.Option(None, help="Pivot JSONL instead of the bundled data."),
    split: str = typer.Option("train", help="Bundled split: train or test."),
    pivot_id: Optional[str] = typer.Option(None, "--id", help="Show this pivot."),
    index: int = typer.Option(0, help="Show the pivot at this position (when --id is not given)."),
    last: Optional[int] = typer.Option(6, help="Show only the last N context messages (0 = all)."),
    as_json: bool = typer.Option(False, "--json", help="Print the pivot as JSON instead."),
    skip_bad: bool = typer.Option(False, "--skip-bad", help="Skip malformed rows of --pivots (counted) instead of stopping."),
) -> None:
    """Render one pivot: context, tools, fixture and the expert action."""
    if last is not None and last < 0:
        fail(f"--last {last}: must be 0 (all context messages) or more")
    report = ReadReport()
    with user_errors():
        try:
            items = resolve_pivots(pivots, domain=domain, split=split, skip_bad=skip_bad, report=report)
        except BadRowError as exc:
            hint = "" if "--skip-bad" in str(exc) else " (pass --skip-bad to skip malformed rows and keep the others)"
            fail(f"{exc}{hint}")
    if report.n_skipped:
        example = next(iter(report.examples.values()))
        err_console.print(f"[yellow]skipped {report.n_skipped} bad row(s)[/] of {escape(str(pivots))} (e.g. {escape(example)})",
                          highlight=False, soft_wrap=True)
    if not items:
        fail(f"no pivots to show in {pivots}" if pivots is not None else "no pivots to show")
    if pivot_id is not None:
        found = [p for p in items if p.id == pivot_id]
        if not found:
            fail(f"no pivot with id {pivot_id!r} among {len(items)} pivots")
        pivot = found[0]
    else:
        if not 0 <= index < len(items):
            fail(f"--index {index}: out of range; this set has {len(items)} pivots, so give 0..{len(items) - 1}")
        pivot = items[index]
    if as_json:
        console.print_json(json.dumps(pivot.to_dict(), ensure_ascii=False))
    else:
        console.print(render_pivot(pivot, last=last or None), highlight=False, markup=False)
        console.print(f"({len(items)} pivots in this set)")


def register(app: typer.Typer) -> None:
    app.add_typer(env_app, name="env")
