"""The SFT baseline: next-token loss of the expert action at every pivot (same data as PivotRL).

::

    from pivot_envs.trainers.sft import SFTConfig, train_sft

    result = train_sft(SFTConfig(model="out/base", pivots="pivots.jsonl", output_dir="out/sft", steps=200))
    # out/sft/final/       the trained model (save_pretrained layout; --agent hf:out/sft/final)
    # out/sft/metrics.jsonl, loss.png, sft_config.json, train_result.json, checkpoint-NNNNNN/

The settings share their names and meaning with
:class:`~pivot_envs.trainers.config.PivotRLConfig` wherever the concept is the same
(``model``, ``output_dir``, ``pivots``/``domain``/``split``, ``steps``, ``lr``,
``lr_schedule``, ``warmup_steps``, ``grad_accum_steps``, ``save_every``, ``resume_from``...),
so one config file drives both arms with only ``algorithm`` changed.

Example of one pivot: the prompt is the pivot's context rendered exactly as the
``hf`` agent renders it (:func:`pivot_envs.agents.prompting.encode_prompt`: the
chat template with the pivot's tools and the open assistant turn), cut from the
left to ``max_prompt_tokens``; the target is :func:`~pivot_envs.agents.prompting.action_target`
of the expert message (Hermes text: content, then ``<tool_call>`` blocks) followed
by the end-of-sequence token. The loss is the mean token NLL over all target
tokens of an optimiser step, so a trained model emits text that parses back into
the expert's action. The step itself (padding, masked NLL, AdamW, clipping, schedule) is
:func:`pivot_envs.trainers.lm_loop.train_steps`, the loop of every supervised trainer here.

Batches: the pivots are shuffled once per epoch under ``seed`` and taken in
order, ``batch_size`` per optimiser step (split into ``grad_accum_steps``
micro-batches for memory; the update is the same); the examples of step ``s``
depend only on ``(seed, s)``, so a resumed run sees the batches an uninterrupted
one would.

Checkpoints: every ``save_every`` steps and at the last step the model,
optimiser, scheduler and RNG states go to ``output_dir/checkpoint-NNNNNN`` in the
PivotRL trainer's layout (:mod:`pivot_envs.trainers.checkpoint`: written to a
temporary folder, then renamed); ``resume_from="latest"`` (or a
checkpoint folder) continues a run and ends with the same weights and metrics as
an uninterrupted one. The metrics file is cut back to the checkpoint's step on
resume, so it never has duplicate steps. A folder that already holds a run is
an error unless ``resume_from`` or ``overwrite_output_dir`` is given.

Metrics (``metrics.jsonl``, one JSON object per step; the common keys are the
PivotRL trainer's): ``step``, ``loss``, ``lr``, ``grad_norm``, ``tokens`` (prompt
+ target tokens processed in the step), ``loss_tokens`` (target tokens),
``tokens_per_s``, ``step_s``, ``wall_s``, ``epoch``, and the run's layout: ``world_size``, ``sharding``,
``params_total``, ``params_local`` (rank 0's share).

Several processes (``torchrun --nproc_per_node W -m pivot_envs.cli train --config sft.yaml``): each takes
``batch_size / W`` of a step's pivots, the gradients are averaged (DDP, or FSDP2 with ``sharding: fsdp``), and
the step's loss and counts are summed over the processes, so a step is the one a single process would take on
the whole batch (up to float rounding). Rank 0 writes the metrics and the model; the output folder must be shared
(checked at the start) and a checkpoint resumes only under the world size that wrote it.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence, cast

from pivot_envs.agents.prompt_format import write_prompt_format
from pivot_envs.agents.prompting import PromptConfig, action_target, encode_prompt
from pivot_envs.config import ConfigError
from pivot_envs.trainers.config import PivotData, TrainerConfig
from pivot_envs.trainers.metrics import MetricsLogger, read_metrics, truncate_metrics
from pivot_envs.types import Pivot
from pivot_envs.trainers.lm_loop import Part, collate, split_micro, target_nll_sum, train_steps  # noqa: F401
from pivot_envs.sources import resolve_pivots

logger = logging.getLogger(__name__)

StepCallback = Callable[[dict[str, Any]], None]
"""Called after every optimiser step with that step's metrics (the keys of ``metrics.jsonl``)."""

