"""End-to-end RL on episode envs: GRPO over whole episodes (``algorithm: e2e``), optionally with ARPO.

::

    from pivot_envs.trainers.episode_rl import EpisodeRLConfig, train_episode_rl

    result = train_episode_rl(EpisodeRLConfig(model="out/tiny-terminal", domain="terminal",
                                              output_dir="out/e2e", steps=20, group_size=4,
                                              rollout="arpo", lr=1e-4))

Beside PivotRL (one turn at a pivot, scored by a verifier), this trains where the paper's
efficiency claim compares against: rollouts of WHOLE tasks from their start in the domain's world
(:class:`pivot_envs.episode_env.EpisodeEnv`), rewarded by task success at the end.

One step::

    tasks    <- next minibatch of tasks (pivots_per_step of them; seeded epochs, as PivotRL's pivots)
    groups   <- group_size (M) rollouts per task (trainers.episode_rollouts.play_groups): every live
                episode advances one turn per round, one sampler call per round;
                rollout="arpo": N initial rollouts, branching after tool results where
                alpha + beta * (H_t - H_init) > tau, until M rollouts per task
    A_j      <- group advantages of the task-success rewards (grpo | dr_grpo); infrastructure errors
                are masked; zero-variance groups skipped (or kept)
    rows     <- every assistant turn of every rollout: (the prompt it was sampled from, its tokens,
                A_j). Tool results and user replies are only in prompts: masked. A branch carries its
                parent's turns before the branch point (ARPO's soft advantage attribution)
                turn_credit = w > 0: a turn t with a turn reward r_t (the domain verifier's score while
                the episode is on the expert's path) gets A_j + w * (r_t - mean of the group's turn
                rewards); a turn off the path gets A_j alone (turn_rows)
    update   <- the PivotRL loss and optimiser (trainers.pivotrl.PivotRLTrainer._update)

Every metrics row counts ``rollout_turns`` (model calls: sampled turns), ``tool_calls`` and
``cumulative_rollout_turns``, the axis on which the demo compares PivotRL with E2E RL.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from pivot_envs.config import ConfigError
from pivot_envs.trainers.advantage import group_advantages
from pivot_envs.trainers.config import PivotRLConfig
from pivot_envs.trainers.distributed import reduce_sums, unwrap
from pivot_envs.trainers.episode_rollouts import ArpoRule, Rollout, RolloutPlan, RolloutStats, play_groups
from pivot_envs.trainers.logprobs import completion_logprobs, pack
from pivot_envs.trainers.pivotrl import SUM_KEYS, PivotRLTrainer, TrainResult, _metrics_row, _Row
from pivot_envs.trainers.sampling import PivotSampler, sampling_seed

__all__ = ["EpisodeRLConfig", "EpisodeRLTrainer", "group_turn_mean", "scored_turn_rewards", "train_episode_rl",
           "turn_rows"]

log = logging.getLogger("pivot_envs.trainers")

ROLLOUTS = ("group", "arpo")

EPISODE_SUM_KEYS = SUM_KEYS + ("rollout_turns", "tool_calls", "replayed_steps", "branches", "topped_up",
                               "turns_sum", "episodes", "errors", "truncated", "rounds", "turn_reward_sum",
                               "turn_reward_n")


@dataclass
class EpisodeRLConfig(PivotRLConfig):
    """:class:`PivotRLConfig` plus the episode settings (``pivots_per_step`` = tasks per step,
    ``group_size`` = M rollouts per task; ``pivots``, ``strict_verifier`` and the PVPO settings do not apply)."""

    tasks: str | None = None
    """Task source: a trajectory file or ``bundled:DOMAIN[:SPLIT]``; ``None``: the domain's bundled ``split``."""

    max_turns: int = 8
    """Assistant turns before an episode is truncated (a truncated episode is a failure)."""

    user: str = "scripted"
    """User simulator of the episodes (``scripted``, ``none``, ``openai:MODEL@URL``)."""

    rollout: str = "group"
    """``group``: ``group_size`` independent rollouts per task; ``arpo``: ARPO's entropy branching."""

    arpo_initial: int = 2
    """ARPO: N, rollouts started per task (the rest of the ``group_size`` budget goes to branches)."""

    arpo_branches: int = 2
    """ARPO: Z, continuations sampled at a branch point."""

    arpo_entropy_tokens: int = 8
    """ARPO: k, the first tokens of a turn whose entropy is compared with the first turn's."""

    arpo_alpha: float = 0.5
    """ARPO: alpha of ``P = alpha + beta * (H_t - H_init)``."""

    arpo_beta: float = 1.0
    """ARPO: beta of ``P`` (entropies are normalised by ``log V``, so ``H`` is in [0, 1])."""

    arpo_tau: float = 0.55
    """ARPO: branch when ``P > tau``."""

    episode_workers: int = 2
    """Threads for env resets, steps and replays (tool calls run beside each other)."""

    turn_credit: float = 0.0
    """Turn-level credit, w: ``0`` (plain E2E: every turn of a rollout shares its task-success advantage).
    With ``w > 0`` the episodes score their turns (``info["turn_reward"]``, the domain verifier's reward for
    an action taken on the expert's path; ``None`` once the episode has left it), and a turn's advantage is
    ``A_j + w * (r_t - rbar)``, ``rbar`` the mean turn reward over the group's scored turns. A group whose task
    rewards are all equal still trains when its turn rewards differ. Task success ends in [-1/std, 1/std]
    under ``grpo``; ``w = 0.5`` lets a right or wrong on-path action move a turn by up to half a unit."""

    def __post_init__(self) -> None:
        if self.strict_verifier == "strict":
            self.strict_verifier = None  # no per-turn verifier in episodes
        super().__post_init__()

    def validate(self) -> None:
        super().validate()
        if self.rollout not in ROLLOUTS:
            raise ConfigError(f"EpisodeRLConfig.rollout = {self.rollout!r} is invalid: it must be one of {', '.join(ROLLOUTS)}")
        if self.advantage == "pvpo":
            raise ConfigError("EpisodeRLConfig.advantage = 'pvpo' is invalid: episodes have no profiled V(s); "
                              "use grpo or dr_grpo")
        if self.zero_variance == "resample":
            raise ConfigError("EpisodeRLConfig.zero_variance = 'resample' is invalid for episodes: use skip or keep")
        if self.pivots is not None:
            raise ConfigError("EpisodeRLConfig.pivots does not apply: episodes start at tasks; set tasks "
                              "(a trajectory file or bundled:DOMAIN:SPLIT)")
        for name in ("max_turns", "arpo_initial", "arpo_branches", "arpo_entropy_tokens", "episode_workers"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"EpisodeRLConfig.{name} = {value!r} is invalid: it must be an integer >= 1")
        if self.rollout == "arpo" and self.arpo_initial > self.group_size:
            raise ConfigError(f"EpisodeRLConfig.arpo_initial = {self.arpo_initial} is invalid: it must be <= "
                              f"group_size ({self.group_size}), the budget of rollouts per task")
        if self.arpo_beta < 0:
            raise ConfigError(f"EpisodeRLConfig.arpo_beta = {self.arpo_beta} is invalid: it must be >= 0")
        if not isinstance(self.turn_credit, (int, float)) or not math.isfinite(self.turn_credit) or self.turn_credit < 0:
            raise ConfigError(f"EpisodeRLConfig.turn_credit = {self.turn_credit!r} is invalid: it must be a number "
                              ">= 0 (0: plain E2E)")

    def plan(self) -> RolloutPlan:
        arpo = None
        if self.rollout == "arpo":
            arpo = ArpoRule(initial=self.arpo_initial, branches=self.arpo_branches,
                            entropy_tokens=self.arpo_entropy_tokens, alpha=self.arpo_alpha, beta=self.arpo_beta,
                            tau=self.arpo_tau)
        return RolloutPlan(group_size=self.group_size, arpo=arpo, workers=self.episode_workers)


