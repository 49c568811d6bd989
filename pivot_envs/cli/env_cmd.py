"""``pivot-envs env show``: render a pivot."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from pivot_envs.cli.common import console, fail, user_errors

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
) -> None:
    """Render one pivot: context, tools, fixture and the expert action."""
    from pivot_envs.env import load_pivot_source
    from pivot_envs.render import render_pivot

    with user_errors():
        items = load_pivot_source(pivots, domain, split)
    if not items:
        fail("no pivots to show")
    if pivot_id is not None:
        found = [p for p in items if p.id == pivot_id]
        if not found:
            fail(f"no pivot with id {pivot_id!r} among {len(items)} pivots")
        pivot = found[0]
    else:
        pivot = items[index % len(items)]
    if as_json:
        console.print_json(json.dumps(pivot.to_dict(), ensure_ascii=False))
    else:
        console.print(render_pivot(pivot, last=last or None), highlight=False, markup=False)
        console.print(f"({len(items)} pivots in this set)")


def register(app: typer.Typer) -> None:
    app.add_typer(env_app, name="env")
