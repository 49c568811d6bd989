"""Learning-rate schedule: linear warm-up, then cosine decay (or a constant rate) — transformers' schedules.

The factor of the peak learning rate at optimiser update ``i`` (0-based) is that of
``transformers.get_scheduler("cosine_with_min_lr", ...)`` (``get_cosine_schedule_with_warmup`` with a floor)::

    i <  warmup:  i / warmup                                              (the first update runs at 0)
    i >= warmup:  min_ratio + (1 - min_ratio) * 0.5 * (1 + cos(pi * p)),   p = (i - warmup) / (total - warmup)

so update ``warmup`` runs at the peak and the last update ``total - 1`` is just above the floor.
``constant`` is ``get_constant_schedule_with_warmup``: the same warm-up, then a factor of 1.
"""

from __future__ import annotations

import torch


def build_scheduler(
    optimizer: torch.optim.Optimizer,
    *,
    warmup_steps: int,
    total_steps: int,
    schedule: str = "cosine",
    min_lr_ratio: float = 0.0,
) -> torch.optim.lr_scheduler.LambdaLR:
    """transformers' warm-up + cosine (to ``min_lr_ratio``) or warm-up + constant schedule, a ``LambdaLR``.

    Its ``state_dict`` round-trips (the factor is a ``functools.partial``), so a resumed run continues exactly.
    """
    from transformers import get_scheduler

    if schedule not in ("cosine", "constant"):
        raise ValueError(f"lr schedule must be 'cosine' or 'constant', got {schedule!r}")
    if schedule == "constant":
        return get_scheduler("constant_with_warmup", optimizer, num_warmup_steps=warmup_steps)
    return get_scheduler("cosine_with_min_lr", optimizer, num_warmup_steps=warmup_steps,
                         num_training_steps=total_steps, scheduler_specific_kwargs={"min_lr_rate": min_lr_ratio})
