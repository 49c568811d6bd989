"""Learning-rate schedule: linear warm-up, then cosine decay (or a constant rate).

The factor multiplies the peak learning rate at optimiser update ``i`` (0-based)::

    i <  warmup:  (i + 1) / warmup                                   (the first update is not wasted at 0)
    i >= warmup:  min_ratio + (1 - min_ratio) * 0.5 * (1 + cos(pi * p)),   p = (i - warmup) / (total - warmup)

so update ``warmup`` runs at the peak and the last update ``total - 1`` is just above the floor.
``constant`` keeps the factor at 1 after the warm-up.
"""

from __future__ import annotations

import functools
import math

import torch


def lr_factor(
    step: int, *, warmup_steps: int, total_steps: int, schedule: str = "cosine", min_lr_ratio: float = 0.0
) -> float:
    """Multiplier of the peak learning rate at optimiser update ``step``."""
    if schedule not in ("cosine", "constant"):
        raise ValueError(f"lr schedule must be 'cosine' or 'constant', got {schedule!r}")
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == "constant":
        return 1.0
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def build_scheduler(
    optimizer: torch.optim.Optimizer,
    *,
    warmup_steps: int,
    total_steps: int,
    schedule: str = "cosine",
    min_lr_ratio: float = 0.0,
) -> torch.optim.lr_scheduler.LambdaLR:
    """A ``LambdaLR`` over :func:`lr_factor` (its ``state_dict`` round-trips: the factor is a partial)."""
    factor = functools.partial(lr_factor, warmup_steps=warmup_steps, total_steps=total_steps,
                               schedule=schedule, min_lr_ratio=min_lr_ratio)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
