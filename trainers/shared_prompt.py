"""Completion logits with each distinct prompt forwarded once: a GRPO group's samples share their prompt.

A PivotRL batch holds ``G`` completions per pivot, all after the same prompt. Packed row by row
(:func:`.token_batch.pack`) the model runs the prompt ``G`` times, forward and backward; on a pivot whose prompt
is ~370 tokens and whose actions are ~30, that is ~85 % of the update's work spent on copies. Here::

    prompts  [U, P]  (the distinct ones, left-padded as in the batch)  -> one forward, its KV cache kept
    cache    [B, ...] (each row's prompt's cache, picked by index: autograd sums the rows' gradients back)
    completions [B, T] against that cache                              -> logits for tokens 1..T-1
    the prompt's last logit                                            -> the logit for token 0

The positions, the attention mask and so the numbers are the packed layout's, up to float rounding (tests
compare log-probs and gradients with :func:`.logprobs.completion_logprobs` on tiny Llama and GPT-2 models).
Gradient checkpointing turns a model's cache off in training, so the trainers use this only without it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from pivot_envs.trainers.token_batch import TokenBatch

__all__ = ["PromptGroups", "distinct_prompts", "shared_prompt_logits"]


@dataclass
class PromptGroups:
    """The distinct prompts of a batch: ``first[u]`` a row holding prompt ``u``, ``index[i]`` row ``i``'s prompt."""

    first: torch.Tensor
    index: torch.Tensor

    @property
    def count(self) -> int:
        return int(self.first.numel())


def distinct_prompts(batch: TokenBatch) -> PromptGroups:
    """Group the rows of ``batch`` by prompt (token ids and padding both equal)."""
    width = batch.input_ids.shape[1] - batch.completion_width
    mask = batch.attention_mask[:, :width]
    key = torch.cat([batch.input_ids[:, :width] * mask, mask], dim=1)
    _, index = torch.unique(key, dim=0, return_inverse=True)
    first = torch.full((int(index.max()) + 1,), -1, dtype=torch.long, device=index.device)
    rows = torch.arange(len(index), device=index.device)
    first = first.scatter_reduce(0, index, rows, reduce="amin", include_self=False)
    return PromptGroups(first=first, index=index)


def select_rows(cache: Any, index: torch.Tensor) -> None:
    """Each row of the batch from its prompt's cache row, in place, with ``index_select``: its backward adds the
    gradients of a prompt's rows in a fixed order. (Indexing, as transformers' ``batch_select_indices`` does, adds them
    with atomic float adds when torch runs several CPU threads, in an order that changes from run to run: at 2 threads
    reruns of one config parted in their last bits after a few steps, ``benchmarks/vllm/vllm_rerun_spread.py``.)"""
    layers = getattr(cache, "layers", None)
    if not layers or not all(isinstance(getattr(layer, "keys", None), torch.Tensor) for layer in layers):
        cache.batch_select_indices(index)  # a cache of another shape: its own selection
        return
    for layer in layers:
        layer.keys = layer.keys.index_select(0, index)
        layer.values = layer.values.index_select(0, index)


def shared_prompt_logits(model: Any, batch: TokenBatch, groups: PromptGroups) -> torch.Tensor:
    """Logits ``[B, T, V]``: column ``t`` predicts completion token ``t`` of each row (as in the packed layout)."""
    width = batch.input_ids.shape[1] - batch.completion_width
    rows = groups.first
    prompt = model(
        input_ids=batch.input_ids[rows, :width],
        attention_mask=batch.attention_mask[rows, :width],
        position_ids=batch.position_ids[rows, :width],
        logits_to_keep=1,
        use_cache=True,
    )
    first_logit = prompt.logits[:, -1:].index_select(0, groups.index)  # [B, 1, V]: predicts completion token 0
    if batch.completion_width == 1:
        return first_logit
    name = "cache" if "cache" in prompt else "past_key_values"  # transformers >= 5.2x renamed it (the old warns)
    cache = prompt[name]
    select_rows(cache, groups.index)
    completion = model(
        input_ids=batch.completion_ids[:, :-1],
        attention_mask=batch.attention_mask[:, :-1],
        position_ids=batch.position_ids[:, width:-1],
        **{name: cache},
        cache_position=torch.arange(width, batch.input_ids.shape[1] - 1, device=batch.input_ids.device),
        use_cache=True,
    )
    return torch.cat([first_logit, completion.logits], dim=1)
