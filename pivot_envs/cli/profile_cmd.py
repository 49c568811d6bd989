"""``pivot-envs profile`` (K samples per candidate under a reference agent, or the report of a
profiled file) and ``pivot-envs filter`` (profiled candidates -> training pivots).

Examples::

    pivot-envs profile --pivots cand.jsonl --agent hf:out/ref -k 8 -o profiled.jsonl
    pivot-envs profile --pivots bundled:tool_use:train --agent noisy_expert:0.5 -o prof.jsonl --ray local
    pivot-envs profile --report profiled.jsonl --png profile.png --max-mean 0.75
    pivot-envs filter profiled.jsonl -o pivots.jsonl --min-var 0 --max-mean 0.75
    pivot-envs filter profiled.jsonl -o cand.jsonl --max-mean 0.75 --mode random --seed 1

``--pivots`` takes a pivot file (ours or NeMo Gym rows) or ``bundled:DOMAIN[:SPLIT]``
(a domain's bundled data, split ``train`` by default). An interrupted ``profile``
resumes from ``OUTPUT.checkpoint`` when run again with the same arguments.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator, Optional

import typer
from rich.table import Table
from rich.text import Text

from pivot_envs.cli.common import RateColumn, console, err_console, fail, progress, user_errors
from pivot_envs.cli.verify_cmd import verifier_spec
from pivot_envs.formats import write_pivots
from pivot_envs.pipeline.filter import MODES, FilterConfig, filter_pivots
from pivot_envs.pipeline.profile import profile_pivots
from pivot_envs.pipeline.profile_ray import profile_pivots_ray
from pivot_envs.pipeline.report import plot_profile, profile_report
from pivot_envs.sources import resolve_pivots


class PivotRateColumn(RateColumn):
    """Pivots per second."""

    def render(self, task):
        speed = task.finished_speed or task.speed
        return Text("  -- pivots/s" if speed is None else f"{speed:7.1f} pivots/s", style="cyan")


def profile_command(
    pivots: Optional[str] = typer.Option(None, "--pivots", "-p", help="Pivot file (ours or NeMo Gym rows), or bundled:DOMAIN[:SPLIT] for a domain's bundled data."),
    agent: Optional[str] = typer.Option(None, "--agent", "-a", help="Reference agent: hf:MODEL_DIR, openai:MODEL@URL, vllm:MODEL, replay, noisy_expert:P or a JSON config."),
    verifier: Optional[str] = typer.Option(None, "--verifier", "-v", help="Functional verifier name (default: each pivot's domain default)."),
    config: Optional[Path] = typer.Option(None, "--config", help="Verifier config file (JSON or YAML: {name: ..., params...})."),
    k: int = typer.Option(8, "-k", "--k", min=1, help="Samples per pivot."),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="Profiled pivot JSONL to write (.gz compresses); checkpoint: OUTPUT.checkpoint."),
    seed: int = typer.Option(0, "--seed", help="Sampling seed (sample j at pivot p depends on (seed, p.id, j) for the built-in agents)."),
    batch_pivots: int = typer.Option(16, "--batch-pivots", min=1, help="Pivots per agent.sample call (all K samples of each)."),
    ray: Optional[str] = typer.Option(None, "--ray", help="Profile on Ray actors: 'local' or a cluster address (extra: ray)."),
    ray_workers: Optional[int] = typer.Option(None, "--ray-workers", min=1, help="Ray actors (default: one per CPU)."),
    ray_gpus: float = typer.Option(0.0, "--ray-gpus", min=0.0, help="GPUs Ray reserves per actor (e.g. 1 for an hf:MODEL agent on GPU nodes; 0.5 packs two actors a GPU). 0: the actors see no GPU."),
    fresh: bool = typer.Option(False, "--fresh", help="Delete an existing checkpoint and profile from scratch."),
    report: Optional[Path] = typer.Option(None, "--report", help="Report mode: summarise this profiled pivot file (no profiling)."),
    png: Optional[Path] = typer.Option(None, "--png", help="Also plot the report to this PNG (needs matplotlib)."),
    max_mean: Optional[float] = typer.Option(None, "--max-mean", help="lambda_diff for the report's filter survivors (var > 0 and mean < L)."),
) -> None:
    """Profile pivot candidates: K samples each from a reference agent, verifier rewards -> mean, variance."""
    if report is not None:
        if pivots or agent or output:
            fail("--report summarises an existing profiled file: drop --pivots/--agent/--output")
        profiled = _read_pivots(str(report))
        if not any(p.profile is not None for p in profiled):
            fail(f"{report}: no pivot has a profile; profile it first: pivot-envs profile --pivots {report} --agent SPEC -o OUT")
        _print_report(profile_report(profiled, max_mean), str(report), png)
        return
    if pivots is None or agent is None or output is None:
        fail("give --pivots IN, --agent SPEC and -o OUT (or --report FILE to summarise a profiled file)")
    spec = verifier_spec(verifier, config)
    candidates = _read_pivots(pivots)
    if not candidates:
        fail(f"{pivots}: no pivots to profile")
    checkpoint = output.with_name(output.name + ".checkpoint")
    if fresh and checkpoint.exists():
        checkpoint.unlink()
    elif checkpoint.exists():
        err_console.print(f"resuming from {checkpoint}")
    if ray_gpus and ray is None:
        fail("--ray-gpus reserves GPUs for Ray actors: give --ray local (or a cluster address) too")
    profiled = _profile(candidates, agent, spec, k, seed, batch_pivots, checkpoint, ray, ray_workers, ray_gpus)
    _write_atomic(profiled, output)
    checkpoint.unlink(missing_ok=True)
    console.print(f"wrote {len(profiled)} profiled pivots to {output}")
    _print_report(profile_report(profiled, max_mean), str(output), png)


def _profile(candidates, agent, spec, k, seed, batch_pivots, checkpoint, ray, ray_workers, ray_gpus=0.0):
    bar = progress()
    bar.columns = tuple(PivotRateColumn() if isinstance(c, RateColumn) else c for c in bar.columns)
    with bar:
        task: list = []

        def on_progress(done: int, total: int) -> None:
            if not task:  # created at the first call so that resumed pivots do not count in the rate
                task.append(bar.add_task("profiling pivots", total=total, completed=done))
            else:
                bar.update(task[0], completed=done)

        with user_errors():
            if ray is not None:
                with _ray_with_gpus(ray, ray_gpus):
                    return profile_pivots_ray(candidates, agent, spec, k, seed=seed, batch_pivots=batch_pivots,
                                              checkpoint=checkpoint, progress=on_progress, address=ray,
                                              workers=ray_workers, worker_gpus=ray_gpus)
            return profile_pivots(candidates, agent, spec, k, seed=seed, batch_pivots=batch_pivots,
                                  checkpoint=checkpoint, progress=on_progress)


@contextlib.contextmanager
def _ray_with_gpus(address: str, gpus: float) -> Iterator[None]:
    """With ``gpus > 0``: join (or start) Ray first and refuse a cluster with fewer GPUs than one actor reserves
    (its actors would wait for them forever); the instance started here is shut down afterwards."""
    if not gpus:
        yield
        return
    import ray as ray_lib

    started = not ray_lib.is_initialized()
    if started:
        ray_lib.init(address=None if address == "local" else address, include_dashboard=False, log_to_driver=False,
                     configure_logging=False)
    try:
        have = float(ray_lib.cluster_resources().get("GPU", 0))
        if have < gpus:
            fail(f"--ray-gpus {gpus:g}: the Ray cluster ({address}) has {have:g} GPU(s), so no actor could start; "
                 "lower --ray-gpus (0 profiles on CPUs) or join a cluster with GPUs (--ray ADDRESS)")
        yield
    finally:
        if started:
            ray_lib.shutdown()


def _read_pivots(source: str):
    """Pivots of a file, or of ``bundled:DOMAIN[:SPLIT]`` (:func:`pivot_envs.sources.resolve_pivots`)."""
    with user_errors():
        return resolve_pivots(source)


def _write_atomic(pivots, output: Path) -> None:
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(f".{output.name}.partial{output.suffix}")  # keeps .gz
    write_pivots(pivots, tmp)
    os.replace(tmp, output)


def _print_report(rep, source: str, png: Optional[Path]) -> None:
    table = Table(title=f"profile report: {source}")
    table.add_column("")
    table.add_column("value", justify="right")
    for label, value in rep.rows():
        table.add_row(label.replace("[", "\\["), value)
    console.print(table)
    hist = Table(title="per-pivot mean reward")
    hist.add_column("mean")
    hist.add_column("pivots", justify="right")
    hist.add_column("")
    top = max(rep.mean_hist) if rep.mean_hist and max(rep.mean_hist) else 1
    for label, count in rep.histogram_rows():
        hist.add_row(label.replace("[", "\\["), str(count), "#" * round(30 * count / top))
    console.print(hist)
    if png is not None:
        with user_errors():
            plot_profile(rep, png, title=Path(source).name)
        console.print(f"wrote {png}")


def filter_command(
    input: Path = typer.Argument(..., help="Profiled pivot JSONL (written by `pivot-envs profile`)."),
    output: Path = typer.Option(..., "-o", "--output", help="Pivot JSONL to write (.gz compresses)."),
    min_var: float = typer.Option(0.0, "--min-var", help="adv: keep var > MIN_VAR (strictly)."),
    max_mean: Optional[float] = typer.Option(None, "--max-mean", help="adv: keep mean < LAMBDA (strictly): the paper's lambda_diff."),
    mode: str = typer.Option("adv", "--mode", help="adv (D_adv), random (uniform D_cand ablation of the same size or --n), pvpo."),
    seed: int = typer.Option(0, "--seed", help="random: sampling seed."),
    n: Optional[int] = typer.Option(None, "--n", min=0, help="random: how many to draw (default: as many as adv keeps)."),
    dedup_actions: bool = typer.Option(False, "--dedup-actions", help="Keep one pivot per expert action (the same call or command, canonically spelled): the hardest by profiled mean."),
) -> None:
    """Keep the informative pivots of a profiled file (var > min-var and mean < max-mean), or an ablation."""
    if mode not in MODES:
        fail(f"--mode must be one of {', '.join(MODES)}, got {mode!r}")
    if max_mean is None and (mode == "adv" or (mode == "random" and n is None)):
        fail(f"--mode {mode} needs --max-mean LAMBDA (keep mean < LAMBDA; e.g. 0.75)"
             + (" or --n N" if mode == "random" else ""))
    if not input.exists():
        fail(f"{input}: no such file")
    pivots = _read_pivots(str(input))
    if mode != "random" and pivots and not any(p.profile is not None for p in pivots):
        fail(f"{input}: no pivot has a profile; profile it first: pivot-envs profile --pivots {input} --agent SPEC -o OUT")
    with user_errors():
        cfg = FilterConfig(mode=mode, min_var=min_var, max_mean=1.0 if max_mean is None else max_mean, n=n, seed=seed,
                           dedup_actions=dedup_actions)
        kept, audit = filter_pivots(pivots, cfg)
    _write_atomic(kept, output)
    table = Table(title=f"filter ({mode}) {input} -> {output}")
    table.add_column("")
    table.add_column("pivots", justify="right")
    for label, value in audit.rows():
        table.add_row(label, value)
    console.print(table)


def register(app: typer.Typer) -> None:
    app.command("profile")(profile_command)
    app.command("filter")(filter_command)
