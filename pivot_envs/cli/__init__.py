"""The ``pivot-envs`` command line.

Each sub-command lives in its own module of this package and exposes
``register(app)``; :data:`COMMAND_MODULES` lists them in help order.
"""

from __future__ import annotations

import importlib
import os
import sys

import typer

from pivot_envs.cli.common import err_console

COMMAND_MODULES = [
    "list_cmd",
    "extract_cmd",
    "data_cmd",
    "env_cmd",
    "verify_cmd",
    "redteam_cmd",
    "export_cmd",
    "profile_cmd",
    "play_cmd",
    "train_cmd",
    "model_cmd",
    "demo_cmd",
    "serve_cmd",
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


MULTI_PROCESS_COMMANDS = ("train",)
"""The commands that run as one job over the processes of a launcher (``torchrun``): the others would run
once per process, into the same output."""


def refuse_several_processes(argv: list[str]) -> None:
    """Exit 2 when a launcher started several processes (``WORLD_SIZE`` > 1) for a command that is not one job
    over them (only ``train`` is): ``torchrun -m pivot_envs.cli profile ...`` would otherwise write W copies."""
    try:
        world = int(os.environ.get("WORLD_SIZE") or 1)
    except ValueError:
        world = 1
    name = next((a for a in argv if not a.startswith("-")), None)
    if world > 1 and name is not None and name not in MULTI_PROCESS_COMMANDS:
        err_console.print(f"[bold red]error:[/] pivot-envs {name} runs in one process, but this launch started "
                          f"{world} (WORLD_SIZE={world}): each would run the whole command into the same output. "
                          f"Run it without torchrun; only {', '.join(MULTI_PROCESS_COMMANDS)} spreads over "
                          "processes (profiling scales with --ray or served endpoints: docs/scale.md)",
                          highlight=False, soft_wrap=True, markup=True)
        raise SystemExit(2)


def main() -> None:
    """Console-script entry point. A usage mistake (a bad flag value, an unknown command) is one line
    naming the flag and where to get help, exit code 2, like every other user error."""
    # click's exception classes, wherever this typer version keeps them (click, or its vendored copy)
    errors = sys.modules[typer.BadParameter.__module__]
    refuse_several_processes(sys.argv[1:])
    command = typer.main.get_command(app)
    try:
        code = command.main(standalone_mode=False)
    except errors.UsageError as exc:
        if type(exc).__name__ == "NoArgsIsHelpError" and exc.ctx is not None:
            typer.echo(exc.ctx.get_help())
            raise SystemExit(0) from None
        where = exc.ctx.command_path if exc.ctx is not None else "pivot-envs"
        err_console.print(f"[bold red]error:[/] {exc.format_message()} (see {where} --help)", highlight=False,
                          soft_wrap=True, markup=True)
        raise SystemExit(exc.exit_code) from None
    except typer.Abort:
        raise SystemExit(130) from None
    raise SystemExit(code if isinstance(code, int) else 0)
