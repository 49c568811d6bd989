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
    A_i      <- group advantages: grpo (r - mean) / (std + eps) | dr_grpo r - mean | pvpo r - V(s)
    log pi_old <- no-grad forward of the policy before the update (or the sampler's scores, see config)
    log pi_0   <- frozen reference (only when beta > 0; with LoRA: adapters disabled)
    num_iterations x: clipped surrogate - beta * k3 KL over grad_accum_steps micro-batches,
                      backward, clip the gradient norm, AdamW, scheduler
    metrics.jsonl row; checkpoint every save_every steps

The math lives in :mod:`.advantage` and :mod:`.loss`; sampling, scoring,
log-probs, checkpoints, metrics, schedule and DDP each have their own module.

Hardware: CPU runs in float32 (tested). CUDA paths — bfloat16 autocast, gradient
checkpointing, LoRA on a bfloat16 base, NCCL — follow the torch / transformers /
peft documentation but were NOT run here (the project's machine has no GPU).
"""

from __future__ import annotations

import contextlib
import logging
import math
import random
import re
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from pivot_envs.sources import resolve_pivots
from pivot_envs.domains import get_domain
from pivot_envs.trainers import checkpoint as ckpt
from pivot_envs.trainers.advantage import group_advantages
from pivot_envs.trainers.config import ConfigError, PivotRLConfig
from pivot_envs.trainers.distributed import (
    DistInfo,
    barrier,
    gather_objects,
    init_distributed,
    no_sync,
    reduce_sums,
    select_device,
    shutdown,
    torch_threads,
    unwrap,
    wrap_ddp,
)
from pivot_envs.trainers.logprobs import TokenBatch, completion_logprobs, pack
from pivot_envs.trainers.loss import pivotrl_loss
from pivot_envs.trainers.metrics import MetricsLogger, format_row, plot_metrics, truncate_metrics
from pivot_envs.trainers.rollout_correction import engine_logprobs, importance_weights, mismatch_sums
from pivot_envs.trainers.rollout_engine import build_rollout_engine
from pivot_envs.trainers.sampling import Group, PivotSampler, build_sampler, expert_completion, sample_groups, sampling_seed
from pivot_envs.trainers.schedule import build_scheduler
from pivot_envs.trainers.scoring import GroupScores, ValueTable, score_groups
from pivot_envs.types import Pivot
from pivot_envs.verifiers import build_verifier

__all__ = ["PivotRLConfig", "PivotRLTrainer", "TrainResult", "train_pivotrl"]

log = logging.getLogger("pivot_envs.trainers")

SUM_KEYS = (
    "groups", "samples", "masked", "completion_tokens", "completion_len_sum", "unscored_groups", "scored_groups",
    "zero_var_groups", "reward_sum", "reward_sq_sum", "reward_n", "strict_sum", "strict_n", "miss_num", "miss_den",
    "resampled_groups", "injected", "skipped_groups", "used_groups", "used_rows", "loss_sum", "kl_sum", "clip_sum",
    "ratio_sum", "loss_tokens", "entropy_sum", "entropy_tokens", "mismatch_sum", "mismatch_tokens", "is_sum",
    "is_tokens", "train_tokens",
)
"""Per-step counters summed over processes (every rank reduces the same keys, in the same order)."""

RESUMABLE_CHANGES = {"save_every", "save_total_limit", "log_every", "log_samples", "report_to", "plots",
                     "resume_from", "overwrite_output_dir", "wandb_project", "num_threads", "output_dir"}
"""Config fields that may differ between a checkpoint and the run resuming it without a warning."""


@dataclass
class TrainResult:
    """What :func:`train_pivotrl` produced.

    Attributes:
        output_dir: the run folder.
        final_model_dir: the trained model (``save_pretrained`` + tokenizer; LoRA runs are merged).
        metrics_path: ``metrics.jsonl`` (one row per step).
        plot_path: ``metrics.png``, when plotted.
        samples_path: ``samples.jsonl`` when ``log_samples`` is on.
        steps: steps completed in total (a resumed run counts the earlier ones).
        last_metrics: the last step's row.
        seconds: wall time of this call's training loop.
        checkpoints: checkpoint folders that exist at the end.
    """

    output_dir: Path
    final_model_dir: Path
    metrics_path: Path
    plot_path: Path | None
    samples_path: Path | None
    steps: int
    last_metrics: dict[str, Any]
    seconds: float
    checkpoints: list[Path] = field(default_factory=list)


@dataclass
class _Row:
    """One sample that enters the loss."""

    prompt: list[int]
    completion: list[int]
    advantage: float
    sampler_logprobs: list[float] | None


def train_pivotrl(
    config: PivotRLConfig | dict[str, Any], on_step: Callable[[dict[str, Any]], None] | None = None,
    *, vllm_llm: Any = None,
) -> TrainResult:
    """Train with PivotRL; ``on_step(row)`` is called on rank 0 after every step (for progress bars).

    ``vllm_llm``: with ``rollout_engine="vllm"``, an engine built elsewhere for a model of the same
    architecture (the run loads its policy's weights into it first); ``None``: the run builds its own.
    """
    return PivotRLTrainer(config, on_step=on_step, vllm_llm=vllm_llm).train()


class PivotRLTrainer:
    """Holds the policy, the reference, the optimiser and the data position of one run.

    ``PivotRLTrainer(config).train()`` is :func:`train_pivotrl`; the object stays usable after
    training (``trainer.policy``, ``trainer.tokenizer``) — e.g. to compare weights across ranks.
    """

    def __init__(self, config: PivotRLConfig | dict[str, Any], on_step: Callable[[dict[str, Any]], None] | None = None,
                 *, vllm_llm: Any = None):
        cfg = self.config = config if isinstance(config, PivotRLConfig) else PivotRLConfig.from_dict(config)
        if not cfg.model:
            raise ConfigError("PivotRLConfig.model is empty: set model to a model folder (save_pretrained) or hub id")
        self.on_step = on_step
        wants_cuda = cfg.device.startswith("cuda") or (cfg.device == "auto" and torch.cuda.is_available())
        self.dist: DistInfo = init_distributed("cuda" if wants_cuda else "cpu")
        self.device = select_device(cfg.device, self.dist)
        self.output_dir = Path(cfg.output_dir)
        self.metrics_path = self.output_dir / "metrics.jsonl"
        self.samples_path = self.output_dir / "samples.jsonl"
        random.seed(cfg.seed)
        np.random.seed(cfg.seed)
        torch.manual_seed(cfg.seed)
        self.resume_dir = ckpt.resolve_checkpoint(cfg.resume_from, self.output_dir) if cfg.resume_from else None
        self._check_output_dir()
        with torch_threads(cfg.num_threads):
            self._load_data()
            self._load_models()
        params = [p for p in self.policy.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.adam_eps,
                                           weight_decay=cfg.weight_decay)
        self.scheduler = build_scheduler(self.optimizer, warmup_steps=cfg.warmup_steps,
                                         total_steps=cfg.steps * cfg.num_iterations, schedule=cfg.lr_schedule,
                                         min_lr_ratio=cfg.min_lr_ratio)
        self.step = 0
        self.rollout_turns_total = 0  # model calls (sampled actions) so far: the axis arms compare on
        self.updates = 0  # optimizer updates so far: the policy version the rollout engine must hold
        if self.resume_dir is not None:
            self._restore(self.resume_dir)
        if cfg.rollout_engine == "vllm" and self.dist.world_size > 1:
            raise ConfigError("rollout_engine='vllm' runs in one process: torchrun with several processes would start "
                              "one engine per process (not supported yet); use rollout_engine='hf' under torchrun")
        self.policy = wrap_ddp(self.policy, self.dist, self.device)
        self.rollout = build_rollout_engine(cfg, unwrap(self.policy), self.tokenizer,
                                            build_sampler(unwrap(self.policy), self.tokenizer, cfg), shared_llm=vllm_llm)
        self.agent = self.rollout.agent

    # ------------------------------------------------------------------ setup
    def _check_output_dir(self) -> None:
        if self.resume_dir is None and self.metrics_path.exists() and not self.config.overwrite_output_dir:
            raise ConfigError(f"{self.output_dir} already holds a run ({self.metrics_path.name}); set resume_from='latest' "
                              "to continue it, overwrite_output_dir=true to start afresh, or pick another output_dir")
        barrier(self.dist)  # every rank checked before rank 0 writes anything

    def _load_data(self) -> None:
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
        self.pivot_sampler = PivotSampler(list(self.pivots), cfg.seed)
        self.values = ValueTable()
        if cfg.advantage == "pvpo":
            missing = [p.id for p in self.pivots.values() if p.profile is None or not p.profile.rewards]
            if missing and not (cfg.pvpo_refresh_source == "profile" and cfg.pvpo_refresh_every > 0):
                raise ConfigError(f"advantage='pvpo' needs V(s) = pivot.profile.mean, but {len(missing)} pivot(s) of "
                                  f"{cfg.pivots or 'the bundled data'} are unprofiled (first: {missing[0]!r}); run "
                                  "`pivot-envs profile` on the pivot file, or set pvpo_refresh_source='profile' with "
                                  "pvpo_refresh_every > 0 to profile them with the policy at the start")
            self.values = ValueTable({p.id: p.profile.mean for p in self.pivots.values()
                                      if p.profile is not None and p.profile.rewards})
            self._pvpo_missing = missing

    def _load_models(self) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        cfg = self.config
        on_cuda = self.device.type == "cuda"
        self.autocast_dtype = torch.bfloat16 if (on_cuda and cfg.bf16) else None
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(cfg.model)
        except OSError as exc:
            raise OSError(f"PivotRLConfig.model={cfg.model!r}: cannot load a tokenizer ({exc})") from exc
        pad = self.tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else self.tokenizer.eos_token_id)
        self.eos_id = int(self.tokenizer.eos_token_id)
        resume_model = self.resume_dir / "model" if self.resume_dir is not None else None
        if cfg.lora_r:
            try:
                from peft import LoraConfig, PeftModel, get_peft_model
            except ImportError as exc:
                raise ImportError("lora_r > 0 needs peft: pip install 'pivot-envs[train]' (or pip install peft)") from exc
            base_dtype = _dtype(cfg.model_dtype, default=torch.bfloat16 if on_cuda else torch.float32)
            base = AutoModelForCausalLM.from_pretrained(cfg.model, dtype=base_dtype).to(self.device)
            if resume_model is not None:
                policy = PeftModel.from_pretrained(base, str(resume_model), is_trainable=True)
            else:
                target = cfg.lora_target_modules
                lora = LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                                  target_modules=target if isinstance(target, str) else list(target), task_type="CAUSAL_LM")
                policy = get_peft_model(base, lora)
        else:
            source = str(resume_model) if resume_model is not None else cfg.model
            policy = AutoModelForCausalLM.from_pretrained(source, dtype=_dtype(cfg.model_dtype, default=torch.float32))
            policy = policy.to(self.device)
        if cfg.gradient_checkpointing:  # non-reentrant: works with LoRA and DDP's no_sync
            if hasattr(policy, "activation_checkpointing_enable"):  # transformers >= 5
                policy.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
            else:
                policy.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        policy.train()
        self.policy = policy
        self.reference = None
        if cfg.beta > 0 and not cfg.lora_r:  # a frozen copy of the INITIAL weights (also when resuming)
            ref_dtype = _dtype(cfg.model_dtype, default=torch.bfloat16 if self.autocast_dtype else torch.float32)
            self.reference = AutoModelForCausalLM.from_pretrained(cfg.model, dtype=ref_dtype).to(self.device).eval()
            self.reference.requires_grad_(False)

    def _restore(self, path: Path) -> None:
        state = ckpt.load_trainer_state(path)
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.pivot_sampler.load_state_dict(state["pivot_sampler"])
        self.values.load_state_dict(state["values"])
        self.step = int(state["step"])
        self.rollout_turns_total = int(state.get("rollout_turns_total", 0))
        self.updates = int(state.get("optimizer_updates", self.step * self.config.num_iterations))
        changed = sorted(k for k, v in state["config"].items()
                         if k not in RESUMABLE_CHANGES and self.config.to_dict().get(k) != v)
        if changed:
            log.warning("resuming %s with changed settings %s: the run will not equal an uninterrupted one", path, changed)
        rng = ckpt.load_rng_state(path, self.dist.rank)
        if rng is not None:
            ckpt.set_rng_state(rng)

    # ------------------------------------------------------------------ the loop
    def train(self) -> TrainResult:
        cfg, start = self.config, time.perf_counter()
        fresh = self.resume_dir is None
        if self.dist.is_main and not fresh:
            truncate_metrics(self.metrics_path, self.step)
            if self.samples_path.exists():
                truncate_metrics(self.samples_path, self.step)
        if self.dist.is_main and fresh and self.samples_path.exists():
            self.samples_path.unlink()
        logger = MetricsLogger(self.metrics_path, report_to=cfg.report_to, run_dir=self.output_dir, config=cfg.to_dict(),
                               enabled=self.dist.is_main, fresh=fresh, wandb_project=cfg.wandb_project)
        row: dict[str, Any] = {}
        try:
            with torch_threads(cfg.num_threads):
                if fresh and cfg.advantage == "pvpo":
                    self._pvpo_start()
                while self.step < cfg.steps:
                    row = self._train_step(self.step + 1)
                    self.step += 1
                    logger.log(row)
                    if cfg.save_every and (self.step % cfg.save_every == 0 or self.step == cfg.steps):
                        self.save_checkpoint(row)
                    if self.dist.is_main:
                        if self.step % cfg.log_every == 0 or self.step == cfg.steps:
                            log.info(format_row(row))
                        if self.on_step is not None:
                            self.on_step(row)
                final_dir = self._save_final()
        finally:
            logger.close()
            self.rollout.close()
        plot = None
        if cfg.plots and self.dist.is_main:
            plot = plot_metrics(self.metrics_path, self.output_dir / "metrics.png")
        barrier(self.dist)
        shutdown(self.dist)
        return TrainResult(
            output_dir=self.output_dir,
            final_model_dir=final_dir,
            metrics_path=self.metrics_path,
            plot_path=plot,
            samples_path=self.samples_path if cfg.log_samples else None,
            steps=self.step,
            last_metrics=row,
            seconds=time.perf_counter() - start,
            checkpoints=ckpt.list_checkpoints(self.output_dir),
        )

    def _train_step(self, step: int) -> dict[str, Any]:
        """Sample, score, build advantages, update; returns the step's metrics row (same on every rank)."""
        cfg, rank, world = self.config, self.dist.rank, self.dist.world_size
        t0 = time.perf_counter()
        per_rank = cfg.pivots_per_step
        share = self.pivot_sampler.draw(per_rank * world)  # the same draw on every rank, each takes its own slice
        pivots = [self.pivots[i] for i in share[rank * per_rank : (rank + 1) * per_rank]]
        sums: dict[str, float] = dict.fromkeys(SUM_KEYS, 0.0)

        def add(key: str, value: float) -> None:
            sums[key] += float(value)

        sync_s = self.rollout.sync(unwrap(self.policy), self.updates)
        version = self.rollout.policy_version
        groups = sample_groups(self.agent, pivots, cfg.group_size, sampling_seed(cfg.seed, step, rank, 0), self._autocast())
        t_sample = time.perf_counter() - t0
        t1 = time.perf_counter()
        scores = self._score(groups)
        t_score = time.perf_counter() - t1
        self._first_round_stats(groups, scores, add)
        pvpo_seen = [(g.pivot.id, s.scored_rewards) for g, s in zip(groups, scores)]

        if cfg.zero_variance == "resample":  # sample flat groups again (counted as sampling / scoring time)
            for attempt in range(1, cfg.max_resample + 1):
                todo = [i for i, s in enumerate(scores) if _flat(s)]
                if not todo:
                    break
                t = time.perf_counter()
                again = sample_groups(self.agent, [groups[i].pivot for i in todo], cfg.group_size,
                                      sampling_seed(cfg.seed, step, rank, attempt), self._autocast())
                t_sample += time.perf_counter() - t
                t = time.perf_counter()
                again_scores = self._score(again)
                t_score += time.perf_counter() - t
                add("resampled_groups", len(todo))
                for i, g, s in zip(todo, again, again_scores):
                    groups[i], scores[i] = g, s
                    add("masked", s.masked)
                    add("completion_tokens", sum(len(c.token_ids or []) for c in g.completions))
                    pvpo_seen.append((g.pivot.id, s.scored_rewards))
        if cfg.pvpo_inject_expert:
            t = time.perf_counter()
            add("injected", self._inject_expert(groups, scores))
            t_score += time.perf_counter() - t

        rows: list[_Row] = []
        for g, s in zip(groups, scores):
            if not s.scored_rewards:
                continue
            if _flat(s) and cfg.zero_variance != "keep":
                add("skipped_groups", 1)
                continue
            baseline = self.values[g.pivot.id] if cfg.advantage == "pvpo" else None
            adv = group_advantages(s.rewards, s.valid, mode=cfg.advantage, baseline=baseline, eps_std=cfg.eps_std)
            add("used_groups", 1)
            for j, c in enumerate(g.completions):
                if s.valid[j] and c.token_ids:
                    rows.append(_Row(g.prompt_ids, list(c.token_ids), float(adv[j]), c.logprobs))
        add("used_rows", len(rows))

        t2 = time.perf_counter()
        lr = self.optimizer.param_groups[0]["lr"]  # the rate this step's (first) update uses
        update = self._update(rows)
        t_update = time.perf_counter() - t2
        for key, value in update.pop("sums").items():
            add(key, value)

        refreshed = self._pvpo_after_step(step, pvpo_seen) if cfg.advantage == "pvpo" else 0
        if cfg.log_samples:
            self._log_samples(step, groups, scores)
        total = reduce_sums(sums, self.dist)
        turns = int(total.get("samples", 0) + total.get("resampled_groups", 0) * cfg.group_size)
        self.rollout_turns_total += turns
        step_s = time.perf_counter() - t0
        row = _metrics_row(step, total, update, lr)
        row.update(
            rollout_turns=turns,
            cumulative_rollout_turns=self.rollout_turns_total,
            pvpo_refreshed=refreshed if cfg.advantage == "pvpo" else None,
            active_pivots=len(self.pivot_sampler.active),
            epoch=self.pivot_sampler.epoch,
            sample_s=t_sample, score_s=t_score, update_s=t_update, step_s=step_s,
            tokens_per_s=total.get("completion_tokens", 0.0) / step_s if step_s > 0 else None,
            train_tokens=int(total.get("train_tokens", 0.0)),
            train_tokens_per_s=total.get("train_tokens", 0.0) / t_update if t_update > 0 else None,
            sample_tokens_per_s=total.get("completion_tokens", 0.0) / t_sample if t_sample > 0 else None,
            **self._engine_fields(total, version, sync_s, t_sample, step_s),
        )
        return row

    # ------------------------------------------------------------------ pieces of a step
    def _engine_fields(self, total: dict[str, float], version: int, sync_s: float, sample_s: float,
                       step_s: float) -> dict[str, Any]:
        """The rollout engine's columns of a metrics row (a contract: fields may be added, never renamed).

        ``sample_s`` (the row's own) includes the weight sync before sampling; ``sample_share`` is its share of the step.
        """
        tokens = total.get("mismatch_tokens", 0.0)
        return {
            "rollout_engine": self.rollout.name,
            "policy_version": version,
            "weight_sync_s": sync_s,
            "logprob_mismatch": total["mismatch_sum"] / tokens if tokens else None,
            "is_weight_mean": total["is_sum"] / total["is_tokens"] if total.get("is_tokens") else None,
            "sample_share": sample_s / step_s if step_s > 0 else None,
        }

    def _autocast(self) -> contextlib.AbstractContextManager:
        """bfloat16 autocast on CUDA (not run here: no GPU), nothing on CPU."""
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.autocast_dtype)

    def _score(self, groups: list[Group]) -> list[GroupScores]:
        return score_groups(self.verifier, groups, parse=self.domain.parse_action, strict_verifier=self.strict_verifier)

    def _first_round_stats(self, groups: list[Group], scores: list[GroupScores], add: Callable[[str, float], None]) -> None:
        """Reward statistics of the first sampling round: the policy's accuracy, unbiased by resampling."""
        for g, s in zip(groups, scores):
            add("groups", 1)
            add("samples", len(g.completions))
            add("masked", s.masked)
            tokens = sum(len(c.token_ids or []) for c in g.completions)
            add("completion_tokens", tokens)
            add("completion_len_sum", tokens)
            scored = s.scored_rewards
            if not scored:
                add("unscored_groups", 1)
                continue
            add("scored_groups", 1)
            add("zero_var_groups", 1 if _flat(s) else 0)
            add("reward_sum", sum(scored))
            add("reward_sq_sum", sum(r * r for r in scored))
            add("reward_n", len(scored))
            for ok, passed, strict in zip(s.valid, s.passed, s.strict):
                if ok and strict is not None:
                    add("strict_sum", strict)
                    add("strict_n", 1)
                    if passed:
                        add("miss_den", 1)
                        add("miss_num", 1 if strict == 0 else 0)

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
        return len(targets)

    def _update(self, rows: list[_Row]) -> dict[str, Any]:
        """``num_iterations`` optimiser updates over ``rows``; returns diagnostics and sums to reduce."""
        cfg, world = self.config, self.dist.world_size
        module = unwrap(self.policy)
        local_norm = len(rows) if cfg.loss_agg == "sample" else sum(len(r.completion) for r in rows)
        norm = reduce_sums({"n": local_norm}, self.dist)["n"]  # global normaliser of the batch loss
        sums: dict[str, float] = {}
        out: dict[str, Any] = {"sums": sums, "grad_norm": None, "updated": False, "beta_on": cfg.beta > 0}
        if norm == 0:  # no group carried a signal anywhere: no update, the schedule still advances
            with warnings.catch_warnings():  # torch warns when the scheduler steps before any optimizer.step()
                warnings.filterwarnings("ignore", message=re.escape("Detected call of `lr_scheduler.step()`"))
                for _ in range(cfg.num_iterations):
                    self.scheduler.step()
            return out
        chunks = [c.tolist() for c in np.array_split(np.arange(len(rows)), cfg.grad_accum_steps)]
        batches: list[TokenBatch | None] = [
            pack([rows[i].prompt for i in c], [rows[i].completion for i in c], self.pad_id, self.device) if c else None
            for c in chunks
        ]
        old: list[torch.Tensor | None] = [None] * len(batches)
        ref: list[torch.Tensor | None] = [None] * len(batches)
        recompute = cfg.old_logprobs == "recompute" or (cfg.old_logprobs == "auto" and cfg.num_iterations > 1)
        engine_lp = [engine_logprobs([rows[i].sampler_logprobs for i in c], b) if b is not None else None
                     for c, b in zip(chunks, batches)] if self.rollout.name == "vllm" else [None] * len(batches)
        correct = self.rollout.name == "vllm" and cfg.rollout_is_correction
        with torch.no_grad(), self._autocast():
            for k, (c, b) in enumerate(zip(chunks, batches)):
                if b is None:
                    continue
                if recompute:
                    old[k] = completion_logprobs(module, b)[0]
                elif cfg.old_logprobs == "sampler":
                    old[k] = _pad_logprobs([rows[i].sampler_logprobs for i in c], b)
                if cfg.beta > 0:
                    ref[k] = self._reference_logprobs(b)
        grad_norms = []
        params = [p for p in self.policy.parameters() if p.requires_grad]
        for iteration in range(cfg.num_iterations):
            self.optimizer.zero_grad(set_to_none=True)
            for k, (c, b) in enumerate(zip(chunks, batches)):
                last = k == len(batches) - 1
                if b is None:
                    if last and self.dist.enabled:  # join the gradient all-reduce with a zero contribution
                        with self._autocast():
                            dummy = self.policy(input_ids=torch.full((1, 1), self.pad_id, device=self.device),
                                                use_cache=False).logits.sum() * 0.0
                        dummy.backward()
                    continue
                with no_sync(self.policy, skip=not last):
                    with self._autocast():
                        logp, entropy = completion_logprobs(self.policy, b, with_entropy=iteration == 0)
                        advantages = torch.tensor([rows[i].advantage for i in c], device=self.device)
                        old_k = old[k] if old[k] is not None else logp.detach()
                        weight = None
                        if engine_lp[k] is not None:
                            if iteration == 0:  # the trainer's pi_old against the engine that sampled
                                diff, count = mismatch_sums(old_k, engine_lp[k])
                                sums["mismatch_sum"] = sums.get("mismatch_sum", 0.0) + diff
                                sums["mismatch_tokens"] = sums.get("mismatch_tokens", 0.0) + count
                            if correct:
                                weight = importance_weights(old_k, engine_lp[k], cfg.rollout_is_mode,
                                                            cfg.rollout_is_min, cfg.rollout_is_max)
                                if iteration == 0:
                                    full = weight.expand_as(b.completion_mask) * b.completion_mask
                                    sums["is_sum"] = sums.get("is_sum", 0.0) + float(full.sum())
                                    sums["is_tokens"] = sums.get("is_tokens", 0.0) + float(b.completion_mask.sum())
                        result = pivotrl_loss(logp, old_k, ref[k], advantages, b.completion_mask, eps_low=cfg.eps_low,
                                              eps_high=cfg.eps_high, beta=cfg.beta, agg=cfg.loss_agg, is_weight=weight)
                    micro_norm = len(c) if cfg.loss_agg == "sample" else float(b.completion_mask.sum())
                    (result.loss * (micro_norm / norm * world)).backward()  # DDP divides by world again
                tokens = float(b.completion_mask.sum())
                sums["train_tokens"] = sums.get("train_tokens", 0.0) + float(b.attention_mask.sum())
                sums["loss_sum"] = sums.get("loss_sum", 0.0) + float(result.loss.detach()) * micro_norm / norm
                for key, value in (("kl_sum", result.kl), ("clip_sum", result.clip_fraction),
                                   ("ratio_sum", result.ratio_mean)):
                    sums[key] = sums.get(key, 0.0) + value * tokens
                sums["loss_tokens"] = sums.get("loss_tokens", 0.0) + tokens
                if entropy is not None:
                    sums["entropy_sum"] = sums.get("entropy_sum", 0.0) + float((entropy * b.completion_mask).sum())
                    sums["entropy_tokens"] = sums.get("entropy_tokens", 0.0) + tokens
            max_norm = cfg.max_grad_norm if cfg.max_grad_norm > 0 else math.inf
            grad_norms.append(float(torch.nn.utils.clip_grad_norm_(params, max_norm)))
            self.optimizer.step()
            self.updates += 1
            self.scheduler.step()
        sums["loss_sum"] = sums.get("loss_sum", 0.0) / cfg.num_iterations
        out.update(grad_norm=sum(grad_norms) / len(grad_norms), updated=True)
        return out

    def _reference_logprobs(self, batch: TokenBatch) -> torch.Tensor:
        """log pi_0 of the completion tokens: the frozen copy, or (LoRA) the base with adapters disabled."""
        if self.reference is not None:
            return completion_logprobs(self.reference, batch)[0]
        module = unwrap(self.policy)
        with module.disable_adapter():
            return completion_logprobs(module, batch)[0]

    # ------------------------------------------------------------------ PVPO baseline V(s)
    def _pvpo_start(self) -> None:
        """Profile unprofiled pivots with the policy (when configured) and drop solved ones."""
        if getattr(self, "_pvpo_missing", None):
            self._pvpo_profile([pid for pid in self._pvpo_missing], step=0)
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
        groups = sample_groups(self.agent, mine, cfg.group_size, seed, self._autocast())
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
            import json

            with self.samples_path.open("a", encoding="utf-8") as f:
                for per_rank in everything:
                    for item in per_rank:
                        f.write(json.dumps(item, ensure_ascii=False) + "\n")

    def save_checkpoint(self, row: dict[str, Any] | None = None) -> Path:
        """Checkpoint the run after ``self.step`` steps (collective under DDP)."""
        state = {
            "format": 1,
            "step": self.step,
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "pivot_sampler": self.pivot_sampler.state_dict(),
            "values": self.values.state_dict(),
            "rollout_turns_total": self.rollout_turns_total,
            "optimizer_updates": self.updates,
            "config": self.config.to_dict(),
        }
        path = ckpt.save_checkpoint(ckpt.checkpoint_path(self.output_dir, self.step), model=unwrap(self.policy),
                                    tokenizer=self.tokenizer, state=state, info=self.dist,
                                    summary={"step": self.step, "config": self.config.to_dict(), "metrics": row or {}})
        if self.dist.is_main:
            ckpt.prune_checkpoints(self.output_dir, self.config.save_total_limit)
        barrier(self.dist)
        return path

    def _save_final(self) -> Path:
        """Rank 0 saves ``final/`` (a LoRA policy is merged into its base first)."""
        final = self.output_dir / "final"
        if self.dist.is_main:
            import json

            model = unwrap(self.policy)
            if self.config.lora_r:
                model = model.merge_and_unload()
            final.mkdir(parents=True, exist_ok=True)
            model.save_pretrained(final)
            self.tokenizer.save_pretrained(final)
            (final / "pivotrl_config.json").write_text(json.dumps(self.config.to_dict(), indent=1) + "\n", encoding="utf-8")
        barrier(self.dist)
        return final


# ---------------------------------------------------------------------- helpers


def _flat(scores: GroupScores) -> bool:
    """No learning signal under GRPO: every scored reward equal (or nothing scored)."""
    return len(set(scores.scored_rewards)) <= 1


def _dtype(name: str, default: torch.dtype) -> torch.dtype:
    return default if name == "auto" else getattr(torch, name)


def _pad_logprobs(values: list[list[float] | None], batch: TokenBatch) -> torch.Tensor:
    out = torch.zeros(batch.completion_ids.shape, dtype=torch.float32, device=batch.completion_ids.device)
    for i, lp in enumerate(values):
        if lp is None:
            raise RuntimeError("old_logprobs='sampler' but a completion came without sampler log-probs")
        out[i, : len(lp)] = torch.tensor(lp, dtype=torch.float32)
    return out


def _metrics_row(step: int, s: dict[str, float], update: dict[str, Any], lr: float) -> dict[str, Any]:
    """The JSONL row from the reduced sums (``None`` where a value is undefined at this step)."""

    def ratio(num: str, den: str) -> float | None:
        return s[num] / s[den] if s.get(den) else None

    mean = ratio("reward_sum", "reward_n")
    second = ratio("reward_sq_sum", "reward_n")
    std = math.sqrt(max(0.0, second - mean * mean)) if mean is not None and second is not None else None
    updated = bool(update.get("updated"))
    return {
        "step": step,
        "reward_mean": mean,
        "reward_std": std,
        "strict_reward_mean": ratio("strict_sum", "strict_n"),
        "miss_rate": ratio("miss_num", "miss_den"),
        "zero_var_frac": ratio("zero_var_groups", "scored_groups"),
        "masked": int(s.get("masked", 0)),
        "groups": int(s.get("groups", 0)),
        "unscored_groups": int(s.get("unscored_groups", 0)),
        "resampled_groups": int(s.get("resampled_groups", 0)),
        "injected": int(s.get("injected", 0)),
        "skipped_groups": int(s.get("skipped_groups", 0)),
        "used_groups": int(s.get("used_groups", 0)),
        "used_samples": int(s.get("used_rows", 0)),
        "completion_len_mean": ratio("completion_len_sum", "samples"),
        "loss": s.get("loss_sum") if updated else None,
        "kl": ratio("kl_sum", "loss_tokens") if (updated and update.get("beta_on", True)) else None,
        "clip_fraction": ratio("clip_sum", "loss_tokens") if updated else None,
        "ratio_mean": ratio("ratio_sum", "loss_tokens") if updated else None,
        "entropy": ratio("entropy_sum", "entropy_tokens") if updated else None,
        "grad_norm": update.get("grad_norm"),
        "lr": lr,
        "updated": updated,
    }