def train_episode_rl(config: EpisodeRLConfig | dict[str, Any],
                     on_step: Callable[[dict[str, Any]], None] | None = None, *, vllm_llm: Any = None) -> TrainResult:
    """Train with end-to-end RL (or ARPO) on episodes; ``on_step(row)`` after every step (``vllm_llm``: as
    :func:`~pivot_envs.trainers.pivotrl.train_pivotrl`)."""
    return EpisodeRLTrainer(config, on_step=on_step, vllm_llm=vllm_llm).train()


def turn_rows(rollouts: Sequence[Rollout], advantages: Sequence[float], turn_credit: float = 0.0) -> list[_Row]:
    """Loss rows of one group: every assistant turn of every scored rollout with its rollout's advantage,
    plus ``turn_credit * (r_t - rbar)`` on turns with a turn reward (see :class:`EpisodeRLConfig.turn_credit`).

    The completion of a row is the turn's sampled tokens only; everything the world or the user said
    is in the prompt, which the loss never counts. Rollouts without a reward (errors) give no rows.
    """
    rbar = group_turn_mean(rollouts) if turn_credit else None
    rows: list[_Row] = []
    for r, adv in zip(rollouts, advantages):
        if r.reward is None:
            continue
        for t in r.turns:
            if t.completion.token_ids:
                a = float(adv)
                if rbar is not None and t.reward is not None:
                    a += turn_credit * (t.reward - rbar)
                rows.append(_Row(list(t.prompt_ids), list(t.completion.token_ids), a, t.completion.logprobs))
    return rows


