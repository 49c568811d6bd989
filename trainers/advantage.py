"""The advantage policy: how the rewards of one group become the loss's advantages, in both RL trainers.

A group is the G samples taken at one state: G actions at a pivot (PivotRL) or G episodes of a task (E2E RL).
One :class:`AdvantagePolicy` (the config's ``advantage``, ``zero_variance``, ``eps_std`` and, for episodes,
``turn_credit``) decides, for every group::

    flat?        every scored reward equal, and (turn_credit > 0) every turn reward equal too
                 -> skip: no loss rows | resample: sample the state again, then skip | keep: train on it
    A_i          grpo:    (r_i - mean(r)) / (std(r) + eps_std)     (population std)
                 dr_grpo: r_i - mean(r)                            (Dr. GRPO: no std scaling)
                 pvpo:    r_i - V(s)                               (V(s): a static baseline per state, ValueTable)
    a turn's A   A_j + turn_credit * (r_t - rbar) on a turn with a turn reward r_t (rbar: the group's mean
                 turn reward); A_j alone on a turn without one

Samples whose verifier failed (``valid = False``) are left out of the group statistics and get advantage 0; the loss
masks them too. ``zero_variance`` and PVPO's expert injection act on the group before its advantages are computed.

A trainer feeds the policy what it has (:class:`AdvantageInputs`): pivots carry a profiled V(s) and can be sampled
again, the start of an episode cannot. A config refuses a setting its trainer cannot feed when it is read
(:meth:`AdvantagePolicy.refusal`, called by the config's ``validate``).

Nothing here imports torch at module level: the configs read :data:`MODES` without the train extra.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

__all__ = ["MODES", "ZERO_VARIANCE_RULES", "AdvantageInputs", "AdvantagePolicy", "ValueTable", "group_advantages",
           "turn_mean", "zero_variance"]

MODES = ("grpo", "dr_grpo", "pvpo")
"""The advantage modes (the config's ``advantage``)."""

BASELINE_MODES = ("pvpo",)
"""Modes that need a V(s) per state."""

ZERO_VARIANCE_RULES = ("skip", "resample", "keep")
"""What happens to a flat group (the config's ``zero_variance``)."""


@dataclass(frozen=True)
class AdvantageInputs:
    """What a trainer can give the policy; each trainer's config declares its own.

    Attributes:
        baselines: a profiled V(s) per state (``pivot.profile.mean``), which ``pvpo`` needs.
        resample: a state can be sampled again (``zero_variance: resample``).
    """

    baselines: bool = False
    resample: bool = False


# ALGO LOGIC: the advantage policy
@dataclass(frozen=True)
class AdvantagePolicy:
    """The advantage of one run: its mode, its zero-variance rule and its per-turn shaping."""

    mode: str = "grpo"
    zero_variance: str = "skip"
    eps_std: float = 1e-4
    turn_credit: float = 0.0

    @classmethod
    def of(cls, config: Any) -> AdvantagePolicy:
        """The policy a trainer's config sets (``turn_credit``: the episode trainer's; 0 where a config has none)."""
        return cls(mode=config.advantage, zero_variance=config.zero_variance, eps_std=config.eps_std,
                   turn_credit=getattr(config, "turn_credit", 0.0))

    def refusal(self, inputs: AdvantageInputs) -> tuple[str, str] | None:
        """``(field, what it must be)`` for the first setting a trainer that gives ``inputs`` cannot use; ``None``
        when it can use them all."""
        modes = tuple(m for m in MODES if inputs.baselines or m not in BASELINE_MODES)
        rules = tuple(z for z in ZERO_VARIANCE_RULES if inputs.resample or z != "resample")
        if self.mode not in modes:
            why = "" if self.mode not in MODES else f" (this trainer has no profiled V(s), which {self.mode} needs)"
            return "advantage", f"one of {', '.join(modes)}{why}"
        if self.zero_variance not in rules:
            why = "" if self.zero_variance not in ZERO_VARIANCE_RULES else " (this trainer cannot sample a state again)"
            return "zero_variance", f"one of {', '.join(rules)}{why}"
        credit = self.turn_credit
        if not isinstance(credit, (int, float)) or not math.isfinite(credit) or credit < 0:
            return "turn_credit", "a number >= 0 (0: plain E2E)"
        return None

    @property
    def resamples(self) -> bool:
        """Whether a flat group's state is sampled again (``zero_variance: resample``) before the advantages."""
        return self.zero_variance == "resample"

    @property
    def uses_baseline(self) -> bool:
        """Whether the advantages are taken against V(s) (a :class:`ValueTable` the trainer keeps)."""
        return self.mode in BASELINE_MODES

    def flat(self, rewards: Sequence[float], valid: Sequence[bool] | None = None,
             turn_rewards: Sequence[float] = ()) -> bool:
        """No learning signal: every scored reward equal and, with turn credit, every turn reward equal (a group
        whose episodes all fail still teaches through turns that differ)."""
        return zero_variance(rewards, valid) and (not self.turn_credit or zero_variance(turn_rewards))

    def trains(self, rewards: Sequence[float], valid: Sequence[bool] | None = None,
               turn_rewards: Sequence[float] = ()) -> bool:
        """Whether a group with scored rewards enters the loss: a flat one only under ``keep``."""
        return not self.flat(rewards, valid, turn_rewards) or self.zero_variance == "keep"

    def advantages(self, rewards: Sequence[float], valid: Sequence[bool] | None = None,
                   baseline: float | None = None) -> list[float]:
        """One advantage per sample (0 where not valid); ``baseline``: V(s), under ``pvpo``."""
        adv = group_advantages(rewards, valid, mode=self.mode, baseline=baseline, eps_std=self.eps_std)
        return [float(a) for a in adv]

    def turn_advantage(self, advantage: float, turn_reward: float | None, rbar: float | None) -> float:
        """A turn's advantage: its rollout's ``advantage``, plus ``turn_credit * (r_t - rbar)`` when the turn has a
        turn reward and turn credit is on (``rbar``: :func:`turn_mean` of the group, ``None`` when off)."""
        a = float(advantage)
        if rbar is not None and turn_reward is not None:
            a += self.turn_credit * (turn_reward - rbar)
        return a


def group_advantages(
    rewards: Sequence[float] | Any,
    valid: Sequence[bool] | Any | None = None,
    *,
    mode: str = "grpo",
    baseline: float | None = None,
    eps_std: float = 1e-4,
) -> Any:
    """Advantages of one group (a float32 tensor); invalid samples get 0 and do not enter the statistics."""
    import torch  # the train extra: this module is read by the configs, which load without it

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


def turn_mean(turn_rewards: Sequence[float]) -> float | None:
    """``rbar``: the mean of a group's turn rewards (``None`` when no turn has one)."""
    return math.fsum(turn_rewards) / len(turn_rewards) if turn_rewards else None


# ---------------------------------------------------------------------- PVPO's baseline V(s)


class ValueTable:
    """PVPO's static baseline ``V(s)`` per pivot id, and the running window it is re-estimated from.

    ``V(s)`` starts as the profiled mean reward (``pivot.profile.mean``). :meth:`observe` adds rewards
    sampled at ``s``; :meth:`refresh` sets ``V(s)`` to the mean of the window for every pivot seen since
    the last refresh (the others keep theirs) and clears the window.
    """

    def __init__(self, values: dict[str, float] | None = None):
        self.values: dict[str, float] = dict(values or {})
        self.window: dict[str, list[float]] = {}  # id -> [sum, count]

    def __getitem__(self, pivot_id: str) -> float:
        return self.values[pivot_id]

    def observe(self, pivot_id: str, rewards: Sequence[float]) -> None:
        acc = self.window.setdefault(pivot_id, [0.0, 0.0])
        acc[0] += float(sum(rewards))
        acc[1] += float(len(rewards))

    def refresh(self) -> int:
        """Apply the window; returns how many pivots got a new ``V(s)``."""
        updated = 0
        for pivot_id, (total, count) in self.window.items():
            if count > 0:
                self.values[pivot_id] = total / count
                updated += 1
        self.window = {}
        return updated

    def solved(self) -> list[str]:
        """Pivots whose ``V(s)`` is 1 (every sample passed)."""
        return [k for k, v in self.values.items() if v >= 1.0]

    def state_dict(self) -> dict[str, Any]:
        return {"values": dict(self.values), "window": {k: list(v) for k, v in self.window.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.values = {str(k): float(v) for k, v in state["values"].items()}
        self.window = {str(k): [float(v[0]), float(v[1])] for k, v in state["window"].items()}
