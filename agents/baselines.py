"""Baseline agents that need no model: ``replay`` and ``noisy_expert``.

* ``replay`` returns the expert action ``n`` times (reward 1 under any sound verifier).
* ``noisy_expert:P`` draws each sample independently: with probability ``P`` a
  seeded perturbation of the expert (:func:`pivot_envs.perturb.perturb_action`:
  another tool, a changed or dropped argument, unrelated text), otherwise the
  expert action or — when the pivot records ``meta["alternatives"]`` (assistant
  messages that do the same) — one of ``[expert, *alternatives]`` chosen
  uniformly. Sample ``j`` at pivot ``p`` depends only on ``(seed, p.id, j)``, so
  results do not change with batch size, order or composition.

Both are deterministic, fast, and give mixed outcomes for testing verifiers,
profiling and trainers without a model.
"""

from __future__ import annotations

import copy
import random
from typing import Any, Sequence

from pivot_envs.actions import message_text, parse_action
from pivot_envs.agents.base import Agent, Completion, register_agent
from pivot_envs.perturb import perturb_action
from pivot_envs.types import Message, Pivot, stable_hash


def _completion(message: Message) -> Completion:
    message = copy.deepcopy(message)
    return Completion(text=message_text(message), action=parse_action(message))


def _check_n(n: int) -> None:
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n (samples per pivot) must be an integer >= 1, got {n!r}")


@register_agent("replay")
class ReplayAgent(Agent):
    """The expert action, ``n`` times per pivot."""

    kind = "replay"

    def sample(self, pivots: Sequence[Pivot], n: int, *, seed: int | None = None) -> list[list[Completion]]:
        _check_n(n)
        return [[_completion(p.expert) for _ in range(n)] for p in pivots]

    def config(self) -> dict[str, Any]:
        return {"kind": self.kind}


@register_agent("noisy_expert")
class NoisyExpertAgent(Agent):
    """The expert (or a recorded alternative), perturbed with probability ``p``.

    Args:
        p: probability that a sample is a perturbation of the expert action.
        seed: the seed used when :meth:`sample` is called with ``seed=None``.
    """

    kind = "noisy_expert"

    def __init__(self, p: float = 0.5, seed: int = 0):
        if not isinstance(p, (int, float)) or not 0.0 <= float(p) <= 1.0:
            raise ValueError(f"noisy_expert: p must be a probability in [0, 1], got {p!r}")
        self.p = float(p)
        self.seed = int(seed)

    def sample(self, pivots: Sequence[Pivot], n: int, *, seed: int | None = None) -> list[list[Completion]]:
        _check_n(n)
        base = self.seed if seed is None else int(seed)
        return [[self._one(p, base, j) for j in range(n)] for p in pivots]

    def _one(self, pivot: Pivot, seed: int, index: int) -> Completion:
        rng = random.Random(int(stable_hash("noisy_expert", seed, pivot.id, index), 16))
        if rng.random() < self.p:
            return _completion(perturb_action(pivot, rng))
        choices = [pivot.expert, *(a for a in pivot.meta.get("alternatives") or [] if isinstance(a, dict))]
        return _completion(choices[rng.randrange(len(choices))])

    def config(self) -> dict[str, Any]:
        return {"kind": self.kind, "p": self.p, "seed": self.seed}
