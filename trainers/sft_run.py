"""The SFT run itself (:func:`~pivot_envs.trainers.sft.train_sft` calls it): the model, the optimiser, the steps, the
checkpoints and the saved model, in one process or each rank of a ``torchrun`` job. It imports torch at its top (the
train extra); :mod:`pivot_envs.trainers.sft` (the config, the encoding, the plot) does not.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from pathlib import Path
from typing import Any, cast

import torch

from pivot_envs.agents.prompt_format import write_prompt_format
from pivot_envs.trainers import checkpoint as ckpt_io, distributed, schedule, sharding
from pivot_envs.trainers.checkpoint import list_checkpoints, load_trainer_state, resolve_checkpoint
from pivot_envs.trainers.distributed import DistInfo, barrier, check_world_size, unwrap
from pivot_envs.trainers.lm_loop import Part, split_micro, train_steps
from pivot_envs.trainers.metrics import MetricsLogger, read_metrics, truncate_metrics
from pivot_envs.trainers.sft import (CONFIG_FILE, FINAL_DIR, METRICS_FILE, PLOT_FILE, RESULT_FILE, RESUME_INVARIANT,
                                     BatchPlan, SFTConfig, SFTResult, StepCallback, default_prompt_tokens,
                                     encode_example, logger, plot_losses, training_pivots)
from pivot_envs.trainers.sharding import full_state_dict, is_sharded, optimizer_state, save_optimizer_shards, save_whole


def run_sft(config: SFTConfig, on_step: StepCallback | None = None) -> SFTResult:
    """:func:`~pivot_envs.trainers.sft.train_sft` of a checked ``config``: the process group, then the run."""
    wants_cuda = config.device.startswith("cuda") or (config.device == "auto" and torch.cuda.is_available())
    dist = distributed.init_distributed("cuda" if wants_cuda else "cpu")
    try:
        distributed.check_shared_dir(config.output_dir, dist)  # a node-local folder fails here, before training
        return _train(config, on_step, dist)
    finally:
        distributed.shutdown(dist)


def _train(config: SFTConfig, on_step: StepCallback | None, dist: Any) -> SFTResult:
    """:func:`run_sft` in a joined process group (``dist``: one process, or each rank of a ``torchrun`` job)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

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


def _prepare_output(out: Path, config: SFTConfig, main: bool = True) -> Path | None:
    """Check/clean ``output_dir`` and return the checkpoint to resume from (``None``: a fresh run); only the main
    process (``main``) removes or creates anything."""
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
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(name)


def _prompt_format(config: SFTConfig) -> dict[str, Any]:
    """The prompt format the model is trained in, recorded beside every model SFT saves."""
    return {"tools": config.prompt_tools, "max_prompt_tokens": config.max_prompt_tokens}


def _save_model(folder: Path, model: Any, tokenizer: Any, prompt_format: dict[str, Any], dist: Any = None) -> None:
    """``save_pretrained`` of the whole model (and the prompt format) into a temporary folder, then rename it into
    place; on rank 0 only (collective under FSDP: the shards are gathered there)."""
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
    optimizer = optimizer_state(model, optim, dist)
    weights = full_state_dict(model, dist) if is_sharded(model) else None
    trainer_state = {"step": step, "optimizer": optimizer, "scheduler": sched.state_dict(), "config": config.to_dict(),
                     "world_size": dist.world_size}
    ckpt_io.save_checkpoint(path, model=unwrap(model), tokenizer=tokenizer, state=trainer_state, info=dist,
                            summary={"step": step, **row}, prompt_format=_prompt_format(config), weights=weights,
                            write_shards=lambda folder: save_optimizer_shards(model, optim, folder))


def _load_state(ckpt: Path, config: SFTConfig, dist: Any = None) -> dict[str, Any]:
    """The checkpoint's trainer state, after checking it belongs to this run's settings and world size."""
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
