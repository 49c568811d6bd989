"""Teacher-forced log-probs of completion tokens under a causal LM, batched and padding-aware.

Layout of a batch (the one ``generate`` uses, so the numbers match sampling)::

    [pad pad p p p p | c c c pad]     prompts left-padded to a common width P,
    [pad p p p p p p | c c c c c]     completions right-padded to a common width T

``position_ids`` count real tokens only (``cumsum(attention_mask) - 1``), so a
padded row sees the same positions as the row alone. The model returns logits
for the last ``T + 1`` positions only (``logits_to_keep``); logits at column
``P - 1 + t`` predict completion token ``t``. Log-probs are ``logit[token] -
logsumexp(logits)`` (no ``[B, T, V]`` log-softmax tensor is kept for autograd).

``temperature`` divides the logits first (1.0: the model's own distribution,
which is what the PivotRL loss uses).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch


@dataclass
class TokenBatch:
    """A packed batch of ``(prompt, completion)`` token rows.

    Attributes:
        input_ids: ``[B, P + T]`` token ids (padding = ``pad_id``).
        attention_mask: ``[B, P + T]`` 1 for real tokens.
        position_ids: ``[B, P + T]`` positions of real tokens (0-based per row).
        completion_ids: ``[B, T]`` the completion tokens (right-padded).
        completion_mask: ``[B, T]`` 1 for real completion tokens.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor

    @property
    def completion_width(self) -> int:
        return int(self.completion_ids.shape[1])

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])


def pack(
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    pad_id: int,
    device: torch.device | str = "cpu",
) -> TokenBatch:
    """Pack rows into a :class:`TokenBatch` (prompts left-padded, completions right-padded)."""
    if len(prompts) != len(completions) or not prompts:
        raise ValueError(f"pack needs as many prompts as completions (>= 1), got {len(prompts)} and {len(completions)}")
    if any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token (the first completion token is predicted from it)")
    width_p = max(len(p) for p in prompts)
    width_c = max(1, max(len(c) for c in completions))
    rows = len(prompts)
    ids = torch.full((rows, width_p + width_c), pad_id, dtype=torch.long)
    mask = torch.zeros((rows, width_p + width_c), dtype=torch.long)
    for i, (p, c) in enumerate(zip(prompts, completions)):
        ids[i, width_p - len(p) : width_p] = torch.as_tensor(list(p), dtype=torch.long)
        mask[i, width_p - len(p) : width_p] = 1
        if len(c):
            ids[i, width_p : width_p + len(c)] = torch.as_tensor(list(c), dtype=torch.long)
            mask[i, width_p : width_p + len(c)] = 1
    positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
    device = torch.device(device)
    return TokenBatch(
        input_ids=ids.to(device),
        attention_mask=mask.to(device),
        position_ids=positions.to(device),
        completion_ids=ids[:, width_p:].to(device),
        completion_mask=mask[:, width_p:].to(device),
    )


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
        from pivot_envs.trainers.shared_prompt import distinct_prompts, shared_prompt_logits

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
