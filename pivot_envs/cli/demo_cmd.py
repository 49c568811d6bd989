"""``pivot-envs demo``: the end-to-end demo on bundled data."""

from __future__ import annotations

import math
from pathlib import Path

import typer
from rich.table import Table

from pivot_envs.cli.common import console, err_console, user_errors


def demo_command(
    out: Path = typer.Option(Path("runs/demo"), "--out", help="Folder for report.json and report.md."),
    pivots: int = typer.Option(150, help="Pivots scored per domain."),
    seed: int = typer.Option(0, help="Seed of the pivot sample and the perturbations."),
) -> None:
    """Extract pivots from the bundled trajectories, make each env, and verify expert, alternative and wrong actions."""
    from pivot_envs.verifier_demo import run_demo

    with user_errors():
        report = run_demo(out, n_pivots=pivots, seed=seed, on_domain=lambda d: err_console.print(f"[bold]{d}[/] ..."))
    table = Table(title=f"pivot-envs demo (seed {seed}, {report['wall_seconds']:.1f} s)")
    domains = report["domains"]
    table.add_column("")
    for name in domains:
        table.add_column(name, justify="right")
    fmt = lambda x: "-" if isinstance(x, float) and math.isnan(x) else f"{x:.2f}"  # noqa: E731
    rows = [
        ("default verifier", lambda s: s["verifier"]),
        ("pivot candidates", lambda s: str(s["candidates"])),
        ("pivots scored", lambda s: str(s["pivots_scored"])),
        ("expert action passes", lambda s: fmt(s["expert_pass"])),
        ("alternatives scored", lambda s: str(s["alternatives"])),
        ("  pass: functional", lambda s: fmt(s["alt_functional_pass"])),
        ("  pass: strict", lambda s: fmt(s["alt_strict_pass"])),
        ("  miss rate of strict", lambda s: fmt(s["miss_rate"])),
        ("wrong actions accepted", lambda s: fmt(s["perturbed_functional_pass"])),
        ("verifier errors", lambda s: str(s["verifier_errors"])),
        ("seconds", lambda s: f"{s['seconds']:.1f}"),
    ]
    for label, cell in rows:
        table.add_row(label, *(cell(s) for s in domains.values()))
    console.print(table)
    console.print(f"report: {out / 'report.md'}  {out / 'report.json'}")


def register(app: typer.Typer) -> None:
    app.command("demo")(demo_command)
