"""Tiny local causal language models, built and trained offline on CPU.

Tests, examples and the small-scale reproduction need a *real* model that any
Hugging Face tool can load (``from_pretrained``, ``transformers serve``, vLLM)
without downloading anything. This module builds one from scratch::

    from pivot_envs.models.tiny import build_tiny_model, train_lm

    model_dir = build_tiny_model("out/tiny", texts, seed=0)
    train_lm(model_dir, [(chat_messages, "the reply")] * 32, steps=50, lr=1e-2)

* the tokenizer is a byte-level BPE trained with the ``tokenizers`` library on
  ``texts`` (every byte is in its alphabet, so any text can be encoded);
* the model is a Llama-style decoder (RoPE, RMSNorm, SwiGLU) with tied
  embeddings; the defaults give 100K-150K parameters (the vocabulary stops
  growing when ``texts`` offer no more merges);
* the chat template is ChatML (``<|im_start|>role\\n...<|im_end|>\\n``) and
  ``<|im_end|>`` is the end-of-sequence token, so generation stops after a turn.

``torch``, ``transformers`` and ``tokenizers`` (the ``train`` extra) are
imported lazily: ``import pivot_envs`` never needs them.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Sequence, Union

from pivot_envs.trainers.lm_loop import Part, train_steps

if TYPE_CHECKING:  # pragma: no cover - typing only
    from transformers import PreTrainedTokenizerFast

BOS = "<|bos|>"
EOS = "<|im_end|>"
PAD = "<|pad|>"
IM_START = "<|im_start|>"
SPECIAL_TOKENS = [PAD, BOS, IM_START, EOS]

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + (message['content'] or '') + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
"""ChatML: the turn of each message, then the open assistant turn when asked for a generation prompt."""

Example = Union[str, tuple[Union[str, list[dict]], str]]
"""A training example: a text (loss on every token) or ``(prompt, completion)`` (loss on the completion only).

