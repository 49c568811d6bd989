"""``pivot-envs demo``: a small-scale PivotRL reproduction on bundled data, CPU only.

::

    from pivot_envs.experiments.demo import quick_config, full_config, run_pipeline

    report = run_pipeline(quick_config(seed=0), "runs/demo")      # ~10 min on 2 cores
    report = run_pipeline(full_config(seed=0, seeds=3), "runs/full")  # the paper's table, ~90 min
    report = run_pipeline(real_config(model="smollm2"), "runs/real")  # SmolLM2-135M-Instruct, vLLM rollouts: hours
    report["arms"]["pivotrl"]["task_success"]

One pipeline for every model (``--model``): the tiny model trained from scratch, or a pretrained one
(``smollm2``, ``gguf:FILE``, ``hf:DIR``) given a warm-up (:mod:`pivot_envs.experiments.pretrained_base`); one
argument for who samples (``--engine hf | vllm``: :mod:`pivot_envs.experiments.engines`).

With ``workers > 1`` runs go to worker processes (``spawn``): a script calling
:func:`run_pipeline` needs the usual ``if __name__ == "__main__":`` guard.

Stages (each prints progress and keeps its output in ``DIR``; a stage whose
output is there with the same settings is skipped, so an interrupted demo
resumes where it stopped; a stage that scores, ``verifiers`` and ``profile``, made
under other verifier versions is refused, naming the verifiers whose code changed:
:mod:`pivot_envs.verifiers.versions`):

1. ``verifiers``: the verifier summary of :mod:`pivot_envs.experiments.verifier_demo` (extract ->
   env -> verify expert, alternative and wrong actions in every built-in domain).
2. ``data``: the domain's bundled pivots, split by trajectory: the *base* part (the
   base model learns from it), the *validation* part (hyper-parameters are chosen on
   it) and the *candidates* D_cand (what the arms train on); test pivots come from
   the bundled test split. ``DIR/data/*.jsonl``.
3. ``base``: the base model, partly competent in the domain: the tiny model
   (:mod:`pivot_envs.experiments.base_model`, which also knows the OOD probes), or a pretrained model with its
   warm-up merged (:mod:`pivot_envs.experiments.pretrained_base`). ``DIR/base_model``.
4. ``profile``: K samples of the base model at every candidate, scored by the domain
   verifier (:func:`pivot_envs.pipeline.profile.profile_pivots`, checkpointed).
5. ``filter``: D_adv = ``var > 0 and mean < lambda`` for each lambda tried; a random
   subset of D_cand of the same size (the ablations); the PVPO set.
6. ``select`` (when grids are given): learning rates of SFT and PivotRL and lambda, chosen with the base
   as a candidate by task success at T=1 on generated *validation tasks* played to the end (``val_tasks``;
   without them, by greedy per-turn accuracy on the validation pivots).
7. ``arms``: every arm trained from the same base model for the same number of
   optimiser steps and evaluated on the held-out tasks, the test pivots, the OOD probes and (with
   ``ood_domain``) the OOD domain's tasks (:mod:`pivot_envs.experiments.arms`); the main arms at several seeds.
8. ``report``: ``report.json``, ``report.md`` and plots (:mod:`pivot_envs.experiments.report`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from pivot_envs.envs_data import generator, load_pivots, load_trajectories
from pivot_envs.episodes import resolve_tasks
from pivot_envs.experiments.arm_table import ARM, ARM_NAMES, Arm
from pivot_envs.experiments.arms import (ArmSettings, RunSettings, RunSpec, execute_run, parts_seconds,
                                        quiet_transformers, read_run, run_dir, run_many)
from pivot_envs.experiments.base_model import BaseRecipe, build_base_model, read_base_report
from pivot_envs.experiments.engines import ENGINES, EngineSettings, eval_agents, resolve_engine
from pivot_envs.experiments.evaluation import Sampling
from pivot_envs.experiments.model_source import parse_model
from pivot_envs.experiments.pretrained_base import (BUILD_WARMUP_COMMAND, SHIPPED_WARMUP, WarmupPlan, build_warmup,
                                                    pretrained_base, warmup_requests)
from pivot_envs.experiments.warmup import WarmupRecipe
from pivot_envs.experiments.report import build_report, write_report
from pivot_envs.experiments.stage_clock import StageClock, sigterm_as_exit
from pivot_envs.experiments.task_keys import fresh_tasks, request_key
from pivot_envs.experiments.verifier_demo import DEMO_DOMAINS, run_domain
from pivot_envs.formats import read_pivots, read_trajectories
from pivot_envs.jsonl import write_jsonl
from pivot_envs.pipeline.extract import ExtractOptions, extract_pivots
from pivot_envs.pipeline.filter import FilterConfig, filter_pivots, is_scored
from pivot_envs.pipeline.profile import profile_pivots
from pivot_envs.pipeline.report import profile_report
from pivot_envs.types import Pivot, stable_hash
from pivot_envs.verifiers.defaults import default_verifier_spec
from pivot_envs.verifiers.versions import check_versions, merged_versions, verifier_fingerprint

Logger = Callable[[str], None]


@dataclass
class DemoConfig:
    """Settings of one demo run; :func:`quick_config`, :func:`full_config`, :func:`real_config` and the smoke
    configs are presets.

    Attributes:
        domain: built-in domain with bundled data whose pivots the demo trains on.
        kinds: pivot kinds kept (``pivot.meta["kind"]``, e.g. ``tool_call``); empty: all.
        seed: seeds the data split, the base model, the profile, the filters and the first arm seed.
        seeds: seeds of the main arms (``base``, ``sft``, ``pivotrl``): ``seed, seed + 1, ...``.
        arms: arms to run (names of :data:`pivot_envs.experiments.arm_table.ARMS`).
        base_fraction: share of the training trajectories the base model learns from.
        val_fraction: share of the other training trajectories set aside for validation.
        base_sees_candidates: the base model also learns from the candidates' trajectories (the
            "fewer steps on the same data" recipe); otherwise the arms train on trajectories it never saw.
        max_base: cap on the base model's domain pivots (a seeded sample; ``None``: all).
        max_candidates: cap on D_cand (a seeded sample; ``None``: all).
        max_val: cap on validation pivots.
        max_test: cap on test pivots (a seeded sample of the test split; ``None``: all).
        per_arm: how every arm is trained and evaluated (steps, batch, G, KL, warm-up, evaluation sizes...:
            :class:`~pivot_envs.experiments.arms.ArmSettings`, which every run holds as it is).
        base: the base model recipe.
        profile_k: K, samples per candidate when profiling with the base model.
        lambda_diff: lambda of D_adv (``mean < lambda``) when no grid is searched.
        lambda_grid: lambdas tried on the validation split (empty: use ``lambda_diff``).
        min_train_pivots: if D_adv has fewer pivots, it is topped up with random candidates (and the
            report says so): a base model without mixed groups would leave nothing to train on.
        sft_long_steps: steps of the ``sft_long`` arm (SFT trained longer on the same pivots, until it loses OOD
            ability: the paper's retention claim needs an SFT that dropped).
        sft_long_lr: its learning rate (``None``: the SFT arm's).
        dedup_actions: D_adv keeps one pivot per expert action (the paper's "commands de-duplicated"; the random
            ablation draws from the de-duplicated pool too).
        rl_lr: PivotRL learning rate when no grid is searched (also used by the ablation arms).
        rl_lr_grid: RL learning rates tried on the validation split.
        sft_lr: SFT learning rate when no grid is searched.
        sft_lr_grid: SFT learning rates tried on the validation split.
        verifier_pivots: pivots per domain in the verifier summary (``0``: no summary).
        extra_trajectories: more trajectories generated for the base model by the domain's generator
            (another seed than the bundled data's; never test tasks): more, and more varied, data so that the
            base generalises instead of memorising.
        max_test_tasks: cap on the held-out tasks played to the end (a seeded sample of the test split's
            trajectories; ``None``: all); ``0``: no task-success evaluation.
        curve_first_seed_only: only the first seed's runs get a curve (the others' curves cost as much again
            each); otherwise the report averages the seeds' curves.
        extra_test_tasks: more held-out tasks generated by the domain's generator (seed ``TEST_SEED + seed``,
            tasks whose request appears in any training trajectory dropped) beside the bundled test split's:
            enough tasks for a paired interval of about +-8 points.
        prebuilt_base: a base model folder made by ``pivot-envs demo --build-base`` (or the shipped one,
            :data:`SHIPPED_BASE`); used when it was built with this config's base recipe and data split
            (same key), otherwise the base is trained here and the report says so.
        workers: runs trained/evaluated at once in worker processes (one CPU thread each).
        threads: torch CPU threads of the in-process stages (base model, profiling) and, with one worker, of the
            runs; ``0``: 2 on an idle machine, 1 when another job is running (two threads that wait on each other
            degrade badly beside a busy neighbour), chosen when the demo first runs in its folder and kept there
            (``DIR/threads.json``: :func:`pin_threads`). The count changes the numbers: a run repeats bit for bit
            only at the same count, so set it to compare folders or machines (``full_config`` sets 1).
        model: ``tiny`` (trained from scratch by the base stage) or a pretrained model: ``smollm2``,
            ``gguf:FILE``, ``hf:DIR`` (:mod:`pivot_envs.experiments.model_source`).
        engine: who samples when the demo profiles, evaluates and trains PivotRL: ``hf``, ``vllm`` or ``auto``
            (``vllm`` where it is installed; resolved when the run starts).
        engine_dtype: the vLLM engine's weights (``bfloat16`` or ``float32``).
        kv_cache_gib: the vLLM engine's KV cache on a CPU.
        prompt_tools: where tool specs go in every prompt (``auto``: as the chat template says; ``none``: left
            out, a pretrained model learns the format in its warm-up: prompts half as long on terminal).
        prompt_window: the prompt window of a pretrained model (the tiny model's is its recipe's).
        warmup: a pretrained model's warm-up (:class:`~pivot_envs.experiments.warmup.WarmupRecipe`; ``None``: the
            model as it is).
        prebuilt_warmup: a warm-up adapter folder (:data:`~pivot_envs.experiments.pretrained_base.SHIPPED_WARMUP`),
            used when its key matches the run, else the warm-up is trained here.
        val_tasks: generated validation tasks (seed ``VAL_SEED + seed``; never a held-out task or one any model
            learned from); when > 0, the grids are chosen by validation **task success** at T=1 on them (the
            held-out metric), not by per-turn accuracy on the validation pivots.
        ood_domain: a built-in domain the arms never train on, whose task success is the OOD measure beside the
            probes (the pretrained model learns it in its warm-up).
        ood_tasks: held-out tasks of ``ood_domain``: its bundled test split's, then generated ones.
    """

    domain: str = "terminal"
    kinds: tuple[str, ...] = ()
    seed: int = 0
    seeds: int = 1
    arms: tuple[str, ...] = ("base", "pivotrl")
    base_fraction: float = 0.5
    val_fraction: float = 0.15
    base_sees_candidates: bool = False
    max_base: int | None = None
    max_candidates: int | None = None
    max_val: int = 80
    max_test: int | None = 150
    per_arm: ArmSettings = field(default_factory=ArmSettings)
    base: BaseRecipe = field(default_factory=lambda: BaseRecipe(vocab_size=4096, max_context_tokens=256, steps=400))
    profile_k: int = 8
    lambda_diff: float = 1.0
    lambda_grid: tuple[float, ...] = ()
    min_train_pivots: int = 8
    dedup_actions: bool = False
    sft_long_steps: int = 160  # 4 x the default steps
    sft_long_lr: float | None = None
    rl_lr: float = 1e-4
    rl_lr_grid: tuple[float, ...] = ()
    sft_lr: float = 3e-4
    sft_lr_grid: tuple[float, ...] = ()
    verifier_pivots: int = 60
    extra_trajectories: int = 0
    max_test_tasks: int | None = None
    curve_first_seed_only: bool = True
    extra_test_tasks: int = 0
    prebuilt_base: str | None = None
    workers: int = 2
    threads: int = 0
    model: str = "tiny"
    engine: str = "hf"
    engine_dtype: str = "bfloat16"
    kv_cache_gib: float = 2.0
    prompt_tools: str = "auto"
    prompt_window: int = 1024
    warmup: WarmupRecipe | None = None
    prebuilt_warmup: str | None = None
    val_tasks: int = 0
    ood_domain: str | None = None
    ood_tasks: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.base, dict):
            self.base = BaseRecipe(**self.base)
        if isinstance(self.per_arm, dict):
            self.per_arm = ArmSettings(**self.per_arm)
        if isinstance(self.warmup, dict):
            self.warmup = WarmupRecipe(**self.warmup)
        if self.engine not in ENGINES:
            raise ValueError(f"DemoConfig.engine {self.engine!r}: use one of {', '.join(ENGINES)}")
        if self.per_arm.probe_set not in ("builtin", "few_shot"):
            raise ValueError(f"DemoConfig.per_arm.probe_set {self.per_arm.probe_set!r}: use builtin or few_shot")
        if self.ood_domain is not None and self.ood_domain == self.domain:
            raise ValueError(f"DemoConfig.ood_domain {self.ood_domain!r} is the arms' own domain: choose another")
        if self.val_tasks < 0 or self.ood_tasks < 0 or self.per_arm.val_episode_k < 1 or self.per_arm.ood_episode_k < 1:
            raise ValueError("DemoConfig: val_tasks and ood_tasks must be >= 0, per_arm.val_episode_k and "
                             "per_arm.ood_episode_k >= 1")
        for name in ("kinds", "arms", "lambda_grid", "rl_lr_grid", "sft_lr_grid"):
            setattr(self, name, tuple(getattr(self, name)))
        unknown = [a for a in self.arms if a not in ARM]
        if unknown:
            raise ValueError(f"DemoConfig.arms: unknown arm {unknown[0]!r}; arms: {', '.join(ARM_NAMES)}")
        for need, why in (n for a in self.arms for n in ARM[a].needs):
            if need not in self.arms:
                raise ValueError(f"DemoConfig.arms: {why}; add {need}")
        if self.sft_long_steps < 1:
            raise ValueError(f"DemoConfig.sft_long_steps {self.sft_long_steps}: must be >= 1")
        if self.seeds < 1 or self.per_arm.steps < 1 or self.per_arm.group_size < 2 or self.profile_k < 2:
            raise ValueError("DemoConfig: seeds and per_arm.steps must be >= 1, per_arm.group_size and profile_k >= 2")
        if self.max_candidates is not None and self.max_candidates < 1:
            raise ValueError(f"DemoConfig.max_candidates {self.max_candidates}: profile at least one candidate")
        if self.per_arm.rl_lora_r < 0:
            raise ValueError(f"DemoConfig.per_arm.rl_lora_r {self.per_arm.rl_lora_r}: must be >= 0 (--rl-lora-r; 0: full "
                             "fine-tuning)")
        if not (self.rl_lr > 0 and self.sft_lr > 0 and all(lr > 0 for lr in self.rl_lr_grid + self.sft_lr_grid)):
            raise ValueError("DemoConfig: learning rates must be > 0 (--rl-lr, --sft-lr)")
        if not (0 < self.base_fraction < 1 and 0 <= self.val_fraction < 1):
            raise ValueError("DemoConfig: base_fraction must be in (0, 1) and val_fraction in [0, 1)")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


QUICK_BASE = BaseRecipe(vocab_size=4096, max_context_tokens=256, steps=3600, eval_every=100)
"""The quick demo's base model: a 256-token window, 3,600 steps of 16 pivots over the base part of the bundled
training split plus 2,000 generated trajectories, early-stopped on validation (49 min on 2 idle cores). With
1,200 steps its task success at T=1 was 0.149, below the 0.25-0.65 band where RL has room; with 3,600 it is
0.343. Too long for the demo's 10 minutes, so it ships prebuilt (:data:`SHIPPED_BASE`, made by
:data:`BUILD_BASE_COMMAND`); any other recipe or split is trained by the demo itself."""

def quick_config(seed: int = 0, domain: str | None = None) -> DemoConfig:
    """``pivot-envs demo``: Base, SFT and PivotRL on the same pivots, one seed, in about 10 minutes on 2 cores.

    Fixed hyper-parameters, set a priori (not tuned on the test split): 32 pivots x 4 samples per step, 8 steps
    after 2 warm-up steps, lr 3e-4 for both trained arms; the prebuilt :data:`QUICK_BASE` model (seed 0,
    terminal: shipped); task success on the bundled test split's tasks plus 150 generated held-out tasks (201),
    one episode per task at temperature 1 and one greedy; mean@2 at the test pivots. A first run with two
    episodes per task and mean@4 took 798 s of stages on 2 idle cores; this keeps the demo near 10 minutes."""
    return DemoConfig(seed=seed, arms=("base", "sft", "pivotrl"), base=dataclasses.replace(QUICK_BASE),
                      extra_trajectories=2000, max_candidates=128, rl_lr=3e-4, sft_lr=3e-4, max_test=100, max_val=64,
                      verifier_pivots=30, extra_test_tasks=150, prebuilt_base=SHIPPED_BASE,
                      per_arm=ArmSettings(steps=8, warmup_steps=2, pivots_per_step=32, group_size=4, episode_k=1,
                                          eval_k=2),
                      **({"domain": domain} if domain else {}))


def full_config(seed: int = 0, seeds: int = 3, domain: str | None = None) -> DemoConfig:
    """``pivot-envs demo --full``: every arm, ``seeds`` seeds of the main arms, the learning rates chosen on
    the validation split with the base as a candidate, and task success measured along training (the curve of
    task success against rollout turns). lambda is fixed at 1 (D_adv = the mixed groups: ``var > 0``), the
    paper's filter; a lambda grid (``lambda_grid``) costs one more RL run per value.

    The base is the quick demo's (:data:`QUICK_BASE`, prebuilt: :data:`SHIPPED_BASE`): a 512-token base trained
    1,200 steps (44 min) reached task success 0.183 at T=1, below the 0.25-0.65 band, and three times the steps
    would take over two hours before any arm ran. Held-out tasks: the bundled test split's plus 150 generated
    (201, an interval of about +-8 points), one episode per task at temperature 1 and one greedy; every test
    pivot, mean@2."""
    return DemoConfig(seed=seed, seeds=seeds, arms=ARM_NAMES, base=dataclasses.replace(QUICK_BASE),
                      extra_trajectories=2000, prebuilt_base=SHIPPED_BASE, max_candidates=384,
                      rl_lr_grid=(1e-4, 3e-4, 1e-3), sft_lr_grid=(3e-4, 1e-3), max_test=None, extra_test_tasks=150,
                      val_tasks=FULL_VAL_TASKS, sft_long_steps=48,
                      per_arm=ArmSettings(steps=12, warmup_steps=2, pivots_per_step=32, group_size=4, eval_k=2,
                                          episode_k=1, curve_every=6, curve_tasks=None),
                      **({"domain": domain} if domain else {}))


FULL_VAL_TASKS = 200
"""Validation tasks of ``--full``'s selection, one T=1 episode each. Two candidates' task success differs by a
paired difference whose per-task standard deviation is about 0.67 at one episode per task (outcomes in {-1, 0,
1}), so 200 tasks give a standard error of about 0.047: a 10-point difference between two learning rates (the
full run's PivotRL rates 1e-4 and 3e-4 were 11 points apart on the held-out tasks) is two standard errors, and
the better rate wins about 92 % of the time. It costs six validation plays of 200 episodes (about 1 minute each
for the tiny model on one thread)."""


SMOLLM2_WARMUP = WarmupRecipe(trajectories=1200, ood_trajectories=400, lora_r=8, lora_alpha=16, lr=5e-4,
                              warmup_steps=10, batch=8, max_steps=400, check_every=40, check_tasks=100,
                              max_tokens=1024, threads=1)
"""The warm-up of the real-model preset (:mod:`pivot_envs.experiments.warmup`): LoRA rank 8 on every linear layer
(a 4.9 MB float16 adapter), 8 trajectories a step from 1,200 generated terminal and 400 search trajectories, a band
check every 40 steps on 100 validation tasks. One torch thread: the same sums on any machine, and two threads beside
a busy neighbour ran 10-20x slower here (each waits for the other at every operation)."""


def with_budget(cfg: DemoConfig, *, steps: int | None = None, candidates: int | None = None,
                rl_lr: float | None = None, sft_lr: float | None = None, rl_lora_r: int | None = None) -> DemoConfig:
    """``cfg`` with another training budget (``None`` keeps the preset's): ``steps`` of every trained arm,
    ``candidates`` profiled (the pool D_adv comes from), fixed learning rates (a fixed rate replaces the
    arm's grid, so the selection does not train that arm at other rates) and the RL arms' LoRA rank."""
    changes: dict[str, Any] = {}
    per_arm = {k: v for k, v in (("rl_lora_r", rl_lora_r), ("steps", steps)) if v is not None}
    if per_arm:
        changes["per_arm"] = dataclasses.replace(cfg.per_arm, **per_arm)
    if candidates is not None:
        changes["max_candidates"] = candidates
    if rl_lr is not None:
        changes.update(rl_lr=rl_lr, rl_lr_grid=())
    if sft_lr is not None:
        changes.update(sft_lr=sft_lr, sft_lr_grid=())
    return dataclasses.replace(cfg, **changes) if changes else cfg


def real_config(seed: int = 0, model: str = "smollm2", engine: str = "auto", domain: str | None = None) -> DemoConfig:
    """``pivot-envs demo --model smollm2``: Base, SFT, PivotRL, SFT -> PivotRL and SFT trained longer on a pretrained
    model, rollouts on vLLM (issue 36: the experiment made able to show what PivotRL does).

    The base is the model with its warm-up merged (:data:`SMOLLM2_WARMUP`; shipped for SmolLM2-135M-Instruct:
    :data:`~pivot_envs.experiments.pretrained_base.SHIPPED_WARMUP`), inside the 0.25-0.65 band of T=1 task success
    on the validation tasks. Terminal (the arms' domain) because its verifier executes commands and its prompts are
    the shortest; search is the OOD domain (the warm-up teaches it too; the arms never see it), beside 240 few-shot
    probes.

    * **Fair arms**: every trained arm has the same 2-step warm-up and constant rate after it, and 16 steps.
    * **A signal in every step**: 384 candidates profiled K = 8 times; D_adv is the paper's low-mean set (mean < 0.75,
      variance > 0) with commands de-duplicated; each RL step takes 16 pivots x G = 8 samples (2,048 samples per RL
      arm), a flat group is sampled again up to twice. RL is LoRA r = 16 at 2e-4 (the rate that held up in issue
      27), SFT full fine-tuning at 1e-5 (issue 27's choice), both fixed a priori, not chosen on the test tasks.
    * **Measured where it acts**: held-out per-turn mean@4 at T=1 beside greedy, KL to the base and entropy on the
      arms' own samples at 48 test pivots.
    * **SFT -> PivotRL** (PivotRL from the SFT model) and **SFT trained longer** (64 steps at 3e-5: an SFT that may
      lose OOD ability, for the retention claim).

    201 held-out tasks played greedily and 4 times at T=1, 100 search tasks greedily and once at T=1, every test
    pivot greedily and 4 times at T=1. One worker (each part in a fresh process, its own engine), checkpoints every 4
    steps: an interrupted run resumes."""
    return DemoConfig(seed=seed, model=model, engine=engine, arms=("base", "sft", "pivotrl", "sft_pivotrl", "sft_long"),
                      warmup=dataclasses.replace(SMOLLM2_WARMUP),
                      prebuilt_warmup=SHIPPED_WARMUP if model == "smollm2" else None, prompt_tools="none",
                      prompt_window=1024, ood_domain="search", ood_tasks=100, val_tasks=100, max_candidates=384,
                      profile_k=8, lambda_diff=0.75, dedup_actions=True, rl_lr=2e-4, sft_lr=1e-5, sft_long_steps=64,
                      sft_long_lr=3e-5, max_test=None, max_val=64, extra_test_tasks=150, verifier_pivots=0, workers=1,
                      min_train_pivots=16,
                      per_arm=ArmSettings(steps=16, warmup_steps=2, pivots_per_step=16, group_size=8,
                                          zero_variance="resample", max_resample=2, beta=0.0, rl_lora_r=16, eval_k=4,
                                          episode_k=4, divergence_pivots=48, divergence_k=4, max_new_tokens=96,
                                          max_turns=8, eval_batch=32, micro_batch_rows=8, save_every=4,
                                          ood_episode_k=1, probe_set="few_shot", val_episode_k=1),
                      **({"domain": domain} if domain else {}))


def smoke_pretrained_config(seed: int = 0, model: str | None = None, engine: str = "hf") -> DemoConfig:
    """A seconds-long run of the pretrained path (tests): a small ``hf:`` model (default: the shipped tiny base,
    taken as if it were a pretrained chat model), a two-step warm-up, the three arms, validation, held-out and OOD
    tasks of two each."""
    return DemoConfig(seed=seed, model=model or f"hf:{SHIPPED_BASE}", engine=engine, arms=("base", "sft", "pivotrl"),
                      warmup=WarmupRecipe(trajectories=6, ood_trajectories=3, lora_r=2, lora_alpha=4, lr=1e-3,
                                          warmup_steps=1, batch=2, max_steps=2, check_every=1, check_tasks=2,
                                          max_tokens=128, autocast=False, threads=1),
                      prompt_tools="none", prompt_window=128, ood_domain="search", ood_tasks=2, val_tasks=2,
                      max_candidates=6, max_val=2, max_test=3, max_test_tasks=2, profile_k=2, min_train_pivots=2,
                      rl_lr_grid=(1e-3,), sft_lr_grid=(1e-3,), verifier_pivots=0, workers=1, threads=1,
                      per_arm=ArmSettings(probe_set="few_shot", probes_per_kind=1, steps=1, warmup_steps=1,
                                          pivots_per_step=2, group_size=2, max_new_tokens=8, eval_k=0, max_turns=2,
                                          episode_k=1, eval_batch=4, micro_batch_rows=2, save_every=1))


def smoke_config(seed: int = 0) -> DemoConfig:
    """A seconds-long run of every stage and arm (tests): a minute model, a handful of pivots and steps."""
    return DemoConfig(seed=seed, seeds=1, arms=ARM_NAMES, max_base=40, max_candidates=12, max_val=4, max_test=4,
                      base=BaseRecipe(hidden_size=32, n_layers=1, n_heads=2, vocab_size=400, max_context_tokens=96,
                                      steps=4, domain_batch=4, probe_batch=4, probe_items=50, warmup_steps=1),
                      profile_k=2, lambda_grid=(1.0, 0.5), min_train_pivots=4, rl_lr_grid=(1e-3,), sft_lr_grid=(1e-3,),
                      verifier_pivots=2, workers=1, threads=1, max_test_tasks=3, val_tasks=3, sft_long_steps=3,
                      dedup_actions=True,
                      per_arm=ArmSettings(steps=2, pivots_per_step=2, group_size=2, max_new_tokens=8, eval_k=1,
                                          episode_k=1, max_turns=3, warmup_steps=1, curve_every=1, curve_tasks=2,
                                          zero_variance="resample", max_resample=1, divergence_pivots=2,
                                          divergence_k=1))


# --------------------------------------------------------------------------- the pipeline


def run_pipeline(config: DemoConfig, out_dir: str | Path, log: Logger | None = None,
                 command: str | None = None) -> dict[str, Any]:
    """Run (or resume) every stage of the demo in ``out_dir``; returns the report (also ``report.json``, whose
    ``command`` is ``command``: the command line that reproduces it)."""

    say = log or _stderr
    cfg = dataclasses.replace(config, engine=resolve_engine(config.engine))
    quiet_transformers()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    (out / "demo_config.json").write_text(json.dumps(cfg.to_dict(), indent=1) + "\n", encoding="utf-8")
    cfg = pin_threads(cfg, out)
    clock = StageClock(out / "timings.json")

    def timed(name: str, fn: Callable[[], Any]) -> Any:
        """Run a stage; its wall time adds to the stage's total over every call, interrupted ones included."""
        say(f"== {name}")
        with sigterm_as_exit():
            return clock.run(name, fn)

    verifiers = timed("verifier summary", lambda: stage_verifiers(cfg, out, say))
    data = timed("data", lambda: stage_data(cfg, out, say))
    base = timed("base model", lambda: stage_base(cfg, out, data, say))
    profiled = timed("profile", lambda: stage_profile(cfg, out, base, data, say))
    pivot_sets = timed("filter", lambda: stage_filter(cfg, out, profiled, say))
    settings = run_settings(cfg, out, data, base)
    selection = timed("select", lambda: stage_select(cfg, settings, pivot_sets, say))
    runs = timed("arms", lambda: stage_arms(cfg, settings, pivot_sets, selection, say))
    this_call = time.perf_counter() - began
    report = build_report(cfg, runs=runs, data=data, base=base, profile=pivot_sets["profile"],
                          filters=pivot_sets["audits"], selection=selection, verifiers=verifiers,
                          stage_seconds=clock.seconds, wall_seconds=clock.total())
    report["invocation_seconds"] = round(this_call, 1)
    report["timings"]["runs_s"] = runs_seconds(out, runs, selection)
    report["command"] = command
    report["machine"] = machine()
    write_report(report, out)
    say(f"== report: {out / 'report.md'} ({this_call:.0f} s in this call, {clock.total():.0f} s in all)")
    return report


def runs_seconds(out: Path, runs: Sequence[dict[str, Any]], selection: dict[str, Any]) -> float:
    """Seconds the selection's and the arms' runs took, from their parts' own clocks (:func:`parts_seconds`):
    the select and arms stages' work measured where it was done, a check on those stages' times."""
    names = {Path(r["folder"]).name for r in runs} | {t["run"] for t in selection.get("trials", []) if t.get("run")}
    return round(sum(parts_seconds(out / "runs" / name) for name in sorted(names)), 1)


def run_settings(cfg: DemoConfig, out: Path, data: dict[str, Any], base: dict[str, Any]) -> RunSettings:
    """What every run of this demo shares (:class:`~pivot_envs.experiments.arms.RunSettings`)."""
    return RunSettings(
        root=str(out), domain=cfg.domain, base_model=str(base["dir"]), val_pivots=data["files"]["val"],
        test_pivots=data["files"]["test"], max_context_tokens=prompt_window(cfg), per_arm=cfg.per_arm,
        num_threads=1 if cfg.workers > 1 else torch_threads(cfg), fingerprint=base["key"],
        test_tasks=data["files"].get("test_tasks"), curve_seed=cfg.seed if cfg.curve_first_seed_only else None,
        engine=engine_settings(cfg), val_tasks=data["files"].get("val_tasks"),
        ood_domain=cfg.ood_domain if data["files"].get("ood_tasks") else None, ood_tasks=data["files"].get("ood_tasks"),
        fresh_process=cfg.engine == "vllm",
    )


def prompt_window(cfg: DemoConfig) -> int:
    """The prompt window of every stage: the tiny base's recipe's, or ``prompt_window`` for a pretrained model."""
    return cfg.prompt_window if parse_model(cfg.model).pretrained else cfg.base.max_context_tokens


def engine_settings(cfg: DemoConfig) -> EngineSettings:
    """The run's engine (``cfg.engine`` resolved: ``hf`` or ``vllm``)."""
    return EngineSettings(kind=resolve_engine(cfg.engine), dtype=cfg.engine_dtype, kv_cache_gib=cfg.kv_cache_gib,
                          max_model_len=max(512, prompt_window(cfg) + cfg.per_arm.max_new_tokens), tools=cfg.prompt_tools)


def sampling(cfg: DemoConfig) -> Sampling:
    """The sampling settings of the in-process stages (profiling, the warm-up's band checks)."""
    return Sampling(engine=engine_settings(cfg), max_new_tokens=cfg.per_arm.max_new_tokens,
                    max_prompt_tokens=prompt_window(cfg),
                    batch_size=cfg.per_arm.eval_batch, num_threads=torch_threads(cfg))


def warmup_plan(cfg: DemoConfig, val_tasks: str | None) -> WarmupPlan:
    """The pretrained base's :class:`~pivot_envs.experiments.pretrained_base.WarmupPlan` of this config."""
    return WarmupPlan(source=parse_model(cfg.model), recipe=cfg.warmup, domain=cfg.domain, ood_domain=cfg.ood_domain,
                      seed=cfg.seed, tools=cfg.prompt_tools, window=prompt_window(cfg), extraction=EXTRACTION,
                      val_tasks=val_tasks, max_turns=cfg.per_arm.max_turns, max_new_tokens=cfg.per_arm.max_new_tokens)


def machine() -> dict[str, Any]:
    """Where the run ran: CPUs, the load, the library versions, the accelerator."""
    import os
    import platform

    versions = {}
    for name in ("torch", "transformers", "vllm", "peft"):
        try:
            versions[name] = __import__(name).__version__
        except ImportError:
            versions[name] = None
    import torch

    return {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
            "load_avg_at_end": list(os.getloadavg()) if hasattr(os, "getloadavg") else None, "versions": versions,
            "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"}


# --------------------------------------------------------------------------- stages


def stage_verifiers(cfg: DemoConfig, out: Path, say: Logger) -> dict[str, Any] | None:
    """The verifier summary of every built-in domain (``DIR/verifiers.json``)."""
    if cfg.verifier_pivots <= 0:
        return None

    fingerprint, versions = scoring_verifiers(DEMO_DOMAINS)
    key = stable_hash("verifiers", cfg.verifier_pivots, cfg.seed, fingerprint)
    path = out / "verifiers.json"
    done = _load_stage(path, key, versions)
    if done is not None:
        say("  (done before)")
        return done
    domains = {}
    for domain in DEMO_DOMAINS:
        say(f"  {domain} ...")
        domains[domain] = asdict(run_domain(domain, cfg.verifier_pivots, cfg.seed))
    return _save_stage(path, key, {"domains": domains}, versions)


def stage_data(cfg: DemoConfig, out: Path, say: Logger) -> dict[str, Any]:
    """Split the bundled pivots by trajectory into base / validation / candidates, and sample the test pivots."""

    pretrained = parse_model(cfg.model).pretrained
    key = stable_hash("data", cfg.domain, cfg.kinds, cfg.seed, cfg.base_fraction, cfg.val_fraction, cfg.max_base,
                      cfg.base_sees_candidates,
                      cfg.max_candidates, cfg.max_val, cfg.max_test, cfg.max_test_tasks, cfg.extra_trajectories,
                      cfg.extra_test_tasks, "tasks-2", EXTRACTION,
                      *((cfg.val_tasks, "val-1") if cfg.val_tasks else ()),
                      *((cfg.ood_domain, cfg.ood_tasks, "ood-1") if cfg.ood_domain and cfg.ood_tasks else ()),
                      *(("pretrained", asdict(cfg.warmup) if cfg.warmup else None) if pretrained else ()))
    folder = out / "data"
    path = folder / "data.json"
    done = _load_stage(path, key)
    if done is not None:
        say(f"  (done before) base {done['sizes']['base']}, candidates {done['sizes']['candidates']}, "
            f"val {done['sizes']['val']}, test {done['sizes']['test']} pivots")
        return done
    train = _keep_kinds(load_pivots(cfg.domain, "train"), cfg.kinds)
    test = _keep_kinds(load_pivots(cfg.domain, "test"), cfg.kinds)
    parts = split_by_trajectory(train, cfg.base_fraction, cfg.val_fraction, seed=cfg.seed)
    rng = random.Random(f"demo-data:{cfg.seed}")
    if cfg.base_sees_candidates:
        parts["base"] = parts["base"] + parts["candidates"]
    parts["base"] = _sample(parts["base"], cfg.max_base, rng)
    if cfg.max_candidates is not None and len(parts["candidates"]) < cfg.max_candidates:
        say(f"  the candidate split holds {len(parts['candidates'])} pivots, fewer than the {cfg.max_candidates} asked "
            "(--candidates): profiling them all")
    parts["candidates"] = _sample(parts["candidates"], cfg.max_candidates, rng)
    parts["val"] = _sample(parts["val"], cfg.max_val, rng)
    parts["test"] = _sample(test, cfg.max_test, rng)
    folder.mkdir(parents=True, exist_ok=True)
    files = {}
    for name, pivots in parts.items():
        files[name] = str(folder / f"{name}.jsonl")
        write_jsonl(files[name], [p.to_dict() for p in pivots])
    sizes = {name: len(p) for name, p in parts.items()}
    sizes["trajectories_base"] = len({_traj(p) for p in parts["base"]})
    sizes["trajectories_candidates"] = len({_traj(p) for p in parts["candidates"]})
    sizes["extra_trajectories"] = cfg.extra_trajectories  # generated by the base stage, when it trains the base
    files.update(write_tasks(cfg, folder, {_traj(p) for p in parts["candidates"]}, rng, say))
    sizes["train_tasks"] = count_lines(files["train_tasks"])
    for name in ("test_tasks", "val_tasks", "ood_tasks"):
        sizes[name] = count_lines(files[name]) if files.get(name) else 0
    say(f"  base {sizes['base']}, candidates {sizes['candidates']}, val {sizes['val']}, test {sizes['test']} pivots; "
        f"{sizes['test_tasks']} held-out tasks, {sizes['train_tasks']} training tasks (E2E arms)"
        + (f", {sizes['val_tasks']} validation tasks" if sizes["val_tasks"] else "")
        + (f", {sizes['ood_tasks']} OOD tasks ({cfg.ood_domain})" if sizes["ood_tasks"] else ""))
    return _save_stage(path, key, {"files": files, "sizes": sizes, "domain": cfg.domain, "kinds": list(cfg.kinds)})


EXTRA_SEED = 100_000
"""Generator seeds of the extra trajectories start here (the bundled data uses the generator's default seed)."""

TEST_SEED = 200_000
"""Generator seeds of the extra held-out tasks start here (never the base's or the bundled data's seeds)."""

VAL_SEED = 300_000
"""Generator seeds of the validation tasks start here (never a held-out task's, the base's or the bundled data's)."""

EXTRACTION = "answers-1"
"""Version of what extraction keeps (``answers-1``: every domain's final answer is a pivot); part of the
data and base keys, so a base model built from older pivots is never taken for a current one."""

SHIPPED_BASE = str(Path(__file__).resolve().parent / "base_models" / "terminal")
"""The base model shipped with the package for the quick demo (built by :data:`BUILD_BASE_COMMAND`)."""

BUILD_BASE_COMMAND = "pivot-envs demo --build-base experiments/base_models/terminal"
"""The deterministic command that made :data:`SHIPPED_BASE`, run from the source root (``experiments/`` is the
folder of ``pivot_envs.experiments``)."""


def generate_extra(cfg: DemoConfig, folder: Path, say: Logger) -> list[Any]:
    """``cfg.extra_trajectories`` more trajectories from the domain's generator (seed ``EXTRA_SEED + seed``),
    kept in ``data/extra_trajectories.jsonl``: more, and more varied, data for the base model."""

    path = folder / "extra_trajectories.jsonl"
    tag = path.with_suffix(".key")
    key = stable_hash("extra", cfg.domain, cfg.extra_trajectories, cfg.seed)
    if path.exists() and tag.exists() and tag.read_text().strip() == key:
        return read_trajectories(path)
    t0 = time.perf_counter()
    trajs = generator(cfg.domain).generate(cfg.extra_trajectories, seed=EXTRA_SEED + cfg.seed)
    folder.mkdir(parents=True, exist_ok=True)
    write_jsonl(path, [t.to_dict() for t in trajs])
    tag.write_text(key + "\n")
    say(f"  generated {len(trajs)} extra trajectories for the base model ({time.perf_counter() - t0:.0f} s)")
    return trajs


def extra_pivots(cfg: DemoConfig, trajs: Sequence[Any]) -> list[Pivot]:
    """The pivots of the extra trajectories (the same extraction as the bundled data's)."""

    pivots, _ = extract_pivots(list(trajs), cfg.domain, ExtractOptions())
    return pivots


def write_tasks(cfg: DemoConfig, folder: Path, candidate_trajectories: set[str],
                rng: random.Random, say: Logger) -> dict[str, str | None]:
    """The task files: ``train_tasks`` (the candidates' trajectories: what the E2E arms train on, the
    same experience PivotRL's pivots come from) and ``test_tasks`` (held-out: the test split's
    trajectories, a seeded sample of ``max_test_tasks``)."""

    train = [t for t in resolve_tasks(None, domain=cfg.domain, split="train") if t.id in candidate_trajectories]
    files: dict[str, str | None] = {"train_tasks": str(folder / "train_tasks.jsonl"), "test_tasks": None}
    write_jsonl(files["train_tasks"], [t.to_dict() for t in train])
    seen = seen_requests(cfg, folder, say) if cfg.extra_test_tasks or cfg.val_tasks else set()
    test: list[Any] = []
    if cfg.max_test_tasks != 0:
        test = _sample(resolve_tasks(None, domain=cfg.domain, split="test"), cfg.max_test_tasks, rng)
        if cfg.extra_test_tasks:
            test = test + extra_test_tasks(cfg, seen)
        files["test_tasks"] = str(folder / "test_tasks.jsonl")
        write_jsonl(files["test_tasks"], [t.to_dict() for t in test])
    if cfg.val_tasks:
        val = validation_tasks(cfg, seen | {request_key(t) for t in test})
        files["val_tasks"] = str(folder / "val_tasks.jsonl")
        write_jsonl(files["val_tasks"], [t.to_dict() for t in val])
    if cfg.ood_domain and cfg.ood_tasks:
        files["ood_tasks"] = str(folder / "ood_tasks.jsonl")
        write_jsonl(files["ood_tasks"], [t.to_dict() for t in ood_test_tasks(cfg, folder, rng, say)])
    return files


def validation_tasks(cfg: DemoConfig, seen: set[str]) -> list[Any]:
    """``cfg.val_tasks`` generated validation tasks (seed ``VAL_SEED + seed``) whose task is not in ``seen`` (every
    bundled, base and held-out task): what the selection plays."""
    tasks = fresh_tasks(generator(cfg.domain).generate(cfg.val_tasks * 2, seed=VAL_SEED + cfg.seed), seen,
                        cfg.val_tasks)
    if len(tasks) < cfg.val_tasks:
        raise ValueError(f"the {cfg.domain} generator gave only {len(tasks)} fresh validation tasks of the "
                         f"{cfg.val_tasks} asked (val_tasks): ask for fewer")
    return tasks


def ood_test_tasks(cfg: DemoConfig, folder: Path, rng: random.Random, say: Logger) -> list[Any]:
    """``cfg.ood_tasks`` held-out tasks of the OOD domain: its bundled test split's (a seeded sample when there are
    more), then generated ones (seed ``TEST_SEED + seed``) whose task no bundled or warm-up trajectory has."""
    domain = str(cfg.ood_domain)
    bundled = _sample(resolve_tasks(None, domain=domain, split="test"), cfg.ood_tasks, rng)
    if len(bundled) >= cfg.ood_tasks:
        return bundled
    seen = {request_key(t) for split in ("train", "test") for t in load_trajectories(domain, split)}
    if parse_model(cfg.model).pretrained:
        seen |= warmup_requests(warmup_plan(cfg, None), folder, say, cfg.prebuilt_warmup)
    need = cfg.ood_tasks - len(bundled)
    return bundled + fresh_tasks(generator(domain).generate(need * 2, seed=TEST_SEED + cfg.seed), seen, need)


def extra_test_tasks(cfg: DemoConfig, seen: set[str]) -> list[Any]:
    """``cfg.extra_test_tasks`` generated held-out tasks (seed ``TEST_SEED + seed``): successful expert
    trajectories whose task (:func:`request_key`: request and start state) is not in ``seen`` (those of every
    bundled and base trajectory: no task the base or an arm learned from is ever a test task)."""
    return fresh_tasks(generator(cfg.domain).generate(cfg.extra_test_tasks * 2, seed=TEST_SEED + cfg.seed), seen,
                       cfg.extra_test_tasks)


BASE_REQUESTS = "base_requests.json"
"""File of a base model folder: the request keys of the extra trajectories it learned from."""


def seen_requests(cfg: DemoConfig, folder: Path, say: Logger) -> set[str]:
    """The task keys (:func:`request_key`) of every trajectory a base model of ``cfg`` may have seen: the bundled ones, and the
    extra generated ones (read from the prebuilt base when it matches, else from the generated file)."""

    seen = {request_key(t) for split in ("train", "test") for t in load_trajectories(cfg.domain, split)}
    if parse_model(cfg.model).pretrained:
        return seen | warmup_requests(warmup_plan(cfg, None), folder, say, cfg.prebuilt_warmup)
    if not cfg.extra_trajectories:
        return seen
    prebuilt = Path(cfg.prebuilt_base) if cfg.prebuilt_base else None
    if prebuilt is not None and _built_base(prebuilt, base_key(cfg)) is not None and (prebuilt / BASE_REQUESTS).exists():
        return seen | set(json.loads((prebuilt / BASE_REQUESTS).read_text(encoding="utf-8")))
    return seen | {request_key(t) for t in generate_extra(cfg, folder, say)}


def count_lines(path: str) -> int:
    """Non-blank lines of a JSONL file (its rows)."""
    with open(path, encoding="utf-8") as f:
        return sum(1 for line in f if line.strip())


def split_by_trajectory(pivots: Sequence[Pivot], base_fraction: float, val_fraction: float,
                        seed: int = 0) -> dict[str, list[Pivot]]:
    """``{"base", "val", "candidates"}``: pivots split by their trajectory (no trajectory is in two parts).

    A seeded shuffle of the trajectory ids: the first ``base_fraction`` go to ``base``, then
    ``val_fraction`` of the rest to ``val``, the others to ``candidates``; pivot order is kept.
    """
    ids = sorted({_traj(p) for p in pivots})
    random.Random(f"demo-split:{seed}").shuffle(ids)
    n_base = round(len(ids) * base_fraction)
    n_val = round((len(ids) - n_base) * val_fraction)
    where = {t: ("base" if i < n_base else "val" if i < n_base + n_val else "candidates") for i, t in enumerate(ids)}
    parts: dict[str, list[Pivot]] = {"base": [], "val": [], "candidates": []}
    for p in pivots:
        parts[where[_traj(p)]].append(p)
    return parts


def base_key(cfg: DemoConfig) -> str:
    """What makes the base model: its recipe and the pivots it learns from (the split that picks the base
    trajectories, the extra trajectories, what extraction keeps), and nothing the arms or tests change."""
    data = stable_hash("base-data", cfg.domain, cfg.kinds, cfg.seed, cfg.base_fraction, cfg.val_fraction, cfg.max_base,
                       cfg.base_sees_candidates, cfg.max_candidates if cfg.base_sees_candidates else None,
                       cfg.extra_trajectories, EXTRACTION)
    return stable_hash("base", data, asdict(cfg.base), cfg.domain)


def stage_base(cfg: DemoConfig, out: Path, data: dict[str, Any], say: Logger) -> dict[str, Any]:
    """The base model: the prebuilt one when its key matches, else built in ``DIR/base_model`` (kept and
    reused when the demo resumes with the same key)."""
    if parse_model(cfg.model).pretrained:
        return pretrained_base(warmup_plan(cfg, data["files"].get("val_tasks")), sampling(cfg), out,
                               cfg.prebuilt_warmup, say)
    key = base_key(cfg)
    if cfg.prebuilt_base:
        found = _built_base(Path(cfg.prebuilt_base), key)
        if found is not None:
            found["prebuilt"] = True
            say(f"  prebuilt base model {cfg.prebuilt_base} ({found['report']['parameters']:,} parameters; "
                f"made by `{found['command']}`)")
            return found
        say(f"  the prebuilt base model {cfg.prebuilt_base} was built with other settings: training one here "
            f"({cfg.base.steps} steps)")
    folder = out / "base_model"
    found = _built_base(folder, key)
    if found is not None:
        say(f"  (done before) {found['report']['parameters']:,} parameters")
        return found
    return train_base(cfg, folder, data, key, command="pivot-envs demo (its base stage)", say=say)


def _built_base(folder: Path, key: str) -> dict[str, Any] | None:
    report = read_base_report(folder)
    marker = folder / "demo_stage.json"
    if report is None or not marker.exists():
        return None
    stage = json.loads(marker.read_text(encoding="utf-8"))
    if stage.get("key") != key:
        return None
    return {"dir": str(folder), "key": key, "report": asdict(report), "command": stage.get("command", ""),
            "prebuilt": False}


def train_base(cfg: DemoConfig, folder: Path, data: dict[str, Any], key: str, command: str,
               say: Logger) -> dict[str, Any]:
    """Train the base model into ``folder`` on the base pivots plus the extra generated trajectories'."""

    recipe = dataclasses.replace(cfg.base, num_threads=torch_threads(cfg))
    if folder.exists():
        shutil.rmtree(folder)
    base_pivots = read_pivots(data["files"]["base"])
    extra = generate_extra(cfg, Path(data["files"]["base"]).parent, say) if cfg.extra_trajectories else []
    base_pivots = base_pivots + _keep_kinds(extra_pivots(cfg, extra), cfg.kinds)
    say(f"  training a {recipe.n_layers}-layer, {recipe.hidden_size}-wide model on {len(base_pivots)} domain pivots "
        f"+ {recipe.probe_items} probe items, {recipe.steps} steps, {recipe.num_threads} thread(s) ...")
    every = max(10, (recipe.steps // 8) // 10 * 10)
    t0 = time.perf_counter()

    def progress(step: int, steps: int, domain_loss: float, probe_loss: float) -> None:
        if step % every == 0 or step == steps:
            say(f"  step {step}/{steps}: action loss {domain_loss:.3f}, probe loss {probe_loss:.3f} "
                f"({time.perf_counter() - t0:.0f} s)")

    val_pivots = read_pivots(data["files"]["val"]) if recipe.eval_every else []
    report = build_base_model(cfg.domain, base_pivots, folder, recipe, seed=cfg.seed, progress=progress,
                              val_pivots=val_pivots)
    (folder / BASE_REQUESTS).write_text(json.dumps(sorted({request_key(t) for t in extra})) + "\n", encoding="utf-8")
    (folder / "demo_stage.json").write_text(json.dumps({"key": key, "command": command}) + "\n", encoding="utf-8")
    stop = (f", weights of step {report.best_step} kept (lowest validation action loss)"
            if report.val_losses else "")
    say(f"  {report.parameters:,} parameters, {report.seconds:.0f} s{stop}")
    return {"dir": str(folder), "key": key, "report": asdict(report), "command": command, "prebuilt": False}


def build_shipped_base(out_dir: str | Path, cfg: DemoConfig | None = None, log: Logger | None = None) -> dict[str, Any]:
    """``pivot-envs demo --build-base DIR``: train the quick demo's base model (deterministic: seeded, 2 torch
    threads) into ``DIR``, the folder :data:`SHIPPED_BASE` ships; its data split is made in a scratch folder.
    With a pretrained ``cfg.model``: its warm-up adapter (:func:`build_shipped_warmup`)."""
    say = log or _stderr
    cfg = dataclasses.replace(cfg or quick_config(), threads=(cfg.threads if cfg and cfg.threads else 2))
    if parse_model(cfg.model).pretrained:
        return build_shipped_warmup(out_dir, cfg, say)
    out = Path(out_dir)
    scratch = out.parent / f".{out.name}-build"
    data = stage_data(cfg, scratch, say)
    built = train_base(cfg, out, data, base_key(cfg), command=BUILD_BASE_COMMAND, say=say)
    shutil.rmtree(scratch, ignore_errors=True)
    for name in ("train_log.jsonl",):
        (out / name).unlink(missing_ok=True)
    return built


def build_shipped_warmup(out_dir: str | Path, cfg: DemoConfig, say: Logger) -> dict[str, Any]:
    """``pivot-envs demo --model smollm2 --build-base DIR``: the warm-up adapter of ``cfg``'s pretrained model into
    ``DIR`` (deterministic: seeded data and checks, fixed threads); its data (the validation tasks the band is
    checked on) is made in a scratch folder."""
    cfg = dataclasses.replace(cfg, engine=resolve_engine(cfg.engine))
    if cfg.warmup is None or not cfg.val_tasks:
        raise ValueError(f"--build-base with --model {cfg.model}: the preset has no warm-up recipe or validation tasks")
    out = Path(out_dir)
    scratch = out.parent / f".{out.name}-build"
    data = stage_data(cfg, scratch, say)
    command = (BUILD_WARMUP_COMMAND if cfg.model == "smollm2" and out.resolve() == Path(SHIPPED_WARMUP).resolve()
               else f"pivot-envs demo --model {cfg.model} --build-base {out_dir}")
    report = build_warmup(warmup_plan(cfg, data["files"]["val_tasks"]), sampling(cfg), out, scratch / "data",
                          command, say)
    shutil.rmtree(scratch, ignore_errors=True)
    return {"dir": str(out), "key": report.key, "report": asdict(report), "command": command, "prebuilt": False}


def torch_threads(cfg: DemoConfig) -> int:
    """torch threads of the in-process stages: ``cfg.threads``, or with ``0`` 2 threads on an idle machine and 1
    when other processes already keep a core busy (measured over half a second: :func:`busy_cores`)."""
    import os

    if cfg.threads:
        return cfg.threads
    free = (os.cpu_count() or 1) - busy_cores()
    return max(1, min(2, int(free + 0.5)))


def pin_threads(cfg: DemoConfig, out: Path) -> DemoConfig:
    """``cfg`` with its torch thread count fixed for the demo folder ``out``: ``cfg.threads`` when set; with ``0``,
    the count :func:`torch_threads` chose by the machine's load when a demo first ran in ``out`` (``DIR/threads.json``).
    One thread and two part the sums (a tiny model's weights differ by ~4e-7 after 5 PivotRL steps, and a sampled
    token flips soon after), so a demo resumed in a later session must compute with the count it started with."""
    if cfg.threads:
        return cfg
    path = out / "threads.json"
    if path.exists():
        threads = int(json.loads(path.read_text(encoding="utf-8"))["threads"])
    else:
        threads = torch_threads(cfg)
        path.write_text(json.dumps({"threads": threads}) + "\n", encoding="utf-8")
    return dataclasses.replace(cfg, threads=threads)


def busy_cores(seconds: float = 0.5) -> float:
    """How many cores other processes keep busy (``/proc/stat`` over ``seconds``, this process's own use
    subtracted); ``0.0`` where ``/proc/stat`` is missing."""
    import os

    def snapshot() -> tuple[list[int], float] | None:
        try:
            with open("/proc/stat", encoding="ascii") as f:
                fields = [int(x) for x in f.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        t = os.times()
        return fields, t.user + t.system

    first = snapshot()
    time.sleep(seconds)
    last = snapshot()
    if first is None or last is None:
        return 0.0
    delta = [b - a for a, b in zip(first[0], last[0])]
    total = sum(delta)
    if total <= 0:
        return 0.0
    idle = delta[3] + (delta[4] if len(delta) > 4 else 0)
    cores = (os.cpu_count() or 1) * (total - idle) / total
    return max(0.0, cores - (last[1] - first[1]) / seconds)


def stage_profile(cfg: DemoConfig, out: Path, base: dict[str, Any], data: dict[str, Any],
                  say: Logger) -> dict[str, Any]:
    """Profile every candidate with K samples of the base model (checkpointed; resumes)."""

    engine = engine_settings(cfg)
    fingerprint, versions = scoring_verifiers([cfg.domain])
    key = stable_hash("profile", base["key"], cfg.profile_k, cfg.seed, cfg.per_arm.max_new_tokens,
                      *((asdict(engine),) if engine != EngineSettings(max_model_len=engine.max_model_len) else ()),
                      fingerprint)
    folder = out / "data"
    path = folder / "profile.json"
    done = _load_stage(path, key, versions)
    if done is not None:
        say(f"  (done before) {done['stats']['candidates']} candidates")
        return done
    candidates = read_pivots(data["files"]["candidates"])
    checkpoint = folder / "profile.checkpoint.jsonl"
    if checkpoint.exists() and not path.exists():
        say("  resuming from the profile checkpoint")
    t0 = time.perf_counter()
    last = [0.0]

    def progress(done_n: int, total: int) -> None:
        now = time.perf_counter() - t0
        if done_n == total or now - last[0] > 20:
            last[0] = now
            say(f"  {done_n}/{total} candidates profiled ({now:.0f} s)")

    engine = engine_settings(cfg)
    with eval_agents(base["dir"], engine, seed=cfg.seed, max_new_tokens=cfg.per_arm.max_new_tokens,
                     max_prompt_tokens=prompt_window(cfg), batch_size=16, num_threads=torch_threads(cfg)) as agent:
        profiled = profile_pivots(candidates, agent(1.0), None, k=cfg.profile_k, seed=cfg.seed,
                                  batch_pivots=16 if engine.kind == "hf" else max(16, cfg.per_arm.eval_batch),
                                  checkpoint=_fresh_checkpoint(checkpoint, key, versions), progress=progress)
    file = folder / "candidates.profiled.jsonl"
    write_jsonl(file, [p.to_dict() for p in profiled])
    stats = profile_stats(profiled, cfg.profile_k)
    say(f"  mean reward {stats['mean_reward']:.3f}; zero-variance {stats['zero_var_frac']:.2f} "
        f"(all wrong {stats['all_wrong_frac']:.2f}, all right {stats['all_right_frac']:.2f}); "
        f"mixed {stats['mixed_frac']:.2f}")
    hack = stats["hack"]
    if hack.get("hack/accepted"):
        say(f"  of {hack['hack/accepted']} accepted samples: more calls than the expert {hack['hack/more_calls']:.1%}, "
            f"a stop at a call pivot {hack['hack/stop_at_call']:.1%}, an answer > 3x the expert's "
            f"{hack['hack/long_answer']:.1%}")
    for domain, row in stats["accepted_by_domain"].items():
        say(f"  {domain}: {row['not_exact']:.1%} of {row['accepted']} accepted samples were not the expert's exact "
            f"action ({', '.join(f'{k} {v}' for k, v in sorted(row['accepted_by'].items(), key=lambda kv: -kv[1]))})")
    return _save_stage(path, key, {"file": str(file), "stats": stats, "seconds": round(time.perf_counter() - t0, 2)},
                       versions)


def profile_stats(pivots: Sequence[Pivot], k: int) -> dict[str, Any]:
    """How the base model's K samples fell at the candidates (a view of
    :func:`pivot_envs.pipeline.report.profile_report` with eighths as histogram bins)."""

    rep = profile_report(pivots, bins=8)
    n = max(1, rep.scored)
    strict = [p.profile.strict_mean or 0.0 for p in pivots if p.profile is not None and is_scored(p)]
    return {
        "candidates": rep.pivots,
        "scored": rep.scored,
        "k": k,
        "rollouts": len(pivots) * k,
        "mean_reward": 0.0 if math.isnan(rep.mean_of_means) else rep.mean_of_means,
        "strict_mean_reward": sum(strict) / n,
        "zero_var_frac": rep.zero_var / n,
        "all_wrong_frac": rep.zero_var_all_fail / n,
        "all_right_frac": rep.zero_var_all_pass / n,
        "mixed_frac": (rep.scored - rep.zero_var) / n,
        "mean_histogram": rep.mean_hist,
        "accepted_by": dict(rep.accepted_by),
        "accepted_by_domain": {d: dict(row) for d, row in rep.by_domain.items()},
        "hack": rep.hack_metrics,
    }


def stage_filter(cfg: DemoConfig, out: Path, profile: dict[str, Any], say: Logger) -> dict[str, Any]:
    """Write the pivot sets: D_adv per lambda, the random D_cand subsets of equal size, the PVPO set."""

    profiled = read_pivots(profile["file"])
    folder = out / "data"
    sets: dict[str, Any] = {"adv": {}, "random": {}, "audits": {}, "profile": profile, "topped_up": {},
                            "train_tasks": str(folder / "train_tasks.jsonl")}
    for lam in sorted(set(cfg.lambda_grid) | {cfg.lambda_diff}, reverse=True):
        kept, audit, topped = adv_set(profiled, lam, cfg.dedup_actions, cfg.min_train_pivots, cfg.seed, say)
        tag = f"{lam:g}"
        sets["adv"][tag] = str(folder / f"adv_lambda{tag}.jsonl")
        write_jsonl(sets["adv"][tag], [p.to_dict() for p in kept])
        rand, raudit = filter_pivots(profiled, FilterConfig(mode="random", n=len(kept), seed=cfg.seed,
                                                            dedup_actions=cfg.dedup_actions))
        sets["random"][tag] = str(folder / f"random_lambda{tag}.jsonl")
        write_jsonl(sets["random"][tag], [p.to_dict() for p in rand])
        sets["audits"][f"adv_lambda{tag}"] = {**audit.to_dict(), "topped_up": topped, "train_pivots": len(kept)}
        flat = sum(1 for p in rand if p.profile is not None and p.profile.var == 0)
        sets["audits"][f"random_lambda{tag}"] = {**raudit.to_dict(), "train_pivots": len(rand), "zero_var_in_sample": flat}
        sets["topped_up"][tag] = topped
        say(f"  lambda {lam:g}: D_adv {audit.kept} of {audit.candidates} candidates "
            f"(zero variance {audit.zero_var}, too easy {audit.too_easy})")
    pvpo, paudit = filter_pivots(profiled, FilterConfig(mode="pvpo"))
    if not pvpo:
        pvpo = list(profiled)
    sets["pvpo"] = str(folder / "pvpo.jsonl")
    write_jsonl(sets["pvpo"], [p.to_dict() for p in pvpo])
    sets["audits"]["pvpo"] = {**paudit.to_dict(), "train_pivots": len(pvpo)}
    return sets


def adv_set(profiled: Sequence[Pivot], lam: float, dedup: bool, min_pivots: int, seed: int,
            say: Logger) -> tuple[list[Pivot], Any, int]:
    """D_adv = ``var > 0 and mean < lam`` of the profiled candidates (commands de-duplicated with ``dedup``), topped
    up with seeded random candidates to ``min_pivots`` (a base model without mixed groups would leave nothing to
    train on; said as a warning). Returns the pivots, the filter's audit and how many were topped up."""
    kept, audit = filter_pivots(profiled, FilterConfig(mode="adv", max_mean=lam, dedup_actions=dedup))
    topped = 0
    if len(kept) < min_pivots:
        ids = {p.id for p in kept}
        rest = [p for p in profiled if p.id not in ids]
        need = min(len(rest), min_pivots - len(kept))
        extra = random.Random(f"demo-topup:{seed}:{lam}").sample(rest, need)
        topped = len(extra)
        kept = kept + extra
        say(f"  WARNING: D_adv(lambda={lam:g}) has {audit.kept} pivots; topped up with {topped} random candidates")
    return kept, audit, topped


def stage_select(cfg: DemoConfig, settings: RunSettings, sets: dict[str, Any], say: Logger) -> dict[str, Any]:
    """Choose the RL and SFT learning rates and lambda on validation (or take the fixed values), the base a
    candidate of every choice (lr = 0). With validation tasks (``cfg.val_tasks``) the metric is their task success
    at T=1, the held-out metric; without, greedy per-turn accuracy on the validation pivots (which does not track
    task success: the full run of the stop-turn fix chose PivotRL's lr 1e-4 by it, a third of the gain of 3e-4)."""
    rollouts = sets["profile"]["stats"]["rollouts"]
    lam0 = f"{cfg.lambda_diff:g}"
    by_tasks = bool(settings.val_tasks)
    evals = ("val", "val_tasks") if by_tasks else ("val",)
    selection: dict[str, Any] = {"rl_lr": cfg.rl_lr, "sft_lr": cfg.sft_lr, "lambda": cfg.lambda_diff, "trials": [],
                                 "metric": selection_metric(cfg, by_tasks)}
    tuned = {ARM[a].tunes for a in cfg.arms}
    wants_rl = "rl" in tuned
    first: list[RunSpec] = []
    if wants_rl and len(cfg.rl_lr_grid) > 0:
        first += [RunSpec("pivotrl", cfg.seed, sets["adv"][lam0], lr, f"lambda={lam0}", evals, rollouts)
                  for lr in cfg.rl_lr_grid]
    if "sft" in tuned and len(cfg.sft_lr_grid) > 0:
        first += [RunSpec("sft", cfg.seed, sets["adv"][lam0], lr, f"lambda={lam0}", evals) for lr in cfg.sft_lr_grid]
    if not first and not cfg.lambda_grid:
        say("  fixed settings (no grid): RL lr %g, SFT lr %g, lambda %g" % (cfg.rl_lr, cfg.sft_lr, cfg.lambda_diff))
        selection["metric"] = None
        return selection
    first.append(RunSpec("base", cfg.seed, evals=evals))  # the base is a candidate (lr = 0)
    results = run_many(first, settings, cfg.workers)
    score = val_score(by_tasks)
    base_val = score(results[-1])
    first, results = first[:-1], results[:-1]
    selection["base_val"] = base_val
    rl = [(s, r) for s, r in zip(first, results) if s.arm == "pivotrl"]
    sft = [(s, r) for s, r in zip(first, results) if s.arm == "sft"]
    if rl:
        selection["rl_lr"] = _best(rl, score).lr
    if sft:
        selection["sft_lr"] = _best(sft, score).lr
    lam_trials = []
    if wants_rl and cfg.lambda_grid:
        lam_specs = [RunSpec("pivotrl", cfg.seed, sets["adv"][f"{lam:g}"], selection["rl_lr"], f"lambda={lam:g}",
                             evals, rollouts) for lam in cfg.lambda_grid]
        lam_trials = list(zip(lam_specs, run_many(lam_specs, settings, cfg.workers)))
        best = _best(lam_trials, score)
        selection["lambda"] = float(best.label.split("=")[1])
    for spec, result in rl + sft + lam_trials:
        trial = {"arm": spec.arm, "lr": spec.lr, "label": spec.label, "val_functional": result["val"]["functional"],
                 "val_strict": result["val"]["strict"], "val_task_success": (result.get("val_tasks") or {}).get("success"),
                 "score": score(result), "run": Path(result["folder"]).name}
        if trial not in selection["trials"]:
            selection["trials"].append(trial)
    for arm, pairs in (("pivotrl", rl), ("sft", sft)):
        if pairs:
            best = max(score(r) for _, r in pairs)
            selection.setdefault("beats_base", {})[arm] = best > base_val
            if best <= base_val:
                say(f"  {arm}: no learning rate beat the base on validation ({best:.3f} <= {base_val:.3f}): "
                    "selection keeps the base (lr = 0); the arm is still trained at its best rate and reported")
    say(f"  chosen on {selection['metric']}: RL lr {selection['rl_lr']:g}, SFT lr {selection['sft_lr']:g}, "
        f"lambda {selection['lambda']:g} (the base: {base_val:.3f})")
    return selection


def selection_metric(cfg: DemoConfig, by_tasks: bool) -> str:
    """What the selection compares, in words."""
    if by_tasks:
        return (f"validation task success (T=1 pass@1 over {cfg.val_tasks} generated validation tasks, "
                f"{cfg.per_arm.val_episode_k} episode(s) each)")
    return "validation per-turn accuracy (greedy, functional, on the validation pivots)"


def val_score(by_tasks: bool) -> Callable[[dict[str, Any]], float]:
    """A run's validation figure the selection maximises: validation task success, or per-turn accuracy."""
    def score(run: dict[str, Any]) -> float:
        if by_tasks:
            value = (run.get("val_tasks") or {}).get("success")
            if value is None:
                raise ValueError(f"run {run.get('folder')}: no validation task success to select on")
            return float(value)
        return float(run["val"]["functional"])

    return score


def stage_arms(cfg: DemoConfig, settings: RunSettings, sets: dict[str, Any], selection: dict[str, Any],
               say: Logger) -> list[dict[str, Any]]:
    """Train and test every arm (main arms at every seed); returns the ``run.json`` of each run."""
    seeds = [cfg.seed + i for i in range(cfg.seeds)]
    specs: list[RunSpec] = []
    for arm in (ARM[a] for a in cfg.arms):
        for seed in seeds if arm.main else [cfg.seed]:
            # val: the base is a candidate of every selection (lr = 0), see the report; the selection seed's runs
            # also keep their validation task success (played by the selection: the same run folders)
            evals = ("val", "val_tasks", "test") if seed == cfg.seed and selection.get("metric") and \
                settings.val_tasks else ("val", "test")
            specs.append(arm_spec(arm, seed, evals if arm.main else ("test",), cfg, settings, sets, selection))
    todo = [s for s in specs if "test" not in read_run(s, settings)]
    if len(todo) < len(specs):
        say(f"  {len(specs) - len(todo)} of {len(specs)} runs done before")
    todo.sort(key=lambda s: ARM[s.arm].queue)  # longest first
    run_many([s for s in todo if not ARM[s.arm].starts_from], settings, cfg.workers)
    run_many([s for s in todo if ARM[s.arm].starts_from], settings, cfg.workers)  # they start from a trained arm
    return [execute_run(s, settings) for s in specs]  # all done: this only reads them back


def arm_spec(arm: Arm, seed: int, evals: tuple[str, ...], cfg: DemoConfig, settings: RunSettings,
             sets: dict[str, Any], selection: dict[str, Any]) -> RunSpec:
    """The run of ``arm`` at ``seed`` (its record says what it trains on, at which rate, from which model)."""
    if not arm.trained:
        return RunSpec(arm.name, seed, evals=evals)
    lam = f"{selection['lambda']:g}"
    pivots = None if arm.pivots is None else sets[arm.pivots]
    if isinstance(pivots, dict):  # a set per lambda
        pivots = pivots[lam]
    lr = (getattr(cfg, arm.lr_field) if arm.lr_field else None) or selection[f"{arm.lr}_lr"]
    init = None
    if arm.starts_from:
        first = arm_spec(ARM[arm.starts_from], seed, evals, cfg, settings, sets, selection)
        init = str(run_dir(first, settings) / "train" / "final")
    return RunSpec(arm.name, seed, pivots, lr, arm.label.format(lam=lam), evals,
                   sets["profile"]["stats"]["rollouts"] if arm.counts_profile else 0,
                   tasks=sets["train_tasks"] if arm.trainer == "episodes" else None, init=init,
                   steps=getattr(cfg, arm.steps_field) if arm.steps_field else None)


# --------------------------------------------------------------------------- helpers


def _best(trials: list[tuple[RunSpec, dict[str, Any]]], score: Callable[[dict[str, Any]], float]) -> RunSpec:
    """The spec with the highest validation figure (ties: the first in grid order)."""
    best = max(range(len(trials)), key=lambda i: (score(trials[i][1]), -i))
    return trials[best][0]


def _keep_kinds(pivots: Sequence[Pivot], kinds: Sequence[str]) -> list[Pivot]:
    return [p for p in pivots if not kinds or p.meta.get("kind") in kinds]


def _traj(p: Pivot) -> str:
    return str(p.meta.get("trajectory_id") or p.meta.get("source") or p.id)


def _sample(pivots: list[Pivot], n: int | None, rng: random.Random) -> list[Pivot]:
    if n is None or len(pivots) <= n:
        return list(pivots)
    keep = sorted(rng.sample(range(len(pivots)), n))
    return [pivots[i] for i in keep]


def scoring_verifiers(domains: Sequence[str]) -> tuple[str, dict[str, int]]:
    """What the stages that score pivots of ``domains`` depend on: a fingerprint of each domain's default verifier
    and of the strict baseline (their configs and versions, hashed into the stage's key), and those verifiers'
    versions (recorded in the stage: :func:`_load_stage` refuses a stage made under other versions)."""
    specs = [*(default_verifier_spec(d) for d in sorted(set(domains))), "strict"]
    return stable_hash([verifier_fingerprint(s) for s in specs]), merged_versions(specs)


STALE_FIX = ("Run the demo in a fresh --out folder, or delete {path} to redo that stage (and what follows it) with "
             "the verifiers of now")
"""How to go on from a stage made under other verifier versions."""


def _load_stage(path: Path, key: str, versions: dict[str, int] | None = None) -> dict[str, Any] | None:
    """A stage's saved output when its key is ``key``; with ``versions`` (a stage that scores), a stage saved under
    other verifier versions is refused (:class:`~pivot_envs.verifiers.versions.VerifierVersionsChanged`)."""
    if not path.exists():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    if versions is not None:
        check_versions(data.get("verifier_versions"), versions, where=f"{path} (a stage of the demo)",
                       fix=STALE_FIX.format(path=path))
    return data if data.get("key") == key else None


def _save_stage(path: Path, key: str, data: dict[str, Any], versions: dict[str, int] | None = None) -> dict[str, Any]:
    data = {**data, "key": key, **({"verifier_versions": versions} if versions is not None else {})}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    tmp.replace(path)
    return data


def _fresh_checkpoint(path: Path, key: str, versions: dict[str, int]) -> Path:
    """The profile checkpoint of this key (one of another key, from an older base model, is removed); one made under
    other verifier versions is refused (the tag beside it records them)."""
    tag = path.with_suffix(".key")
    lines = tag.read_text(encoding="utf-8").splitlines() if tag.exists() else []
    if path.exists():
        check_versions(json.loads(lines[1]) if len(lines) > 1 else None, versions,
                       where=f"{path} (the demo's interrupted profile)", fix=STALE_FIX.format(path=path))
        if not lines or lines[0].strip() != key:
            path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    tag.write_text(key + "\n" + json.dumps(versions, sort_keys=True) + "\n", encoding="utf-8")
    return path


def _stderr(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)
