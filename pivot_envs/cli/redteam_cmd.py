"""``pivot-envs redteam``: attack a domain's verifier with the red-team families, a user's domain included.

Builds at the domain's pivots the wrong actions a policy finds and the right spellings the reward must keep
(:mod:`pivot_envs.redteam`), labels them by rule and by the domain's world, scores them with the domain's default
verifier (or ``--verifier`` / ``--config``) and prints the accepted share per family; ``-o DIR`` writes
``table.md`` and ``report.json`` (figures and examples of each mismatch); ``--check`` exits 1 when a target is missed
(wrong accepted > 1 % per domain or > 3 % per family, right accepted < 95 %).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer
from rich.table import Table

from pivot_envs.cli.common import WORLD_HELP, console, fail, user_errors, world_option
from pivot_envs.config import ConfigError, read_config_file
from pivot_envs.redteam import family_names, red_team
from pivot_envs.redteam.case import FAMILIES
from pivot_envs.redteam.run import RedTeamReport, pct
from pivot_envs.verifiers import build_verifier


def redteam_command(
    domain: Optional[str] = typer.Argument(None, help="A registered domain (`pivot-envs list`) or a tau2 preset (tau2-airline, tau2-retail)."),
    tasks: Optional[str] = typer.Option(None, "--tasks", help="Trajectory file or bundled:DOMAIN[:SPLIT] (default: the domain's bundled --split)."),
    split: str = typer.Option("test", "--split", help="The bundled split when --tasks is not given."),
    verifier: Optional[str] = typer.Option(None, "--verifier", "-v", help="Verifier name to attack (default: the domain's)."),
    config: Optional[Path] = typer.Option(None, "--config", help="Verifier config file (YAML, TOML or JSON) to attack."),
    world: Optional[str] = typer.Option(None, "--world", help="The world that labels the cases (default: the domain's). " + WORLD_HELP),
    families: Optional[str] = typer.Option(None, "--families", help="Comma-separated families (default: all; --list-families)."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="At most this many pivots (drawn with --seed)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the pivot draw."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Folder for table.md and report.json."),
    check: bool = typer.Option(False, "--check", help="Exit 1 when a target is missed."),
    list_families: bool = typer.Option(False, "--list-families", help="List the families and exit."),
) -> None:
    """Red-team a domain's verifier: wrong actions a policy finds, right ones it must keep, accepted per family."""
    if list_families:
        _print_families()
        return
    if domain is None:
        fail("give a DOMAIN (see `pivot-envs list`), or --list-families")
    spec = _verifier_spec(verifier, config)
    chosen = [f.strip() for f in families.split(",") if f.strip()] if families else None
    if chosen:
        unknown = sorted(set(chosen) - set(family_names()))
        if unknown:
            fail(f"--families: unknown {', '.join(unknown)}; known: {', '.join(family_names())}")
    if out is not None and out.exists() and not out.is_dir():
        fail(f"-o {out}: is a file; give a folder for table.md and report.json")
    with user_errors():
        report = red_team(domain, tasks=tasks, split=split, world=world_option(world) if world else None,
                          verifier=spec, families=chosen, limit=limit, seed=seed)
    _print_report(report)
    if out is not None:
        report.save(out)
        console.print(f"wrote {out / 'table.md'} and {out / 'report.json'}")
    if check and report.misses():
        raise typer.Exit(1)


def _verifier_spec(verifier: Optional[str], config: Optional[Path]) -> Any:
    if verifier and config:
        fail("give either --verifier or --config, not both")
    spec: Any = verifier
    if config is not None:
        try:
            spec = read_config_file(config).data
        except ConfigError as exc:
            fail(f"--config {exc}")
    if spec is not None:
        try:
            build_verifier(spec)
        except (ValueError, TypeError) as exc:
            fail(f"--{'config ' + str(config) if config else 'verifier ' + str(verifier)}: {exc}")
    return spec


def _print_families() -> None:
    family_names()
    table = Table(title="red-team families")
    for column in ("family", "label", "turn", "needs", "what it builds"):
        table.add_column(column)
    for name in sorted(FAMILIES):
        fam = FAMILIES[name]
        table.add_row(name, fam.label, fam.where, fam.needs or "-", fam.doc)
    console.print(table)


def _print_report(report: RedTeamReport) -> None:
    table = Table(title=f"red team: {report.domain} ({report.pivots} pivots)")
    for column in ("family", "label", "cases", "accepted", "errors"):
        table.add_column(column, justify="left" if column in ("family", "label") else "right")
    for row in report.rows:
        bad = row.n and (row.accepted if row.label == "wrong" else row.n - row.accepted)
        table.add_row(row.family, row.label, str(row.n), ("[red]" if bad else "") + pct(row), str(row.errors))
    for label in ("wrong", "right"):
        total = report.total(label)
        table.add_row(f"all {label}", label, str(total.n), pct(total), str(total.errors), style="bold")
    console.print(table)
    misses = report.misses()
    console.print("targets missed: " + ("; ".join(misses) if misses else "none"), highlight=False)
    if report.skipped:
        console.print(f"[yellow]{len(report.skipped)} makers skipped at a pivot[/] (first: {report.skipped[0]})")


def register(app: typer.Typer) -> None:
    app.command("redteam")(redteam_command)
