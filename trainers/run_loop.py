"""What every RL run does around its steps: start (processes, device, seeds, the output folder), loop
(metrics rows, checkpoints, the console line, ``on_step``), finish (``final/``, plots) and resume.

A trainer holds a :class:`~.policy_update.PolicyUpdate` and gives :func:`run_steps` its step function;
the PivotRL and the episode trainer differ only in their data and their step.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

import numpy as np
import torch

from pivot_envs.config import ConfigError
from pivot_envs.trainers import checkpoint as ckpt
from pivot_envs.trainers.config import PolicyConfig
from pivot_envs.trainers.distributed import (
    DistInfo,
    barrier,
    check_shared_dir,
    init_distributed,
    select_device,
    shutdown,
    torch_threads,
)
from pivot_envs.trainers.metrics import MetricsLogger, format_row, plot_metrics, truncate_metrics
from pivot_envs.trainers.policy_update import PolicyUpdate
from pivot_envs.trainers.step_stats import StepStats
from pivot_envs.verifiers.versions import check_versions

__all__ = ["RESUMABLE_CHANGES", "Run", "TrainResult", "engine_fields", "run_steps", "start_run"]

log = logging.getLogger("pivot_envs.trainers")

RESUMABLE_CHANGES = {"save_every", "save_total_limit", "log_every", "log_samples", "report_to", "plots",
                     "resume_from", "overwrite_output_dir", "wandb_project", "output_dir"}
"""Config fields that may differ between a checkpoint and the run resuming it without a warning (not ``num_threads``:
one torch thread and two part the sums, so a run resumed under another count does not repeat the uninterrupted one)."""


@dataclass
class TrainResult:
    """What a training run produced.

    Attributes:
        output_dir: the run folder.
        final_model_dir: the trained model (``save_pretrained`` + tokenizer; LoRA runs are merged).
        metrics_path: ``metrics.jsonl`` (one row per step).
        plot_path: ``metrics.png``, when plotted.
        samples_path: ``samples.jsonl`` when ``log_samples`` is on.
        steps: steps completed in total (a resumed run counts the earlier ones).
        last_metrics: the last step's row.
        seconds: wall time of this call's training loop.
        checkpoints: checkpoint folders that exist at the end.
    """

    output_dir: Path
    final_model_dir: Path
    metrics_path: Path
    plot_path: Path | None
    samples_path: Path | None
    steps: int
    last_metrics: dict[str, Any]
    seconds: float
    checkpoints: list[Path] = field(default_factory=list)


@dataclass
class Run:
    """The processes, device, files and resume point of one run (:func:`start_run`)."""

    dist: DistInfo
    device: torch.device
    output_dir: Path
    resume_dir: Path | None

    @property
    def metrics_path(self) -> Path:
        return self.output_dir / "metrics.jsonl"

    @property
    def samples_path(self) -> Path:
        return self.output_dir / "samples.jsonl"


def start_run(cfg: PolicyConfig) -> Run:
    """Join the process group, check that every rank sees one ``output_dir`` (:func:`~.distributed.check_shared_dir`),
    pick the device, seed python/numpy/torch, find the checkpoint to resume and
    refuse an ``output_dir`` that already holds a run (unless resuming or ``overwrite_output_dir``)."""
    wants_cuda = cfg.device.startswith("cuda") or (cfg.device == "auto" and torch.cuda.is_available())
    dist = init_distributed("cuda" if wants_cuda else "cpu")
    try:
        check_shared_dir(cfg.output_dir, dist)  # before anything is loaded: a node-local folder fails here, not later
    except Exception:
        shutdown(dist)
        raise
    run = Run(dist=dist, device=select_device(cfg.device, dist), output_dir=Path(cfg.output_dir), resume_dir=None)
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    run.resume_dir = ckpt.resolve_checkpoint(cfg.resume_from, run.output_dir) if cfg.resume_from else None
    if run.resume_dir is None and run.metrics_path.exists() and not cfg.overwrite_output_dir:
        raise ConfigError(f"{run.output_dir} already holds a run ({run.metrics_path.name}); set resume_from='latest' "
                          "to continue it, overwrite_output_dir=true to start afresh, or pick another output_dir")
    barrier(dist)  # every rank checked before rank 0 writes anything
    return run


def open_trainer(trainer: Any, cfg: PolicyConfig, on_step: Callable[[dict[str, Any]], None] | None) -> None:
    """What both RL trainers do first: start the run (:func:`start_run`), load their data
    (``trainer._load_data()``), build the :class:`~.policy_update.PolicyUpdate` and, when resuming, restore
    their own state (``trainer._restore(dir)``). Sets ``on_step``, ``run``, ``dist``, ``device``,
    ``output_dir``, ``metrics_path``, ``samples_path``, ``resume_dir``, ``policy_update``, ``step`` and
    ``rollout_turns_total`` (model calls so far: the axis the arms compare on)."""
    trainer.on_step = on_step
    run = trainer.run = start_run(cfg)
    trainer.dist, trainer.device = run.dist, run.device
    trainer.output_dir, trainer.metrics_path, trainer.samples_path = run.output_dir, run.metrics_path, run.samples_path
    trainer.resume_dir = run.resume_dir
    with torch_threads(cfg.num_threads):
        trainer._load_data()
        trainer.policy_update = PolicyUpdate(cfg, run.dist, run.device, run.resume_dir)
    trainer.step = 0
    trainer.rollout_turns_total = 0
    if run.resume_dir is not None:
        trainer._restore(run.resume_dir)


def read_checkpoint(path: Path, cfg: PolicyConfig, renamed: dict[str, str] | None = None,
                    verifier_versions: dict[str, int] | None = None) -> dict[str, Any]:
    """A checkpoint's trainer state; warns when the run's settings differ from the checkpoint's
    (``renamed``: old key -> new key, for checkpoints written before a field was renamed). Refuses
    (:class:`~pivot_envs.verifiers.versions.VerifierVersionsChanged`) a checkpoint whose recorded verifier versions
    are not ``verifier_versions``, the run's of now: its rewards came from other verifier code."""
    state = ckpt.load_trainer_state(path)
    if verifier_versions is not None:
        check_versions(state.get("verifier_versions"), verifier_versions, where=f"{path} (a training checkpoint)",
                       fix="Start the run afresh instead of resuming it: another output_dir, or this one with "
                       "overwrite_output_dir=true and no resume_from")
    now = cfg.to_dict()
    saved = {(renamed or {}).get(k, k): v for k, v in state["config"].items() if v is not None or k not in (renamed or {})}
    changed = sorted(k for k, v in saved.items() if k not in RESUMABLE_CHANGES and now.get(k) != v)
    if changed:
        log.warning("resuming %s with changed settings %s: the run will not equal an uninterrupted one", path, changed)
    return state


