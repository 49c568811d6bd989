"""Group advantages for PivotRL (pure functions, tested against hand numbers).

For one pivot (state) with G sampled actions and rewards ``r``:

- ``grpo``:    ``A_i = (r_i - mean(r)) / (std(r) + eps_std)``  (population std)
- ``dr_grpo``: ``A_i = r_i - mean(r)``                           (Dr. GRPO: no std scaling)
- ``pvpo``:    ``A_i = r_i - V(s)``  with ``V(s)`` a static baseline, the profiled mean reward

Samples whose verifier failed (``valid = False``) are left out of the group
statistics and get advantage 0; the loss masks them too.
"""

from __future__ import annotations

from typing import Sequence

import torch

MODES = ("grpo", "dr_grpo", "pvpo")


def group_advantages(
    rewards: Sequence[float] | torch.Tensor,
    valid: Sequence[bool] | torch.Tensor | None = None,
    *,
    mode: str = "grpo",
    baseline: float | None = None,
    eps_std: float = 1e-4,
) -> torch.Tensor:
    """Advantages of one group; invalid samples get 0 and do not enter the statistics."""
    if mode not in MODES:
        raise ValueError(f"advantage mode must be one of {MODES}, got {mode!r}")
    r = torch.as_tensor(rewards, dtype=torch.float64)
    mask = torch.ones_like(r, dtype=torch.bool) if valid is None else torch.as_tensor(valid, dtype=torch.bool)
    out = torch.zeros_like(r)
    if not mask.any():
        return out.float()
    scored = r[mask]
    if mode == "pvpo":
        if baseline is None:
            raise ValueError("pvpo advantages need the profiled baseline V(s) (pivot.profile.mean)")
        out[mask] = scored - baseline
    else:
        centred = scored - scored.mean()
        if mode == "grpo":
            centred = centred / (scored.std(unbiased=False) + eps_std)
        out[mask] = centred
    return out.float()


def zero_variance(rewards: Sequence[float], valid: Sequence[bool] | None = None) -> bool:
    """True when every valid reward of the group is the same (no learning signal under GRPO)."""
    scored = [r for r, ok in zip(rewards, valid or [True] * len(rewards)) if ok]
    return len(set(scored)) <= 1
