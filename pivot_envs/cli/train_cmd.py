"""``pivot-envs train`` (PivotRL or the SFT baseline, from a config file) and ``pivot-envs eval``.

Examples::

    pivot-envs train --config examples/train_pivotrl_tiny.yaml
    pivot-envs train --config examples/train_sft_tiny.yaml --set steps=50 --set lr=3e-3
    pivot-envs train --config run.toml --set algorithm=sft --dry-run
    pivot-envs eval --model out/sft --pivots bundled:tool_use:test --k 4 -o report.json
    pivot-envs eval --model out/sft --pivots bundled:tool_use:test --episodes --max-turns 20

A config file (YAML, TOML or JSON) names the trainer with ``algorithm: pivotrl | e2e | sft``
(``e2e``: GRPO over whole episodes, ``rollout: arpo`` for ARPO branching);
every other key is a field of that trainer's config dataclass (``PivotRLConfig``,
``EpisodeRLConfig`` or ``SFTConfig``), nested sections for nested fields. ``--set KEY=VALUE`` overrides any
of them (dotted keys for nested ones; values parsed as YAML scalars). Unknown keys
and values of the wrong type are errors naming the key and where it was set.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import json
import math
import os
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from pivot_envs.cli.common import console, err_console, fail, progress, user_errors
from pivot_envs.config import ConfigError, apply_overrides, build_config, read_config_file
from pivot_envs.sources import resolve_pivots
from pivot_envs.trainers.eval_report import EvalReport
from pivot_envs.trainers.evaluate import episode_sources, evaluate
from pivot_envs.trainers.harness_steps import HarnessFailure
from pivot_envs.trainers.metrics import StepReport
from pivot_envs.users import parse_user_spec

ALGORITHMS: dict[str, tuple[str, str, str]] = {
    "pivotrl": ("pivot_envs.trainers.pivotrl", "PivotRLConfig", "train_pivotrl"),
    "e2e": ("pivot_envs.trainers.episode_rl", "EpisodeRLConfig", "train_episode_rl"),
    "sft": ("pivot_envs.trainers.sft", "SFTConfig", "train_sft"),
}
"""``algorithm`` -> (module, config class, train function)."""


# --------------------------------------------------------------------------- train


def resolve_train_config(config_path: Path, overrides: list[str]) -> tuple[str, Any, Callable[..., Any]]:
    """``(algorithm, config object, train function)`` of a config file plus ``--set`` overrides.

    Raises :class:`~pivot_envs.config.ConfigError` (a ``ValueError``) naming the key on any problem.
    """
    source = apply_overrides(read_config_file(config_path), overrides)
    algorithm = source.data.get("algorithm")
    if algorithm is None:
        raise ConfigError(f"{config_path}: missing key 'algorithm'; set it to one of {', '.join(ALGORITHMS)} "
                          "(in the file, or --set algorithm=sft)")
    if algorithm not in ALGORITHMS:
        raise ConfigError(f"{source.origin('algorithm')}: algorithm {algorithm!r} is not one of {', '.join(ALGORITHMS)}")
    module_name, class_name, fn_name = ALGORITHMS[algorithm]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"algorithm {algorithm!r} cannot be loaded ({exc}); training needs the train extra: "
                          "pip install 'pivot-envs[train]'") from None
    config = build_config(getattr(module, class_name), source, ignore=("algorithm",))
    return algorithm, config, getattr(module, fn_name)


def train_command(
    config: Path = typer.Option(..., "--config", "-c", help="Training config: YAML, TOML or JSON with algorithm: pivotrl | e2e | sft."),
    overrides: Optional[list[str]] = typer.Option(None, "--set", "-s", help="Override a config key: KEY=VALUE (dotted keys for nested fields; repeatable)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the resolved config and exit without training."),
) -> None:
    """Train with PivotRL (GRPO on pivots) or the SFT baseline, as a config file says."""
    with user_errors():
        algorithm, cfg, train = resolve_train_config(config, list(overrides or []))
    main_rank = int(os.environ.get("RANK", "0")) == 0  # under torchrun only rank 0 prints tables and progress
    if main_rank:
        _print_config(algorithm, cfg, only_changed=not dry_run)
    if dry_run:
        return
    with user_errors(), _load_errors():
        result = _run_with_progress(algorithm, cfg, train) if main_rank else train(cfg)
    if main_rank:
        _print_result(algorithm, result)


@contextlib.contextmanager
def _load_errors() -> Iterator[None]:
    """A model folder that does not load (``OSError`` from transformers) is a one-line error too; a harness that
    failed the run (:class:`~pivot_envs.trainers.harness_steps.HarnessFailure`) is an error with its reason."""
    try:
        yield
    except HarnessFailure as exc:
        fail(str(exc), code=1)
    except OSError as exc:
        fail(str(exc).splitlines()[0])


def _run_with_progress(algorithm: str, cfg: Any, train: Callable[..., Any]) -> Any:
    """Run ``train(cfg, on_step=...)`` with a progress bar fed by the trainer's per-step callback."""
    total = int(getattr(cfg, "steps", 0) or 0) or None
    bar = Progress(
        TextColumn(f"[bold]{algorithm}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[stats]}"),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        console=err_console,
    )
    with bar:
        task = bar.add_task("train", total=total, stats="")
        started: list[bool] = []

        def on_step(metrics: dict[str, Any]) -> None:
            step = int(metrics.get("step", 0))
            if not started:  # a resumed run: count the rate from here
                started.append(True)
                bar.reset(task, total=total, completed=step, stats="")
            bar.update(task, completed=step, stats=_stats_text(metrics))

        return train(cfg, on_step=on_step)