METRICS_FILE = "metrics.jsonl"
PLOT_FILE = "loss.png"
CONFIG_FILE = "sft_config.json"
RESULT_FILE = "train_result.json"
FINAL_DIR = "final"
GENERATION_ROOM = 256
"""Completion room assumed for the default prompt window (the ``hf`` agent's default ``max_new_tokens``)."""

PROMPT_TOOLS = ("auto", "template", "system", "none")

RESUME_INVARIANT = ("model", "domain", "pivots", "split", "seed", "steps", "batch_size", "lr", "weight_decay",
                    "betas", "adam_eps", "lr_schedule", "warmup_steps", "min_lr_ratio", "max_grad_norm",
                    "max_prompt_tokens", "max_action_tokens", "prompt_tools", "model_dtype")
"""Settings a checkpoint must share with the run that resumes it (the rest: logging, saving, hardware)."""


@dataclass
class SFTConfig(TrainerConfig, PivotData):
    """Settings of the SFT baseline: :class:`~pivot_envs.trainers.config.TrainerConfig`'s (the model, data, run
    length, AdamW and schedule, checkpoints and hardware, declared there once, as the RL trainers share them) plus
    the pivots (:class:`~pivot_envs.trainers.config.PivotData`'s, as PivotRL's) and their batch.

    Attributes:
        output_dir: folder for ``final/`` (the trained model), ``metrics.jsonl``, ``loss.png``,
            ``checkpoint-NNNNNN/`` folders, ``sft_config.json`` and ``train_result.json``.
        batch_size: pivots per optimiser step.
        lr: peak AdamW learning rate (``1e-3``: a tiny model's; RL's default, ``1e-6``, is a large model's).
        max_action_tokens: cut expert actions longer than this (the agent cannot emit more anyway).
        save_every: save a checkpoint every this-many steps and at the last step (``0``, the default: only
            ``final/``; an SFT baseline is short).
        log_every: log a one-line summary every this-many steps (``metrics.jsonl`` gets every step).
        num_threads: torch CPU threads while training (restored afterwards; ``None``: torch's setting; 1 by
            default: the baseline runs beside RL runs).
    """

    output_dir: str = "out/sft"
    batch_size: int = 8
    lr: float = 1e-3
    max_action_tokens: int = 256
    save_every: int = 0
    log_every: int = 10
    num_threads: int | None = 1

    def validate(self) -> None:
        super().validate()
        for name in ("batch_size", "max_action_tokens"):
            if getattr(self, name) < 1:
                raise ConfigError(f"SFTConfig.{name} = {getattr(self, name)!r} is invalid: it must be >= 1")
        if self.grad_accum_steps > self.batch_size:
            raise ConfigError(f"SFTConfig.grad_accum_steps = {self.grad_accum_steps} is invalid: it must be <= "
                              f"batch_size ({self.batch_size}), each micro-batch needs a pivot")
        if self.prompt_tools not in PROMPT_TOOLS:
            raise ConfigError(f"SFTConfig.prompt_tools = {self.prompt_tools!r} is invalid: it must be one of "
                              f"{', '.join(PROMPT_TOOLS)}")


@dataclass
class SFTResult:
    """What :func:`train_sft` did (also saved as ``train_result.json`` in ``output_dir``).

    Attributes:
        output_dir: the run folder.
        final_model_dir: the trained model (``output_dir/final``), as ``TrainResult.final_model_dir``.
        steps: optimiser steps done in total (including the ones before a resume).
        final_loss: loss of the last step.
        losses: loss of every step.
        tokens: prompt + target tokens processed over all steps.
        loss_tokens: target tokens the loss was taken on, over all steps.
        seconds: wall time of this call's training loop.
        train_pivots: pivots trained on.
        resumed_from: the checkpoint step this run continued from (``None``: from scratch).
        metrics_path: the metrics JSONL.
        plot_path: the metrics plot (``None`` when not drawn).
    """

    output_dir: str
    final_model_dir: str
    steps: int
    final_loss: float
    losses: list[float] = field(default_factory=list)
    tokens: int = 0
    loss_tokens: int = 0
    seconds: float = 0.0
    train_pivots: int = 0
    resumed_from: int | None = None
    metrics_path: str | None = None
    plot_path: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------- data


