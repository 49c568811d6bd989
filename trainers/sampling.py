"""Sampling groups of actions from pi_old: the ``hf`` agent on the policy's LIVE weights.

::

    agent = build_sampler(policy, tokenizer, config)       # HFAgent(model=policy, ...): no copy
    groups = sample_groups(agent, pivots, group_size=8, seed=sampling_seed(0, step, rank, 0))
    groups[i].completions[j].token_ids                        # what the loss is taken over

The agent switches the model to ``eval()`` and ``no_grad`` while it samples and
back afterwards, so pi_old is exactly the policy at sampling time. Each group
keeps the prompt token ids it was sampled from (cut as the agent cuts
them), so the log-probs of the loss are taken on the very same sequence.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Sequence

from pivot_envs.actions import parse_action
from pivot_envs.agents.base import Completion
from pivot_envs.agents.hf import HFAgent
from pivot_envs.agents.prompting import action_target, encode_prompt
from pivot_envs.agents.vllm_agent import VLLMAgent
from pivot_envs.types import Pivot, stable_hash


@dataclass
class Group:
    """The G samples drawn at one pivot.

    Attributes:
        pivot: the pivot (state s and expert action a*).
        prompt_ids: prompt token ids the samples were drawn from.
        completions: the samples, each with ``token_ids``.
        injected: per sample, whether it is the expert action put in by ``pvpo_inject_expert``.
    """

    pivot: Pivot
    prompt_ids: list[int]
    completions: list[Completion]
    injected: list[bool] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.injected:
            self.injected = [False] * len(self.completions)


def build_sampler(policy: Any, tokenizer: Any, config: Any, batch_size: int | None = None) -> HFAgent:
    """An ``hf`` agent that samples from ``policy`` itself (a loaded model, not copied); ``generate`` batches
    ``config.sampling_batch_size`` rows, else ``batch_size`` (default: ``config.pivots_per_step``)."""
    return HFAgent(
        model=policy,
        tokenizer=tokenizer,
        temperature=config.temperature,
        top_p=config.top_p,
        max_new_tokens=config.max_new_tokens,
        batch_size=config.sampling_batch_size or batch_size or config.pivots_per_step,
        logprobs="sampling" if config.old_logprobs == "sampler" else "none",
        max_prompt_tokens=config.max_prompt_tokens,
        tools=config.prompt_tools,
        seed=config.seed,
    )


def sampling_seed(seed: int, *parts: Any) -> int:
    """A seed for one sampling call, derived from the run seed and e.g. ``(step, rank, attempt)``."""
    return int(stable_hash("pivotrl-sample", seed, *parts), 16) % (2**63)


def sample_groups(
    agent: HFAgent | VLLMAgent,
    pivots: Sequence[Pivot],
    group_size: int,
    seed: int,
    autocast: contextlib.AbstractContextManager | None = None,
) -> list[Group]:
    """``group_size`` completions (with token ids) per pivot, from one ``agent.sample`` call."""
    if not pivots:
        return []
    with autocast or contextlib.nullcontext():
        samples = agent.sample(list(pivots), n=group_size, seed=seed)
    groups = []
    for pivot, completions in zip(pivots, samples):
        for c in completions:
            if c.token_ids is None:
                raise RuntimeError("the sampler returned completions without token ids; the trainer needs them")
        groups.append(Group(pivot=pivot, prompt_ids=encode_prompt(agent.tokenizer, pivot, agent.prompt_config),
                            completions=completions))
    return groups


def expert_completion(tokenizer: Any, pivot: Pivot, eos_id: int) -> Completion:
    """The expert action as a sample: its target text's tokens followed by the end-of-turn token."""
    text = action_target(pivot.expert)
    ids = list(tokenizer(text, add_special_tokens=False)["input_ids"]) + [int(eos_id)]
    return Completion(text=text, action=parse_action(text), token_ids=ids, logprobs=None)


class PivotSampler:
    """Seeded minibatches of pivot ids: epoch after epoch, each epoch a fresh permutation of D_pivot.

    The permutation of epoch ``e`` is ``numpy.random.default_rng([seed, e]).permutation``, so the
    whole state is ``(epoch, position, inactive ids)`` (see :meth:`state_dict`); a resumed run draws
    exactly what the uninterrupted run would have. Inactive ids (PVPO's solved pivots) are skipped
    where they fall in the order. A draw that crosses an epoch boundary continues in the next epoch.
    """

    def __init__(self, ids: Sequence[str], seed: int):
        if not ids:
            raise ValueError("PivotSampler needs at least one pivot id")
        self.ids = list(ids)
        self.seed = int(seed)
        self.epoch = 0
        self.position = 0
        self.inactive: set[str] = set()
        self._order_epoch = -1
        self._order: list[int] = []

    @property
    def active(self) -> list[str]:
        return [i for i in self.ids if i not in self.inactive]

    def deactivate(self, ids: Sequence[str]) -> list[str]:
        """Leave ``ids`` out of later draws, unless that would leave no pivot; returns the ids dropped."""
        known = set(self.ids)
        drop = [i for i in dict.fromkeys(ids) if i in known and i not in self.inactive]
        if len(self.inactive) + len(drop) >= len(self.ids):
            return []
        self.inactive.update(drop)
        return drop

    def draw(self, k: int) -> list[str]:
        """The next ``k`` active ids."""
        out: list[str] = []
        while len(out) < k:
            if self.position >= len(self.ids):
                self.epoch += 1
                self.position = 0
            if self._order_epoch != self.epoch:
                import numpy as np

                self._order = np.random.default_rng([self.seed, self.epoch]).permutation(len(self.ids)).tolist()
                self._order_epoch = self.epoch
            pivot_id = self.ids[self._order[self.position]]
            self.position += 1
            if pivot_id not in self.inactive:
                out.append(pivot_id)
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"seed": self.seed, "epoch": self.epoch, "position": self.position, "inactive": sorted(self.inactive),
                "n_ids": len(self.ids)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if int(state["n_ids"]) != len(self.ids):
            raise ValueError(f"the checkpoint's pivot sampler saw {state['n_ids']} pivots but this run has {len(self.ids)}: "
                             "resume with the same pivot file")
        self.seed, self.epoch, self.position = int(state["seed"]), int(state["epoch"]), int(state["position"])
        self.inactive = set(state["inactive"])