def _stats_text(metrics: dict[str, Any]) -> str:
    return StepReport.from_row(metrics).text()


def _config_dict(cfg: Any) -> dict[str, Any]:
    if hasattr(cfg, "to_dict"):
        return cfg.to_dict()
    return dataclasses.asdict(cfg)


def _print_config(algorithm: str, cfg: Any, only_changed: bool = False) -> None:
    """The resolved config as a key/value table (``only_changed``: the keys that differ from the defaults)."""
    values = _flatten(_config_dict(cfg))
    if only_changed:
        defaults = _flatten(_config_dict(type(cfg)())) if _has_defaults(type(cfg)) else {}
        values = {k: v for k, v in values.items() if k not in defaults or defaults[k] != v}
    title = f"{algorithm}: {type(cfg).__name__}" + (" (settings other than the defaults)" if only_changed else "")
    table = Table(title=title, show_header=False)
    table.add_column("key", style="bold")
    table.add_column("value")
    for key, value in values.items():
        table.add_row(key, json.dumps(value, default=str))
    err_console.print(table)


def _flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict) and value:
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _has_defaults(cls: type) -> bool:
    try:
        cls()
    except Exception:  # noqa: BLE001 - a config whose defaults do not validate: show everything
        return False
    return True


def _print_result(algorithm: str, result: Any) -> None:
    if hasattr(result, "to_dict"):
        data = result.to_dict()
    elif dataclasses.is_dataclass(result) and not isinstance(result, type):
        data = dataclasses.asdict(result)
    else:
        data = dict(getattr(result, "__dict__", {}))
    table = Table(title=f"{algorithm} finished", show_header=False)
    table.add_column("")
    table.add_column("", justify="right")
    for key, value in data.items():
        if isinstance(value, (list, dict)):
            continue
        if isinstance(value, float):
            value = "-" if math.isnan(value) else f"{value:.4g}"
        table.add_row(key, str(value))
    console.print(table)


# --------------------------------------------------------------------------- eval