def training_pivots(config: SFTConfig) -> list[Pivot]:
    """The pivots of ``config``: ``pivots`` (a file or ``bundled:...``), else the bundled ``split`` of ``domain``."""
    return resolve_pivots(config.pivots, domain=config.domain, split=config.split)


def default_prompt_tokens(model: Any, tokenizer: Any, room: int = GENERATION_ROOM) -> int | None:
    """The prompt window the ``hf`` agent keeps by default (positions or ``model_max_length``, minus ``room``)."""
    found = [getattr(model.config, "max_position_embeddings", None), getattr(tokenizer, "model_max_length", None)]
    limits = [int(x) for x in found if isinstance(x, int) and 0 < x < 10**7]
    return max(16, min(limits) - room) if limits else None


def encode_example(tokenizer: Any, pivot: Pivot, *, max_prompt_tokens: int | None, max_action_tokens: int,
                   tools: str = "auto") -> tuple[list[int], list[int]]:
    """``(prompt ids, target ids)`` of one pivot: the agent's prompt and the expert action + end of turn."""
    prompt = encode_prompt(tokenizer, pivot, PromptConfig(tools=tools, max_prompt_tokens=max_prompt_tokens))
    target = tokenizer(action_target(pivot.expert), add_special_tokens=False, verbose=False)["input_ids"]
    return prompt, list(target[:max_action_tokens]) + [tokenizer.eos_token_id]


