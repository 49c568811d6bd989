"""``pivot-envs demo``: the small-scale PivotRL reproduction on bundled data (CPU only)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from pivot_envs.cli.common import console, err_console, user_errors
from pivot_envs.experiments.demo import build_shipped_base, full_config, quick_config, run_pipeline, smoke_config
from pivot_envs.experiments.report import table_rows


def demo_command(
    out: Path = typer.Option(Path("runs/demo"), "--out", help="Folder for the report, plots, models and runs "
                             "(an interrupted demo resumes from it)."),
    full: bool = typer.Option(False, "--full", help="Every arm of the paper's comparison (Base, SFT, PivotRL, "
                              "- filtering, - functional reward, PVPO, E2E RL, ARPO), hyper-parameters chosen on a "
                              "validation split, --seeds seeds of the main arms (about 80 min on 2 idle cores; resumable)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the data split, the base model and the first arm seed."),
    seeds: Optional[int] = typer.Option(None, "--seeds", help="Seeds of the main arms (default: 1, or 3 with --full)."),
    domain: Optional[str] = typer.Option(None, "--domain", help="Domain whose bundled pivots are used "
                                         "(default: the preset's)."),
    workers: Optional[int] = typer.Option(None, "--workers", help="Runs trained/evaluated at once (default 2)."),
    smoke: bool = typer.Option(False, "--smoke", hidden=True, help="A seconds-long run of every stage (tests)."),
    build_base: Optional[Path] = typer.Option(None, "--build-base", help="Only train the quick demo's base model "
                                              "(deterministic, about 50 min on 2 idle cores) into this folder: how the "
                                              "shipped one was made."),
) -> None:
    """Train and compare a tiny model on bundled data: base model -> profile -> filter -> PivotRL (and, with
    --full, SFT and the ablations); prints a table and writes report.md, report.json and plots to --out."""
    with user_errors():
        if build_base is not None:
            built = build_shipped_base(build_base, quick_config(seed, domain),
                                       log=lambda m: err_console.print(m, highlight=False, soft_wrap=True))
            console.print(f"base model: {built['dir']} ({built['report']['parameters']:,} parameters, key {built['key']})")
            return
        if smoke:
            cfg = smoke_config(seed)
        elif full:
            cfg = full_config(seed, seeds if seeds is not None else 3, domain)
        else:
            cfg = quick_config(seed, domain)
        if seeds is not None:
            cfg.seeds = seeds
        if domain is not None:
            cfg.domain = domain
        if workers is not None:
            cfg.workers = workers
        report = run_pipeline(cfg, out, log=lambda m: err_console.print(m, highlight=False, soft_wrap=True))
    rows = table_rows(report, titles=False)
    table = Table(title=f"pivot-envs demo: {report['domain']}, seeds {report['seeds']}, "
                        f"{report['model_params']:,}-parameter base, {report['wall_seconds'] / 60:.1f} min")
    for i, name in enumerate(rows[0]):
        table.add_column(name, justify="left" if i == 0 else "right")
    for row in rows[1:]:
        table.add_row(*row)
    console.print(table)
    comp = (report.get("comparisons") or {}).get("pivotrl_vs_base")
    if comp and comp.get("diff") is not None:
        console.print(f"PivotRL vs Base, task success (T=1 pass@1, {comp.get('n')} held-out tasks, paired bootstrap): "
                      f"{comp['diff']:+.3f} [95 % {comp['ci_low']:+.3f}, {comp['ci_high']:+.3f}], p = {comp['p_value']:.3g}")
        turn = comp.get("per_turn")
        if turn:
            console.print(f"PivotRL vs Base, per-turn greedy accuracy ({turn['n']} test pivots, McNemar): "
                          f"{turn['diff']:+.3f} [95 % {turn['ci_low']:+.3f}, {turn['ci_high']:+.3f}], "
                          f"p = {turn['p_value']:.3g}")
    styles = {"reproduced": "green", "not reproduced": "red", "within noise": "yellow", "not measured": "dim"}
    for claim in report["claims"]:
        verdict = claim.get("verdict") or {True: "reproduced", False: "not reproduced", None: "not measured"}[claim["holds"]]
        console.print(f"[{styles.get(verdict, 'white')}]{verdict}[/]: {claim['text']}")
    console.print(f"report: {out / 'report.md'}  {out / 'report.json'}")


def register(app: typer.Typer) -> None:
    app.command("demo")(demo_command)
