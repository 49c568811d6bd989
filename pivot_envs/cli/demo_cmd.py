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
    from pivot_envs.demo import run_demo

    with user_errors():
        report = run_demo(out, n_pivots=pivots, seed=seed, on_domain=lambda d: err_console.print(f"[bold]{d}[/] ..."))
    table = Table(title=f"pivot-envs demo (seed {seed}, {report['wall_seconds']:.1f} s)")
    cols = ["domain", "verifier", "candidates", "scored", "expert pass", "alt: functional", "alt: strict",
            "miss rate", "wrong accepted", "errors", "s"]
    for c in cols:
        table.add_column(c, justify="right")
    fmt = lambda x: "-" if isinstance(x, float) and math.isnan(x) else f"{x:.2f}"  # noqa: E731
    for name, s in report["domains"].items():
        table.add_row(name, s["verifier"], str(s["candidates"]), str(s["pivots_scored"]), fmt(s["expert_pass"]),
                      f"{fmt(s['alt_functional_pass'])} ({s['alternatives']})", fmt(s["alt_strict_pass"]),
                      fmt(s["miss_rate"]), fmt(s["perturbed_functional_pass"]), str(s["verifier_errors"]), f"{s['seconds']:.1f}")
    console.print(table)
    console.print(f"report: {out / 'report.md'}  {out / 'report.json'}")


def register(app: typer.Typer) -> None:
    app.command("demo")(demo_command)
