"""The ``pivot-envs`` command line.

Each sub-command lives in its own module of this package and exposes
``register(app)``; :data:`COMMAND_MODULES` lists them in help order.
"""

from __future__ import annotations

import importlib

import typer

COMMAND_MODULES = [
    "list_cmd",
    "extract_cmd",
    "data_cmd",
    "env_cmd",
    "verify_cmd",
    "profile_cmd",
    "train_cmd",
    "model_cmd",
    "demo_cmd",
]

app = typer.Typer(
    name="pivot-envs",
    help="Turn-level agentic RL: trajectories -> pivots -> gymnasium envs with functional verifiers.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

for _module in COMMAND_MODULES:
    importlib.import_module(f"pivot_envs.cli.{_module}").register(app)


def main() -> None:
    """Console-script entry point."""
    app()
