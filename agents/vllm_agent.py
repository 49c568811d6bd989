"""``vllm`` agent: an in-process vLLM engine (optional extra ``pivot-envs[vllm]``).

NOT RUN ON THIS MACHINE: vLLM cannot be installed where this module was
written (no GPU), so only the clear ImportError path is tested here. The code
follows vLLM's documented offline API (``LLM``, ``SamplingParams``,
``LLM.generate`` with ``{"prompt_token_ids": ...}`` prompts, per-request
``seed``, ``logprobs=0`` for the sampled token's log-prob) and is kept thin on
purpose. For a served model use the ``openai`` agent against ``vllm serve``
instead, which is tested.

Prompts are rendered exactly as in the ``hf`` agent
(:mod:`pivot_envs.agents.prompting` with the engine's tokenizer); the sampling
params of a pivot are seeded from ``(seed, pivot id)``, so samples do not
depend on the batch. ``Completion.logprobs`` are vLLM's log-probs of the
sampled tokens (by default vLLM reports them from the raw model logits, i.e.
NOT tempered; see vLLM's ``logprobs_mode``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from pivot_envs.actions import parse_action
from pivot_envs.agents.base import Agent, Completion
from pivot_envs.agents.prompting import PromptConfig, encode_prompt
from pivot_envs.types import Pivot, stable_hash

INSTALL_HINT = 'the vllm agent needs vLLM: pip install "pivot-envs[vllm]" (Linux with a CUDA GPU)'


@dataclass
class VLLMSampling:
    """Settings of the ``vllm`` agent.

    Attributes:
        temperature: softmax temperature (0 = greedy).
        top_p: nucleus sampling mass.
        max_new_tokens: longest completion in tokens.
        max_prompt_tokens: keep the last this-many prompt tokens (``None``: all).
        tools: where tool specs go in the prompt (see :class:`PromptConfig`).
        seed: the seed used when ``sample`` gets ``seed=None``.
        engine: extra keyword arguments of ``vllm.LLM`` (``gpu_memory_utilization``, ``tensor_parallel_size``...).
    """

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 256
    max_prompt_tokens: int | None = None
    tools: str = "auto"
    seed: int = 0
    engine: dict[str, Any] = field(default_factory=dict)


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError as exc:
        raise ImportError(f"{INSTALL_HINT} ({exc})") from exc
    return vllm


class VLLMAgent(Agent):
    """Sample with an in-process ``vllm.LLM`` engine built from ``model``."""

    kind = "vllm"

    def __init__(self, model: str, **settings: Any):
        vllm = _import_vllm()
        self.model_name = model
        self.settings = VLLMSampling(**settings)
        self.llm = vllm.LLM(model=model, seed=self.settings.seed, **self.settings.engine)
        self.tokenizer = self.llm.get_tokenizer()
        self.prompt_config = PromptConfig(tools=self.settings.tools, max_prompt_tokens=self.settings.max_prompt_tokens)
        self._params = vllm.SamplingParams

    def sample(self, pivots: Sequence[Pivot], n: int, *, seed: int | None = None) -> list[list[Completion]]:
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"n (samples per pivot) must be an integer >= 1, got {n!r}")
        s = self.settings
        seed = s.seed if seed is None else int(seed)
        prompts = [{"prompt_token_ids": encode_prompt(self.tokenizer, p, self.prompt_config)} for p in pivots]
        params = [
            self._params(n=n, temperature=s.temperature, top_p=s.top_p, max_tokens=s.max_new_tokens, logprobs=0,
                         seed=int(stable_hash("vllm", seed, p.id), 16) % (2**31))
            for p in pivots
        ]
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        groups = []
        for out in outputs:
            group = []
            for o in out.outputs:
                ids = list(o.token_ids)
                lps = None
                if o.logprobs:
                    lps = [float(step[t].logprob) for t, step in zip(ids, o.logprobs)]
                group.append(Completion(text=o.text, action=parse_action(o.text), token_ids=ids, logprobs=lps))
            groups.append(group)
        return groups

    def config(self) -> dict[str, Any]:
        return {"kind": self.kind, "model": self.model_name, **asdict(self.settings)}

    def close(self) -> None:
        self.llm = None
