"""Engine/trainer mismatch: how far the rollout engine's log-probs are from the trainer's, and the
truncated importance weights that correct for it (TRL's ``vllm_importance_sampling_correction``).

Per sampled token ``t`` of a completion::

    d_t   = log pi_trainer_old(t) - log pi_engine(t)        (both at temperature 1, same weights)
    token_*:    w_t = exp(d_t)                  sequence_*:  w = exp(sum_t d_t), one per completion
    *_truncate: w clipped to [lo, hi]           *_mask:      w = 0 where it falls outside [lo, hi]
    mismatch = mean_t |d_t|                                 (``logprob_mismatch`` in the metrics)

Rows without engine log-probs (an expert action put in by PVPO) get weight 1 and no mismatch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from pivot_envs.trainers.token_batch import TokenBatch


@dataclass
class EngineLogprobs:
    """The engine's log-probs of a batch, padded like its completions.

    Attributes:
        values: ``[B, T]`` log-probs (0 where there are none).
        present: ``[B, T]`` 1 where a row has engine log-probs and the token is real.
    """

    values: torch.Tensor
    present: torch.Tensor


def engine_logprobs(rows: Sequence[Sequence[float] | None], batch: TokenBatch) -> EngineLogprobs:
    """Pad the engine's per-row log-probs to the batch's completion width."""
    values = torch.zeros(batch.completion_ids.shape, dtype=torch.float32, device=batch.completion_ids.device)
    present = torch.zeros_like(values)
    for i, lp in enumerate(rows):
        if lp is None:
            continue
        if len(lp) != int(batch.completion_mask[i].sum()):
            raise RuntimeError(f"the rollout engine returned {len(lp)} log-probs for a completion of "
                               f"{int(batch.completion_mask[i].sum())} tokens")
        values[i, : len(lp)] = torch.tensor(list(lp), dtype=torch.float32)
        present[i, : len(lp)] = 1.0
    return EngineLogprobs(values=values, present=present * batch.completion_mask.float())


def mismatch_sums(old_logp: torch.Tensor, engine: EngineLogprobs) -> tuple[float, float]:
    """``(sum of |d_t|, tokens)`` over the tokens with engine log-probs."""
    diff = (old_logp.detach().float() - engine.values).abs() * engine.present
    return float(diff.sum()), float(engine.present.sum())


def importance_weights(old_logp: torch.Tensor, engine: EngineLogprobs, mode: str, lo: float, hi: float) -> torch.Tensor:
    """Per-token (``token_*``) or per-completion (``sequence_*``, shape ``[B, 1]``) importance weights."""
    diff = (old_logp.detach().float() - engine.values) * engine.present
    if mode.startswith("sequence"):
        diff = diff.sum(dim=1, keepdim=True)
    ratio = torch.exp(diff.clamp(max=50.0))
    if mode.endswith("truncate"):
        return ratio.clamp(min=lo, max=hi)
    if mode.endswith("mask"):
        return ratio.masked_fill((ratio < lo) | (ratio > hi), 0.0)
    raise ValueError(f"unknown importance-sampling mode {mode!r}: token_truncate, token_mask, sequence_truncate, "
                     "sequence_mask")
