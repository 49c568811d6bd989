"""End-to-end RL on episode envs: GRPO over whole episodes (``algorithm: e2e``), optionally with ARPO.

::

    from pivot_envs.trainers.episode_rl import EpisodeRLConfig, train_episode_rl

    result = train_episode_rl(EpisodeRLConfig(model="out/tiny-terminal", domain="terminal",
                                              output_dir="out/e2e", steps=20, group_size=4,
                                              rollout="arpo", lr=1e-4))

Beside PivotRL (one turn at a pivot, scored by a verifier), this trains where the paper's
efficiency claim compares against: rollouts of WHOLE tasks from their start in the domain's world
(:class:`pivot_envs.episodes.EpisodeEnv`), rewarded by task success at the end.

One step::

    tasks    <- next minibatch of tasks (tasks_per_step of them; seeded epochs, as PivotRL's pivots)
    groups   <- group_size (M) rollouts per task (trainers.episode_rollouts.play_groups): every live
                episode advances one turn per round, one sampler call per round;
                rollout="arpo": N initial rollouts, branching after tool results where
                alpha + beta * (H_t - H_init) > tau, until M rollouts per task
    A_j      <- the advantage policy (trainers.advantage) on the task-success rewards (grpo | dr_grpo);
                infrastructure errors are masked; zero-variance groups skipped (or kept)
    rows     <- every assistant turn of every rollout: (the prompt it was sampled from, its tokens,
                A_j). Tool results and user replies are only in prompts: masked. A branch carries its
                parent's turns before the branch point (ARPO's soft advantage attribution)
                turn_credit = w > 0: a turn t with a turn reward r_t (the domain verifier's score while
                the episode is on the expert's path) gets A_j + w * (r_t - mean of the group's turn
                rewards); a turn off the path gets A_j alone (turn_rows, AdvantagePolicy.turn_advantage)
    update   <- the PivotRL loss and optimiser (trainers.policy_update.PolicyUpdate, which both
                trainers hold)

Every metrics row counts ``rollout_turns`` (model calls: sampled turns), ``tool_calls`` and
``cumulative_rollout_turns``, the axis on which the demo compares PivotRL with E2E RL.

The hack monitor's shares (``hack/*``, ``accepted_by/*``: :mod:`pivot_envs.verifiers.hack_monitor`) are over the
turns the episodes score (:func:`turn_hacks`): with ``turn_credit > 0`` the env judges every turn on the expert's
path with the domain's verifier, and a turn is accepted when that verdict passed with no error (``exact``: the
strict verifier's key equals the expert's). With ``turn_credit = 0`` (and under a harness) no turn is judged:
``hack/accepted`` is 0 and the shares are ``null``.

**From an external harness** (``harness``: a command template, or ``train_episode_rl(config, harness=fn)``):
the groups are not played by the trainer's own loop but by the harness, G times per task at once, each run
against its own rollout endpoint (:mod:`pivot_envs.harness.source`: an OpenAI-compatible
``base_url`` answered by the trainer's sampler, the task's world over MCP). The rows are the captured calls:
each call's prompt token ids and sampled tokens, with the captured log-probs as the behaviour log-probs
(the engine mismatch is measured and the truncated importance correction applied, as with
``rollout_engine: vllm``); the weights are synced before every step as usual. Metrics rows gain
the harness columns (:func:`~.harness_steps.harness_fields`). A failing harness stops the run
(:mod:`.harness_steps`: a warning with its stderr per failed step, an error past ``max_harness_failure_rate``,
and an error when no step trained). ARPO does not apply (a harness's state cannot be branched).
"""

from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from pivot_envs.agents.hf import HFAgent
from pivot_envs.config import ConfigError
from pivot_envs.domains import get_domain
from pivot_envs.episodes import EpisodeEnv, resolve_tasks
from pivot_envs.episodes.turns import turn_verifier
from pivot_envs.trainers.advantage import AdvantageInputs, AdvantagePolicy, turn_mean, zero_variance
from pivot_envs.trainers.config import PolicyConfig
from pivot_envs.trainers.distributed import DistInfo
from pivot_envs.trainers.episode_rollouts import ArpoRule, Rollout, RolloutPlan, RolloutStats, play_groups
from pivot_envs.trainers.harness_steps import (HarnessFailure, StepVerdict, check_failures, failure_text, harness_fields,
                                               nothing_trained, to_rollouts)
