"""``PivotEnv``: one pivot per episode, one action per episode, scored by a verifier.

``reset()`` loads a pivot (seeded sampling, or ``options={"pivot_id": ...}`` /
``options={"index": ...}``); ``step(action)`` scores one action with the
domain's verifier and ends the episode. ``step_many(actions)`` scores a group of
G actions at the current pivot with one ``verify_many`` call, without
re-loading data (what GRPO needs).

Observation (see :func:`pivot_envs.spaces.observation_space`)::

    {"messages": json.dumps(context), "tools": json.dumps(tools)}

``info`` of ``reset``: ``pivot_id``, ``expert`` (the expert assistant message),
``domain``. ``info`` of ``step``: ``reward`` (functional), ``strict_reward``,
``passed``, ``reason``, ``verifier``, ``pivot_id``, ``error`` (an infrastructure
failure of the verifier: the reward then means nothing and trainers mask it).
"""

from __future__ import annotations

import copy
import json
from typing import Any, Sequence

import gymnasium

from pivot_envs.domains import get_domain
from pivot_envs.render import render_pivot
from pivot_envs.spaces import action_space, observation_space
from pivot_envs.types import Message, Pivot, VerifyResult
from pivot_envs.verifiers import Verifier, VerifierSpec, build_verifier
from pivot_envs.sources import PivotSource, resolve_pivots


class PivotEnv(gymnasium.Env[dict[str, Any], str]):  # spaces.Dict is a Space[dict[str, Any]]
    """A gymnasium env over the pivots of one domain.

    Args:
        pivots: a pivot JSONL path, a list of :class:`Pivot` (or dicts), or ``None`` for the
            domain's bundled data (``split``).
        domain: a registered domain name (``tool_use``, ``terminal``, ``swe``, ``search``...).
        verifier: a verifier name, config dict or object; ``None`` = the domain's default.
        split: bundled split when ``pivots`` is ``None`` (``train`` or ``test``).
        strict_verifier: the verifier whose reward goes to ``info["strict_reward"]``.
        render_mode: ``"ansi"`` (``render()`` returns text) or ``"human"`` (prints it).
    """

    metadata = {"render_modes": ["ansi", "human"], "render_fps": 4}

    def __init__(
        self,
        pivots: PivotSource = None,
        domain: str = "tool_use",
        verifier: VerifierSpec = None,
        split: str = "train",
        strict_verifier: VerifierSpec = "strict",
        render_mode: str | None = None,
    ):
        self.domain = get_domain(domain)
        self.pivots: list[Pivot] = resolve_pivots(pivots, domain=self.domain.name, split=split)
        if not self.pivots:
            raise ValueError(f"no pivots for domain {self.domain.name!r} (pivots={pivots!r}, split={split!r})")
        self._index = {p.id: i for i, p in enumerate(self.pivots)}
        self.verifier: Verifier = build_verifier(verifier if verifier is not None else self.domain.verifier_spec())
        self.strict_verifier: Verifier = build_verifier(strict_verifier)
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}")
        self.render_mode = render_mode
        self.observation_space = observation_space()
        self.action_space = action_space()
        self.pivot: Pivot | None = None
        self._obs_cache: tuple[str | None, str, str] = (None, "", "")

    # --- gymnasium API -------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = options or {}
        if "pivot_id" in options:
            if options["pivot_id"] not in self._index:
                raise KeyError(f"pivot_id {options['pivot_id']!r} is not among this env's {len(self.pivots)} pivots")
            index = self._index[options["pivot_id"]]
        elif "index" in options:
            index = int(options["index"]) % len(self.pivots)
        else:
            index = int(self.np_random.integers(len(self.pivots)))
        self.pivot = self.pivots[index]
        info = {"pivot_id": self.pivot.id, "expert": copy.deepcopy(self.pivot.expert), "domain": self.domain.name}
        if self.render_mode == "human":
            self.render()
        return self._observation(), info

    def step(self, action: str | Message):
        pivot = self._require_pivot()
        parsed = self.domain.parse_action(action)  # parsed once, shared by both verifiers
        result = self.verifier.safe_verify(parsed, pivot)
        info = self._step_info(parsed, pivot, result)
        return self._observation(), float(result.reward), True, False, info

    def render(self) -> str | None:
        text = render_pivot(self._require_pivot())
        if self.render_mode == "human":
            print(text)
            return None
        return text

    # --- group scoring -------------------------------------------------------------
    def step_many(self, actions: Sequence[str | Message]) -> list[tuple[float, dict[str, Any]]]:
        """Score G actions at the current pivot with one ``verify_many`` call.

        Returns ``(reward, info)`` per action, in order; the episode state is unchanged,
        so this may be called repeatedly after one ``reset``.
        """
        pivot = self._require_pivot()
        parsed = [self.domain.parse_action(a) for a in actions]
        results = self.verifier.verify_many(parsed, pivot)
        return [(float(r.reward), self._step_info(a, pivot, r)) for a, r in zip(parsed, results)]

    def pivot_by_id(self, pivot_id: str) -> Pivot:
        return self.pivots[self._index[pivot_id]]

    # --- internals -----------------------------------------------------------------
    def _require_pivot(self) -> Pivot:
        if self.pivot is None:
            raise RuntimeError("call reset() before step()/render()")
        return self.pivot

    def _observation(self) -> dict[str, str]:
        pivot = self._require_pivot()
        if self._obs_cache[0] != pivot.id:  # encoded once per pivot; str values are immutable
            self._obs_cache = (pivot.id, json.dumps(pivot.context, ensure_ascii=False),
                               json.dumps(pivot.tools, ensure_ascii=False))
        return {"messages": self._obs_cache[1], "tools": self._obs_cache[2]}

    def _step_info(self, action: Any, pivot: Pivot, result: VerifyResult) -> dict[str, Any]:
        strict = self.strict_verifier.safe_verify(action, pivot)
        return {
            "pivot_id": pivot.id,
            "reward": float(result.reward),
            "strict_reward": float(strict.reward),
            "passed": bool(result.passed),
            "reason": result.reason,
            "verifier": result.verifier,
            "error": result.error,
        }
