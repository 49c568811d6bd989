"""``pivot-envs extract``: trajectories -> pivot candidates, with an audit."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape
from rich.table import Table

from pivot_envs.cli.common import console, err_console, fail, user_errors
from pivot_envs.formats import PIVOT_OUTPUT_FORMATS, read_trajectories, write_pivots
from pivot_envs.jsonl import BadRowError, ReadReport
from pivot_envs.pipeline.extract import ExtractOptions, extract_pivots


def extract_command(
    input: Path = typer.Argument(..., help="Trajectories: OpenAI chat JSONL, tau-bench JSONL, SWE-agent .traj (file or folder), "
                                           "ATIF (Harbor) .json document, folder of them or JSONL of them."),
    output: Path = typer.Option(..., "-o", "--output", help="Pivot JSONL to write (.gz compresses)."),
    domain: str = typer.Option(..., "--domain", "-d", help="Domain of the pivots: tool_use, terminal, swe, search or a registered one."),
    min_reward: Optional[float] = typer.Option(None, help="Keep only trajectories with reward >= X."),
    fmt: str = typer.Option("auto", "--format", help="Input format: auto, openai, tau_bench, swe_agent, atif."),
    output_format: str = typer.Option("pivots", help="Output format: pivots (ours), nemo_gym (NeMo Gym pivot rows) or "
                                                     "atif (one ATIF document per pivot and line: the context, then the expert's step)."),
    skip_tool_errors: bool = typer.Option(True, "--skip-tool-errors/--keep-tool-errors", help="Drop turns whose tool call got an error result."),
    chat_only: Optional[bool] = typer.Option(None, "--skip-chat-only/--keep-chat-only", help="Drop turns without tool calls (default: per domain)."),
    dedup: bool = typer.Option(True, "--dedup/--no-dedup", help="Drop repeated (context, normalised action) pairs of tasks with the same tools, world settings and start fixture."),
    max_turns: Optional[int] = typer.Option(None, help="Keep at most N turns per trajectory."),
    agent_ref: Optional[str] = typer.Option(None, help="nemo_gym output: the agent_ref each row routes to in NeMo Gym."),
    skip_bad: bool = typer.Option(False, "--skip-bad", help="Skip malformed rows (counted by reason) instead of stopping."),
) -> None:
    """Cut trajectories into pivot candidates (one per assistant turn) and print an audit.

    The input format is detected (--format auto): a folder of SWE-agent .traj files, or else of ATIF .json
    documents (Harbor's Agent Trajectory Interchange Format v1.7/v1.8; other .json files there, e.g. a trial's
    config.json, are passed over); a .json file holding one ATIF document or SWE-agent trajectory; JSON lines of
    OpenAI chat, tau-bench, SWE-agent or ATIF rows. ATIF steps become chat messages (agent -> assistant,
    tool_calls -> tool calls, observation results -> tool messages, a result without source_call_id -> a user
    message), agent.tool_definitions the tools and extra.reward the reward.
    """
    if not input.exists():
        fail(f"{input}: no such file or folder")
    check_options(output, max_turns, min_reward, agent_ref, output_format)
    report = ReadReport()
    with user_errors():
        try:
            trajs = read_trajectories(input, fmt, skip_bad=skip_bad, report=report)
        except BadRowError as exc:
            hint = "" if "--skip-bad" in str(exc) else " (pass --skip-bad to skip malformed rows and keep the others)"
            fail(f"{exc}{hint}")
    if not report.read and report.n_skipped:
        example = next(iter(report.examples.values()))
        fail(f"{input}: no good rows: all {report.n_skipped} were skipped (e.g. {example}); {output} not written")
    opts = ExtractOptions(min_reward=min_reward, skip_tool_errors=skip_tool_errors, skip_chat_only=chat_only,
                          dedup=dedup, max_turns_per_trajectory=max_turns)
    with user_errors():
        pivots, audit = extract_pivots(trajs, domain, opts)
        extra = {"agent_ref": agent_ref} if agent_ref and output_format == "nemo_gym" else {}
        write_pivots(pivots, output, fmt=output_format, **extra)
    print_audit(audit, report, output)
    if not audit.candidates:
        err_console.print(f"[yellow]warning:[/] no pivot candidates kept from {escape(str(input))}: every turn was skipped "
                          "(see 'turns skipped' above); loosen the filters", highlight=False, soft_wrap=True)


def check_options(output: Path, max_turns: Optional[int], min_reward: Optional[float], agent_ref: Optional[str],
                  output_format: str) -> None:
    """Reject flag values that can only be mistakes, before any work (one line naming the flag)."""
    if output.is_dir():
        fail(f"-o/--output {output}: is a folder; give the pivot file to write, e.g. {output / 'pivots.jsonl'}")
    blocker = next((p for p in output.parents if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        fail(f"-o/--output {output}: {blocker} is a file, not a folder; choose another output path")
    if max_turns is not None and max_turns < 1:
        fail(f"--max-turns {max_turns}: must be at least 1 (it keeps the first N turns of each trajectory); "
             "leave it out to keep every turn")
    if min_reward is not None and math.isnan(min_reward):
        fail("--min-reward nan: give a number (trajectories with a lower reward are dropped)")
    if agent_ref and output_format != "nemo_gym":
        fail(f"--agent-ref applies to --output-format nemo_gym only (the output format is {output_format!r})")
    if output_format not in PIVOT_OUTPUT_FORMATS:
        fail(f"--output-format {output_format}: unknown; use {', '.join(PIVOT_OUTPUT_FORMATS)}")
    if output_format == "atif" and output.name.lower().endswith((".json", ".json.gz")):
        fail(f"-o/--output {output}: --output-format atif writes one ATIF document per line (JSON lines): "
             f"name the file .jsonl, e.g. {output.with_name(output.name.split('.')[0] + '.jsonl')}")


def print_audit(audit, report, output: Path) -> None:
    table = Table(title=f"extract -> {escape(str(output))}")
    table.add_column("")
    table.add_column("count", justify="right")
    table.add_row("rows read", str(report.read))
    for reason, count in report.skipped.most_common():
        table.add_row(f"rows skipped: {escape(reason)}", str(count))
    table.add_row("trajectories used", f"{audit.trajectories_used} of {audit.trajectories}")
    for kind, count in sorted(audit.kept.items()):
        table.add_row(f"candidates kept: {kind}", str(count))
    table.add_row("[bold]candidates kept", f"[bold]{audit.candidates}")
    for reason, count in audit.skipped.most_common():
        table.add_row(f"turns skipped: {reason}", str(count))
    console.print(table)
    for reason, example in report.examples.items():
        console.print(f"[yellow]skipped[/] {escape(reason)}: e.g. {escape(example)}", highlight=False)


def register(app: typer.Typer) -> None:
    app.command("extract")(extract_command)
