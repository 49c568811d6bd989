"""Baseline agents that need no model: ``replay``, ``noisy_expert`` and ``constant``.

* ``replay`` returns the expert action ``n`` times (reward 1 under any sound verifier). In an
  episode (:class:`pivot_envs.episodes.EpisodeEnv`) the agent's pivot carries the task's
  recorded action at this turn as ``expert``, so ``replay`` plays the task's recorded assistant
  actions back in order.
* ``replay:FILE`` replays the actions recorded in another trajectory file (any format
  :func:`pivot_envs.formats.read_trajectories` reads; ``pivot-envs play`` output too), matched by
  trajectory id (``pivot.meta["trajectory_id"]``): at a pivot whose context holds ``k`` assistant
  messages it returns the ``k``-th assistant message of that trajectory (an empty text message
  past its end). Controls use it: play another run's (or a perturbed file's) actions in a task.
* ``noisy_expert:P`` draws each sample independently: with probability ``P`` a
  seeded perturbation of the expert (:func:`pivot_envs.perturb.perturb_action`:
  another tool, a changed or dropped argument, unrelated text), otherwise the
  expert action or — when the pivot records ``meta["alternatives"]`` (assistant
  messages that do the same) — one of ``[expert, *alternatives]`` chosen
  uniformly. Sample ``j`` at pivot ``p`` depends only on ``(seed, p.id, j)``, so
  results do not change with batch size, order or composition.

* ``constant:TEXT`` says ``TEXT`` at every pivot (parsed like model text): a control, e.g. the
  refusal ``constant:Sorry, I cannot help with that.``

All are deterministic, fast, and give mixed outcomes for testing verifiers,
profiling and trainers without a model.
"""

from __future__ import annotations

import copy
import random
from pathlib import Path
from typing import Any, Sequence

from pivot_envs.actions import message_text, parse_action
from pivot_envs.agents.base import Agent, Completion, register_agent
from pivot_envs.formats import read_trajectories
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
    """The expert action (or, with ``file``, the action recorded in that file), ``n`` times per pivot.

    Args:
        file: a trajectory file whose recorded actions are replayed, matched by trajectory id;
            ``None``: the pivot's own expert action.
    """

    kind = "replay"

    def __init__(self, file: str | None = None):
        self.file = None if file is None else str(file)
        self._actions: dict[str, list[Message]] = {}
        if self.file is not None:
            if not Path(self.file).exists():
                raise FileNotFoundError(f"replay:{self.file}: no such trajectory file")
            for traj in read_trajectories(self.file):
                self._actions.setdefault(traj.id, [m for m in traj.messages if m.get("role") == "assistant"])

    def sample(self, pivots: Sequence[Pivot], n: int, *, seed: int | None = None) -> list[list[Completion]]:
        _check_n(n)
        return [[_completion(self._action(p)) for _ in range(n)] for p in pivots]

    def _action(self, pivot: Pivot) -> Message:
        if self.file is None:
            return pivot.expert
        tid = pivot.meta.get("trajectory_id")
        if tid is None:
            raise ValueError(f"replay:{self.file}: pivot {pivot.id!r} names no trajectory_id to match")
        actions = self._actions.get(str(tid))
        if actions is None:
            raise ValueError(f"replay:{self.file}: no trajectory with id {tid!r} in the file "
                             f"({len(self._actions)} trajectories)")
        k = sum(1 for m in pivot.context if m.get("role") == "assistant")
        return actions[k] if k < len(actions) else {"role": "assistant", "content": ""}

    def config(self) -> dict[str, Any]:
        return {"kind": self.kind} if self.file is None else {"kind": self.kind, "file": self.file}


@register_agent("constant")
class ConstantAgent(Agent):
    """The same text at every pivot (parsed like model text: a JSON tool call becomes a call).

    Args:
        text: what the agent says, e.g. ``"Sorry, I cannot help with that."`` (a refusal control).
    """

    kind = "constant"

    def __init__(self, text: str):
        if not isinstance(text, str):
            raise ValueError(f"constant: text must be a string, got {type(text).__name__}")
        self.text = text

    def sample(self, pivots: Sequence[Pivot], n: int, *, seed: int | None = None) -> list[list[Completion]]:
        _check_n(n)
        return [[Completion(text=self.text, action=parse_action(self.text)) for _ in range(n)] for _ in pivots]

    def config(self) -> dict[str, Any]:
        return {"kind": self.kind, "text": self.text}


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
