"""``pivot-envs export``: write pivots in a trainer's dataset layout (``--to verl``: veRL's RL parquet)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from pivot_envs.cli.common import console, fail, user_errors
from pivot_envs.integrations.verl import export_parquet

TARGETS = ("verl",)


def export_command(
    to: str = typer.Option(..., "--to", help=f"Target layout: {', '.join(TARGETS)}."),
    input: str = typer.Option(..., "--input", "-i", help="Pivot JSONL file or bundled:DOMAIN[:SPLIT]."),
    output: Path = typer.Option(..., "--output", "-o", help="Output file (veRL: .parquet)."),
    split: Optional[str] = typer.Option(None, "--split", help="Split written to extra_info.split (default: the split of bundled:DOMAIN:SPLIT, else train)."),
    verifier: Optional[str] = typer.Option(None, "--verifier", "-v", help="Verifier name for every row (default: each pivot's domain default)."),
) -> None:
    """Export pivots for another trainer (veRL's parquet: data_source, prompt, ability, reward_model, extra_info)."""
    if to not in TARGETS:
        fail(f"--to {to}: unknown target; targets: {', '.join(TARGETS)}")
    if output.exists() and output.is_dir():
        fail(f"--output {output}: is a folder, give a .parquet file path")
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        fail('--to verl needs pyarrow: pip install "pivot-envs[verl]"')

    with user_errors():
        n = export_parquet(input, output, split=split, verifier=verifier)
    console.print(f"wrote {n} rows to {output}")


def register(app: typer.Typer) -> None:
    app.command("export")(export_command)
