"""``pivot-envs list``: domains, env ids, verifiers."""

from __future__ import annotations

import json

import typer
from rich.table import Table

from pivot_envs.cli.common import console


def list_command() -> None:
    """List the registered domains (with their gymnasium env ids) and verifiers."""
    from pivot_envs.domains import all_domains
    from pivot_envs.envs_data import DATA_DIR
    from pivot_envs.verifiers import verifier_class, verifier_names

    manifest_path = DATA_DIR / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    table = Table(title="domains")
    for col in ("domain", "env id", "default verifier", "train/test trajectories"):
        table.add_column(col, no_wrap=True)
    for d in all_domains():
        spec = d.verifier_spec()
        name = spec if isinstance(spec, str) else spec.get("name", "?")
        splits = manifest.get(d.name, {}).get("splits", {})
        counts = "/".join(str(splits.get(s, {}).get("trajectories", "-")) for s in ("train", "test")) if splits else "-"
        table.add_row(d.name, d.env_id, name, counts)
    console.print(table)
    for d in all_domains():
        console.print(f"  [bold]{d.name}[/]: {d.description}", highlight=False)
    vt = Table(title="verifiers")
    vt.add_column("name")
    vt.add_column("what it checks")
    for name in verifier_names():
        doc = (verifier_class(name).__doc__ or "").strip().splitlines()
        vt.add_row(name, doc[0] if doc else "")
    console.print(vt)


def register(app: typer.Typer) -> None:
    app.command("list")(list_command)
