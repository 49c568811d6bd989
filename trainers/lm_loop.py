"""The supervised LM training loop: ``(prompt ids, target ids)`` examples -> padded batches -> masked token NLL -> AdamW.

One loop for every next-token trainer of the package: the SFT baseline
(:func:`pivot_envs.trainers.sft.train_sft`), the tiny-model trainer
(:func:`pivot_envs.models.tiny.train_lm`) and the demo's base model
(:func:`pivot_envs.experiments.base_model.train_mixture`)::

    optim = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = build_scheduler(optim, warmup_steps=0, total_steps=100)
    train_steps(model, optim, sched, lambda step: [[Part(rows_of(step))]], steps=100, pad_id=pad, on_step=print)

The caller decides what each step trains on (``batch_for(step)``, called once per step in
order, so a seeded ``random.Random`` in a closure is deterministic) and owns the optimiser
and the schedule (so it can restore them from a checkpoint and save them in ``on_step``).

A step is a list of micro-batches, each a list of :class:`Part`: every micro-batch goes
through one backward pass (memory only), every part is padded on its own (examples of very
different lengths do not pad each other). The loss of a step is the sum, over the *terms*
of its parts, of the term's weighted token NLL divided by the term's total weight, wherever
its parts fall, so splitting a batch into micro-batches gives the same update. A token's
weight is 1 on the targets, the part's ``prompt_weight`` on the prompt (the first token of a
sequence is never predicted) and 0 on padding. Then the gradient norm is clipped to
``max_grad_norm`` (``0``: not clipped, still measured), the optimiser and the schedule step.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

Row = tuple[list[int], list[int]]
"""One example: prompt token ids (the context) and target token ids (what the loss is on)."""


@dataclass(frozen=True)
class Part:
    """Examples padded into one forward pass.

    Attributes:
        rows: the ``(prompt ids, target ids)`` examples.
        term: the loss term they count towards; parts of one term share its normaliser (its total weight).
        prompt_weight: weight of the prompt tokens relative to the target tokens (``0``: loss on the targets only).
    """

    rows: Sequence[Row]
    term: str = "loss"
    prompt_weight: float = 0.0


StepBatches = Callable[[int], Sequence[Sequence[Part]]]
"""``batch_for(step)`` (0-based): the micro-batches of optimiser step ``step``."""


def collate(rows: Sequence[Row], pad_id: int, device: Any = None):
    """Right-padded ``input_ids``, ``attention_mask`` and ``labels`` (-100 outside the targets)."""
    import torch

    width = max(len(p) + len(t) for p, t in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (prompt, target) in enumerate(rows):
        seq = list(prompt) + list(target)
        ids[i, : len(seq)] = torch.tensor(seq)
        labels[i, len(prompt) : len(seq)] = torch.tensor(list(target), dtype=torch.long)
        mask[i, : len(seq)] = 1
    if device is not None:
        ids, mask, labels = ids.to(device), mask.to(device), labels.to(device)
    return ids, mask, labels


def token_weights(mask: Any, labels: Any, prompt_weight: float = 0.0):
    """Loss weight of every predicted token (``[batch, width - 1]``): 1 on targets, ``prompt_weight`` on the prompt."""
    import torch

    weight = torch.zeros(labels.shape, dtype=torch.float32, device=labels.device)
    if prompt_weight:
        weight[mask != 0] = prompt_weight
    weight[labels != -100] = 1.0
    return weight[:, 1:]  # a view of the full width: its sum is bit for bit the one the demo's base model was built with


def token_nll(model: Any, ids: Any, mask: Any):
    """Next-token NLL of every position (``[batch, width - 1]``, float32; padding included: weigh it out)."""
    import torch

    logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1),
                                             reduction="none").view(ids.shape[0], -1)


def target_nll_sum(model: Any, ids: Any, mask: Any, labels: Any):
    """Sum of the next-token NLL over the target tokens (no normalising; e.g. for an evaluation loss)."""
    return (token_nll(model, ids, mask) * (labels[:, 1:] != -100)).sum()


def split_micro(items: list[Any], parts: int) -> list[list[Any]]:
    """``items`` cut into ``parts`` consecutive chunks of near-equal size (none empty when ``parts <= len``)."""
    size, extra = divmod(len(items), parts)
    out, start = [], 0
    for i in range(parts):
        end = start + size + (1 if i < extra else 0)
        out.append(items[start:end])
        start = end
    return [chunk for chunk in out if chunk]


def train_steps(
    model: Any,
    optimizer: Any,
    scheduler: Any,
    batch_for: StepBatches,
    *,
    steps: int,
    pad_id: int,
    start_step: int = 0,
    max_grad_norm: float = 1.0,
    num_threads: int | None = None,
    on_step: Callable[[dict[str, Any]], None] | None = None,
    dist: Any = None,
) -> None:
    """Run optimiser steps ``start_step .. steps - 1`` (see the module docstring); the model is left in train mode.

    ``on_step(row)`` is called after every step with ``step`` (1-based), ``loss`` (the summed terms),
    ``lr`` (the rate the step used), ``grad_norm`` (before clipping), ``tokens`` (non-padding tokens),
    ``loss_tokens`` (target tokens), ``step_s`` and ``terms``: per term ``loss``, ``target_loss`` (mean
    NLL of its target tokens alone), ``tokens`` and ``loss_tokens``. ``num_threads`` sets torch's CPU
    threads during the loop (``None``: unchanged).

    ``dist`` (a :class:`~.distributed.DistInfo` of several processes, the model wrapped in DDP or sharded by FSDP):
    ``batch_for`` gives this rank's share of the step, with as many micro-batches and the same terms on every
    rank; each term's normaliser and the row's figures are summed over the ranks, so the update and the row are
    those of one process training on the whole step.
    """
    from pivot_envs.trainers.distributed import no_sync, torch_threads  # imports torch; lm_loop is imported without it

    multi = dist is not None and dist.enabled
    world = dist.world_size if multi else 1
    device = next(model.parameters()).device
    clip = max_grad_norm if max_grad_norm > 0 else math.inf
    model.train()
    with torch_threads(num_threads):
        for step in range(start_step, steps):
            t0 = time.perf_counter()
            micros = []
            totals: dict[str, Any] = {}
            for micro in batch_for(step):
                batches = []
                for part in micro:
                    ids, mask, labels = collate(part.rows, pad_id, device)
                    weight = token_weights(mask, labels, part.prompt_weight)
                    totals[part.term] = totals.get(part.term, 0) + weight.sum()
                    batches.append((part.term, ids, mask, labels, weight))
                micros.append(batches)
            if multi:
                totals = {k: v.float() for k, v in zip(sorted(totals), _summed([totals[k] for k in sorted(totals)], device))}
            stats: dict[str, dict[str, Any]] = {term: {"sum": 0, "target_sum": 0, "target_count": 0, "tokens": 0}
                                                for term in totals}  # tensors once the micro-batches add to them
            optimizer.zero_grad(set_to_none=True)
            for n_micro, batches in enumerate(micros):
                loss: Any = 0  # a tensor once the first term adds to it
                for term, ids, mask, labels, weight in batches:
                    nll = token_nll(model, ids, mask)
                    weighted = (nll * weight).sum()
                    loss = loss + weighted / totals[term].clamp(min=1e-8)
                    target = labels[:, 1:] != -100
                    s = stats[term]
                    s["sum"] = s["sum"] + weighted.detach()
                    s["target_sum"] = s["target_sum"] + (nll.detach() * target).sum()
                    s["target_count"] = s["target_count"] + target.sum()
                    s["tokens"] = s["tokens"] + mask.sum()
                with no_sync(model, skip=n_micro < len(micros) - 1):
                    (loss * world).backward()  # DDP and FSDP average the ranks' gradients: * world makes it a sum
            if multi:
                for term in sorted(stats):
                    s = stats[term]
                    s.update(zip(sorted(s), _summed([s[k] for k in sorted(s)], device)))
            grad_norm = clip_grad_norm(model.parameters(), clip)
            lr = optimizer.param_groups[0]["lr"]
            optimizer.step()
            scheduler.step()
            terms = {term: {"loss": float(s["sum"] / totals[term].clamp(min=1e-8)),
                            "target_loss": float(s["target_sum"] / s["target_count"].clamp(min=1)),
                            "tokens": int(s["tokens"]), "loss_tokens": int(s["target_count"])}
                     for term, s in stats.items()}
            row = {"step": step + 1, "loss": sum(t["loss"] for t in terms.values()), "lr": lr, "grad_norm": grad_norm,
                   "tokens": sum(t["tokens"] for t in terms.values()),
                   "loss_tokens": sum(t["loss_tokens"] for t in terms.values()),
                   "step_s": time.perf_counter() - t0, "terms": terms}
            if on_step is not None:
                on_step(row)


def clip_grad_norm(parameters: Any, max_norm: float) -> float:
    """``torch.nn.utils.clip_grad_norm_`` as a float; with FSDP's sharded gradients (DTensors) the norm is taken over
    all ranks' shards (each rank's squares summed over the process group) and every shard is scaled alike."""
    import torch

    params = [p for p in parameters if p.grad is not None]
    if not any(hasattr(p.grad, "to_local") for p in params):
        return float(torch.nn.utils.clip_grad_norm_(params, max_norm))
    import torch.distributed as tdist

    local = [p.grad.to_local() for p in params]
    device = local[0].device if local else torch.device("cpu")
    squares = torch.zeros((), dtype=torch.float64, device=device)
    for g in local:
        squares += g.detach().double().pow(2).sum()
    tdist.all_reduce(squares)
    total = float(squares.sqrt())
    if math.isfinite(max_norm):
        coef = min(1.0, max_norm / (total + 1e-6))  # clip_grad_norm_'s rule
        if coef < 1.0:
            for g in local:
                g.mul_(coef)
    return total


def _summed(values: list[Any], device: Any) -> list[Any]:
    """Each value (a number or a 0-d tensor) summed over the process group, as float64 tensors."""
    import torch
    import torch.distributed as tdist

    flat = torch.stack([torch.as_tensor(v, dtype=torch.float64, device=device).detach().reshape(()) for v in values])
    tdist.all_reduce(flat)
    return list(flat.unbind())
