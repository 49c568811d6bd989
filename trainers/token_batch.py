"""A packed batch of ``(prompt, completion)`` token rows: what every teacher-forced forward of the trainers takes.

Layout (the one ``generate`` uses, so the numbers match sampling)::

    [pad pad p p p p | c c c pad]     prompts left-padded to a common width P,
    [pad p p p p p p | c c c c c]     completions right-padded to a common width T

``position_ids`` count real tokens only (``cumsum(attention_mask) - 1``), so a
padded row sees the same positions as the row alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

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