from pivot_envs.trainers.policy_update import PolicyUpdate, Row
from pivot_envs.trainers.rollout_engine import build_rollout_engine
from pivot_envs.trainers.run_loop import RLTrainer, TrainResult, engine_fields
from pivot_envs.trainers.sampling import PivotSampler, build_sampler, sampling_seed
from pivot_envs.trainers.step_stats import EpisodeStepStats, metrics_row
from pivot_envs.verifiers.hack_monitor import HackCounts, hack_counts
from pivot_envs.verifiers.versions import verifier_versions

__all__ = ["EpisodeRLConfig", "EpisodeRLTrainer", "scored_turn_rewards", "train_episode_rl", "turn_hacks",
           "turn_rows"]

log = logging.getLogger("pivot_envs.trainers")

ROLLOUTS = ("group", "arpo")


@dataclass
class EpisodeRLConfig(PolicyConfig):
    """Configuration of :func:`train_episode_rl`: the :class:`~pivot_envs.trainers.config.PolicyConfig`
    settings (model, sampling, loss, optimiser, checkpoints; ``group_size`` = M rollouts per task) plus
    the tasks and the episodes."""

    advantage_inputs = AdvantageInputs(baselines=False, resample=False)  # a task's start has no profiled V(s)

    tasks: str | None = None
    """Task source: a trajectory file or ``bundled:DOMAIN[:SPLIT]``; ``None``: the domain's bundled ``split``."""

    tasks_per_step: int = 8
    """Tasks drawn per step (each plays ``group_size`` rollouts, the GRPO group)."""

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

    world: str | None = None
    """The world the episodes are played in (a world spec: ``tau2-airline``, ``mcp:COMMAND``...), for tasks of no
    built-in domain (``tasks`` must then be a trajectory file); the episodes are then generic (the default action
    parser, the ``state`` and ``facts`` success rules, the ``tool_call`` turn verifier) and ``domain`` is not used.
    ``None``: the domain's world."""

    harness: str | list[str] | None = None
    """An external harness that plays the episodes (issue 28): a command template (a string split like a shell,
    or a list) with the placeholders ``{base_url}``, ``{mcp_url}``, ``{task_file}``, ``{rollout_id}``,
    ``{task_id}``, ``{task}``, ``{system}``, ``{model}``, ``{workdir}``; ``None``: the trainer's own loop. A Python
    callable is passed to :func:`train_episode_rl` as ``harness=``. Needs FastAPI, uvicorn and mcp
    (``pip install 'pivot-envs[serve,mcp]'``)."""

    harness_timeout_s: float = 300.0
    """Seconds one harness run may take; past it the run is killed and its rollout abandoned (an error)."""

    harness_concurrency: int | None = None
    """Harness runs in flight at once (``None``: all of a step's ``tasks_per_step * group_size``)."""

    harness_env: dict[str, str] = field(default_factory=dict)
    """Extra environment variables of the harness processes."""

    max_harness_failure_rate: float = 0.5
    """The share of a step's harness runs that may fail (a non-zero exit, killed, could not start) before the run
    stops with an error naming the harness's stderr. A failed step always warns with it; ``1.0`` never stops early
    (a run in which no step trained still ends with an error)."""

    def validate(self) -> None:
        super().validate()
        if self.rollout not in ROLLOUTS:
            raise ConfigError(f"EpisodeRLConfig.rollout = {self.rollout!r} is invalid: it must be one of {', '.join(ROLLOUTS)}")
        for name in ("tasks_per_step", "max_turns", "arpo_initial", "arpo_branches", "arpo_entropy_tokens", "episode_workers"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"EpisodeRLConfig.{name} = {value!r} is invalid: it must be an integer >= 1")
        if self.rollout == "arpo" and self.arpo_initial > self.group_size:
            raise ConfigError(f"EpisodeRLConfig.arpo_initial = {self.arpo_initial} is invalid: it must be <= "
                              f"group_size ({self.group_size}), the budget of rollouts per task")
        if self.arpo_beta < 0:
            raise ConfigError(f"EpisodeRLConfig.arpo_beta = {self.arpo_beta} is invalid: it must be >= 0")
        if self.harness is not None and self.rollout == "arpo":
            raise ConfigError("EpisodeRLConfig.rollout = 'arpo' does not apply with a harness: ARPO branches a rollout "
                              "at a state, and an external harness's state cannot be branched; use rollout: group")
        if not isinstance(self.harness_timeout_s, (int, float)) or self.harness_timeout_s <= 0:
            raise ConfigError(f"EpisodeRLConfig.harness_timeout_s = {self.harness_timeout_s!r} is invalid: it must be "
                              "a number of seconds > 0")
        rate = self.max_harness_failure_rate
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0.0 <= rate <= 1.0:
            raise ConfigError(f"EpisodeRLConfig.max_harness_failure_rate = {rate!r} is invalid: it must be a share "
                              "in [0, 1] (0: any failed run stops the run; 1: none does)")
        if self.harness_concurrency is not None and (not isinstance(self.harness_concurrency, int)
                                                     or self.harness_concurrency < 1):
            raise ConfigError(f"EpisodeRLConfig.harness_concurrency = {self.harness_concurrency!r} is invalid: it must "
                              "be an integer >= 1 or null")

    def plan(self) -> RolloutPlan:
        arpo = None
        if self.rollout == "arpo":
            arpo = ArpoRule(initial=self.arpo_initial, branches=self.arpo_branches,
                            entropy_tokens=self.arpo_entropy_tokens, alpha=self.arpo_alpha, beta=self.arpo_beta,
                            tau=self.arpo_tau)
        return RolloutPlan(group_size=self.group_size, arpo=arpo, workers=self.episode_workers)


