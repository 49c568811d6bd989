"""``pivot-envs list``: domains, env ids, worlds, verifiers, and plugins that failed to load.

Every cell is computed on its own: a user domain or world that cannot be described shows what went
wrong in its cell, and the rest of the listing still prints.
"""

from __future__ import annotations

import json
from typing import Any, Callable

import typer
from rich.markup import escape
from rich.table import Table

from pivot_envs.cli.common import console
from pivot_envs.domains import all_domains, plugin_errors
from pivot_envs.envs_data import DATA_DIR
from pivot_envs.success import SUCCESS_RULES, rule_name, rules_for, success_rule_names
from pivot_envs.verifiers import verifier_class, verifier_names
from pivot_envs.worlds import describe_world, describe_world_spec, world_names, world_origin, world_plugin_errors


def list_command() -> None:
    """List the registered domains (with their gymnasium env ids), worlds and verifiers."""
    domains = all_domains()
    console.print(_domains_table(domains))
    for d in domains:  # printed as lines, not cells: env ids are never cut by a narrow terminal
        ids = ", ".join(i for i in (d.env_id, d.episode_env_id if d.world is not None else None) if i)
        rules = _cell(lambda: ", ".join(r if isinstance(r, str) else rule_name(r) for r in rules_for(d.name)))
        console.print(f"  [bold]{escape(d.name)}[/]: {escape(ids)} — {escape(d.description)}; task success: "
                      f"{escape(rules)}", highlight=False, soft_wrap=True)
    console.print("  generic episodes over any world: pivot/Episode-v0 (world=SPEC, tasks=...)", highlight=False,
                  soft_wrap=True)
    console.print(_worlds_table())
    console.print(_verifiers_table())
    console.print(_success_rules_table())
    _print_plugin_errors()


def _domains_table(domains: list[Any]) -> Table:
    manifest_path = DATA_DIR / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    table = Table(title="domains")
    for col in ("domain", "default verifier", "world", "train/test trajectories"):
        table.add_column(col, no_wrap=True)
    for d in domains:
        table.add_row(escape(d.name), escape(_cell(lambda: _verifier_label(d.verifier_spec()))),
                      escape(describe_world_spec(d.world)), _cell(lambda: _counts(manifest, d.name)))
    return table


def _worlds_table() -> Table:
    table = Table(title="worlds")
    table.caption = "a world spec: one of these names, mcp:COMMAND [ARGS], or a config dict {name: ..., params}"
    for col in ("world", "from", "what it is"):
        table.add_column(col, overflow="fold")  # an entry point's module:Object is never cut
    for name in world_names():
        table.add_row(escape(name), escape(world_origin(name)), escape(describe_world(name)))
    return table


def _verifiers_table() -> Table:
    table = Table(title="verifiers")
    table.add_column("name")
    table.add_column("what it checks", overflow="fold")
    for name in verifier_names():
        table.add_row(name, escape(first_paragraph(verifier_class(name).__doc__)))
    return table


def _success_rules_table() -> Table:
    table = Table(title="success rules (task success: every rule that applies must pass)")
    table.add_column("rule")
    table.add_column("when an episode passes it", overflow="fold")
    for name in success_rule_names():
        table.add_row(escape(name), escape(_cell(lambda: first_paragraph(type(SUCCESS_RULES.get(name)).__doc__))))
    return table


def first_paragraph(doc: str | None) -> str:
    """A docstring's first paragraph as one line (a description never cut mid-sentence)."""
    return " ".join((doc or "").strip().split("\n\n")[0].split())


def _print_plugin_errors() -> None:
    for message in plugin_errors() + world_plugin_errors():
        console.print(f"[yellow]plugin not loaded:[/] {escape(message)}", highlight=False, soft_wrap=True)


def _cell(compute: Callable[[], str]) -> str:
    """``compute()``, or the error it raised as ``? (Type: message)``: one bad entry never stops the listing."""
    try:
        return compute()
    except Exception as exc:  # noqa: BLE001 - user code (a domain's callable) may raise anything
        return f"? ({type(exc).__name__}: {exc})"


def _verifier_label(spec: Any) -> str:
    if isinstance(spec, str):
        return spec
    if isinstance(spec, dict):
        return str(spec.get("name", "?"))
    return str(getattr(spec, "name", None) or type(spec).__name__)


def _counts(manifest: dict[str, Any], domain: str) -> str:
    splits = manifest.get(domain, {}).get("splits", {})
    if not splits:
        return "-"
    return "/".join(str(splits.get(s, {}).get("trajectories", "-")) for s in ("train", "test"))


def register(app: typer.Typer) -> None:
    app.command("list")(list_command)
