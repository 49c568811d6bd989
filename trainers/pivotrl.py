"""The PivotRL trainer: GRPO at pivots (Algorithm 1 of arXiv 2603.21383), readable top to bottom.

::

    from pivot_envs.trainers.pivotrl import PivotRLConfig, train_pivotrl

    result = train_pivotrl(PivotRLConfig(model="out/ref-tool_use", pivots="out/pivots.jsonl",
                                         output_dir="out/rl", steps=200, lr=1e-4))
    result.final_model_dir, result.metrics_path

One step (per process; ``torchrun`` runs several, see :mod:`.distributed`)::

    pivots   <- next minibatch of D_pivot (seeded epochs; each process takes its own share)
    engine   <- the policy's weights, when the rollout engine (vLLM) does not hold the latest update yet
    groups   <- G actions per pivot from pi_old: ``hf`` on the policy's live weights, or the vLLM engine
    scores   <- verifier.verify_many over the whole batch; verifier errors are masked and counted
    zero-variance groups: skipped, resampled or kept; PVPO: expert action injected into all-0 groups
    A_i      <- the advantage policy (.advantage): grpo (r - mean) / (std + eps) | dr_grpo r - mean | pvpo r - V(s)
    log pi_old <- no-grad forward of the policy before the update (or the sampler's scores, see config)
    log pi_0   <- frozen reference (only when beta > 0; with LoRA: adapters disabled)
    num_iterations x: clipped surrogate - beta * k3 KL over grad_accum_steps micro-batches,
                      backward, clip the gradient norm, AdamW, scheduler
    metrics.jsonl row; checkpoint every save_every steps

The math lives in :mod:`.advantage` (the advantage policy, PVPO's V(s) included) and :mod:`.loss`; the policy, its
reference, the optimiser, the schedule, the update step and the model's checkpoints in :mod:`.policy_update` (shared
with the episode trainer, :mod:`.episode_rl`); the run, the loop around the steps and checkpoints in
:mod:`.run_loop` (:class:`~.run_loop.RLTrainer`, the base of both trainers); the step's counters in
:mod:`.step_stats`. Sampling, scoring, log-probs, metrics and DDP each have their own module.

Hardware: CPU runs in float32 (tested). CUDA paths — bfloat16 autocast, gradient
checkpointing, LoRA on a bfloat16 base, NCCL — follow the torch / transformers /
peft documentation but were NOT run here (the project's machine has no GPU).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import fields
from typing import Any, Callable

from pivot_envs.domains import get_domain
from pivot_envs.sources import resolve_pivots
from pivot_envs.trainers.advantage import ValueTable, zero_variance
from pivot_envs.trainers.config import ConfigError, PivotRLConfig
from pivot_envs.trainers.distributed import DistInfo, gather_objects, unwrap
from pivot_envs.trainers.policy_update import PolicyUpdate, Row
from pivot_envs.trainers.rollout_engine import build_rollout_engine
from pivot_envs.trainers.run_loop import (
    RLTrainer,
    TrainResult,
    engine_fields,
)
from pivot_envs.trainers.sampling import Group, PivotSampler, build_sampler, expert_completion, sample_groups, sampling_seed
from pivot_envs.trainers.scoring import GroupScores, score_groups
from pivot_envs.trainers.step_stats import StepStats, metrics_row
from pivot_envs.types import Pivot
from pivot_envs.verifiers import build_verifier
from pivot_envs.verifiers.versions import merged_versions

__all__ = ["PivotRLConfig", "PivotRLTrainer", "TrainResult", "train_pivotrl"]

log = logging.getLogger("pivot_envs.trainers")


def train_pivotrl(
    config: PivotRLConfig | dict[str, Any], on_step: Callable[[dict[str, Any]], None] | None = None,
    *, vllm_llm: Any = None,
) -> TrainResult:
    """Train with PivotRL; ``on_step(row)`` is called on rank 0 after every step (for progress bars).

    ``vllm_llm``: with ``rollout_engine="vllm"``, an engine built elsewhere for a model of the same
    architecture (the run loads its policy's weights into it first); ``None``: the run builds its own.
    """
    return PivotRLTrainer(config, on_step=on_step, vllm_llm=vllm_llm).train()


class PivotRLTrainer(RLTrainer):
    """The pivots, their verifiers and the PVPO baseline of one run; the run, the policy and its updates are the
    :class:`~.run_loop.RLTrainer`'s, shared with the episode trainer.

    ``PivotRLTrainer(config).train()`` is :func:`train_pivotrl`; the object stays usable after
    training (``trainer.policy``, ``trainer.tokenizer``) — e.g. to compare weights across ranks.
    """

    config: PivotRLConfig

    def __init__(self, config: PivotRLConfig | dict[str, Any], on_step: Callable[[dict[str, Any]], None] | None = None,
                 *, vllm_llm: Any = None):
        cfg = config if isinstance(config, PivotRLConfig) else PivotRLConfig.from_dict(config)
        if not cfg.model:
            raise ConfigError("PivotRLConfig.model is empty: set model to a model folder (save_pretrained) or hub id")
        super().__init__(cfg, on_step)
        if cfg.rollout_engine == "vllm" and self.dist.world_size > 1:
            raise ConfigError("rollout_engine='vllm' runs in one process: torchrun with several processes would start "
                              "one engine per process (not supported yet); use rollout_engine='hf' under torchrun")
        self.policy_update.wrap_ddp()
        module = self.policy_update.module
        self.rollout = build_rollout_engine(cfg, module, self.tokenizer, build_sampler(module, self.tokenizer, cfg),
                                            shared_llm=vllm_llm)
        self.agent = self.rollout.agent

    # more of the policy's parts, as attributes of the trainer (they live in ``policy_update``)
    reference = property(lambda self: self.policy_update.reference)
    optimizer = property(lambda self: self.policy_update.optimizer)
    scheduler = property(lambda self: self.policy_update.scheduler)
    eos_id = property(lambda self: self.policy_update.eos_id)

    # ------------------------------------------------------------------ setup
    def load_data(self) -> None:
        cfg = self.config
        self.domain = get_domain(cfg.domain)
        pivots = resolve_pivots(cfg.pivots, domain=self.domain.name, split=cfg.split)
        if not pivots:
            raise ConfigError(f"no pivots in {cfg.pivots or f'the bundled {cfg.split!r} split of {cfg.domain!r}'}")
        self.pivots: dict[str, Pivot] = {}
        for p in pivots:
            self.pivots.setdefault(p.id, p)
        self.verifier = build_verifier(cfg.verifier if cfg.verifier is not None else self.domain.verifier_spec())
        self.strict_verifier = build_verifier(cfg.strict_verifier) if cfg.strict_verifier is not None else None
        self.verifier_versions = merged_versions(v for v in (self.verifier, self.strict_verifier) if v is not None)
        self.pivot_sampler = PivotSampler(list(self.pivots), cfg.seed)
        self.values = ValueTable()
        self._pvpo_missing: list[str] = []  # pivots with no profile: profiled with the policy before the first step
        if self.advantage.uses_baseline:
            missing = [p.id for p in self.pivots.values() if p.profile is None or not p.profile.rewards]
            if missing and not (cfg.pvpo_refresh_source == "profile" and cfg.pvpo_refresh_every > 0):
                raise ConfigError(f"advantage='pvpo' needs V(s) = pivot.profile.mean, but {len(missing)} pivot(s) of "
                                  f"{cfg.pivots or 'the bundled data'} are unprofiled (first: {missing[0]!r}); run "
                                  "`pivot-envs profile` on the pivot file, or set pvpo_refresh_source='profile' with "
                                  "pvpo_refresh_every > 0 to profile them with the policy at the start")
            self.values = ValueTable({p.id: p.profile.mean for p in self.pivots.values()
                                      if p.profile is not None and p.profile.rewards})
            self._pvpo_missing = missing

    def data_state(self) -> dict[str, Any]:
        """The pivot order and PVPO's V(s) (its running window too)."""
        return {"pivot_sampler": self.pivot_sampler.state_dict(), "values": self.values.state_dict()}

    def load_data_state(self, state: dict[str, Any]) -> None:
        self.pivot_sampler.load_state_dict(state["pivot_sampler"])
        self.values.load_state_dict(state["values"])

    # ------------------------------------------------------------------ the loop
    def before_first_step(self) -> None:
        if self.advantage.uses_baseline:
            self._pvpo_start()

    def train_step(self, step: int) -> dict[str, Any]:
        """Sample, score, build advantages, update; returns the step's metrics row (same on every rank)."""
        cfg, rank, world = self.config, self.dist.rank, self.dist.world_size
        t0 = time.perf_counter()
        per_rank = cfg.pivots_per_step
        share = self.pivot_sampler.draw(per_rank * world)  # the same draw on every rank, each takes its own slice
        pivots = [self.pivots[i] for i in share[rank * per_rank : (rank + 1) * per_rank]]
        st = StepStats()
        sync_s = self.rollout.sync(unwrap(self.policy), self.updates)
        version = self.rollout.policy_version
        groups = sample_groups(self.agent, pivots, cfg.group_size, sampling_seed(cfg.seed, step, rank, 0), self.policy_update.autocast())
        t_sample = time.perf_counter() - t0
        t1 = time.perf_counter()
        scores = self._score(groups)
        t_score = time.perf_counter() - t1
        self._first_round_stats(groups, scores, st)
        pvpo_seen = [(g.pivot.id, s.scored_rewards) for g, s in zip(groups, scores)]

        if self.advantage.resamples:  # sample flat groups again (counted as sampling / scoring time)
            for attempt in range(1, cfg.max_resample + 1):
                todo = [i for i, s in enumerate(scores) if self.advantage.flat(s.rewards, s.valid)]
                if not todo:
                    break
                t = time.perf_counter()
                again = sample_groups(self.agent, [groups[i].pivot for i in todo], cfg.group_size,
                                      sampling_seed(cfg.seed, step, rank, attempt), self.policy_update.autocast())
                t_sample += time.perf_counter() - t
                t = time.perf_counter()
                again_scores = self._score(again)
                t_score += time.perf_counter() - t
                st.resampled_groups += len(todo)
                for i, g, s in zip(todo, again, again_scores):
                    groups[i], scores[i] = g, s
                    st.masked += float(s.masked)
                    st.completion_tokens += float(sum(len(c.token_ids or []) for c in g.completions))
                    pvpo_seen.append((g.pivot.id, s.scored_rewards))
        if cfg.pvpo_inject_expert:
            t = time.perf_counter()
            st.injected += float(self._inject_expert(groups, scores))
            t_score += time.perf_counter() - t

        # ALGO LOGIC: the advantages (the run's AdvantagePolicy, trainers/advantage.py), then the loss over their rows
        # (PolicyUpdate.update: clipped surrogate - beta * k3 KL, trainers/loss.py)
        rows: list[Row] = []
        for g, s in zip(groups, scores):
            if not s.scored_rewards:
                continue
            if not self.advantage.trains(s.rewards, s.valid):
                st.skipped_groups += 1
                continue
            baseline = self.values[g.pivot.id] if self.advantage.uses_baseline else None
            adv = self.advantage.advantages(s.rewards, s.valid, baseline)
            st.used_groups += 1
            for j, c in enumerate(g.completions):
                if s.valid[j] and c.token_ids:
                    rows.append(Row(g.prompt_ids, list(c.token_ids), adv[j], c.logprobs))
        st.used_rows += len(rows)

        t2 = time.perf_counter()
        lr = self.policy_update.lr  # the rate this step's (first) update uses
        update = self.policy_update.update(rows, engine=self.rollout.name)
        t_update = time.perf_counter() - t2
        st.add_update(update)

        # PLUMBING: PVPO's V(s) refresh, samples, the metrics row
        refreshed = self._pvpo_after_step(step, pvpo_seen) if self.advantage.uses_baseline else 0
        if cfg.log_samples:
            self._log_samples(step, groups, scores)
        total = st.reduced(self.dist)
        turns = int(total.samples + total.resampled_groups * cfg.group_size)
        self.rollout_turns_total += turns
        step_s = time.perf_counter() - t0
        row = metrics_row(step, total, update, lr)
        row.update(
            rollout_turns=turns,
            cumulative_rollout_turns=self.rollout_turns_total,
            pvpo_refreshed=refreshed if self.advantage.uses_baseline else None,
            active_pivots=len(self.pivot_sampler.active),
            epoch=self.pivot_sampler.epoch,
            sample_s=t_sample, score_s=t_score, update_s=t_update, step_s=step_s,
            tokens_per_s=total.completion_tokens / step_s if step_s > 0 else None,
            train_tokens=int(total.train_tokens),
            train_tokens_per_s=total.train_tokens / t_update if t_update > 0 else None,
            sample_tokens_per_s=total.completion_tokens / t_sample if t_sample > 0 else None,
            **engine_fields(self.rollout, total, version, sync_s, t_sample, step_s),
        )
        return row

    # ------------------------------------------------------------------ pieces of a step
    def _score(self, groups: list[Group]) -> list[GroupScores]:
        return score_groups(self.verifier, groups, parse=self.domain.parse_action, strict_verifier=self.strict_verifier)

    def _first_round_stats(self, groups: list[Group], scores: list[GroupScores], st: StepStats) -> None:
        """Reward statistics of the first sampling round: the policy's accuracy, unbiased by resampling (and the
        hack monitor's counts over its accepted samples)."""
        for g, s in zip(groups, scores):
            st.hack = st.hack + s.hacks(g.pivot)
            st.groups += 1
            st.samples += len(g.completions)
            st.masked += float(s.masked)
            tokens = sum(len(c.token_ids or []) for c in g.completions)
            st.completion_tokens += float(tokens)
            st.completion_len_sum += float(tokens)
            scored = s.scored_rewards
            if not scored:
                st.unscored_groups += 1
                continue
            st.scored_groups += 1
            st.zero_var_groups += float(1 if zero_variance(s.rewards, s.valid) else 0)
            st.reward_sum += float(sum(scored))
            st.reward_sq_sum += float(sum(r * r for r in scored))
            st.reward_n += len(scored)
            for ok, passed, strict in zip(s.valid, s.passed, s.strict):
                if ok and strict is not None:
                    st.strict_sum += float(strict)
                    st.strict_n += 1
                    if passed:
                        st.miss_den += 1
                        st.miss_num += float(1 if strict == 0 else 0)

    def _inject_expert(self, groups: list[Group], scores: list[GroupScores]) -> int:
        """Replace the last sample of every all-zero group by the expert action; returns how many groups."""
        targets = [i for i, s in enumerate(scores) if s.scored_rewards and max(s.scored_rewards) == 0.0]
        if not targets:
            return 0
        experts = [expert_completion(self.tokenizer, groups[i].pivot, self.eos_id) for i in targets]
        expert_scores = self._score([Group(groups[i].pivot, groups[i].prompt_ids, [e]) for i, e in zip(targets, experts)])
        for i, e, es in zip(targets, experts, expert_scores):
            g, s = groups[i], scores[i]
            g.completions[-1], g.injected[-1] = e, True
            s.rewards[-1], s.valid[-1], s.passed[-1] = es.rewards[0], es.valid[0], es.passed[0]
            s.errors[-1], s.strict[-1] = es.errors[0], es.strict[0]
            s.actions[-1], s.results[-1] = es.actions[0], es.results[0]
            if s.strict_passed is not None and es.strict_passed is not None:
                s.strict_passed[-1] = es.strict_passed[0]
        return len(targets)

    # ------------------------------------------------------------------ PVPO baseline V(s)
    def _pvpo_start(self) -> None:
        """Profile unprofiled pivots with the policy (when configured) and drop solved ones."""
        if self._pvpo_missing:
            self._pvpo_profile(list(self._pvpo_missing), step=0)
        self._pvpo_drop_solved()

    def _pvpo_after_step(self, step: int, seen: list[tuple[str, list[float]]]) -> int:
        cfg = self.config
        if not cfg.pvpo_refresh_every:
            return 0  # static V(s): the profile's
        if cfg.pvpo_refresh_source == "running":
            for per_rank in gather_objects(seen, self.dist):
                for pivot_id, rewards in per_rank:
                    if rewards:
                        self.values.observe(pivot_id, rewards)
        if step % cfg.pvpo_refresh_every:
            return 0
        if cfg.pvpo_refresh_source == "running":
            updated = self.values.refresh()
        else:
            updated = self._pvpo_profile(self.pivot_sampler.active, step=step)
        self._pvpo_drop_solved()
        return updated

    def _pvpo_profile(self, ids: list[str], step: int) -> int:
        """``group_size`` fresh samples of the current policy at every pivot of ``ids`` (sharded over ranks)."""
        cfg, rank, world = self.config, self.dist.rank, self.dist.world_size
        mine = [self.pivots[i] for i in ids[rank::world]]
        seed = sampling_seed(cfg.seed, "pvpo", step, rank)
        groups = sample_groups(self.agent, mine, cfg.group_size, seed, self.policy_update.autocast())
        scores = self._score(groups)
        found = [(g.pivot.id, s.scored_rewards) for g, s in zip(groups, scores)]
        self.values.window = {}
        for per_rank in gather_objects(found, self.dist):
            for pivot_id, rewards in per_rank:
                if rewards:
                    self.values.observe(pivot_id, rewards)
        return self.values.refresh()

    def _pvpo_drop_solved(self) -> None:
        if self.config.pvpo_drop_solved:
            dropped = self.pivot_sampler.deactivate(self.values.solved())
            if dropped and self.dist.is_main:
                log.info("pvpo: %d solved pivot(s) leave the pool (%d active)", len(dropped), len(self.pivot_sampler.active))
        missing = [p for p in self.pivot_sampler.active if p not in self.values.values]
        if missing:
            raise ConfigError(f"pvpo: no V(s) for pivot {missing[0]!r} (profile failed: every sample errored)")

    # ------------------------------------------------------------------ outputs
    def _log_samples(self, step: int, groups: list[Group], scores: list[GroupScores]) -> None:
        mine = [{"step": step, "rank": self.dist.rank, "pivot_id": g.pivot.id, "sample": j, "text": c.text,
                 "reward": s.rewards[j] if s.valid[j] else None, "error": s.errors[j], "injected": g.injected[j]}
                for g, s in zip(groups, scores) for j, c in enumerate(g.completions)]
        everything = gather_objects(mine, self.dist)
        if self.dist.is_main:
            with self.samples_path.open("a", encoding="utf-8") as f:
                for per_rank in everything:
                    for item in per_rank:
                        f.write(json.dumps(item, ensure_ascii=False) + "\n")