def train_episode_rl(config: EpisodeRLConfig | dict[str, Any],
                     on_step: Callable[[dict[str, Any]], None] | None = None, *, vllm_llm: Any = None,
                     harness: Any = None) -> TrainResult:
    """Train with end-to-end RL (or ARPO) on episodes; ``on_step(row)`` after every step (``vllm_llm``: as
    :func:`~pivot_envs.trainers.pivotrl.train_pivotrl`; ``harness``: a callable ``fn(run)`` playing each
    episode, instead of ``config.harness``'s command)."""
    return EpisodeRLTrainer(config, on_step=on_step, vllm_llm=vllm_llm, harness=harness).train()


def turn_rows(rollouts: Sequence[Rollout], advantages: Sequence[float],
              policy: AdvantagePolicy = AdvantagePolicy()) -> list[Row]:
    """Loss rows of one group: every assistant turn of every scored rollout with its rollout's advantage, shaped
    per turn by ``policy`` (:meth:`~.advantage.AdvantagePolicy.turn_advantage`: ``turn_credit * (r_t - rbar)`` on
    turns with a turn reward, see :class:`EpisodeRLConfig.turn_credit`).

    The completion of a row is the turn's sampled tokens only; everything the world or the user said
    is in the prompt, which the loss never counts. Rollouts without a reward (errors) give no rows.
    """
    rbar = turn_mean(scored_turn_rewards(rollouts)) if policy.turn_credit else None
    rows: list[Row] = []
    for r, adv in zip(rollouts, advantages):
        if r.reward is None:
            continue
        for t in r.turns:
            if t.completion.token_ids:
                a = policy.turn_advantage(adv, t.reward, rbar)
                rows.append(Row(list(t.prompt_ids), list(t.completion.token_ids), a, t.completion.logprobs))
    return rows


def scored_turn_rewards(rollouts: Sequence[Rollout]) -> list[float]:
    """The turn rewards of a group's scored rollouts (turns off the expert's path have none)."""
    return [t.reward for r in rollouts if r.reward is not None for t in r.turns if t.reward is not None]


def turn_hacks(rollouts: Sequence[Rollout]) -> HackCounts:
    """The hack monitor's counts over a group's judged turns: every turn a rollout sampled itself (shared turns
    count once, in the rollout that sampled them) that the env judged (:attr:`Turn.verdict`), in rollouts with a
    reward (as :func:`scored_turn_rewards`)."""
    judged = [t.verdict for r in rollouts if r.reward is not None for t in r.turns
              if not t.shared and t.verdict is not None]
    return hack_counts([v.action for v in judged], [v.pivot for v in judged], [v.result for v in judged])