def eval_command(
    model: str = typer.Option(..., "--model", "-m", help="Model folder (save_pretrained layout) or hub id."),
    pivots: str = typer.Option(..., "--pivots", "-p", help="Held-out pivots: a pivot file or bundled:DOMAIN:test."),
    k: int = typer.Option(1, "--k", "-k", min=0, help="Samples per pivot for mean@k at --temperature (0: greedy only)."),
    temperature: float = typer.Option(1.0, "--temperature", min=0.0, help="Temperature of the mean@k samples."),
    probes: bool = typer.Option(True, "--probes/--no-probes", help="Also score the OOD probe set (greedy exact match)."),
    verifier: Optional[str] = typer.Option(None, "--verifier", "-v", help="Functional verifier name (default: each domain's default)."),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="Write the full report as JSON."),
    seed: int = typer.Option(0, "--seed", help="Sampling seed."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Evaluate only the first N pivots (with --episodes: and play only the first N tasks)."),
    max_new_tokens: int = typer.Option(256, "--max-new-tokens", min=1, help="Longest generated action."),
    batch_size: int = typer.Option(16, "--batch-size", min=1, help="Pivots per generate call."),
    threads: int = typer.Option(1, "--threads", min=1, help="torch CPU threads."),
    device: str = typer.Option("auto", "--device", help="auto, cpu, cuda, cuda:1 ..."),
    episodes: bool = typer.Option(False, "--episodes", help="Also play whole tasks in each domain's world (greedy) and report task success beside the per-turn accuracy."),
    tasks: Optional[str] = typer.Option(None, "--tasks", help="Episode tasks: a trajectory file or bundled:DOMAIN:SPLIT (default: the tasks of bundled --pivots)."),
    max_turns: int = typer.Option(20, "--max-turns", help="Episodes: assistant turns before an episode is truncated (>= 1)."),
    user: str = typer.Option("scripted", "--user", help="Episodes: user simulator: scripted, none or openai:MODEL@URL."),
) -> None:
    """Evaluate a model: functional and strict accuracy on held-out pivots (greedy, mean@k) and OOD probes;
    with --episodes also task success of whole episodes."""
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        fail(f"evaluation needs the train extra: pip install 'pivot-envs[train]' ({exc})")
    if tasks is not None and not episodes:
        fail("--tasks names the tasks of --episodes: add --episodes")
    if max_turns < 1:
        fail(f"--max-turns must be >= 1, got {max_turns}")
    episode_arg: Any = False
    if episodes:
        try:
            parse_user_spec(user)
        except ValueError as exc:
            fail(f"--user: {exc}")
        try:
            episode_arg = episode_sources(True if tasks is None else tasks, pivots)
        except ValueError as exc:
            fail(f"--episodes: {exc}" + ("; give --tasks FILE|bundled:DOMAIN:SPLIT" if tasks is None else ""))
    with user_errors():
        pivot_list = resolve_pivots(pivots)
    if limit is not None:
        pivot_list = pivot_list[:limit]
    if not pivot_list:
        fail(f"{pivots}: no pivots to evaluate")
    bar_tasks: dict[str, Any] = {}
    with progress() as bar:
        def on_progress(phase: str, done: int, total: int) -> None:
            if phase not in bar_tasks:
                bar_tasks[phase] = bar.add_task(phase, total=total)
            bar.update(bar_tasks[phase], completed=done)

        with user_errors(), _load_errors():
            report = evaluate(model, pivot_list, k=k, temperature=temperature, verifier=verifier, probes=probes,
                              seed=seed, max_new_tokens=max_new_tokens, batch_size=batch_size, num_threads=threads,
                              device=device, progress=on_progress, episodes=episode_arg, episode_max_turns=max_turns,
                              episode_user=user, episode_limit=limit)
    _print_eval(report, pivots)
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(json.dumps(_json_safe(report), indent=1) + "\n", encoding="utf-8")
        console.print(f"wrote {output}")


def _json_safe(value: Any) -> Any:
    """NaN -> null (JSON has no NaN)."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value


def _print_eval(data: dict[str, Any], source: str) -> None:
    """One column per domain (and ``all`` when there are several), one row per measure."""
    fmt = lambda x: "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"  # noqa: E731
    report = EvalReport.from_dict(data)
    k, t = report.k, report.temperature
    columns = report.columns()
    table = Table(title=f"eval {report.model} on {source}\n(seed {report.seed}, {report.seconds:.1f} s)")
    table.add_column("")
    for name, _ in columns:
        table.add_column(name, justify="right")
    rows: list[tuple[str, Any]] = [
        ("pivots", lambda s: str(s["pivots"])),
        ("greedy functional", lambda s: fmt(s["greedy"]["functional"])),
        ("greedy strict", lambda s: fmt(s["greedy"]["strict"])),
    ]
    if report.has_sampled:
        rows += [
            (f"mean@{k} functional (T={t:g})", lambda s: fmt(s["sampled"]["functional"])),
            (f"mean@{k} strict (T={t:g})", lambda s: fmt(s["sampled"]["strict"])),
            (f"pass@{k}", lambda s: fmt(s["sampled"]["pass_at_k"])),
        ]
    rows.append(("verifier errors", lambda s: str(s["greedy"]["errors"] + (s["sampled"] or {}).get("errors", 0))))
    if report.has_episodes:
        rows += [
            ("episodes", lambda s: str(s["episodes"]["episodes"])),
            ("task success (episodes)", lambda s: fmt(s["episodes"]["success"])),
            ("episode errors", lambda s: str(s["episodes"]["errors"])),
            ("episode turns (mean)", lambda s: fmt(s["episodes"]["turns_mean"])),
        ]
    for label, cell in rows:
        table.add_row(label, *(_cell(cell, s) for _, s in columns))
    console.print(table)
    probes = report.probes
    if probes:
        console.print(f"OOD probes: greedy exact match on {probes['n']} items")
        ood = Table()
        ood.add_column("all", justify="right")
        for kind in probes["by_kind"]:
            ood.add_column(kind, justify="right")
        ood.add_row(fmt(probes["accuracy"]), *(fmt(v) for v in probes["by_kind"].values()))
        console.print(ood)


def _cell(cell: Callable[[dict[str, Any]], str], summary: dict[str, Any]) -> str:
    """A table cell, "-" where the summary lacks that measure (a domain with episodes but no pivots)."""
    try:
        return cell(summary)
    except (KeyError, TypeError):
        return "-"


def register(app: typer.Typer) -> None:
    app.command("train")(train_command)
    app.command("eval")(eval_command)
