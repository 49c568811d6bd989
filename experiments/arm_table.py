"""The demo's arms as records: one :class:`Arm` per arm in :data:`ARMS`, in the order of the report's table.

Adding an arm is one entry here: what trains it (``trainer``), on which pivot set, at which learning rate, with
which trainer options, from which other arm's model, and where it sits in the report and the queue. The demo's
stages (:func:`pivot_envs.experiments.demo.stage_arms`), the runs (:mod:`pivot_envs.experiments.arms`) and the
report read these fields; none of them tests an arm's name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

TURN_CREDIT = 0.5
"""``turn_credit`` of the ``e2e_credit`` arm (:class:`~pivot_envs.trainers.episode_rl.EpisodeRLConfig`)."""

TRAINERS = ("none", "sft", "pivotrl", "episodes")
"""Who trains an arm: nobody (the base model as it is), SFT on the pivots' expert actions, PivotRL's GRPO on
pivots, or RL over whole episodes (tasks)."""


@dataclass(frozen=True)
class Arm:
    """One arm of the demo's comparison.

    Attributes:
        name: the arm's name (``--arms``, the report's key, the run folders' prefix).
        title: its row label in the report.
        trainer: one of :data:`TRAINERS`.
        pivots: the pivot set it trains on (``adv``: D_adv, ``random``: random D_cand of D_adv's size, ``pvpo``: the
            PVPO set); ``None``: none (the base, or the episode arms, which train on the candidates' tasks).
        label: its runs' label, part of their folder key (``{lam}``: the chosen lambda).
        lr: the learning rate it trains at: ``rl`` or ``sft`` (the selection's), ``None`` for the base.
        lr_field: a :class:`~pivot_envs.experiments.demo.DemoConfig` field holding its own learning rate, used when
            set (``None``: the ``lr`` above).
        steps_field: a ``DemoConfig`` field holding its own step count (``None``: the settings' ``steps``).
        main: a main arm of the paper's table: run at every seed, and evaluated on the validation split too.
        tunes: the learning rate (``rl`` or ``sft``) the selection chooses when this arm is asked for.
        counts_profile: the rollouts spent profiling its pivots count in its budget (and its curve).
        starts_from: the arm whose trained model (same seed) its training starts from: it runs after that one.
        needs: arms it must run beside, and why (the error message's end).
        curve: its task success is measured along training (Figure 1's curves).
        options: trainer config fields set for this arm (beside the demo's shared ones).
        queue: its place in the arms stage's queue (lower first: the longest runs start first).
    """

    name: str
    title: str
    trainer: str
    pivots: str | None = None
    label: str = ""
    lr: str | None = None
    lr_field: str | None = None
    steps_field: str | None = None
    main: bool = False
    tunes: str | None = None
    counts_profile: bool = False
    starts_from: str | None = None
    needs: tuple[tuple[str, str], ...] = ()
    curve: bool = False
    options: dict[str, Any] = field(default_factory=dict)
    queue: int = 0

    @property
    def trained(self) -> bool:
        """Whether the arm trains (every arm but the base)."""
        return self.trainer != "none"


_PIVOTRL = "no_filter and strict_reward are ablations of pivotrl"

ARMS = (
    Arm("base", "Base", "none", main=True, queue=1),
    Arm("sft", "SFT (same pivots, NLL)", "sft", pivots="adv", label="lambda={lam}", lr="sft", main=True, tunes="sft",
        queue=2),
    Arm("pivotrl", "PivotRL (D_adv + functional reward)", "pivotrl", pivots="adv", label="lambda={lam}", lr="rl",
        main=True, tunes="rl", counts_profile=True, curve=True),
    Arm("sft_pivotrl", "SFT -> PivotRL (PivotRL from the SFT model, as recipes chain stages)", "pivotrl",
        pivots="adv", label="lambda={lam}", lr="rl", counts_profile=True, starts_from="sft",
        needs=(("sft", "sft_pivotrl starts from the sft arm's model"),)),
    Arm("sft_long", "SFT trained longer (more passes over the same pivots: where SFT loses OOD ability)", "sft",
        pivots="adv", label="lambda={lam}", lr="sft", lr_field="sft_long_lr", steps_field="sft_long_steps"),
    Arm("no_filter", "- pivot filtering (random D_cand + functional)", "pivotrl", pivots="random",
        label="n=|D_adv({lam})|", lr="rl", tunes="rl", needs=(("pivotrl", _PIVOTRL),)),
    Arm("strict_reward", "- functional reward (random D_cand + strict)", "pivotrl", pivots="random",
        label="n=|D_adv({lam})|", lr="rl", tunes="rl", needs=(("pivotrl", _PIVOTRL),), options={"verifier": "strict"}),
    Arm("pvpo", "PVPO advantages", "pivotrl", pivots="pvpo", label="pvpo", lr="rl", tunes="rl", counts_profile=True,
        options={"advantage": "pvpo", "zero_variance": "keep", "pvpo_drop_solved": True, "pvpo_inject_expert": True}),
    Arm("e2e", "E2E RL (GRPO over whole episodes, task success)", "episodes", label="tasks=candidates", lr="rl",
        curve=True),
    Arm("e2e_credit", "E2E RL + turn-level credit (turn rewards on the expert's path)", "episodes",
        label="tasks=candidates", lr="rl", curve=True, options={"turn_credit": TURN_CREDIT}),
    Arm("arpo", "ARPO (E2E RL + entropy branching)", "episodes", label="tasks=candidates", lr="rl", curve=True,
        options={"rollout": "arpo"}),
)
"""Every arm, in the order of the report's table."""

ARM = {arm.name: arm for arm in ARMS}
"""The arms by name."""

ARM_NAMES = tuple(ARM)
"""The arms' names, in the report's order."""