def restore_rng(path: Path, dist: DistInfo) -> None:
    """This process's RNG states from a checkpoint (when it holds them)."""
    rng = ckpt.load_rng_state(path, dist.rank)
    if rng is not None:
        ckpt.set_rng_state(rng)


class Steppable(Protocol):
    """What :func:`run_steps` needs of a trainer."""

    config: PolicyConfig
    run: Run
    policy_update: PolicyUpdate
    rollout: Any
    step: int
    on_step: Callable[[dict[str, Any]], None] | None

    def train_step(self, step: int) -> dict[str, Any]: ...

    def save_checkpoint(self, row: dict[str, Any] | None = None) -> Path: ...


def run_steps(trainer: Steppable, before: Callable[[], None] | None = None) -> TrainResult:
    """Run ``trainer.train_step`` until ``config.steps``: a metrics row per step, checkpoints every
    ``save_every`` steps and at the last, then ``final/`` and the plot. ``before()`` runs first on a fresh run.
    A trainer with a ``check_step(row)`` method has it called after each step's row is logged: it stops the run
    by raising."""
    cfg, run, start = trainer.config, trainer.run, time.perf_counter()
    dist = run.dist
    fresh = run.resume_dir is None
    if dist.is_main and not fresh:
        truncate_metrics(run.metrics_path, trainer.step)
        if run.samples_path.exists():
            truncate_metrics(run.samples_path, trainer.step)
    if dist.is_main and fresh and run.samples_path.exists():
        run.samples_path.unlink()
    logger = MetricsLogger(run.metrics_path, report_to=cfg.report_to, run_dir=run.output_dir, config=cfg.to_dict(),
                           enabled=dist.is_main, fresh=fresh, wandb_project=cfg.wandb_project)
    row: dict[str, Any] = {}
    layout = trainer.policy_update.layout()  # world_size, sharding, params_total, params_local (rank 0's share)
    try:
        with torch_threads(cfg.num_threads):
            if fresh and before is not None:
                before()
            while trainer.step < cfg.steps:
                row = {**trainer.train_step(trainer.step + 1), **layout}
                trainer.step += 1
                logger.log(row)
                if cfg.save_every and (trainer.step % cfg.save_every == 0 or trainer.step == cfg.steps):
                    trainer.save_checkpoint(row)
                if dist.is_main:
                    if trainer.step % cfg.log_every == 0 or trainer.step == cfg.steps:
                        log.info(format_row(row))
                    if trainer.on_step is not None:
                        trainer.on_step(row)
                check = getattr(trainer, "check_step", None)
                if check is not None:  # after the row is logged: a trainer may stop the run (it raises)
                    check(row)
            final_dir = trainer.policy_update.save_final(run.output_dir, cfg.to_dict())
    finally:
        logger.close()
        trainer.rollout.close()
    plot = None
    if cfg.plots and dist.is_main:
        plot = plot_metrics(run.metrics_path, run.output_dir / "metrics.png")
    barrier(dist)
    shutdown(dist)
    return TrainResult(
        output_dir=run.output_dir,
        final_model_dir=final_dir,
        metrics_path=run.metrics_path,
        plot_path=plot,
        samples_path=run.samples_path if cfg.log_samples else None,
        steps=trainer.step,
        last_metrics=row,
        seconds=time.perf_counter() - start,
        checkpoints=ckpt.list_checkpoints(run.output_dir),
    )


def engine_fields(rollout: Any, total: StepStats, version: int, sync_s: float, sample_s: float,
                  step_s: float) -> dict[str, Any]:
    """The rollout engine's columns of a metrics row (a contract: fields may be added, never renamed).

    ``sample_s`` (the row's own) includes the weight sync before sampling; ``sample_share`` is its share of the step.
    """
    return {
        "rollout_engine": rollout.name,
        "policy_version": version,
        "weight_sync_s": sync_s,
        "logprob_mismatch": total.ratio("mismatch_sum", "mismatch_tokens"),
        "is_weight_mean": total.ratio("is_sum", "is_tokens"),
        "sample_share": sample_s / step_s if step_s > 0 else None,
    }
