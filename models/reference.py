"""Tiny reference policies per domain: a small Llama-style LM SFT-warmed on the domain's expert actions.

PivotRL profiles pivots with a reference policy: a pivot is informative when
the policy's K samples there get *mixed* rewards. Tests, examples and the
small-scale reproduction need such a policy without downloading one, so this
module builds it offline on CPU in a minute or two::

    from pivot_envs.models.reference import build_reference_model

    model_dir = build_reference_model("tool_use", "out/ref-tool_use", seed=0)
    agent = build_agent(f"hf:{model_dir}")          # or serve it: transformers serve / vLLM

Steps:

1. a byte-level BPE tokenizer is trained on the domain's bundled training
   trajectories (plus ``probe_texts``), with :data:`REFERENCE_CHAT_TEMPLATE`, a
   ChatML template that renders ``tools`` (a compact ``name(arg, ...)`` list in the
   system turn) and assistant ``tool_calls`` (Hermes ``<tool_call>`` blocks, the very
   text of :func:`~pivot_envs.actions.message_text`), so the model reads the same
   prompt from :mod:`pivot_envs.agents.prompting` locally and from
   ``transformers serve`` / vLLM;
2. an untrained Llama-style model (:func:`pivot_envs.models.tiny.build_tiny_model`);
3. ``lm_steps`` of language modelling on the training conversations rendered whole
   (windows of ``max_context_tokens`` cut at turn ends): every token counts, so the model
   learns the domain's text and to copy names and ids from the context far faster than
   from the actions alone;
4. ``steps`` of supervised fine-tuning (:func:`pivot_envs.models.tiny.train_lm`) on every
   pivot of the domain's *training* split: the loss is on the expert action text (and
   the end of turn) given the chat-templated context, contexts cut from the left to
   ``max_context_tokens``.

The defaults (600 + 400 steps) aim at a *partly* competent policy, the kind profiling needs
(mixed outcomes at some pivots). Measure what a built model does on a domain with::

    pivot-envs model tiny --domain search -o out/ref-search
    pivot-envs profile --pivots bundled:search:test --agent hf:out/ref-search -k 8 -o out/prof.jsonl
    pivot-envs profile --report out/prof.jsonl          # mean reward, zero-variance and mixed shares

More steps, more competence. The
generation config samples (``do_sample``, temperature 1, no top-k), so servers
sample from the model's distribution by default. Deterministic under ``seed``.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

from pivot_envs.agents.prompting import PromptConfig, action_target, chat_messages, pivot_prompt
from pivot_envs.domains import get_domain
from pivot_envs.models.tiny import build_tiny_model, count_parameters, train_lm
from pivot_envs.types import Pivot

REFERENCE_CHAT_TEMPLATE = (
    "{%- set sys = messages[0]['content'] if messages and messages[0]['role'] == 'system' else '' -%}"
    "{%- if sys or tools -%}"
    "{{ '<|im_start|>system\\n' + (sys or '') }}"
    "{%- if tools -%}"
    "{{ ('\\n' if sys else '') + 'Tools: ' }}"
    "{%- for t in tools -%}"
    "{%- set f = t['function'] if t['function'] is defined else t -%}"
    "{%- set props = (f['parameters']['properties'] if f['parameters'] is defined and f['parameters']['properties'] is defined else {}) -%}"
    "{{ f['name'] + '(' + (props.keys() | join(', ')) + ')' + ('; ' if not loop.last else '') }}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{{ '<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{%- for m in messages -%}"
    "{%- if not (loop.first and m['role'] == 'system') -%}"
    "{{ '<|im_start|>' + m['role'] + '\\n' }}"
    "{%- if m['role'] == 'assistant' and m['tool_calls'] is defined and m['tool_calls'] -%}"
    "{{ (m['content'] + '\\n') if m['content'] else '' }}"
    "{%- for c in m['tool_calls'] -%}"
    "{%- set f = c['function'] if c['function'] is defined else c -%}"
    "{{ '<tool_call>\\n' + ({'name': f['name'], 'arguments': f['arguments']} | tojson) + '\\n</tool_call>' + ('\\n' if not loop.last else '') }}"
    "{%- endfor -%}"
    "{%- else -%}"
    "{{ m['content'] or '' }}"
    "{%- endif -%}"
    "{{ '<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)
"""ChatML with tools (``name(args)`` list in the system turn) and Hermes tool calls (as :func:`message_text`)."""

GENERATION_TOKENS = 256
"""Room for the completion: the tokenizer's ``model_max_length`` is ``max_context_tokens`` plus this, so an
agent that keeps ``model_max_length - max_new_tokens`` prompt tokens (the ``hf`` agent's default with
``max_new_tokens=256``) shows the model the window it was trained on."""


@dataclass
class ReferenceModelReport:
    """What :func:`build_reference_model` did (also saved as ``reference_model.json`` in the model folder).

    Attributes:
        domain: the domain it was trained for.
        parameters: number of model parameters.
        vocab_size: tokenizer vocabulary size.
        train_pivots: training examples (pivots of the training split).
        steps: SFT optimiser steps.
        lm_steps: language-model warm-up steps.
        final_loss: mean token loss of the last SFT step (on the expert action tokens).
        lm_final_loss: mean token loss of the last warm-up step (on all tokens).
        seconds: wall time of the whole build.
        settings: the build arguments.
    """

    domain: str
    parameters: int
    vocab_size: int
    train_pivots: int
    steps: int
    lm_steps: int
    final_loss: float
    lm_final_loss: float
    seconds: float
    settings: dict = field(default_factory=dict)


def build_reference_model(
    domain: str,
    out_dir: str | Path,
    *,
    steps: int = 400,
    lm_steps: int = 600,
    seed: int = 0,
    probe_texts: Sequence[str] = (),
    pivots: Sequence[Pivot] | None = None,
    vocab_size: int = 2048,
    hidden_size: int = 64,
    n_layers: int = 2,
    n_heads: int = 2,
    max_context_tokens: int = 512,
    lr: float = 5e-3,
    batch_size: int = 8,
    num_threads: int | None = 1,
) -> Path:
    """Build, SFT-warm and save a tiny reference policy for ``domain``; returns ``out_dir``.

    Args:
        domain: a domain with bundled data (``tool_use``, ``terminal``, ``swe``, ``search``).
        out_dir: folder to write (``save_pretrained`` layout + ``reference_model.json``).
        steps: SFT optimiser steps on the expert actions (more = more competent).
        lm_steps: language-model warm-up steps before the SFT: next-token loss on every token
            of the training conversations (rendered whole, cut at turn ends into windows of
            ``max_context_tokens``), which teaches the domain's text and copying cheaply.
        seed: seeds the tokenizer corpus order, the initial weights and the batches.
        probe_texts: extra texts the tokenizer must encode compactly (e.g. prompts of other data).
        pivots: training pivots; default: the domain's bundled ``train`` split.
        vocab_size: BPE vocabulary size (the vocabulary stops growing when the data offer no merges).
        hidden_size, n_layers, n_heads: model shape.
        max_context_tokens: longest training sequence; contexts are cut from the left.
        lr: peak AdamW learning rate (linear decay to 10 %).
        batch_size: examples per step.
        num_threads: torch CPU threads while training (``None``: torch's setting).
    """
    from transformers import AutoTokenizer, GenerationConfig

    start = time.perf_counter()
    settings = {k: v for k, v in locals().items() if k in _SETTINGS}
    if steps < 0 or lm_steps < 0:
        raise ValueError(f"steps and lm_steps must be >= 0, got steps={steps}, lm_steps={lm_steps}")
    get_domain(domain)  # an unknown domain fails here, naming the known ones
    train = list(pivots) if pivots is not None else _bundled_pivots(domain)
    if not train:
        raise ValueError(f"no training pivots for domain {domain!r}")
    tool_lists = {json.dumps(p.tools, sort_keys=True): p.tools for p in train}

    corpus = _tokenizer_corpus(train, list(tool_lists.values()), probe_texts)
    out = build_tiny_model(out_dir, corpus, vocab_size=vocab_size, hidden_size=hidden_size, n_layers=n_layers,
                           n_heads=n_heads, max_positions=max(2048, 2 * max_context_tokens), seed=seed)
    tokenizer = AutoTokenizer.from_pretrained(out)
    tokenizer.chat_template = REFERENCE_CHAT_TEMPLATE
    tokenizer.model_max_length = max_context_tokens + GENERATION_TOKENS  # agents keep prompts to the trained window
    tokenizer.save_pretrained(out)
    GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=GENERATION_TOKENS,
    ).save_pretrained(out)

    lm_report = None
    if lm_steps:
        windows = _conversation_windows(tokenizer, train, max_context_tokens)
        lm_report = train_lm(out, windows, steps=lm_steps, lr=lr, seed=seed, batch_size=batch_size,
                             max_length=max_context_tokens, num_threads=num_threads)
    report = None
    if steps:
        config = PromptConfig()  # as the hf agent renders prompts
        examples = [(pivot_prompt(tokenizer, p, config), action_target(p.expert)) for p in train]
        report = train_lm(out, examples, steps=steps, lr=lr, seed=seed, batch_size=batch_size,
                          max_length=max_context_tokens, num_threads=num_threads)
    summary = ReferenceModelReport(
        domain=domain,
        parameters=count_parameters(out),
        vocab_size=len(tokenizer),
        train_pivots=len(train),
        steps=steps,
        lm_steps=lm_steps,
        final_loss=report.final_loss if report else float("nan"),
        lm_final_loss=lm_report.final_loss if lm_report else float("nan"),
        seconds=round(time.perf_counter() - start, 2),
        settings=settings,
    )
    (out / "reference_model.json").write_text(json.dumps(asdict(summary), indent=1) + "\n", encoding="utf-8")
    return out


def read_report(model_dir: str | Path) -> ReferenceModelReport:
    """The :class:`ReferenceModelReport` saved beside a reference model."""
    path = Path(model_dir) / "reference_model.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: {model_dir} was not built by build_reference_model")
    return ReferenceModelReport(**json.loads(path.read_text(encoding="utf-8")))


_SETTINGS = ("steps", "lm_steps", "seed", "vocab_size", "hidden_size", "n_layers", "n_heads", "max_context_tokens", "lr", "batch_size")


def _bundled_pivots(domain: str) -> list[Pivot]:
    loader = get_domain(domain).load_pivots
    if loader is None:
        raise ValueError(f"domain {domain!r} ships no bundled data: pass pivots= (a list of training pivots)")
    return list(loader("train"))


def _tokenizer_corpus(train: Sequence[Pivot], tool_lists: list, probe_texts: Sequence[str]) -> list[str]:
    """Texts the tokenizer learns merges from: every message of the training contexts, the targets, the tools."""
    seen: set[str] = set()
    texts: list[str] = []

    def add(text: str) -> None:
        if text and text not in seen:
            seen.add(text)
            texts.append(text)

    for p in train:
        for m in p.context:
            add(action_target(m) if m.get("role") == "assistant" else str(m.get("content") or ""))
        add(action_target(p.expert))
    for tools in tool_lists:
        for t in tools:
            fn = t.get("function", t)
            add(f"{fn.get('name')}({', '.join((fn.get('parameters') or {}).get('properties') or {})})")
    for text in probe_texts:
        add(text)
    add("<|im_start|>system\n<|im_start|>user\n<|im_start|>assistant\n<|im_start|>tool\nTools: ")
    return texts


def _conversation_windows(tokenizer, train: Sequence[Pivot], window: int) -> list[str]:
    """The training conversations rendered whole, cut at turn ends into texts of at most ``window`` tokens.

    A conversation is the longest pivot of each trajectory (its context + expert turn). Each
    window ends just before an end-of-turn token (``train_lm`` appends it), so the model
    does not learn to end a turn in the middle of one; only a single turn longer than the
    window is cut inside.
    """
    longest: dict[str, Pivot] = {}
    for p in train:
        key = str(p.meta.get("trajectory_id", p.id))
        if key not in longest or len(p.context) > len(longest[key].context):
            longest[key] = p
    eos = tokenizer.eos_token_id
    im_start = tokenizer.convert_tokens_to_ids("<|im_start|>")
    texts: list[str] = []
    for p in longest.values():
        messages = chat_messages([*p.context, p.expert])
        text = tokenizer.apply_chat_template(messages, tools=p.tools or None, tokenize=False)
        ids = tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]
        start = 0
        while start < len(ids):
            ends = [i for i in range(start + 1, min(len(ids), start + window)) if ids[i] == eos]
            if ends:
                end = ends[-1]
                texts.append(tokenizer.decode(ids[start:end]))
                start = end + 1
                while start < len(ids) and ids[start] != im_start:
                    start += 1  # the newline after an end of turn
            else:  # one turn longer than the window: cut it (the only place a window ends mid-turn)
                end = min(len(ids), start + window - 1)
                texts.append(tokenizer.decode(ids[start:end]))
                start = end
    return [t for t in texts if t.strip()]
