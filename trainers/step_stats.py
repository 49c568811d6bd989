"""Typed statistics of one RL step, and the ``metrics.jsonl`` row made from them.

A step counts into a :class:`StepStats` (PivotRL) or :class:`EpisodeStepStats` (episode RL); the
policy update returns an :class:`UpdateResult`. Under DDP the counters are summed over processes
(:meth:`StepStats.reduced`), then :func:`metrics_row` turns them into the row whose keys
:mod:`.metrics` documents (a file format: keys may be added, never renamed). ``hack`` holds the hack monitor's
counts (:mod:`pivot_envs.verifiers.hack_monitor`) over the samples the step scored; the row carries their shares.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pivot_envs.trainers.distributed import DistInfo, reduce_sums
from pivot_envs.verifiers.hack_monitor import HackCounts

__all__ = ["EpisodeStepStats", "StepStats", "UpdateResult", "UpdateSums", "metrics_row"]

S = TypeVar("S", bound="StepStats")


@dataclass
class UpdateSums:
    """What the loss passes add up (per process; summed over processes with the step's counters)."""

    loss_sum: float = 0.0
    kl_sum: float = 0.0
    clip_sum: float = 0.0
    ratio_sum: float = 0.0
    loss_tokens: float = 0.0
    entropy_sum: float = 0.0
    entropy_tokens: float = 0.0
    mismatch_sum: float = 0.0
    mismatch_tokens: float = 0.0
    is_sum: float = 0.0
    is_tokens: float = 0.0
    train_tokens: float = 0.0


@dataclass
class UpdateResult:
    """One step's ``num_iterations`` optimiser updates: their sums, the mean gradient norm, whether any ran."""

    sums: UpdateSums = field(default_factory=UpdateSums)
    grad_norm: float | None = None
    updated: bool = False
    beta_on: bool = False


@dataclass
class StepStats(UpdateSums):
    """Counters of one PivotRL step (``reward_*``: the first sampling round's scored samples)."""

    groups: float = 0.0
    samples: float = 0.0
    masked: float = 0.0
    completion_tokens: float = 0.0
    completion_len_sum: float = 0.0
    unscored_groups: float = 0.0
    scored_groups: float = 0.0
    zero_var_groups: float = 0.0
    reward_sum: float = 0.0
    reward_sq_sum: float = 0.0
    reward_n: float = 0.0
    strict_sum: float = 0.0
    strict_n: float = 0.0
    miss_num: float = 0.0
    miss_den: float = 0.0
    resampled_groups: float = 0.0
    injected: float = 0.0
    skipped_groups: float = 0.0
    used_groups: float = 0.0
    used_rows: float = 0.0
    hack: HackCounts = field(default_factory=HackCounts)

    def add_update(self, update: UpdateResult) -> None:
        """Add the update's sums to the step's counters."""
        for f in dataclasses.fields(UpdateSums):
            setattr(self, f.name, getattr(self, f.name) + float(getattr(update.sums, f.name)))

    def reduced(self: S, dist: DistInfo) -> S:
        """The counters summed over every process (the same on every rank; ``hack`` by its counts)."""
        sums = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "hack"}
        hack = {f"hack:{k}": v for k, v in self.hack.counts().items()}
        total = reduce_sums({**sums, **hack}, dist)
        return type(self)(**{k: total[k] for k in sums},
                          hack=HackCounts.from_counts({k[len("hack:"):]: total[k] for k in hack}))

    def ratio(self, num: str, den: str) -> float | None:
        d = getattr(self, den)
        return getattr(self, num) / d if d else None


@dataclass
class EpisodeStepStats(StepStats):
    """:class:`StepStats` plus the costs and outcomes of a step's episodes (``reward_*`` = task success)."""

    rollout_turns: float = 0.0
    tool_calls: float = 0.0
    replayed_steps: float = 0.0
    branches: float = 0.0
    topped_up: float = 0.0
    turns_sum: float = 0.0
    episodes: float = 0.0
    errors: float = 0.0
    truncated: float = 0.0
    rounds: float = 0.0
    turn_reward_sum: float = 0.0
    turn_reward_n: float = 0.0


def metrics_row(step: int, s: StepStats, update: UpdateResult, lr: float) -> dict[str, Any]:
    """The JSONL row's shared keys from the reduced counters (``None`` where a value is undefined at this step)."""
    mean = s.ratio("reward_sum", "reward_n")
    second = s.ratio("reward_sq_sum", "reward_n")
    std = math.sqrt(max(0.0, second - mean * mean)) if mean is not None and second is not None else None
    updated = bool(update.updated)
    return {
        "step": step,
        "reward_mean": mean,
        "reward_std": std,
        "strict_reward_mean": s.ratio("strict_sum", "strict_n"),
        "miss_rate": s.ratio("miss_num", "miss_den"),
        "zero_var_frac": s.ratio("zero_var_groups", "scored_groups"),
        "masked": int(s.masked),
        "groups": int(s.groups),
        "unscored_groups": int(s.unscored_groups),
        "resampled_groups": int(s.resampled_groups),
        "injected": int(s.injected),
        "skipped_groups": int(s.skipped_groups),
        "used_groups": int(s.used_groups),
        "used_samples": int(s.used_rows),
        "completion_len_mean": s.ratio("completion_len_sum", "samples"),
        "loss": s.loss_sum if updated else None,
        "kl": s.ratio("kl_sum", "loss_tokens") if (updated and update.beta_on) else None,
        "clip_fraction": s.ratio("clip_sum", "loss_tokens") if updated else None,
        "ratio_mean": s.ratio("ratio_sum", "loss_tokens") if updated else None,
        "entropy": s.ratio("entropy_sum", "entropy_tokens") if updated else None,
        "grad_norm": update.grad_norm,
        "lr": lr,
        "updated": updated,
        **s.hack.metrics(),
    }
