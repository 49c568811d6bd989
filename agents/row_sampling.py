"""Sampling whose draws belong to a row, not to a batch: the ``hf`` agent's sampler.

``transformers``' ``generate(do_sample=True)`` draws every row's next token from one torch RNG, so a
row's sample depends on the other rows of the batch (how many there are, and in which order). Here the
draw is made by a logits processor instead: row ``r`` at step ``t`` takes the uniform number
``u(key_r, t)`` of a counter-based generator (SplitMix64 over the row's key and the step) and inverts
the CDF of the tempered, nucleus-truncated distribution; ``generate`` then runs greedily over scores that
keep only the drawn token. A row's tokens therefore depend only on its key (the ``hf`` agent's key is
``(seed, pivot id, sample index)``) and on its own logits, never on the batch around it.

The log-prob of each drawn token under the distribution it was drawn from (after temperature and top-p)
is recorded as it is drawn: the ``hf`` agent's ``logprobs="sampling"``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from pivot_envs.types import stable_hash

if TYPE_CHECKING:
    import torch

_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def row_key(*parts: Any) -> int:
    """A 64-bit key for one row from any hashable description of it (``stable_hash`` of the parts)."""
    return int(stable_hash("row-sampling", *parts), 16) & _MASK64


def uniform(key: int, step: int) -> float:
    """The uniform number in [0, 1) of row ``key`` at ``step``: SplitMix64 of the counter, 53 bits."""
    z = (key + (step + 1) * _GOLDEN) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    z ^= z >> 31
    return (z >> 11) / float(1 << 53)


def sampling_logprobs(scores: "torch.Tensor", temperature: float, top_p: float) -> "torch.Tensor":
    """Log-probs of the distribution a token is drawn from: ``scores / temperature``, then the smallest
    set of tokens whose mass reaches ``top_p`` (the most likely token always kept), renormalised."""
    import torch  # torch is an optional dependency (the [train] extra): imported where it is used

    logp = torch.log_softmax(scores.float() / temperature, dim=-1)
    if top_p >= 1.0:
        return logp
    sorted_logp, order = torch.sort(logp, dim=-1, descending=True)
    before = torch.cumsum(sorted_logp.exp(), dim=-1) - sorted_logp.exp()  # mass of the more likely tokens
    drop_sorted = before >= top_p
    drop_sorted[..., 0] = False
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    return torch.log_softmax(logp.masked_fill(drop, float("-inf")), dim=-1)


class RowSampler:
    """A ``transformers`` logits processor that draws each row's next token from the row's own stream.

    Args:
        keys: one 64-bit key per row of the ``generate`` call (:func:`row_key`).
        prompt_width: the padded prompt length (step ``t`` is ``input_ids.shape[1] - prompt_width``).
        temperature: softmax temperature (> 0).
        top_p: nucleus mass in (0, 1].

    After ``generate``, ``logprobs[r]`` holds the log-prob of every token drawn for row ``r`` (one per
    step, past the row's end too: cut it to the completion's length).
    """

    def __init__(self, keys: Sequence[int], prompt_width: int, temperature: float, top_p: float = 1.0):
        if temperature <= 0:
            raise ValueError(f"RowSampler draws at a temperature > 0, got {temperature}")
        self.keys = [int(k) & _MASK64 for k in keys]
        self.prompt_width = int(prompt_width)
        self.temperature = float(temperature)
        self.top_p = float(top_p)
        self.logprobs: list[list[float]] = [[] for _ in self.keys]

    def __call__(self, input_ids: "torch.Tensor", scores: "torch.Tensor") -> "torch.Tensor":
        import torch

        if scores.shape[0] != len(self.keys):
            raise ValueError(f"RowSampler has {len(self.keys)} row keys, generate gave {scores.shape[0]} rows")
        step = int(input_ids.shape[1]) - self.prompt_width
        logp = sampling_logprobs(scores, self.temperature, self.top_p)
        cdf = torch.cumsum(logp.double().exp(), dim=-1)
        u = torch.tensor([uniform(k, step) for k in self.keys], dtype=torch.float64, device=cdf.device)
        target = (u * cdf[:, -1]).unsqueeze(-1)
        chosen = torch.searchsorted(cdf, target, right=True).clamp_(max=cdf.shape[-1] - 1)
        for r, lp in enumerate(logp.gather(-1, chosen).squeeze(-1).tolist()):
            self.logprobs[r].append(lp)
        out = torch.full_like(scores, float("-inf"))
        return out.scatter_(-1, chosen, 0.0)
