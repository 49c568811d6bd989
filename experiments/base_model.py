"""The demo's base model: a tiny LM that is *partly* competent in the domain and knows the OOD probes.

PivotRL's effects need a starting policy whose sampled groups are mixed at many
turns (neither always right nor always wrong) and that knows something outside
the domain which narrow fine-tuning can erode. :func:`build_base_model` makes one
on CPU in a few minutes:

1. :func:`pivot_envs.models.reference.build_reference_model` (``steps=0``) makes the
   tokenizer (trained on the base pivots plus the probe texts), the chat template
   and an untrained Llama-style model;
2. :func:`train_mixture` trains it on a *mixture*: every step takes one batch of the
   domain's expert turns (``(prompt, expert action)`` of the given pivots: part of
   the training split) and one batch of probe questions
   (:mod:`pivot_envs.envs_data.probes`). The two batches have very different
   lengths, so they are padded separately (one padded batch of both would spend
   most of its compute on padding).

The domain loss is on the expert action tokens plus, with weight
``prompt_loss_weight``, on the prompt tokens: the prompts hold earlier turns whose
tool calls copy ids and names out of the conversation, which is the skill the
actions need. Deterministic under ``seed``.
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from pivot_envs.envs_data.probes import probe_examples
from pivot_envs.models.reference import build_reference_model
from pivot_envs.models.tiny import count_parameters
from pivot_envs.trainers.lm_loop import Part, collate, target_nll_sum, train_steps
from pivot_envs.trainers.sft import encode_example
from pivot_envs.types import Pivot


@dataclass
class BaseRecipe:
    """How the base model is built (shape, data mixture, optimisation).

    Attributes:
        hidden_size: width of the residual stream.
        n_layers: decoder layers.
        n_heads: attention heads.
        vocab_size: BPE vocabulary size (the tokenizer may stop short of it).
        max_context_tokens: prompt window in tokens (prompts keep the task and the latest tokens); every arm uses it.
        steps: optimiser steps of the mixture training.
        domain_batch: domain examples per step.
        probe_batch: probe questions per step.
        lr: peak AdamW learning rate (linear warm-up over ``warmup_steps``, then linear decay to 10 %).
        warmup_steps: linear warm-up steps.
        prompt_loss_weight: weight of the prompt tokens in the domain loss (the action tokens have 1).
        probe_items: distinct training probe items drawn for the mixture.
        num_threads: torch CPU threads while training.
        eval_every: early stopping: every ``eval_every`` steps the action loss on the validation
            pivots is measured and the weights of the best check are the ones kept (``0``: off, the
            last step's weights are kept).
    """

    hidden_size: int = 128
    n_layers: int = 4
    n_heads: int = 4
    vocab_size: int = 2048
    max_context_tokens: int = 256
    steps: int = 400
    domain_batch: int = 16
    probe_batch: int = 32
    lr: float = 3e-3
    warmup_steps: int = 20
    prompt_loss_weight: float = 0.3
    probe_items: int = 4000
    num_threads: int | None = 1
    eval_every: int = 0


@dataclass
class BaseReport:
    """What :func:`build_base_model` did (saved as ``base_model.json`` beside the model).

    Attributes:
        parameters: model parameters.
        vocab_size: tokenizer vocabulary size.
        base_pivots: domain pivots in the mixture.
        probe_items: probe items in the mixture.
        steps: optimiser steps.
        domain_losses: mean action-token loss of every 10th step.
        probe_losses: mean probe-answer loss of every 10th step.
        tokens: tokens processed (domain + probe batches, padding excluded).
        seconds: wall time of the build.
        recipe: the :class:`BaseRecipe` used.
        val_losses: ``[step, validation action loss]`` at every check (early stopping).
        best_step: the step whose weights were kept (``steps`` without early stopping).
    """

    parameters: int
    vocab_size: int
    base_pivots: int
    probe_items: int
    steps: int
    domain_losses: list[float] = field(default_factory=list)
    probe_losses: list[float] = field(default_factory=list)
    tokens: int = 0
    seconds: float = 0.0
    recipe: dict = field(default_factory=dict)
    val_losses: list[list[float]] = field(default_factory=list)
    best_step: int = 0


REPORT_FILE = "base_model.json"


def build_base_model(
    domain: str,
    base_pivots: Sequence[Pivot],
    out_dir: str | Path,
    recipe: BaseRecipe | None = None,
    *,
    seed: int = 0,
    progress: Callable[[int, int, float, float], None] | None = None,
    val_pivots: Sequence[Pivot] = (),
) -> BaseReport:
    """Build the base model in ``out_dir`` from ``base_pivots`` and the probes; returns (and saves) its report.

    ``progress(step, steps, domain_loss, probe_loss)`` is called every 10 steps. With
    ``recipe.eval_every`` and ``val_pivots``, the weights with the lowest validation action loss are kept.
    """
    recipe = recipe or BaseRecipe()
    start = time.perf_counter()
    probes = probe_examples(recipe.probe_items, seed=seed)
    probe_text = [t for item in probes[:1000] for t in (item.question, item.answer)]
    model_dir = build_reference_model(
        domain, out_dir, steps=0, lm_steps=0, seed=seed, probe_texts=probe_text, pivots=list(base_pivots),
        vocab_size=recipe.vocab_size, hidden_size=recipe.hidden_size, n_layers=recipe.n_layers,
        n_heads=recipe.n_heads, max_context_tokens=recipe.max_context_tokens, num_threads=recipe.num_threads,
    )
    report = train_mixture(model_dir, base_pivots, [item.example() for item in probes], recipe, seed=seed,
                           progress=progress, val_pivots=val_pivots)
    from transformers import AutoTokenizer

    report.parameters = count_parameters(model_dir)
    report.vocab_size = len(AutoTokenizer.from_pretrained(model_dir))
    report.seconds = round(time.perf_counter() - start, 2)
    (Path(model_dir) / REPORT_FILE).write_text(json.dumps(asdict(report), indent=1) + "\n", encoding="utf-8")
    return report


def read_base_report(model_dir: str | Path) -> BaseReport | None:
    """The saved :class:`BaseReport` of a finished base model (``None`` when the build did not finish)."""
    path = Path(model_dir) / REPORT_FILE
    if not path.exists():
        return None
    return BaseReport(**json.loads(path.read_text(encoding="utf-8")))


def train_mixture(
    model_dir: str | Path,
    pivots: Sequence[Pivot],
    probe_pairs: Sequence[tuple[list[dict], str]],
    recipe: BaseRecipe,
    *,
    seed: int = 0,
    progress: Callable[[int, int, float, float], None] | None = None,
    val_pivots: Sequence[Pivot] = (),
) -> BaseReport:
    """Train the model in ``model_dir`` on domain + probe batches (see the module docstring) and save it back.

    The loop is :func:`pivot_envs.trainers.lm_loop.train_steps`: each step is one micro-batch of two parts
    (``domain`` with the prompt weight, ``probe``), two loss terms normalised separately and summed."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    ctx = recipe.max_context_tokens
    domain_rows = [encode_example(tokenizer, p, max_prompt_tokens=ctx, max_action_tokens=256) for p in pivots]
    def chat_rows(pairs: Sequence[tuple[list[dict], str]]) -> list[tuple[list[int], list[int]]]:
        rows = []
        for messages, answer in pairs:
            prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            p_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
            a_ids = tokenizer(answer, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
            rows.append((p_ids, a_ids))
        return rows

    val_rows = [encode_example(tokenizer, p, max_prompt_tokens=ctx, max_action_tokens=256) for p in val_pivots]
    probe_rows = chat_rows(probe_pairs)
    if not domain_rows or not probe_rows:
        raise ValueError("the base mixture needs domain pivots and probe items")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    torch.manual_seed(seed)
    rng = random.Random(f"demo-base:{seed}")
    optim = torch.optim.AdamW(model.parameters(), lr=recipe.lr, weight_decay=0.0)
    steps, warm = recipe.steps, max(1, recipe.warmup_steps)

    def lr_at(i: int) -> float:  # warm-up times a linear decay over all steps: no transformers schedule has this shape
        return min(1.0, (i + 1) / warm) * (1.0 - 0.9 * i / max(1, steps))

    sched = torch.optim.lr_scheduler.LambdaLR(optim, lr_at)
    report = BaseReport(parameters=0, vocab_size=0, base_pivots=len(domain_rows), probe_items=len(probe_rows),
                        steps=steps, recipe=asdict(recipe))
    d_acc, p_acc = [], []

    def batch_for(_: int) -> list[list[Part]]:
        domain = [domain_rows[rng.randrange(len(domain_rows))] for _ in range(recipe.domain_batch)]
        probe = [probe_rows[rng.randrange(len(probe_rows))] for _ in range(recipe.probe_batch)]
        return [[Part(domain, "domain", recipe.prompt_loss_weight), Part(probe, "probe")]]

    best: dict[str, Any] = {"loss": math.inf, "state": None, "step": steps}

    def val_loss() -> float:
        model.eval()
        total, count = 0.0, 0
        with torch.no_grad():
            for start in range(0, len(val_rows), 32):
                chunk = val_rows[start : start + 32]
                ids, mask, labels = collate(chunk, pad)
                total += float(target_nll_sum(model, ids, mask, labels))
                count += sum(len(t) for _, t in chunk)
        model.train()
        return total / max(1, count)

    def record(row: dict) -> None:
        if recipe.eval_every and val_rows and (row["step"] % recipe.eval_every == 0 or row["step"] == steps):
            loss = val_loss()
            report.val_losses.append([row["step"], round(loss, 4)])
            if loss < best["loss"]:
                best.update(loss=loss, step=row["step"],
                            state={k: v.detach().clone() for k, v in model.state_dict().items()})
        report.tokens += row["tokens"]
        d_acc.append(row["terms"]["domain"]["target_loss"])
        p_acc.append(row["terms"]["probe"]["loss"])
        if row["step"] % 10 == 0 or row["step"] == steps:
            report.domain_losses.append(round(sum(d_acc) / len(d_acc), 4))
            report.probe_losses.append(round(sum(p_acc) / len(p_acc), 4))
            d_acc.clear()
            p_acc.clear()
            if progress is not None:
                progress(row["step"], steps, report.domain_losses[-1], report.probe_losses[-1])

    train_steps(model, optim, sched, batch_for, steps=steps, pad_id=pad, num_threads=recipe.num_threads,
                on_step=record)
    if best["state"] is not None:
        model.load_state_dict(best["state"])
    report.best_step = best["step"]
    model.eval()
    model.save_pretrained(model_dir)
    return report