class EpisodeRLTrainer(RLTrainer):
    """Tasks and their episodes; the run, the policy and its updates are the :class:`~.run_loop.RLTrainer`'s: the
    same model, loss, optimiser, schedule, checkpoints (the task order resumes like the pivot order) and metrics
    file as :class:`~.pivotrl.PivotRLTrainer`'s."""

    config: EpisodeRLConfig
    renamed_keys = {"pivots_per_step": "tasks_per_step"}

    def __init__(self, config: EpisodeRLConfig | dict[str, Any],
                 on_step: Callable[[dict[str, Any]], None] | None = None, *, vllm_llm: Any = None, harness: Any = None):
        cfg = config if isinstance(config, EpisodeRLConfig) else EpisodeRLConfig.from_dict(config)
        if not cfg.model:
            raise ConfigError("EpisodeRLConfig.model is empty: set model to a model folder (save_pretrained) or hub id")
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # before any model loads or files are written
            raise ConfigError(f"the episode trainer (algorithm e2e, ARPO included) runs in one process, but this is "
                              f"one of {os.environ['WORLD_SIZE']} (torchrun or accelerate launch): start it with plain "
                              "`pivot-envs train` or `python -m pivot_envs.cli train`; for whole tasks on several GPUs "
                              "use TRL (examples/trl_episodes.py)")
        super().__init__(cfg, on_step)
        self.policy_update.wrap_ddp()
        module = self.policy_update.module
        sampler = build_sampler(module, self.tokenizer, cfg, batch_size=cfg.tasks_per_step)
        self.rollout = build_rollout_engine(cfg, module, self.tokenizer, sampler, shared_llm=vllm_llm)
        self.agent = self.rollout.agent
        if cfg.sampling_batch_size is None and self.rollout.name == "hf":  # one generate call per round
            sampler.settings.batch_size = cfg.tasks_per_step * cfg.group_size  # the hf engine samples with it
        self.harness = self._harness_source(harness) if (harness is not None or cfg.harness is not None) else None
        self.harness_steps: list[StepVerdict] = []

    # ------------------------------------------------------------------ setup
    def _harness_source(self, harness: Any) -> Any:
        """The external harness's rollout source, on its own endpoint answered by this trainer's sampler."""
        cfg = self.config
        try:
            from pivot_envs.harness import command, source  # FastAPI, uvicorn and mcp: only with a harness
        except ImportError as exc:
            raise ConfigError(f"EpisodeRLConfig.harness needs the harness endpoint's packages ({exc}): "
                              "pip install 'pivot-envs[serve,mcp]'") from None
        if cfg.rollout == "arpo":
            raise ConfigError("EpisodeRLConfig.rollout = 'arpo' does not apply with a harness (its state cannot be "
                              "branched); use rollout: group")
        chosen = harness if harness is not None else cfg.harness
        assert chosen is not None  # __init__ asks for a source only with a harness
        spec = command.HarnessSpec.build(chosen, timeout_s=cfg.harness_timeout_s, env=cfg.harness_env)
        if isinstance(self.agent, HFAgent):  # the hf engine: the behaviour log-probs of every captured call
            self.agent.settings.logprobs = "sampling"
        return source.local_harness_source(
            self.agent, self.make_env, spec, version=lambda: self.rollout.policy_version, max_turns=cfg.max_turns,
            score_turns=cfg.turn_credit > 0, concurrency=cfg.harness_concurrency, seed=cfg.seed)

    def load_data(self) -> None:
        cfg = self.config
        self.domain = get_domain(cfg.domain)
        if cfg.world is not None:
            if not cfg.tasks:
                raise ConfigError(f"EpisodeRLConfig.world = {cfg.world!r} needs tasks: a trajectory file of that "
                                  "world's tasks (e.g. written from pivot_envs.formats.tau2_tasks.read_tau2_tasks)")
        elif self.domain.world is None:
            raise ConfigError(f"domain {cfg.domain!r} has no world: end-to-end RL needs one (domains with worlds: "
                              "tool_use, terminal, swe, search), or set world")
        self.tasks = resolve_tasks(cfg.tasks, domain=None if cfg.world is not None else self.domain.name,
                                   split=cfg.split)
        if not self.tasks:
            raise ConfigError(f"no tasks in {cfg.tasks or f'the bundled {cfg.split!r} split of {cfg.domain!r}'}")
        self.task_by_id = {t.id: t for t in self.tasks}
        self.task_sampler = PivotSampler(list(self.task_by_id), cfg.seed)
        self.plan = cfg.plan()
        # the versions of the turn rewards' verifier (the domain's default; tool_call without a domain), recorded in
        # checkpoints: a resume under other versions is refused
        self.verifier_versions = verifier_versions(turn_verifier(None, None if cfg.world is not None else self.domain))

    def data_state(self) -> dict[str, Any]:
        """The task order (stored as ``pivot_sampler``)."""
        return {"pivot_sampler": self.task_sampler.state_dict()}

    def load_data_state(self, state: dict[str, Any]) -> None:
        self.task_sampler.load_state_dict(state["pivot_sampler"])

    def make_env(self) -> EpisodeEnv:
        """A fresh episode env over the run's tasks (rewards are task success; with ``turn_credit`` the env
        also scores each on-path turn with the domain's verifier, a sandbox run for terminal)."""
        cfg = self.config
        if cfg.world is not None:
            return EpisodeEnv(tasks=self.tasks, world=cfg.world, user=cfg.user, max_turns=cfg.max_turns,
                              score_turns=cfg.turn_credit > 0)
        return EpisodeEnv(tasks=self.tasks, domain=self.domain.name, user=cfg.user,
                          max_turns=cfg.max_turns, score_turns=cfg.turn_credit > 0)

    def entropy_fn(self, prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]]) -> list[float]:
        """Normalised entropy (mean over the given tokens of H / log V) of the policy at each row's tokens."""
        return self.policy_update.entropies(prompts, completions)

    # ------------------------------------------------------------------ the loop
    def train(self) -> TrainResult:
        """Run the remaining steps (see :meth:`~.run_loop.RLTrainer.train`); a harness's endpoint stops at the end,
        and a harness run in which no step trained raises :class:`~.harness_steps.HarnessFailure` saying why."""
        try:
            result = super().train()
        finally:
            if self.harness is not None:
                self.harness.close()
        why = nothing_trained(self.harness_steps, self.harness.harness.name) if self.harness is not None else None
        if why is not None:
            raise HarnessFailure(why)
        return result

    def check_step(self, row: dict[str, Any]) -> None:
        """After a step is logged: stop a harness run whose step failed too often (:func:`~.harness_steps.check_failures`)."""
        stats = getattr(self, "_last_harness_stats", None)
        if self.harness is not None and stats is not None:
            check_failures(stats, self.config.max_harness_failure_rate, int(row["step"]), self.harness.harness.name)

    def train_step(self, step: int) -> dict[str, Any]:
        cfg = self.config
        t0 = time.perf_counter()
        ids = self.task_sampler.draw(cfg.tasks_per_step)
        tasks = [self.task_by_id[i] for i in ids]
        st = EpisodeStepStats()
        sync_s = self.rollout.sync(self.policy_update.module, self.updates)
        version = self.rollout.policy_version
        harness_columns: dict[str, Any] = {}
        with self.policy_update.autocast():
            if self.harness is not None:
                groups, stats, harness_columns = self._play_harness(tasks, step)
            else:
                groups, stats = play_groups(self.make_env, self.agent, tasks, self.plan,
                                            seed=sampling_seed(cfg.seed, step, 0, 0),
                                            entropy_fn=self.entropy_fn if self.plan.arpo is not None else None)
        t_sample = time.perf_counter() - t0
        self._count(groups, stats, st)
        # ALGO LOGIC: the advantages (the run's AdvantagePolicy, trainers/advantage.py: task success per rollout, turn
        # credit per turn), then the loss over their rows (PolicyUpdate.update, trainers/loss.py)
        rows: list[Row] = []
        for group in groups:
            rewards = [r.reward if r.reward is not None else 0.0 for r in group]
            valid = [r.reward is not None for r in group]
            if not any(valid):
                continue
            turn_rewards = scored_turn_rewards(group)
            st.turn_reward_sum += math.fsum(turn_rewards)
            st.turn_reward_n += len(turn_rewards)
            if not self.advantage.trains(rewards, valid, turn_rewards):
                st.skipped_groups += 1
                continue
            adv = self.advantage.advantages(rewards, valid)
            st.used_groups += 1
            rows += turn_rows(group, adv, self.advantage)
        st.used_rows += len(rows)
        t2 = time.perf_counter()
        lr = self.policy_update.lr
        update = self.policy_update.update(rows, engine="harness" if self.harness is not None else self.rollout.name)
        t_update = time.perf_counter() - t2
        st.add_update(update)

        # PLUMBING: the metrics row
        total = st.reduced(self.dist)
        self.rollout_turns_total += int(total.rollout_turns)
        step_s = time.perf_counter() - t0
        row = metrics_row(step, total, update, lr)
        episodes = total.episodes or 0.0
        row.update(
            success_mean=row["reward_mean"],
            rollout_turns=int(total.rollout_turns),
            cumulative_rollout_turns=self.rollout_turns_total,
            tool_calls=int(total.tool_calls),
            replayed_steps=int(total.replayed_steps),
            episodes=int(episodes),
            turns_mean=total.turns_sum / episodes if episodes else None,
            turn_reward_mean=total.ratio("turn_reward_sum", "turn_reward_n"),
            scored_turns=int(total.turn_reward_n),
            episode_errors=int(total.errors),
            truncated=int(total.truncated),
            branches=int(total.branches),
            topped_up=int(total.topped_up),
            rounds=int(total.rounds),
            branch_points=[list(b) for b in stats.branches],
            active_pivots=len(self.task_sampler.active),
            epoch=self.task_sampler.epoch,
            sample_s=t_sample, score_s=0.0, update_s=t_update, step_s=step_s,
            tokens_per_s=total.completion_tokens / step_s if step_s > 0 else None,
            **engine_fields(self.rollout, total, version, sync_s, t_sample, step_s),
            **harness_columns,
        )
        if self.harness is not None:
            self._remember(row, int(total.errors))
        return row

    def _remember(self, row: dict[str, Any], errors: int) -> None:
        """The step's verdict, for the end-of-run check."""
        stats = self._last_harness_stats
        self.harness_steps.append(StepVerdict(
            step=int(row["step"]), updated=bool(row["updated"]), runs=stats.runs,
            harness_failures=stats.harness_failures, errors=errors, skipped_groups=int(row["skipped_groups"]),
            reward_mean=row.get("reward_mean"), first_failure=failure_text(stats.failures[0]) if stats.failures else None))

    def _play_harness(self, tasks: Sequence[Any], step: int) -> tuple[list[list[Rollout]], RolloutStats,
                                                                       dict[str, Any]]:
        """The step's groups played by the external harness, and the metrics row's harness columns; a step in which
        the harness failed warns with the end of its stderr."""
        harness = self.harness
        assert harness is not None  # the trainer plays with a harness
        outcomes, h = harness.play([{"task_id": t.id} for t in tasks], self.config.group_size)
        self._last_harness_stats = h
        groups = to_rollouts(outcomes)
        stats = RolloutStats(rollout_turns=h.calls, tool_calls=sum(r.tool_calls for g in groups for r in g),
                             rollouts=h.runs)
        name = harness.harness.name
        if h.failures:
            log.warning("step %d: the harness %r failed in %d of %d runs; first, %s", step, name, h.harness_failures,
                        h.runs, failure_text(h.failures[0]))
        for group, outs in zip(groups, outcomes):
            for r, o in zip(group, outs):
                if r.error and not o.harness_failed:
                    log.warning("harness run on task %s: %s", o.task_id, r.error)
        return groups, stats, harness_fields(name, h)

    def _count(self, groups: list[list[Rollout]], stats: RolloutStats, st: EpisodeStepStats) -> None:
        """Reward and cost counters of the step's rollouts (``reward_*`` are task-success figures)."""
        st.rollout_turns += stats.rollout_turns
        st.tool_calls += stats.tool_calls
        st.replayed_steps += stats.replayed_steps
        st.branches += len(stats.branches)
        st.topped_up += stats.topped_up
        st.rounds += stats.rounds
        for group in groups:
            st.groups += 1
            st.samples += len(group)
            scored = [r.reward for r in group if r.reward is not None]
            for r in group:
                st.episodes += 1
                st.turns_sum += len(r.turns)
                st.errors += 1 if r.error else 0
                st.truncated += 1 if r.truncated else 0
                own = [t for t in r.turns if not t.shared]
                tokens = sum(len(t.completion.token_ids or []) for t in own)
                st.completion_tokens += tokens
                st.completion_len_sum += tokens / max(1, len(own))
            st.masked += len(group) - len(scored)
            st.hack = st.hack + turn_hacks(group)
            if not scored:
                st.unscored_groups += 1
                continue
            st.scored_groups += 1
            st.zero_var_groups += 1 if zero_variance(scored) else 0
            st.reward_sum += float(sum(scored))
            st.reward_sq_sum += float(sum(x * x for x in scored))
            st.reward_n += len(scored)
