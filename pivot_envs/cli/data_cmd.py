"""``pivot-envs data``: generate trajectories of the built-in domains; rebuild the bundled set."""

from __future__ import annotations

import time
from pathlib import Path
from typing import List, Optional

import typer
from rich.table import Table

from pivot_envs.cli.common import console, err_console, user_errors
from pivot_envs.envs_data import generator
from pivot_envs.envs_data.build import build_all
from pivot_envs.jsonl import write_jsonl

data_app = typer.Typer(help="Generate domain data.", no_args_is_help=True)


@data_app.command("generate")
def generate_command(
    domain: str = typer.Option(..., "--domain", "-d", help="tool_use, terminal, swe or search."),
    n: int = typer.Option(300, "--n", "-n", min=1, help="Number of expert trajectories."),
    seed: int = typer.Option(0, help="Generator seed (same seed -> same bytes)."),
    output: Path = typer.Option(..., "-o", "--output", help="Trajectory JSONL to write (.gz compresses)."),
) -> None:
    """Generate N expert trajectories of a built-in domain (OpenAI chat JSONL)."""
    with user_errors():
        gen = generator(domain)
    start = time.perf_counter()
    with err_console.status(f"generating {n} {domain} trajectories"):
        trajs = gen.generate(n, seed)
    with user_errors():
        count = write_jsonl(output, (t.to_dict() for t in trajs))
    turns = sum(1 for t in trajs for m in t.messages if m.get("role") == "assistant")
    console.print(f"wrote {count} trajectories ({turns} assistant turns) to {output} in {time.perf_counter() - start:.1f}s")


@data_app.command("build")
def build_command(
    n: int = typer.Option(300, "--n", "-n", min=5, help="Trajectories per domain (split 80/20)."),
    seed: int = typer.Option(0, help="Generator seed."),
    domain: Optional[List[str]] = typer.Option(None, "--domain", "-d", help="Only these domains (repeatable)."),
) -> None:
    """Regenerate the bundled data set inside the package (envs_data/)."""
    with user_errors():
        manifest = build_all(n=n, seed=seed, domains=domain or None, progress=lambda d: err_console.print(f"building {d} ..."))
    table = Table(title="bundled data")
    for col in ("domain", "split", "trajectories", "successful", "assistant turns", "bytes"):
        table.add_column(col, justify="right")
    for name, entry in sorted(manifest.items()):
        for split, s in entry["splits"].items():
            table.add_row(name, split, str(s["trajectories"]), str(s["successful"]), str(s["assistant_turns"]), str(s["bytes"]))
    console.print(table)


def register(app: typer.Typer) -> None:
    app.add_typer(data_app, name="data")