class BatchPlan:
    """Which examples each step takes: per-epoch permutations under ``seed``, a pure function of the step."""

    def __init__(self, n: int, seed: int, batch_size: int):
        if n < 1:
            raise ValueError("no training examples")
        self.n, self.seed, self.batch_size = n, seed, batch_size
        self._perm_cache: tuple[int, list[int]] | None = None

    def _perm(self, epoch: int) -> list[int]:
        if self._perm_cache is None or self._perm_cache[0] != epoch:
            order = list(range(self.n))
            random.Random(f"pivot-envs-sft:{self.seed}:{epoch}").shuffle(order)
            self._perm_cache = (epoch, order)
        return self._perm_cache[1]

    def batch(self, step: int) -> list[int]:
        """Example indices of optimiser step ``step`` (0-based)."""
        start = step * self.batch_size
        return [self._perm(pos // self.n)[pos % self.n] for pos in range(start, start + self.batch_size)]

    def epoch(self, steps_done: int) -> float:
        """Epochs (passes over the examples) completed after ``steps_done`` steps."""
        return steps_done * self.batch_size / self.n


def expert_nll(model: Any, tokenizer: Any, pivots: Sequence[Pivot], *, max_prompt_tokens: int | None = None,
               max_action_tokens: int = 256, tools: str = "auto", batch_size: int = 8) -> float:
    """Mean token NLL of the expert actions at ``pivots`` under ``model`` (the SFT loss, no gradient)."""
    import torch

    window = max_prompt_tokens or default_prompt_tokens(model, tokenizer)
    rows = [encode_example(tokenizer, p, max_prompt_tokens=window, max_action_tokens=max_action_tokens, tools=tools)
            for p in pivots]
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    device = next(model.parameters()).device
    total, count = 0.0, 0
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for start in range(0, len(rows), batch_size):
            chunk = rows[start : start + batch_size]
            total += float(target_nll_sum(model, *collate(chunk, pad_id, device)))
            count += sum(len(t) for _, t in chunk)
    model.train(was_training)
    return total / max(1, count)


# --------------------------------------------------------------------------- training


def train_sft(config: SFTConfig | dict[str, Any], on_step: StepCallback | None = None) -> SFTResult:
    """Train the SFT baseline described by ``config``; returns what it did (see the module docstring).

    ``config`` may be a dict (:meth:`SFTConfig.from_dict`). ``on_step(row)`` is called after every
    step with the row written to ``metrics.jsonl`` (for progress bars), as in ``train_pivotrl``.
    """
    if isinstance(config, dict):
        config = SFTConfig.from_dict(config)
    import torch

    from pivot_envs.trainers import distributed  # needs torch

    wants_cuda = config.device.startswith("cuda") or (config.device == "auto" and torch.cuda.is_available())
    dist = distributed.init_distributed("cuda" if wants_cuda else "cpu")
    try:
        distributed.check_shared_dir(config.output_dir, dist)  # a node-local folder fails here, before training
        return _train(config, on_step, dist)
    finally:
        distributed.shutdown(dist)


def _train(config: SFTConfig, on_step: StepCallback | None, dist: Any) -> SFTResult:
    """:func:`train_sft` in a joined process group (``dist``: one process, or each rank of a ``torchrun`` job)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pivot_envs.trainers import checkpoint as ckpt_io, distributed, schedule, sharding  # they need torch

    world, rank = dist.world_size, dist.rank
    if config.batch_size % world or config.batch_size // world < config.grad_accum_steps:
        raise ValueError(f"SFTConfig.batch_size = {config.batch_size} does not split over {world} processes with "
                         f"grad_accum_steps = {config.grad_accum_steps}: each process takes batch_size / {world} "
                         f"pivots a step, in grad_accum_steps micro-batches; make batch_size a multiple of {world} "
                         f"and at least {world * config.grad_accum_steps}")
    out = Path(config.output_dir)
    resume = _prepare_output(out, config, main=dist.is_main)
    distributed.barrier(dist)  # rank 0 has cleaned the folder before anyone writes to it
    state = _load_state(resume, config, dist) if resume is not None else None
    pivots = training_pivots(config)
    if not pivots:
        raise ValueError(f"{config.pivots or config.domain}: no pivots to train on")
    device = distributed.select_device(config.device, dist) if dist.enabled else _device(config.device)
    source = str(resume / "model") if resume is not None else config.model
    dtype = torch.bfloat16 if config.model_dtype == "bfloat16" else torch.float32
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype).to(device)
    except OSError as exc:
        raise OSError(f"sft: cannot load a causal LM from {source!r} (model: {config.model!r}): {exc}") from exc
    if tokenizer.eos_token_id is None:
        raise ValueError(f"{config.model}: the tokenizer has no eos token; SFT needs one to end the action")
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    window = config.max_prompt_tokens or default_prompt_tokens(model, tokenizer)
    examples = [encode_example(tokenizer, p, max_prompt_tokens=window, max_action_tokens=config.max_action_tokens,
                               tools=cast(str, config.prompt_tools)) for p in pivots]  # resolved in __post_init__
    plan = BatchPlan(len(examples), config.seed, config.batch_size)

    torch.manual_seed(config.seed)
    model = sharding.wrap_policy(model, dist, device, config.sharding)
    layout = sharding.layout_fields(model, dist, config.sharding)
    optim = torch.optim.AdamW(model.parameters(), lr=config.lr, betas=config.betas, eps=config.adam_eps,
                              weight_decay=config.weight_decay)
    sched = schedule.build_scheduler(optim, warmup_steps=config.warmup_steps, total_steps=config.steps,
                                     schedule=config.lr_schedule, min_lr_ratio=config.min_lr_ratio)
    start_step = 0
    metrics_path = out / METRICS_FILE
    if state is not None:
        assert resume is not None  # the state was read from it
        sharding.load_optimizer_state(model, optim, state["optimizer"], resume)
        sched.load_state_dict(state["scheduler"])
        start_step = int(state["step"])
        rng = ckpt_io.load_rng_state(resume, rank)
        if rng is not None:
            ckpt_io.set_rng_state(rng)
        if dist.is_main:
            truncate_metrics(metrics_path, start_step)
    if dist.is_main:
        (out / CONFIG_FILE).write_text(json.dumps(config.to_dict(), indent=1) + "\n", encoding="utf-8")

    metrics = MetricsLogger(metrics_path, fresh=state is None, enabled=dist.is_main)
    began = time.perf_counter()
    share = config.batch_size // world

    def batch_for(step: int) -> list[list[Part]]:
        mine = plan.batch(step)[rank * share : (rank + 1) * share]  # this process's slice of the step's pivots
        batch = [examples[i] for i in mine]
        return [[Part(micro)] for micro in split_micro(batch, config.grad_accum_steps)]

    def after_step(done: dict[str, Any]) -> None:
        step, dt = done["step"], done["step_s"]
        row = {"step": step, "loss": done["loss"], "lr": done["lr"], "grad_norm": done["grad_norm"],
               "tokens": done["tokens"], "loss_tokens": done["loss_tokens"],
               "tokens_per_s": done["tokens"] / dt if dt > 0 else 0.0, "step_s": dt,
               "wall_s": time.perf_counter() - began, "epoch": plan.epoch(step), **layout}
        metrics.log(row)
        if dist.is_main and (step % config.log_every == 0 or step == config.steps):
            logger.info("sft step %d/%d: loss %.4f lr %.2e grad_norm %.3g %.0f tok/s", step, config.steps,
                        row["loss"], row["lr"], row["grad_norm"], row["tokens_per_s"])
        if config.save_every and (step % config.save_every == 0 or step == config.steps):
            _save_checkpoint(ckpt_io.checkpoint_path(out, step), model, tokenizer, optim, sched, config, dist, step,
                             row)
            if dist.is_main:
                ckpt_io.prune_checkpoints(out, config.save_total_limit)
            distributed.barrier(dist)
        if on_step is not None and dist.is_main:
            on_step(row)

    try:
        train_steps(model, optim, sched, batch_for, steps=config.steps, start_step=start_step, pad_id=pad_id,
                    max_grad_norm=config.max_grad_norm, num_threads=config.num_threads, on_step=after_step,
                    dist=dist)
    finally:
        metrics.close()
    seconds = time.perf_counter() - began

    model.eval()
    final = out / FINAL_DIR
    _save_model(final, model, tokenizer, _prompt_format(config), dist)
    rows = read_metrics(metrics_path) if dist.is_main else []
    result = SFTResult(
        output_dir=str(out), final_model_dir=str(final), steps=config.steps,
        final_loss=rows[-1]["loss"] if rows else math.nan, losses=[r["loss"] for r in rows],
        tokens=sum(r["tokens"] for r in rows), loss_tokens=sum(r["loss_tokens"] for r in rows),
        seconds=round(seconds, 3), train_pivots=len(pivots), resumed_from=start_step if state is not None else None,
        metrics_path=str(metrics_path),
    )
    if dist.is_main:
        if config.plots:
            result.plot_path = plot_losses(metrics_path, out / PLOT_FILE, title=f"SFT of {Path(config.model).name}")
        (out / RESULT_FILE).write_text(json.dumps(result.to_dict(), indent=1) + "\n", encoding="utf-8")
    distributed.barrier(dist)
    return result


def plot_losses(metrics_path: str | Path, png: str | Path, *, keys: Sequence[str] = ("loss", "grad_norm", "lr"),
                title: str = "SFT") -> str | None:
    """Plot ``keys`` of a metrics JSONL against ``step`` into ``png``; ``None`` (and a warning) without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
    except ImportError:
        logger.warning("matplotlib is not installed: no loss plot (pip install matplotlib)")
        return None
    rows = read_metrics(metrics_path)
    fig, axes = plt.subplots(1, len(keys), figsize=(4.2 * len(keys), 3.2), squeeze=False)
    for ax, key in zip(axes[0], keys):
        points = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float))]
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="." if len(points) < 60 else None,
                linewidth=1.2)
        ax.set_title(key)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    png = Path(png)
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return str(png)


