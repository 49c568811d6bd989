"""How far an arm moved from its base: KL to the base and entropy, on the arm's own samples at the test pivots.

At ``limit`` test pivots (a seeded sample), the arm samples ``k`` actions at temperature 1 on its engine (the
demo's sampling settings, so the prompts are the ones it is evaluated with). Both models then score those tokens
teacher-forced in float32 (:func:`pivot_envs.trainers.logprobs.completion_logprobs`), so engine precision
(vLLM's bfloat16) does not enter the figures:

* ``kl_per_token``: mean over sampled tokens of ``log pi_arm(y_t) - log pi_base(y_t)``, the k1 estimate of
  ``KL(pi_arm || pi_base)`` per token (0 for the base itself); ``kl_per_sample`` the same summed per action;
* ``entropy_per_token``: the arm's exact next-token entropy at the sampled positions, averaged;
* ``base_entropy_per_token``: the base's, at the same positions.

A full fine-tune at 1e-5 and a LoRA at 2e-4 can score alike on tasks while one moved ten times further: this says
which (issue 36). One float32 forward of each model over ``limit * k`` sequences: about 2 minutes per arm for 48
pivots x 4 on 2 CPU cores with SmolLM2-135M.
"""

from __future__ import annotations

import math
import random
import time
from typing import Any

import torch

from pivot_envs.agents.prompting import encode_prompt
from pivot_envs.experiments.engines import eval_agents
from pivot_envs.experiments.evaluation import Sampling
from pivot_envs.formats import read_pivots
from pivot_envs.trainers.logprobs import completion_logprobs
from pivot_envs.trainers.token_batch import pack

SCORE_BATCH = 8
"""Sequences per float32 forward pass."""


def divergence(model: str, base: str, pivots: str, sampling: Sampling, *, seed: int, k: int = 4,
               limit: int = 48) -> dict[str, Any]:
    """KL to ``base`` and entropy of ``model`` on its own samples at ``limit`` pivots of ``pivots`` (see the module
    docstring)."""
    began = time.perf_counter()
    chosen = read_pivots(pivots)
    if len(chosen) > limit:
        chosen = random.Random(seed).sample(chosen, limit)
    with eval_agents(model, sampling.engine, seed=seed, max_new_tokens=sampling.max_new_tokens,
                     max_prompt_tokens=sampling.max_prompt_tokens, batch_size=sampling.batch_size,
                     num_threads=sampling.num_threads, device=sampling.device) as agent:
        sampler = agent(1.0)
        groups = sampler.sample(chosen, k, seed=seed)
        prompts = [encode_prompt(sampler.tokenizer, p, sampler.prompt_config) for p in chosen]
    rows = [(prompt, list(c.token_ids or [])) for prompt, group in zip(prompts, groups) for c in group]
    rows = [(p, c) for p, c in rows if c]
    if not rows:
        raise ValueError(f"divergence: {model} sampled no tokens at {len(chosen)} pivots")
    arm = _score(model, rows, sampling, with_entropy=True)
    ref = arm if model == base else _score(base, rows, sampling, with_entropy=True)
    kl = [a - b for seq_a, seq_b in zip(arm["logp"], ref["logp"]) for a, b in zip(seq_a, seq_b)]
    per_sample = [sum(a) - sum(b) for a, b in zip(arm["logp"], ref["logp"])]
    return {"pivots": len(chosen), "samples": len(rows), "tokens": len(kl),
            "kl_per_token": _mean(kl), "kl_per_sample": _mean(per_sample),
            "entropy_per_token": _mean([e for seq in arm["entropy"] for e in seq]),
            "base_entropy_per_token": _mean([e for seq in ref["entropy"] for e in seq]),
            "seconds": round(time.perf_counter() - began, 1)}


def _score(model_dir: str, rows: list[tuple[list[int], list[int]]], sampling: Sampling, *,
           with_entropy: bool) -> dict[str, list[list[float]]]:
    """Per-sequence token log-probs (and entropies) of the completions under ``model_dir``, float32."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if sampling.num_threads:
        torch.set_num_threads(sampling.num_threads)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
    out: dict[str, list[list[float]]] = {"logp": [], "entropy": []}
    with torch.no_grad():
        for i in range(0, len(rows), SCORE_BATCH):
            chunk = rows[i:i + SCORE_BATCH]
            batch = pack([p for p, _ in chunk], [c for _, c in chunk], pad)
            logp, entropy = completion_logprobs(model, batch, with_entropy=with_entropy)
            for j, (_, completion) in enumerate(chunk):
                n = len(completion)
                out["logp"].append(logp[j, :n].tolist())
                out["entropy"].append(entropy[j, :n].tolist() if entropy is not None else [])
    del model
    return out


def _mean(values: list[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None
