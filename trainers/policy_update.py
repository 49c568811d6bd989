"""The policy and how it learns: what the PivotRL and the episode trainer share, held by both.

::

    policy = PolicyUpdate(config, dist, device, resume_dir)   # tokenizer, policy (LoRA or full), pi_0,
                                                             # AdamW and the LR schedule
    result = policy.update(rows, engine="hf")                 # num_iterations GRPO updates over the rows
    policy.save_checkpoint(output_dir, step, trainer_state, summary)
    policy.save_final(output_dir, config_dict)

A :class:`Row` is one sequence that enters the loss: its prompt tokens, its completion tokens, the
completion's advantage and (from a vLLM engine or ``old_logprobs="sampler"``) the sampler's log-probs.
The trainers decide which rows there are; this object only turns them into optimiser updates.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from pivot_envs.agents.prompt_format import write_prompt_format
from pivot_envs.config import ConfigError
from pivot_envs.trainers import checkpoint as ckpt
from pivot_envs.trainers.advantage import AdvantagePolicy
from pivot_envs.trainers.config import PivotRLConfig, PolicyConfig
from pivot_envs.trainers.distributed import DistInfo, barrier, check_world_size, no_sync, reduce_sums, unwrap, wrap_ddp
from pivot_envs.trainers.lm_loop import clip_grad_norm
from pivot_envs.trainers.logprobs import completion_logprobs, normalised_entropy
from pivot_envs.trainers.loss import pivotrl_loss
from pivot_envs.trainers.rollout_correction import engine_logprobs, importance_weights, mismatch_sums
from pivot_envs.trainers.schedule import build_scheduler
from pivot_envs.trainers.sharding import (
    full_state_dict,
    is_sharded,
    layout_fields,
    load_optimizer_state,
    optimizer_state,
    save_optimizer_shards,
    save_whole,
    shard,
)
from pivot_envs.trainers.step_stats import UpdateResult, UpdateSums
from pivot_envs.trainers.token_batch import TokenBatch, pack

__all__ = ["PolicyUpdate", "Row"]


@dataclass
class Row:
    """One sample that enters the loss."""

    prompt: list[int]
    completion: list[int]
    advantage: float
    sampler_logprobs: list[float] | None


class PolicyUpdate:
    """The policy (full or LoRA), its frozen reference, AdamW, the LR schedule and the update count.

    Args:
        config: the trainer's config (its :class:`PolicyConfig` fields are read).
        dist: the process group (:func:`~.distributed.init_distributed`).
        device: where the policy lives.
        resume_dir: a checkpoint to continue from (its model weights are loaded here; optimiser and
            schedule state by :meth:`load_state_dict`).
    """

    def __init__(self, config: PolicyConfig, dist: DistInfo, device: torch.device, resume_dir: Path | None = None):
        self.config = config
        self.dist = dist
        self.device = device
        self.resume_dir = resume_dir
        self._load_models(resume_dir)
        cfg = config
        if cfg.sharding == "fsdp" and dist.enabled:  # before the optimiser: FSDP replaces the parameters by shards
            self._shard()
        params = [p for p in self.policy.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.adam_eps,
                                           weight_decay=cfg.weight_decay)
        self.scheduler = build_scheduler(self.optimizer, warmup_steps=cfg.warmup_steps,
                                         total_steps=cfg.steps * cfg.num_iterations, schedule=cfg.lr_schedule,
                                         min_lr_ratio=cfg.min_lr_ratio)
        self.updates = 0  # optimizer updates so far: the policy version the rollout engine must hold

    # ------------------------------------------------------------------ setup
    def _load_models(self, resume_dir: Path | None) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer  # heavy: imported when a run starts

        cfg = self.config
        on_cuda = self.device.type == "cuda"
        self.autocast_dtype = torch.bfloat16 if (on_cuda and cfg.bf16) else None
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(cfg.model)
        except OSError as exc:
            raise OSError(f"{type(cfg).__name__}.model={cfg.model!r}: cannot load a tokenizer ({exc})") from exc
        pad = self.tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else self.tokenizer.eos_token_id)
        self.eos_id = int(self.tokenizer.eos_token_id)
        resume_model = resume_dir / "model" if resume_dir is not None else None
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

    def _shard(self) -> None:
        """FSDP2 over the processes: the policy and the reference, a decoder layer at a time (mixed precision:
        ``fsdp_param_dtype``); the policy's forwards then gather each layer's weights, in sampling too."""
        cfg = self.config
        policy = AdvantagePolicy.of(cfg)
        if policy.resamples or (isinstance(cfg, PivotRLConfig) and policy.uses_baseline
                                and cfg.pvpo_refresh_every and cfg.pvpo_refresh_source == "profile"):
            raise ConfigError("sharding='fsdp' needs every process to run the same forwards (each one gathers the "
                              "layers' shards from all), but zero_variance='resample' and PVPO's refresh by profiling "
                              "sample as many groups as each process happens to need; use zero_variance='skip' (or "
                              "'keep') and pvpo_refresh_source='running', or sharding='none' (DDP)")
        dtype = self.autocast_dtype if cfg.fsdp_param_dtype == "auto" else getattr(torch, cfg.fsdp_param_dtype)
        if dtype == next(self.policy.parameters()).dtype:
            dtype = None  # gathered as stored: no mixed precision
        elif dtype is not None:
            self.autocast_dtype = None  # FSDP's mixed precision runs the forwards in bfloat16 instead of autocast
        self.policy = shard(self.policy, self.dist, self.device, param_dtype=dtype)
        if self.reference is not None:
            self.reference = shard(self.reference, self.dist, self.device, param_dtype=dtype)

    def wrap_ddp(self) -> None:
        """Wrap the policy for DDP (a no-op in one process, and under FSDP: sharded at construction); call after
        restoring optimiser state."""
        if not is_sharded(self.policy):
            self.policy = wrap_ddp(self.policy, self.dist, self.device)

    def layout(self) -> dict[str, Any]:
        """``world_size``, ``sharding``, ``params_total`` and ``params_local`` (this rank's share) for metrics rows."""
        return layout_fields(self.policy, self.dist, self.config.sharding)

    @property
    def module(self) -> Any:
        """The policy without its DDP wrapper (what samplers and ``save_pretrained`` use)."""
        return unwrap(self.policy)

    @property
    def lr(self) -> float:
        """The learning rate the next update uses."""
        return self.optimizer.param_groups[0]["lr"]

    def autocast(self) -> contextlib.AbstractContextManager:
        """bfloat16 autocast on CUDA (not run here: no GPU), nothing on CPU."""
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.autocast_dtype)

    # ------------------------------------------------------------------ the update
    def update(self, rows: list[Row], engine: str = "hf") -> UpdateResult:
        """``num_iterations`` optimiser updates over ``rows`` (``engine``: who sampled them; rows of any engine but
        ``hf`` (``vllm``, ``harness``) carry that sampler's log-probs for the mismatch and its correction)."""
        cfg, world = self.config, self.dist.world_size
        module = self.module
        local_norm = len(rows) if cfg.loss_agg == "sample" else sum(len(r.completion) for r in rows)
        norm = reduce_sums({"n": local_norm}, self.dist)["n"]  # global normaliser of the batch loss
        sums = UpdateSums()
        out = UpdateResult(sums=sums, beta_on=cfg.beta > 0)
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
        external = engine != "hf"  # another sampler ("vllm", a "harness" endpoint): its rows carry its log-probs
        engine_lp = [engine_logprobs([rows[i].sampler_logprobs for i in c], b) if b is not None else None
                     for c, b in zip(chunks, batches)] if external else [None] * len(batches)
        correct = external and cfg.rollout_is_correction
        sharded = is_sharded(self.policy)  # every forward is a collective: a rank without rows joins with an empty one
        with torch.no_grad(), self.autocast():
            for k, (c, b) in enumerate(zip(chunks, batches)):
                if b is None:
                    if sharded and recompute:
                        self._join_forward(module)
                    if sharded and cfg.beta > 0:
                        self._join_forward(self.reference if self.reference is not None else None)
                    continue
                if recompute:
                    old[k] = self.logprobs(module, b)[0]
                elif cfg.old_logprobs == "sampler":
                    old[k] = _pad_logprobs([rows[i].sampler_logprobs for i in c], b)
                if cfg.beta > 0:
                    ref[k] = self.reference_logprobs(b)
        grad_norms = []
        # the optimiser's own parameters: under FSDP the model's root may still hold the unsharded ones of a forward
        params = [p for group in self.optimizer.param_groups for p in group["params"]]
        for iteration in range(cfg.num_iterations):
            self.optimizer.zero_grad(set_to_none=True)
            for k, (c, b) in enumerate(zip(chunks, batches)):
                last = k == len(batches) - 1
                if b is None:
                    if (last or sharded) and self.dist.enabled:  # join the gradient all-reduce with a zero contribution
                        with self.autocast():
                            dummy = self.policy(input_ids=torch.full((1, 1), self.pad_id, device=self.device),
                                                use_cache=False).logits.sum() * 0.0
                        dummy.backward()
                    continue
                with no_sync(self.policy, skip=not last):
                    with self.autocast():
                        logp, entropy = self.logprobs(self.policy, b, with_entropy=iteration == 0)
                        advantages = torch.tensor([rows[i].advantage for i in c], device=self.device)
                        old_k = old[k] if old[k] is not None else logp.detach()
                        weight = None
                        engine_k = engine_lp[k]
                        if engine_k is not None:
                            if iteration == 0:  # the trainer's pi_old against the engine that sampled
                                diff, count = mismatch_sums(old_k, engine_k)
                                sums.mismatch_sum += diff
                                sums.mismatch_tokens += count
                            if correct:
                                weight = importance_weights(old_k, engine_k, cfg.rollout_is_mode,
                                                            cfg.rollout_is_min, cfg.rollout_is_max)
                                if iteration == 0:
                                    full = weight.expand_as(b.completion_mask) * b.completion_mask
                                    sums.is_sum += float(full.sum())
                                    sums.is_tokens += float(b.completion_mask.sum())
                        result = pivotrl_loss(logp, old_k, ref[k], advantages, b.completion_mask, eps_low=cfg.eps_low,
                                              eps_high=cfg.eps_high, beta=cfg.beta, agg=cfg.loss_agg, is_weight=weight)
                    micro_norm = len(c) if cfg.loss_agg == "sample" else float(b.completion_mask.sum())
                    (result.loss * (micro_norm / norm * world)).backward()  # DDP divides by world again
                tokens = float(b.completion_mask.sum())
                sums.train_tokens += float(b.attention_mask.sum())
                sums.loss_sum += float(result.loss.detach()) * micro_norm / norm
                sums.kl_sum += result.kl * tokens
                sums.clip_sum += result.clip_fraction * tokens
                sums.ratio_sum += result.ratio_mean * tokens
                sums.loss_tokens += tokens
                if entropy is not None:
                    sums.entropy_sum += float((entropy * b.completion_mask).sum())
                    sums.entropy_tokens += tokens
            max_norm = cfg.max_grad_norm if cfg.max_grad_norm > 0 else math.inf
            grad_norms.append(clip_grad_norm(params, max_norm))
            self.optimizer.step()
            self.updates += 1
            self.scheduler.step()
        sums.loss_sum = sums.loss_sum / cfg.num_iterations
        out.grad_norm, out.updated = sum(grad_norms) / len(grad_norms), True
        return out

    def logprobs(self, model: Any, batch: TokenBatch, with_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """:func:`~.logprobs.completion_logprobs`, each distinct prompt forwarded once where the config allows."""
        cfg = self.config  # DDP: one forward per backward, as its reducer expects
        shared = cfg.shared_prompt and not cfg.gradient_checkpointing and not self.dist.enabled
        return completion_logprobs(model, batch, with_entropy=with_entropy, shared_prompt=shared)

    def _join_forward(self, model: Any) -> None:
        """A one-token forward that takes part in FSDP's gathers for a rank with nothing to compute (``None``: the
        LoRA policy with its adapters off, as :meth:`reference_logprobs`)."""
        ids = torch.full((1, 1), self.pad_id, device=self.device)
        if model is None:
            with self.module.disable_adapter():
                self.module(input_ids=ids, use_cache=False)
        else:
            model(input_ids=ids, use_cache=False)

    def reference_logprobs(self, batch: TokenBatch) -> torch.Tensor:
        """log pi_0 of the completion tokens: the frozen copy, or (LoRA) the base with adapters disabled."""
        if self.reference is not None:
            return self.logprobs(self.reference, batch)[0]
        with self.module.disable_adapter():
            return self.logprobs(self.module, batch)[0]

    def entropies(self, prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]]) -> list[float]:
        """Normalised entropy (:func:`~.logprobs.normalised_entropy`: mean over the given tokens of
        H / log V) of the policy at each row's completion tokens (0 for an empty completion)."""
        module = self.module
        out = [0.0] * len(prompts)
        idx = [i for i, c in enumerate(completions) if len(c) > 0]
        if not idx:
            return out
        batch = pack([prompts[i] for i in idx], [completions[i] for i in idx], self.pad_id, self.device)
        was_training = module.training
        module.eval()
        try:
            with torch.no_grad(), self.autocast():
                _, entropy = self.logprobs(module, batch, with_entropy=True)
        finally:
            module.train(was_training)
        assert entropy is not None
        vocab = int(module.config.vocab_size)
        mask = batch.completion_mask.bool()
        for row, i in enumerate(idx):
            out[i] = normalised_entropy(entropy[row][mask[row]].float().tolist(), vocab)
        return out

    # ------------------------------------------------------------------ state and files
    def state_dict(self) -> dict[str, Any]:
        """The optimiser's, the schedule's, the update count and the world size (a checkpoint's share of this object;
        under FSDP the optimiser's entry points to the shards every rank writes, :func:`~.sharding.optimizer_state`)."""
        return {"optimizer": optimizer_state(self.policy, self.optimizer, self.dist),
                "scheduler": self.scheduler.state_dict(), "optimizer_updates": self.updates,
                "world_size": self.dist.world_size}

    def load_state_dict(self, state: dict[str, Any], default_updates: int = 0) -> None:
        check_world_size(state.get("world_size"), self.dist, "the checkpoint")
        load_optimizer_state(self.policy, self.optimizer, state["optimizer"], self.resume_dir)
        self.scheduler.load_state_dict(state["scheduler"])
        self.updates = int(state.get("optimizer_updates", default_updates))

    def save_checkpoint(self, output_dir: Path, step: int, state: dict[str, Any], summary: dict[str, Any],
                        keep: int | None) -> Path:
        """``checkpoint-NNNNNN/`` with the model, the tokenizer, ``state`` plus :meth:`state_dict`, and the RNG
        states; keeps the newest ``keep`` checkpoints (collective under DDP)."""
        weights = full_state_dict(self.policy, self.dist) if is_sharded(self.policy) else None
        path = ckpt.save_checkpoint(ckpt.checkpoint_path(output_dir, step), model=self.module, tokenizer=self.tokenizer,
                                    state={**state, **self.state_dict()}, info=self.dist, summary=summary,
                                    prompt_format=self.prompt_format(), weights=weights,
                                    write_shards=lambda folder: save_optimizer_shards(self.policy, self.optimizer, folder))
        if self.dist.is_main:
            ckpt.prune_checkpoints(output_dir, keep)
        barrier(self.dist)
        return path

    def prompt_format(self) -> dict[str, Any]:
        """The prompt format the policy is trained in, recorded beside every model this saves."""
        return {"tools": self.config.prompt_tools, "max_prompt_tokens": self.config.max_prompt_tokens}

    def save_final(self, output_dir: Path, config: dict[str, Any]) -> Path:
        """Rank 0 saves ``final/``, the whole model (gathered from its shards under FSDP; a LoRA policy is merged into
        its base first) with ``pivotrl_config.json``."""
        final = output_dir / "final"
        if self.dist.is_main:
            final.mkdir(parents=True, exist_ok=True)
        save_whole(self.policy, final, self.dist, merge_lora=bool(self.config.lora_r))  # collective under FSDP
        if self.dist.is_main:
            self.tokenizer.save_pretrained(final)
            write_prompt_format(final, **self.prompt_format())
            (final / "pivotrl_config.json").write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")
        barrier(self.dist)
        return final


def _dtype(name: str, default: torch.dtype) -> torch.dtype:
    return default if name == "auto" else getattr(torch, name)


def _pad_logprobs(values: list[list[float] | None], batch: TokenBatch) -> torch.Tensor:
    out = torch.zeros(batch.completion_ids.shape, dtype=torch.float32, device=batch.completion_ids.device)
    for i, lp in enumerate(values):
        if lp is None:
            raise RuntimeError("old_logprobs='sampler' but a completion came without sampler log-probs")
        out[i, : len(lp)] = torch.tensor(lp, dtype=torch.float32)
    return out