# --------------------------------------------------------------------------- internals


def _prepare_output(out: Path, config: SFTConfig, main: bool = True) -> Path | None:
    """Check/clean ``output_dir`` and return the checkpoint to resume from (``None``: a fresh run); only the main
    process (``main``) removes or creates anything."""
    from pivot_envs.trainers.checkpoint import list_checkpoints, resolve_checkpoint

    if config.resume_from is not None:
        return resolve_checkpoint(config.resume_from, out)
    existing = [p for p in (out / METRICS_FILE, out / FINAL_DIR, out / RESULT_FILE) if p.exists()]
    existing += list_checkpoints(out)
    if existing:
        if not config.overwrite_output_dir:
            raise ValueError(f"{out} already holds a run ({existing[0].name}); set resume_from=latest to continue it, "
                             "overwrite_output_dir=true to start over, or choose another output_dir")
        for path in existing + [out / PLOT_FILE] if main else []:
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
    if main:
        out.mkdir(parents=True, exist_ok=True)
    return None


def _device(name: str) -> Any:
    import torch

    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(name)


def _prompt_format(config: SFTConfig) -> dict[str, Any]:
    """The prompt format the model is trained in, recorded beside every model SFT saves."""
    return {"tools": config.prompt_tools, "max_prompt_tokens": config.max_prompt_tokens}