The prompt of a pair is a text or a list of chat messages; messages are rendered with the
model's chat template and the open assistant turn, so the completion is the assistant's reply."""


@dataclass
class TinyModelConfig:
    """Shape of a tiny Llama-style model.

    Attributes:
        vocab_size: size of the byte-level BPE vocabulary (>= 256 bytes + special tokens).
        hidden_size: width of the residual stream.
        n_layers: number of decoder layers.
        n_heads: attention heads (``hidden_size`` must be divisible by it).
        intermediate_size: width of the SwiGLU MLP; ``None`` means ``2 * hidden_size``.
        max_positions: longest sequence (prompt + generation) in tokens; RoPE costs no parameters.
    """

    vocab_size: int = 1024
    hidden_size: int = 64
    n_layers: int = 2
    n_heads: int = 4
    intermediate_size: int | None = None
    max_positions: int = 4096


@dataclass
class TrainReport:
    """What :func:`train_lm` did.

    Attributes:
        steps: optimiser steps taken.
        losses: mean token loss of each step.
        tokens: completion tokens the loss was taken over, summed over steps.
        seconds: wall time of the training loop.
    """

    steps: int
    losses: list[float] = field(default_factory=list)
    tokens: int = 0
    seconds: float = 0.0

    @property
    def final_loss(self) -> float:
        return self.losses[-1] if self.losses else math.nan


def train_tokenizer(texts: Iterable[str], vocab_size: int = 1024) -> "PreTrainedTokenizerFast":
    """Train a byte-level BPE tokenizer on ``texts`` (offline) and wrap it for ``transformers``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    if vocab_size < len(alphabet) + len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size must be >= {len(alphabet) + len(SPECIAL_TOKENS)} (256 bytes + special tokens)")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, initial_alphabet=alphabet, show_progress=False
    )
    tok.train_from_iterator(list(texts), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=BOS, eos_token=EOS, pad_token=PAD, additional_special_tokens=[IM_START]
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_tiny_model(
    out_dir: str | Path,
    texts: Sequence[str],
    *,
    vocab_size: int = 1024,
    hidden_size: int = 64,
    n_layers: int = 2,
    n_heads: int = 4,
    intermediate_size: int | None = None,
    max_positions: int = 4096,
    seed: int = 0,
) -> Path:
    """Build an untrained tiny Llama-style model with a tokenizer trained on ``texts``.

    Writes ``config.json``, ``model.safetensors``, the tokenizer files (with
    the chat template) and ``generation_config.json`` to ``out_dir``, and
    returns that directory. The weights are deterministic under ``seed``.
    """
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    shape = TinyModelConfig(vocab_size, hidden_size, n_layers, n_heads, intermediate_size, max_positions)
    if shape.hidden_size % shape.n_heads:
        raise ValueError(f"hidden_size={hidden_size} must be divisible by n_heads={n_heads}")
    texts = list(texts)
    if not texts:
        raise ValueError("build_tiny_model needs at least one text to train the tokenizer on")
    tokenizer = train_tokenizer(texts, shape.vocab_size)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size or 2 * shape.hidden_size,
        num_hidden_layers=shape.n_layers,
        num_attention_heads=shape.n_heads,
        num_key_value_heads=shape.n_heads,
        max_position_embeddings=shape.max_positions,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        do_sample=False,
        max_new_tokens=64,
    )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def count_parameters(model_dir: str | Path) -> int:
    """Number of distinct parameters of the model saved in ``model_dir``."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    return sum(p.numel() for p in model.parameters())


def train_lm(
    model_dir: str | Path,
    examples: Sequence[Example],
    steps: int = 100,
    lr: float = 3e-3,
    seed: int = 0,
    *,
    batch_size: int = 8,
    max_length: int | None = None,
    num_threads: int | None = 1,
) -> TrainReport:
    """Train the causal LM in ``model_dir`` on ``examples`` with AdamW on CPU and save it back.

    Each example is a text (next-token loss on all its tokens) or a
    ``(prompt, completion)`` pair, the prompt a text or chat messages: the
    loss is taken on the completion and the end-of-sequence token that
    follows it, so the model learns to stop there.
    Batches are drawn with replacement under ``seed``; the learning rate
    decays linearly to 10 % over ``steps``; gradients are clipped to norm 1
    (the loop is :func:`pivot_envs.trainers.lm_loop.train_steps`). Deterministic under ``seed``.

    ``num_threads`` sets torch's CPU threads during training (restored after):
    tiny models train fastest on one thread, and extra threads slow down badly
    on a machine whose cores are busy. ``None`` keeps torch's setting.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, get_polynomial_decay_schedule_with_warmup

    if not examples:
        raise ValueError("train_lm needs at least one example")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    limit = max_length or model.config.max_position_embeddings
    rows = [_encode(tokenizer, ex, limit) for ex in examples]

    torch.manual_seed(seed)
    rng = random.Random(seed)
    optim = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    sched = get_polynomial_decay_schedule_with_warmup(optim, 0, max(1, steps), lr_end=0.1 * lr, power=1.0)
    report = TrainReport(steps=steps)

    def record(row: dict) -> None:
        report.losses.append(row["loss"])
        report.tokens += row["loss_tokens"]

    start = time.perf_counter()
    train_steps(model, optim, sched, lambda _: [[Part([rows[rng.randrange(len(rows))] for _ in range(batch_size)])]],
                steps=steps, pad_id=tokenizer.pad_token_id, num_threads=num_threads, on_step=record)
    report.seconds = time.perf_counter() - start
    model.eval()
    model.save_pretrained(model_dir)
    return report


def generate(model_dir: str | Path, messages: list[dict], max_new_tokens: int = 64, num_threads: int | None = 1) -> str:
    """Greedy chat completion with the model in ``model_dir`` (for checks; servers do this in production)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pivot_envs.trainers.distributed import torch_threads  # imports torch; tiny is imported without it

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad(), torch_threads(num_threads):
        out = model.generate(**ids, max_new_tokens=max_new_tokens, do_sample=False)
    return tokenizer.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)


def _encode(tokenizer, example: Example, limit: int) -> tuple[list[int], list[int]]:
    """``(prompt ids, target ids)`` of an example (a text is all target), cut to ``limit`` tokens keeping the end."""
    eos = [tokenizer.eos_token_id]
    if isinstance(example, str):
        prompt, target = [], tokenizer(example, add_special_tokens=False)["input_ids"] + eos
    else:
        text, completion = example
        if not isinstance(text, str):
            text = tokenizer.apply_chat_template(text, add_generation_prompt=True, tokenize=False)
        prompt = tokenizer(text, add_special_tokens=False)["input_ids"]
        target = tokenizer(completion, add_special_tokens=False)["input_ids"] + eos
    cut = max(0, len(prompt) + len(target) - limit)
    return prompt[cut:], target[max(0, cut - len(prompt)):]
