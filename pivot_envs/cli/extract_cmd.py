"""``pivot-envs extract``: trajectories -> pivot candidates, with an audit."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from pivot_envs.cli.common import console, fail, user_errors


def extract_command(
    input: Path = typer.Argument(..., help="Trajectories: OpenAI chat JSONL, tau-bench JSONL, SWE-agent .traj (file or folder)."),
    output: Path = typer.Option(..., "-o", "--output", help="Pivot JSONL to write (.gz compresses)."),
    domain: str = typer.Option(..., "--domain", "-d", help="Domain of the pivots: tool_use, terminal, swe, search or a registered one."),
    min_reward: Optional[float] = typer.Option(None, help="Keep only trajectories with reward >= X."),
    fmt: str = typer.Option("auto", "--format", help="Input format: auto, openai, tau_bench, swe_agent."),
    output_format: str = typer.Option("pivots", help="Output format: pivots (ours) or nemo_gym (NeMo Gym pivot rows)."),
    skip_tool_errors: bool = typer.Option(True, "--skip-tool-errors/--keep-tool-errors", help="Drop turns whose tool call got an error result."),
    chat_only: Optional[bool] = typer.Option(None, "--skip-chat-only/--keep-chat-only", help="Drop turns without tool calls (default: per domain)."),
    dedup: bool = typer.Option(True, "--dedup/--no-dedup", help="Drop repeated (context, normalised action) pairs."),
    max_turns: Optional[int] = typer.Option(None, help="Keep at most N turns per trajectory."),
    agent_ref: Optional[str] = typer.Option(None, help="nemo_gym output: the agent_ref each row routes to in NeMo Gym."),
    skip_bad: bool = typer.Option(False, "--skip-bad", help="Skip malformed rows (counted by reason) instead of stopping."),
) -> None:
    """Cut trajectories into pivot candidates (one per assistant turn) and print an audit."""
    from pivot_envs.pipeline.extract import ExtractOptions, extract_pivots
    from pivot_envs.formats import read_trajectories, write_pivots
    from pivot_envs.jsonl import BadRowError, ReadReport

    if not input.exists():
        fail(f"{input}: no such file or folder")
    report = ReadReport()
    try:
        trajs = read_trajectories(input, fmt, skip_bad=skip_bad, report=report)
    except BadRowError as exc:
        fail(f"{exc}\n(pass --skip-bad to skip malformed rows and keep the others)")
    except (ValueError, FileNotFoundError) as exc:
        fail(str(exc))
    opts = ExtractOptions(min_reward=min_reward, skip_tool_errors=skip_tool_errors, skip_chat_only=chat_only,
                          dedup=dedup, max_turns_per_trajectory=max_turns)
    with user_errors():
        pivots, audit = extract_pivots(trajs, domain, opts)
        extra = {"agent_ref": agent_ref} if agent_ref and output_format == "nemo_gym" else {}
        write_pivots(pivots, output, fmt=output_format, **extra)
    print_audit(audit, report, output)


def print_audit(audit, report, output: Path) -> None:
    table = Table(title=f"extract -> {output}")
    table.add_column("")
    table.add_column("count", justify="right")
    table.add_row("rows read", str(report.read))
    for reason, count in report.skipped.most_common():
        table.add_row(f"rows skipped: {reason}", str(count))
    table.add_row("trajectories used", f"{audit.trajectories_used} of {audit.trajectories}")
    for kind, count in sorted(audit.kept.items()):
        table.add_row(f"candidates kept: {kind}", str(count))
    table.add_row("[bold]candidates kept", f"[bold]{audit.candidates}")
    for reason, count in audit.skipped.most_common():
        table.add_row(f"turns skipped: {reason}", str(count))
    console.print(table)
    for reason, example in report.examples.items():
        console.print(f"[yellow]skipped[/] {reason}: e.g. {example}", highlight=False)


def register(app: typer.Typer) -> None:
    app.command("extract")(extract_command)
