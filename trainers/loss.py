"""The PivotRL policy loss: clipped surrogate with token-level ratios minus beta * KL (k3).

Per completion token t of sample i::

    w    = exp(logp_theta - logp_old)
    surr = min(w * A_i, clip(w, 1 - eps_low, 1 + eps_high) * A_i)
    kl   = exp(logp_ref - logp_theta) - (logp_ref - logp_theta) - 1         (k3 estimator, >= 0)
    objective_t = surr - beta * kl
    objective_t *= is_weight_t          (only with rollout weights: the engine/trainer importance ratio)

The loss is the negative objective, averaged over each sample's tokens and then
over samples (``agg="sample"``, GRPO), or over all tokens of the batch
(``agg="token"``, DAPO-style). ``A_i`` comes from the advantage policy, :mod:`.advantage`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class LossOutput:
    """The loss and its diagnostics (floats, detached)."""

    loss: torch.Tensor
    kl: float
    clip_fraction: float
    ratio_mean: float
    surrogate: float


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(pi_theta || pi_ref) from log-probs of the sampled tokens."""
    delta = ref_logp - logp
    return torch.exp(delta) - delta - 1.0


def pivotrl_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    ref_logp: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    beta: float = 0.0,
    agg: str = "sample",
    is_weight: torch.Tensor | None = None,
) -> LossOutput:
    """Loss over a batch of completions.

    Args:
        logp, old_logp, ref_logp: ``[B, T]`` log-probs of the sampled tokens under the current,
            sampling and reference policies (``ref_logp`` may be None when ``beta == 0``).
        advantages: ``[B]`` one advantage per completion.
        mask: ``[B, T]`` 1 for completion tokens that count, 0 for padding and masked samples.
        is_weight: ``[B, T]`` or ``[B, 1]`` constant weights of each token's objective (the truncated importance
            ratio between the trainer's pi_old and the rollout engine's sampling policy), or None.
    """
    if agg not in ("sample", "token"):
        raise ValueError(f"agg must be 'sample' or 'token', got {agg!r}")
    mask = mask.to(logp.dtype)
    adv = advantages.to(logp.dtype).unsqueeze(1)
    ratio = torch.exp(logp - old_logp)
    clipped = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high)
    surrogate = torch.minimum(ratio * adv, clipped * adv)
    objective = surrogate
    kl = torch.zeros_like(logp)
    if beta != 0.0:
        if ref_logp is None:
            raise ValueError("beta > 0 needs the reference policy's log-probs")
        kl = k3_kl(logp, ref_logp)
        objective = objective - beta * kl
    if is_weight is not None:
        objective = objective * is_weight.detach().to(objective.dtype)
    loss = -_aggregate(objective, mask, agg)
    with torch.no_grad():
        n = mask.sum().clamp(min=1.0)
        # the clipped branch is the one taken: ratio out of range in the direction of the advantage
        was_clipped = ((ratio > 1.0 + eps_high) & (adv > 0)) | ((ratio < 1.0 - eps_low) & (adv < 0))
        return LossOutput(
            loss=loss,
            kl=float((kl * mask).sum() / n),
            clip_fraction=float((was_clipped.to(mask.dtype) * mask).sum() / n),
            ratio_mean=float((ratio * mask).sum() / n),
            surrogate=float((surrogate * mask).sum() / n),
        )


def _aggregate(values: torch.Tensor, mask: torch.Tensor, agg: str) -> torch.Tensor:
    if agg == "token":
        return (values * mask).sum() / mask.sum().clamp(min=1.0)
    per_sample = (values * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)
    counted = (mask.sum(dim=1) > 0).to(values.dtype)
    return (per_sample * counted).sum() / counted.sum().clamp(min=1.0)
