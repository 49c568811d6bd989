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
    for col in ("domain", "default verifier", "world", "train/test trajectories"):
        table.add_column(col, no_wrap=True)
    for d in all_domains():
        spec = d.verifier_spec()
        name = spec if isinstance(spec, str) else spec.get("name", "?")
        splits = manifest.get(d.name, {}).get("splits", {})
        counts = "/".join(str(splits.get(s, {}).get("trajectories", "-")) for s in ("train", "test")) if splits else "-"
        world = "-" if d.world is None else (d.world if isinstance(d.world, str) else d.world.get("name", "?"))
        table.add_row(d.name, name, world, counts)
    console.print(table)
    for d in all_domains():  # printed as lines, not cells: env ids are never cut by a narrow terminal
        ids = ", ".join(i for i in (d.env_id, d.episode_env_id if d.world is not None else None) if i)
        console.print(f"  [bold]{d.name}[/]: {ids} — {d.description}", highlight=False, soft_wrap=True)
    console.print("  generic episodes over any world: pivot/Episode-v0 (world=SPEC, tasks=...)", highlight=False,
                  soft_wrap=True)
    vt = Table(title="verifiers")
    vt.add_column("name")
    vt.add_column("what it checks")
    for name in verifier_names():
        doc = (verifier_class(name).__doc__ or "").strip().splitlines()
        vt.add_row(name, doc[0] if doc else "")
    console.print(vt)


def register(app: typer.Typer) -> None:
    app.command("list")(list_command)
