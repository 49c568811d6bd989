"""The peer arm of ``benchmarks/training_speed/trainer.py``: TRL's ``GRPOTrainer`` on the same model, pivots and verifier.

TRL is a dev dependency of this benchmark only (not of pivot-envs)::

    pip install trl        # into the project's venv; the benchmark skips this arm with a message without it

What is matched to the PivotRL arm (see :func:`grpo_config`): the model folder, the prompts
(each pivot rendered by :func:`pivot_envs.agents.prompting.pivot_prompt`, passed to TRL as a
plain ``prompt`` string so TRL tokenizes the very same text), ``num_generations = group_size``,
``per_device_train_batch_size = generation_batch_size = pivots_per_step * group_size`` (one
generation per optimiser step), the reward (:class:`VerifierReward`: ``parse_action`` + the
domain verifier's ``verify_many`` against the pivot), steps, ``max_completion_length =
max_new_tokens``, temperature / top-p / top-k = 0, learning rate, constant schedule, AdamW
betas / eps / weight decay, gradient clipping, ``beta`` (k3 KL), ``epsilon``,
``num_iterations``, ``loss_type="grpo"`` (mean over each completion's tokens, then over
completions: our ``loss_agg="sample"``), ``scale_rewards="group"``, CPU fp32, no vLLM, no
gradient checkpointing, torch threads.

Timing: :class:`StepTimer` stamps ``on_step_begin`` / ``on_step_end`` (a step = generation +
scoring + loss + backward + optimiser step, as in TRL's own loop) in wall and process-CPU time.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from pivot_envs.actions import parse_action
from pivot_envs.types import Action, Pivot

INSTALL_HINT = "install it with `pip install trl` (a dev dependency of this benchmark only)"


def trl_version() -> str | None:
    """The installed TRL version, or None when TRL is missing."""
    try:
        import trl
    except ImportError:
        return None
    return str(trl.__version__)


@dataclass
class PeerSettings:
    """The knobs shared by both arms (a subset of :class:`pivot_envs.trainers.config.PivotRLConfig`).

    Attributes:
        steps: optimiser steps.
        pivots_per_step: distinct pivots (prompts) per step.
        group_size: samples per pivot (TRL's ``num_generations``).
        max_new_tokens: longest completion (TRL's ``max_completion_length``).
        temperature: sampling temperature.
        top_p: nucleus mass (1 = off); top-k is off in both arms.
        lr: constant AdamW learning rate (no warm-up, no decay).
        beta: k3 KL coefficient against the frozen initial model (0: no reference model).
        epsilon: clip range (our ``eps_low = eps_high``).
        num_iterations: optimiser updates per sampled batch.
        max_grad_norm: gradient-norm clip.
        weight_decay: AdamW weight decay.
        adam_betas: AdamW betas.
        adam_eps: AdamW epsilon.
        seed: run seed.
        threads: torch CPU threads for the whole run.
    """

    steps: int = 30
    pivots_per_step: int = 4
    group_size: int = 8
    max_new_tokens: int = 32
    temperature: float = 1.0
    top_p: float = 1.0
    lr: float = 3e-3
    beta: float = 0.01
    epsilon: float = 0.2
    num_iterations: int = 1
    max_grad_norm: float = 1.0
    weight_decay: float = 0.0
    adam_betas: tuple[float, float] = (0.9, 0.999)
    adam_eps: float = 1e-8
    seed: int = 0
    threads: int = 1


@dataclass
class StepRecord:
    """One TRL step as the benchmark saw it.

    Attributes:
        begin_wall, end_wall: ``time.perf_counter()`` at ``on_step_begin`` / ``on_step_end``.
        begin_cpu, end_cpu: ``time.process_time()`` at the same points.
        reward_mean: mean verifier reward of the step's samples (scored ones).
        completion_tokens: sampled completion tokens of the step (end-of-turn token included).
        masked: samples whose verifier errored (returned to TRL as ``None`` -> NaN).
    """

    begin_wall: float = 0.0
    end_wall: float = 0.0
    begin_cpu: float = 0.0
    end_cpu: float = 0.0
    reward_mean: float | None = None
    completion_tokens: int = 0
    masked: int = 0


class VerifierReward:
    """A TRL reward function that wraps a pivot-envs verifier.

    TRL calls it once per generation batch with the decoded ``completions``, their
    ``completion_ids`` and the dataset's extra columns (here ``pivot_id``). Each completion is
    parsed with the domain's action parser and the whole batch goes to ONE ``verify_many`` call
    against the pivots, as the PivotRL trainer scores a step. A verifier error becomes ``None``
    (TRL turns it into NaN and leaves it out of the group statistics).
    """

    __name__ = "pivot_verifier"

    def __init__(self, verifier: Any, pivots: Sequence[Pivot], parse: Callable[[str], Action] = parse_action):
        self.verifier = verifier
        self.pivots = {p.id: p for p in pivots}
        self.parse = parse
        self.calls: list[dict[str, Any]] = []

    def __call__(self, prompts: list[str], completions: list[str], completion_ids: list[list[int]],
                 pivot_id: list[str], **_: Any) -> list[float | None]:
        actions = [self.parse(c) for c in completions]
        results = self.verifier.verify_many(actions, [self.pivots[i] for i in pivot_id])
        rewards = [None if r.error else float(r.reward) for r in results]
        scored = [r for r in rewards if r is not None]
        self.calls.append({"reward_mean": sum(scored) / len(scored) if scored else None,
                           "completion_tokens": sum(len(ids) for ids in completion_ids),
                           "masked": len(rewards) - len(scored)})
        return rewards


def grpo_config(settings: PeerSettings, output_dir: Path) -> Any:
    """TRL's ``GRPOConfig`` matched to the PivotRL arm (every knob named, see the module docstring)."""
    from trl import GRPOConfig

    rows = settings.pivots_per_step * settings.group_size
    return GRPOConfig(
        output_dir=str(output_dir),
        # hardware: CPU, fp32, no vLLM, no gradient checkpointing (GRPOConfig turns it on by default)
        use_cpu=True, bf16=False, fp16=False, use_vllm=False, gradient_checkpointing=False,
        dataloader_num_workers=0, report_to="none", disable_tqdm=True,
        # batch: one generation of pivots_per_step prompts x G completions per optimiser step
        per_device_train_batch_size=rows, generation_batch_size=rows, gradient_accumulation_steps=1,
        num_generations=settings.group_size, max_steps=settings.steps, shuffle_dataset=True,
        # sampling
        max_completion_length=settings.max_new_tokens, temperature=settings.temperature, top_p=settings.top_p,
        top_k=0, repetition_penalty=1.0,
        # optimiser and schedule
        learning_rate=settings.lr, lr_scheduler_type="constant", warmup_steps=0, optim="adamw_torch",
        adam_beta1=settings.adam_betas[0], adam_beta2=settings.adam_betas[1], adam_epsilon=settings.adam_eps,
        weight_decay=settings.weight_decay, max_grad_norm=settings.max_grad_norm,
        # loss
        beta=settings.beta, epsilon=settings.epsilon, num_iterations=settings.num_iterations, loss_type="grpo",
        scale_rewards="group", mask_truncated_completions=False, disable_dropout=True,
        # outputs: a log row per step (as our metrics.jsonl), no checkpoints
        logging_steps=1, save_strategy="no", seed=settings.seed, data_seed=settings.seed,
    )


def run_trl(model_dir: Path, pivots: Sequence[Pivot], prompts: Sequence[str], verifier: Any,
            settings: PeerSettings, output_dir: Path, parse: Callable[[str], Action] = parse_action) -> dict[str, Any]:
    """Train with TRL's ``GRPOTrainer``; returns per-step records, the config and TRL's log history.

    ``seconds`` runs from loading the model to the end of training (TRL saves nothing: ``save_strategy="no"``).

    ``prompts[i]`` is the rendered prompt text of ``pivots[i]``.
    """
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback, TrainerCallback
    from trl import GRPOTrainer

    records: list[StepRecord] = []
    threads: set[int] = set()

    class StepTimer(TrainerCallback):
        """Wall and CPU stamps around every optimiser step of TRL's loop."""

        def on_step_begin(self, args, state, control, **kwargs):  # noqa: ANN001 - TrainerCallback signature
            records.append(StepRecord(begin_wall=time.perf_counter(), begin_cpu=time.process_time()))

        def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001
            records[-1].end_wall, records[-1].end_cpu = time.perf_counter(), time.process_time()
            threads.add(torch.get_num_threads())

    reward = VerifierReward(verifier, pivots, parse)
    dataset = Dataset.from_list([{"prompt": text, "pivot_id": p.id} for p, text in zip(pivots, prompts)])
    config = grpo_config(settings, output_dir)
    previous = torch.get_num_threads()
    torch.set_num_threads(settings.threads)
    start = time.perf_counter()
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=config, train_dataset=dataset,
                              processing_class=tokenizer, callbacks=[StepTimer()])
        trainer.remove_callback(PrinterCallback)  # it prints every log row; they stay in state.log_history
        trainer.train()
        seconds = time.perf_counter() - start
    finally:
        torch.set_num_threads(previous)
    if len(reward.calls) != len(records):
        raise RuntimeError(f"TRL made {len(reward.calls)} reward calls for {len(records)} steps: the generation batch "
                           "is not one per step; check generation_batch_size / steps_per_generation")
    for rec, call in zip(records, reward.calls):
        rec.reward_mean, rec.completion_tokens = call["reward_mean"], call["completion_tokens"]
        rec.masked = call["masked"]
    return {
        "records": records,
        "threads_seen": sorted(threads),
        "seconds": seconds,
        "tokenizer_prompt_ids": [list(tokenizer(text)["input_ids"]) for text in prompts],
        "config": {k: v for k, v in config.to_dict().items() if k in _REPORTED_KEYS},
        "log_history": trainer.state.log_history,
    }


_REPORTED_KEYS = (
    "use_cpu", "bf16", "fp16", "use_vllm", "gradient_checkpointing", "per_device_train_batch_size",
    "generation_batch_size", "steps_per_generation", "gradient_accumulation_steps", "num_generations", "max_steps",
    "max_completion_length", "temperature", "top_p", "top_k", "learning_rate", "lr_scheduler_type", "warmup_steps",
    "optim", "adam_beta1", "adam_beta2", "adam_epsilon", "weight_decay", "max_grad_norm", "beta", "epsilon",
    "epsilon_high", "num_iterations", "loss_type", "scale_rewards", "mask_truncated_completions", "disable_dropout",
    "seed", "shuffle_dataset",
)
"""GRPOConfig fields written to the results JSON."""

