"""What every RL run does around its steps: start (processes, device, seeds, the output folder), loop
(metrics rows, checkpoints, the console line, ``on_step``), finish (``final/``, plots) and resume.

Both RL trainers are an :class:`RLTrainer`: a run, its data, a :class:`~.policy_update.PolicyUpdate`, the step
count and the model calls so far. The PivotRL and the episode trainer differ only in their data
(:meth:`~RLTrainer.load_data`, :meth:`~RLTrainer.data_state`) and their step (:meth:`~RLTrainer.train_step`).
"""

from __future__ import annotations

import logging
import random
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar

import numpy as np
import torch

from pivot_envs.config import ConfigError
from pivot_envs.trainers import checkpoint as ckpt
from pivot_envs.trainers.advantage import AdvantagePolicy
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
from pivot_envs.trainers.rollout_engine import HFRolloutEngine, VLLMRolloutEngine
from pivot_envs.trainers.step_stats import StepStats
from pivot_envs.verifiers.versions import check_versions

__all__ = ["RESUMABLE_CHANGES", "RLTrainer", "Run", "TrainResult", "engine_fields", "start_run"]

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


class RLTrainer(ABC):
    """What both RL trainers are. ``__init__`` starts the run (:func:`start_run`), loads the subclass's data
    (:meth:`load_data`), builds the :class:`~.policy_update.PolicyUpdate` and, when resuming, restores the
    checkpoint's state (:meth:`restore`); the subclass then builds its ``rollout`` engine. :meth:`train` runs
    :meth:`train_step` until ``config.steps``.

    Attributes:
        config: the run's settings.
        on_step: called on rank 0 with every step's metrics row.
        advantage: the advantage policy (:mod:`.advantage`): mode, zero-variance rule, baseline, turn shaping.
        run: the processes, device, files and resume point (``dist``, ``device``, ``output_dir``, ... read it).
        policy_update: the policy, its reference, the optimiser and the schedule.
        rollout: the rollout engine (``hf`` or ``vllm``), built by the subclass.
        step: steps done (a resumed run counts the earlier ones).
        rollout_turns_total: model calls so far (sampled turns): the axis the arms compare on.
        verifier_versions: the versions of the verifiers behind the rewards, recorded in checkpoints (set by
            :meth:`load_data`): a resume under other versions is refused.
    """

    renamed_keys: ClassVar[dict[str, str] | None] = None
    """Config keys renamed since a checkpoint was written (old -> new), for :func:`read_checkpoint`."""

    config: PolicyConfig
    rollout: HFRolloutEngine | VLLMRolloutEngine
    verifier_versions: dict[str, int]

    def __init__(self, config: PolicyConfig, on_step: Callable[[dict[str, Any]], None] | None):
        self.config = config
        self.on_step = on_step
        self.advantage = AdvantagePolicy.of(config)
        self.run = start_run(config)
        with torch_threads(config.num_threads):
            self.load_data()
            self.policy_update = PolicyUpdate(config, self.run.dist, self.run.device, self.run.resume_dir)
        self.step = 0
        self.rollout_turns_total = 0
        if self.run.resume_dir is not None:
            self.restore(self.run.resume_dir)

    # the run's and the policy's parts, as attributes of the trainer
    dist = property(lambda self: self.run.dist, doc="The process group.")
    device = property(lambda self: self.run.device)
    output_dir = property(lambda self: self.run.output_dir)
    metrics_path = property(lambda self: self.run.metrics_path)
    samples_path = property(lambda self: self.run.samples_path)
    resume_dir = property(lambda self: self.run.resume_dir, doc="The checkpoint this run resumed from, or None.")
    policy = property(lambda self: self.policy_update.policy, doc="The policy (DDP-wrapped under torchrun).")
    tokenizer = property(lambda self: self.policy_update.tokenizer)
    updates = property(lambda self: self.policy_update.updates, doc="Optimiser updates so far.")

    # ------------------------------------------------------------------ what a trainer adds
    @abstractmethod
    def load_data(self) -> None:
        """Load the run's data (pivots or tasks, their verifiers) and set ``verifier_versions``; runs before the
        policy is built, under the run's torch threads."""

    @abstractmethod
    def data_state(self) -> dict[str, Any]:
        """The trainer's own part of a checkpoint (the data position, ...), JSON-ready."""

    @abstractmethod
    def load_data_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`data_state` saved (``state``: the whole checkpoint's trainer state)."""

    @abstractmethod
    def train_step(self, step: int) -> dict[str, Any]:
        """Make step ``step`` (1-based); returns its metrics row (the same on every rank)."""

    def before_first_step(self) -> None:
        """Runs once before the first step of a fresh run (not on resume)."""

    def check_step(self, row: dict[str, Any]) -> None:
        """Runs after each step's row is logged; a trainer stops the run by raising."""

    # ------------------------------------------------------------------ checkpoints
    def restore(self, path: Path) -> None:
        """Continue from the checkpoint ``path``: the optimiser and schedule, the trainer's data state, the step
        count, the model calls so far and this process's RNG states."""
        state = read_checkpoint(path, self.config, renamed=self.renamed_keys, verifier_versions=self.verifier_versions)
        self.policy_update.load_state_dict(state, default_updates=int(state["step"]) * self.config.num_iterations)
        self.load_data_state(state)
        self.step = int(state["step"])
        self.rollout_turns_total = int(state.get("rollout_turns_total", 0))
        restore_rng(path, self.dist)

    def save_checkpoint(self, row: dict[str, Any] | None = None) -> Path:
        """Checkpoint the run after ``self.step`` steps (collective under DDP)."""
        state = {
            "format": 1,
            "step": self.step,
            **self.data_state(),
            "rollout_turns_total": self.rollout_turns_total,
            "config": self.config.to_dict(),
            "verifier_versions": self.verifier_versions,
        }
        summary = {"step": self.step, "config": self.config.to_dict(), "metrics": row or {},
                   "verifier_versions": self.verifier_versions}
        return self.policy_update.save_checkpoint(self.output_dir, self.step, state, summary, self.config.save_total_limit)

    # ------------------------------------------------------------------ the loop
    def train(self) -> TrainResult:
        """Run :meth:`train_step` until ``config.steps``: a metrics row per step, checkpoints every
        ``save_every`` steps and at the last, then ``final/`` and the plot. :meth:`before_first_step` runs first
        on a fresh run; :meth:`check_step` after each step's row is logged."""
        cfg, run, start = self.config, self.run, time.perf_counter()
        dist = run.dist
        fresh = run.resume_dir is None
        if dist.is_main and not fresh:
            truncate_metrics(run.metrics_path, self.step)
            if run.samples_path.exists():
                truncate_metrics(run.samples_path, self.step)
        if dist.is_main and fresh and run.samples_path.exists():
            run.samples_path.unlink()
        logger = MetricsLogger(run.metrics_path, report_to=cfg.report_to, run_dir=run.output_dir, config=cfg.to_dict(),
                               enabled=dist.is_main, fresh=fresh, wandb_project=cfg.wandb_project)
        row: dict[str, Any] = {}
        layout = self.policy_update.layout()  # world_size, sharding, params_total, params_local (rank 0's share)
        try:
            with torch_threads(cfg.num_threads):
                if fresh:
                    self.before_first_step()
                while self.step < cfg.steps:
                    row = {**self.train_step(self.step + 1), **layout}
                    self.step += 1
                    logger.log(row)
                    if cfg.save_every and (self.step % cfg.save_every == 0 or self.step == cfg.steps):
                        self.save_checkpoint(row)
                    if dist.is_main:
                        if self.step % cfg.log_every == 0 or self.step == cfg.steps:
                            log.info(format_row(row))
                        if self.on_step is not None:
                            self.on_step(row)
                    self.check_step(row)  # after the row is logged: a trainer may stop the run (it raises)
                final_dir = self.policy_update.save_final(run.output_dir, cfg.to_dict())
        finally:
            logger.close()
            self.rollout.close()
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
            steps=self.step,
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