def scored_turn_rewards(rollouts: Sequence[Rollout]) -> list[float]:
    """The turn rewards of a group's scored rollouts (turns off the expert's path have none)."""
    return [t.reward for r in rollouts if r.reward is not None for t in r.turns if t.reward is not None]


def group_turn_mean(rollouts: Sequence[Rollout]) -> float | None:
    """``rbar``: the mean turn reward over the group's scored turns (``None`` when no turn has one)."""
    values = scored_turn_rewards(rollouts)
    return math.fsum(values) / len(values) if values else None


class EpisodeRLTrainer(PivotRLTrainer):
    """:class:`PivotRLTrainer` with episodes instead of pivots: the same model, loss, optimiser,
    schedule, checkpoints (the task order resumes like the pivot order) and metrics file."""

    config: EpisodeRLConfig

    def __init__(self, config: EpisodeRLConfig | dict[str, Any],
                 on_step: Callable[[dict[str, Any]], None] | None = None, *, vllm_llm: Any = None):
        cfg = config if isinstance(config, EpisodeRLConfig) else EpisodeRLConfig.from_dict(config)
        super().__init__(cfg, on_step=on_step, vllm_llm=vllm_llm)
        if self.dist.world_size > 1:
            raise ConfigError("EpisodeRLTrainer runs in one process (torchrun with several is not supported yet)")
        if cfg.sampling_batch_size is None and self.rollout.name == "hf":  # one generate call per round
            self.agent.settings.batch_size = cfg.pivots_per_step * cfg.group_size

    # ------------------------------------------------------------------ setup
    def _load_data(self) -> None:
        from pivot_envs.domains import get_domain
        from pivot_envs.episode_env import resolve_tasks

        cfg = self.config
        self.domain = get_domain(cfg.domain)
        if self.domain.world is None:
            raise ConfigError(f"domain {cfg.domain!r} has no world: end-to-end RL needs one (domains with worlds: "
                              "tool_use, terminal, swe, search)")
        self.tasks = resolve_tasks(cfg.tasks, domain=self.domain.name, split=cfg.split)
        if not self.tasks:
            raise ConfigError(f"no tasks in {cfg.tasks or f'the bundled {cfg.split!r} split of {cfg.domain!r}'}")
        self.task_by_id = {t.id: t for t in self.tasks}
        self.pivots = {}
        self.verifier = None
        self.strict_verifier = None
        self.pivot_sampler = PivotSampler(list(self.task_by_id), cfg.seed)
        from pivot_envs.trainers.scoring import ValueTable

        self.values = ValueTable()
        self.plan = cfg.plan()

    def make_env(self) -> Any:
        from pivot_envs.episode_env import EpisodeEnv

        # rewards are task success: the per-turn verifier (a sandbox run for terminal) is not needed here
        # with turn credit the env scores each on-path turn with the domain's verifier (a sandbox run for terminal)
        return EpisodeEnv(tasks=self.tasks, domain=self.domain.name, user=self.config.user,
                          max_turns=self.config.max_turns, score_turns=self.config.turn_credit > 0)

    def entropy_fn(self, prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]]) -> list[float]:
        """Normalised entropy (mean over the given tokens of H / log V) of the policy at each row's tokens."""
        module = unwrap(self.policy)
        out = [0.0] * len(prompts)
        idx = [i for i, c in enumerate(completions) if len(c) > 0]
        if not idx:
            return out
        batch = pack([prompts[i] for i in idx], [completions[i] for i in idx], self.pad_id, self.device)
        was_training = module.training
        module.eval()
        try:
            with torch.no_grad(), self._autocast():
                _, entropy = completion_logprobs(module, batch, with_entropy=True)
        finally:
            module.train(was_training)
        assert entropy is not None
        mask = batch.completion_mask.float()
        mean = (entropy * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        scale = math.log(max(2, int(module.config.vocab_size)))
        for row, i in enumerate(idx):
            out[i] = float(mean[row]) / scale
        return out

    # ------------------------------------------------------------------ the step
    def _train_step(self, step: int) -> dict[str, Any]:
        cfg = self.config
        t0 = time.perf_counter()
        ids = self.pivot_sampler.draw(cfg.pivots_per_step)
        tasks = [self.task_by_id[i] for i in ids]
        sums: dict[str, float] = dict.fromkeys(EPISODE_SUM_KEYS, 0.0)

        def add(key: str, value: float) -> None:
            sums[key] += float(value)

        sync_s = self.rollout.sync(unwrap(self.policy), self.updates)
        version = self.rollout.policy_version
        with self._autocast():
            groups, stats = play_groups(self.make_env, self.agent, tasks, self.plan,
                                        seed=sampling_seed(cfg.seed, step, 0, 0),
                                        entropy_fn=self.entropy_fn if self.plan.arpo is not None else None)
        t_sample = time.perf_counter() - t0
        self._count(groups, stats, add)
        rows: list[_Row] = []
        for group in groups:
            rewards = [r.reward if r.reward is not None else 0.0 for r in group]
            valid = [r.reward is not None for r in group]
            scored = [x for x, ok in zip(rewards, valid) if ok]
            if not scored:
                continue
            turn_rewards = scored_turn_rewards(group)
            add("turn_reward_sum", math.fsum(turn_rewards))
            add("turn_reward_n", len(turn_rewards))
            flat_turns = not cfg.turn_credit or len(set(turn_rewards)) <= 1
            if len(set(scored)) <= 1 and flat_turns and cfg.zero_variance != "keep":
                add("skipped_groups", 1)
                continue
            adv = group_advantages(rewards, valid, mode=cfg.advantage, eps_std=cfg.eps_std)
            add("used_groups", 1)
            rows += turn_rows(group, [float(a) for a in adv], cfg.turn_credit)
        add("used_rows", len(rows))
        t2 = time.perf_counter()
        lr = self.optimizer.param_groups[0]["lr"]
        update = self._update(rows)
        t_update = time.perf_counter() - t2
        for key, value in update.pop("sums").items():
            add(key, value)
        total = reduce_sums(sums, self.dist)
        self.rollout_turns_total += int(total["rollout_turns"])
        step_s = time.perf_counter() - t0
        row = _metrics_row(step, total, update, lr)
        episodes = total["episodes"] or 0.0
        row.update(
            success_mean=row["reward_mean"],
            rollout_turns=int(total["rollout_turns"]),
            cumulative_rollout_turns=self.rollout_turns_total,
            tool_calls=int(total["tool_calls"]),
            replayed_steps=int(total["replayed_steps"]),
            episodes=int(episodes),
            turns_mean=total["turns_sum"] / episodes if episodes else None,
            turn_reward_mean=total["turn_reward_sum"] / total["turn_reward_n"] if total["turn_reward_n"] else None,
            scored_turns=int(total["turn_reward_n"]),
            episode_errors=int(total["errors"]),
            truncated=int(total["truncated"]),
            branches=int(total["branches"]),
            topped_up=int(total["topped_up"]),
            rounds=int(total["rounds"]),
            branch_points=[list(b) for b in stats.branches],
            active_pivots=len(self.pivot_sampler.active),
            epoch=self.pivot_sampler.epoch,
            sample_s=t_sample, score_s=0.0, update_s=t_update, step_s=step_s,
            tokens_per_s=total.get("completion_tokens", 0.0) / step_s if step_s > 0 else None,
            **self._engine_fields(total, version, sync_s, t_sample, step_s),
        )
        return row

    def _count(self, groups: list[list[Rollout]], stats: RolloutStats, add: Callable[[str, float], None]) -> None:
        """Reward and cost counters of the step's rollouts (``reward_*`` are task-success figures)."""
        add("rollout_turns", stats.rollout_turns)
        add("tool_calls", stats.tool_calls)
        add("replayed_steps", stats.replayed_steps)
        add("branches", len(stats.branches))
        add("topped_up", stats.topped_up)
        add("rounds", stats.rounds)
        for group in groups:
            add("groups", 1)
            add("samples", len(group))
            scored = [r.reward for r in group if r.reward is not None]
            for r in group:
                add("episodes", 1)
                add("turns_sum", len(r.turns))
                add("errors", 1 if r.error else 0)
                add("truncated", 1 if r.truncated else 0)
                own = [t for t in r.turns if not t.shared]
                tokens = sum(len(t.completion.token_ids or []) for t in own)
                add("completion_tokens", tokens)
                add("completion_len_sum", tokens / max(1, len(own)))
            add("masked", len(group) - len(scored))
            if not scored:
                add("unscored_groups", 1)
                continue
            add("scored_groups", 1)
            add("zero_var_groups", 1 if len(set(scored)) <= 1 else 0)
            add("reward_sum", sum(scored))
            add("reward_sq_sum", sum(x * x for x in scored))
            add("reward_n", len(scored))
