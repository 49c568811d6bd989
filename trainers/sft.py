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

import logging
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from pivot_envs.agents.prompting import PromptConfig, action_target, encode_prompt
from pivot_envs.config import ConfigError
from pivot_envs.trainers.config import PivotData, TrainerConfig
from pivot_envs.trainers.metrics import read_metrics
from pivot_envs.types import Pivot
from pivot_envs.trainers.lm_loop import collate, target_nll_sum
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
    from pivot_envs.trainers.sft_run import run_sft  # torch (the train extra): imported at sft_run's top

    return run_sft(config, on_step)


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
