"""Teacher-forced log-probs of completion tokens under a causal LM, batched and padding-aware.

The batch is a :class:`~.token_batch.TokenBatch` (prompts left-padded to a width P, completions
right-padded to a width T). The model returns logits
for the last ``T + 1`` positions only (``logits_to_keep``); logits at column
``P - 1 + t`` predict completion token ``t``. Log-probs are ``logit[token] -
logsumexp(logits)`` (no ``[B, T, V]`` log-softmax tensor is kept for autograd).

``temperature`` divides the logits first (1.0: the model's own distribution,
which is what the PivotRL loss uses).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch

from pivot_envs.trainers.shared_prompt import distinct_prompts, shared_prompt_logits
from pivot_envs.trainers.token_batch import TokenBatch


def completion_logprobs(
    model: Any,
    batch: TokenBatch,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
    shared_prompt: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs ``[B, T]`` (float32) of the completion tokens, and optionally the per-token entropy.

    Gradients flow when called with grad enabled; the entropy is always detached. Values at padded
    completion positions are meaningless: multiply by ``batch.completion_mask``.

    ``shared_prompt``: where rows share a prompt (a GRPO group's G samples), forward each distinct prompt once
    and its completions against its KV cache (:mod:`.shared_prompt`): the same numbers up to float rounding, at
    about ``P + G*T`` tokens of work per group instead of ``G*(P + T)``.
    """
    if shared_prompt:
        groups = distinct_prompts(batch)
        if groups.count < len(batch):
            logits = shared_prompt_logits(model, batch, groups)
            return token_logprobs(logits, batch.completion_ids, temperature, with_entropy)
    width = batch.completion_width
    out = model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        position_ids=batch.position_ids,
        logits_to_keep=width + 1,
        use_cache=False,
    )
    logits = out.logits
    if logits.shape[1] != width + 1:  # a model that ignores logits_to_keep returns every position
        logits = logits[:, -(width + 1) :]
    return token_logprobs(logits[:, :-1], batch.completion_ids, temperature, with_entropy)


def token_logprobs(
    logits: torch.Tensor, tokens: torch.Tensor, temperature: float = 1.0, with_entropy: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``log p(tokens)`` from ``logits`` ``[B, T, V]`` (column ``t`` predicts ``tokens[:, t]``), float32, and
    optionally the detached per-token entropy."""
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    normaliser = torch.logsumexp(logits, dim=-1)
    logp = logits.gather(-1, tokens.unsqueeze(-1)).squeeze(-1) - normaliser
    entropy = None
    if with_entropy:
        with torch.no_grad():
            probs = torch.softmax(logits.detach(), dim=-1)
            entropy = normaliser.detach() - (probs * logits.detach()).sum(-1)
    return logp, entropy


def normalised_entropy(entropies: Sequence[float], vocab_size: int) -> float:
    """Mean of per-token entropies (nats) divided by ``log V``: 0 (certain) .. 1 (uniform)."""
    if not entropies:
        return 0.0
    return math.fsum(entropies) / len(entropies) / math.log(max(2, vocab_size))