def _save_model(folder: Path, model: Any, tokenizer: Any, prompt_format: dict[str, Any], dist: Any = None) -> None:
    """``save_pretrained`` of the whole model (and the prompt format) into a temporary folder, then rename it into
    place; on rank 0 only (collective under FSDP: the shards are gathered there)."""
    from pivot_envs.trainers.distributed import DistInfo, barrier
    from pivot_envs.trainers.sharding import save_whole

    dist = dist or DistInfo()
    tmp = folder.with_name(folder.name + ".tmp")
    if dist.is_main:
        shutil.rmtree(tmp, ignore_errors=True)
    save_whole(model, tmp, dist)
    if dist.is_main:
        tokenizer.save_pretrained(tmp)
        write_prompt_format(tmp, **prompt_format)
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(tmp, folder)
    barrier(dist)


def _save_checkpoint(path: Path, model: Any, tokenizer: Any, optim: Any, sched: Any, config: SFTConfig, dist: Any,
                     step: int, row: dict[str, Any]) -> None:
    """``checkpoint-NNNNNN/`` in the PivotRL trainer's layout (collective: every rank writes its RNG state)."""
    from pivot_envs.trainers import checkpoint as ckpt_io
    from pivot_envs.trainers.distributed import unwrap
    from pivot_envs.trainers.sharding import full_state_dict, is_sharded, optimizer_state, save_optimizer_shards

    optimizer = optimizer_state(model, optim, dist)
    weights = full_state_dict(model, dist) if is_sharded(model) else None
    trainer_state = {"step": step, "optimizer": optimizer, "scheduler": sched.state_dict(), "config": config.to_dict(),
                     "world_size": dist.world_size}
    ckpt_io.save_checkpoint(path, model=unwrap(model), tokenizer=tokenizer, state=trainer_state, info=dist,
                            summary={"step": step, **row}, prompt_format=_prompt_format(config), weights=weights,
                            write_shards=lambda folder: save_optimizer_shards(model, optim, folder))


def _load_state(ckpt: Path, config: SFTConfig, dist: Any = None) -> dict[str, Any]:
    """The checkpoint's trainer state, after checking it belongs to this run's settings and world size."""
    from pivot_envs.trainers.checkpoint import load_trainer_state
    from pivot_envs.trainers.distributed import DistInfo, check_world_size

    state = load_trainer_state(ckpt)
    check_world_size(state.get("world_size"), dist or DistInfo(), str(ckpt))
    old = state.get("config", {})
    now = config.to_dict()
    diff = [k for k in RESUME_INVARIANT if old.get(k) != now.get(k)]
    if diff:
        shown = ", ".join(f"{k}: checkpoint {old.get(k)!r} vs now {now.get(k)!r}" for k in diff)
        raise ValueError(f"{ckpt}: checkpoint of a run with other settings ({shown}); resume with the same settings "
                         "or start a new run (another output_dir, or overwrite_output_dir=true)")
    return state
