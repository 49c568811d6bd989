"""The rollout engine of a trainer: who samples the groups and episodes, and how the weights get there.

::

    engine = build_rollout_engine(config, policy, tokenizer, hf_agent)   # config.rollout_engine: "hf" | "vllm"
    seconds = engine.sync(policy, updates)   # before sampling: the engine's weights include ``updates`` updates
    engine.agent.sample(pivots, n=8)         # the sampler every trainer step uses
    engine.policy_version

``hf`` samples with transformers' ``generate`` on the policy's live weights: nothing to sync, the
sampler always has every update. ``vllm`` samples with an in-process vLLM engine colocated with the
trainer (TRL's colocate mode). After an optimizer update, :meth:`VLLMRolloutEngine.sync` loads the
policy's weights into the engine's worker through vLLM's in-place ``reload_weights`` (no restart), then
drops the prefix cache, whose keys and values the old weights computed.

What goes to the engine (:func:`engine_weights`):

* a full model: its ``state_dict``; with tied input and output embeddings the output head is sent
  under ``lm_head.weight`` explicitly, because an update without it leaves vLLM's old head in place;
* a LoRA model: the adapters merged into the base (``merge_adapter``), the merged tensors sent under
  the base model's names, then unmerged. One path for both kinds of model, and it avoids what failed
  with vLLM's own LoRA serving here (each adapter version needs a fresh id or the old one is served;
  prompt log-probs with LoRA stop the engine).
"""

from __future__ import annotations

import time
from typing import Any

from pivot_envs.agents.hf import HFAgent
from pivot_envs.agents.vllm_agent import VLLMAgent

class HFRolloutEngine:
    """Sampling on the policy's live weights (transformers ``generate``): always up to date."""

    name = "hf"

    def __init__(self, agent: HFAgent):
        self.agent = agent
        self.policy_version = 0

    def sync(self, policy: Any, updates: int) -> float:
        self.policy_version = int(updates)
        return 0.0

    def close(self) -> None:
        """Nothing to release: the agent samples from the trainer's own model."""


class VLLMRolloutEngine:
    """An in-process vLLM engine whose weights follow the policy's.

    Args:
        agent: a :class:`~pivot_envs.agents.vllm_agent.VLLMAgent` (its engine receives the weights; closing
            the agent stops the engine only when the agent built it).
    """

    name = "vllm"

    def __init__(self, agent: VLLMAgent):
        self.agent = agent
        self.policy_version = -1  # the engine holds the checkpoint's weights until the first sync

    def sync(self, policy: Any, updates: int) -> float:
        """Load ``policy``'s weights into the engine unless it already holds ``updates`` updates; seconds taken."""
        if updates == self.policy_version:
            return 0.0
        start = time.perf_counter()
        load_weights(self.agent.llm, engine_weights(policy))
        self.policy_version = int(updates)
        return time.perf_counter() - start

    def close(self) -> None:
        self.agent.close()


def load_weights(llm: Any, weights: list[tuple[str, Any]]) -> None:
    """Reload ``weights`` (checkpoint names) into the worker of an in-process ``vllm.LLM``, in place.

    ``collective_rpc`` with a function runs it on the worker; in-process the tensors arrive as they are
    (across processes vLLM would serialise them to lists). The prefix cache is reset afterwards.
    """

    def reload(worker: Any) -> None:
        worker.reload_weights(weights_iterator=iter(weights))

    try:
        llm.collective_rpc(reload)
    except Exception as exc:  # a failed reload leaves the engine's weights half-written
        raise RuntimeError(f"loading the policy's weights into the vLLM engine failed ({exc}); the engine's weights "
                           "are now inconsistent: restart the run") from exc
    llm.reset_prefix_cache()


def engine_weights(policy: Any) -> list[tuple[str, Any]]:
    """``(name, tensor)`` pairs of ``policy`` under the names of its ``save_pretrained`` checkpoint."""
    if hasattr(policy, "merge_adapter") and hasattr(policy, "peft_config"):
        return _merged_lora_weights(policy)
    state = {name: tensor.detach() for name, tensor in policy.state_dict().items()}
    return _with_output_head(policy, state)


def _with_output_head(model: Any, state: dict[str, Any]) -> list[tuple[str, Any]]:
    tied = bool(getattr(getattr(model, "config", None), "tie_word_embeddings", False))
    if tied and "lm_head.weight" not in state and hasattr(model, "get_input_embeddings"):
        state["lm_head.weight"] = model.get_input_embeddings().weight.detach()
    return list(state.items())


def _merged_lora_weights(peft_model: Any) -> list[tuple[str, Any]]:
    """The LoRA model's merged weights under the base model's names (TRL's ``_move_model_to_vllm``)."""
    import torch

    peft_model.merge_adapter()
    try:
        state: dict[str, Any] = {}
        prefix = "base_model.model."
        for name, tensor in peft_model.named_parameters(remove_duplicate=False):
            if "lora_" in name or ("modules_to_save" in name and "original_module" in name):
                continue
            clean = name[len(prefix):] if name.startswith(prefix) else name
            clean = clean.replace(".base_layer.", ".").replace(".modules_to_save.default.", ".")
            with torch.no_grad():
                state[clean] = tensor.detach().clone()
        base = peft_model.get_base_model()
        return _with_output_head(base, state)
    finally:
        peft_model.unmerge_adapter()


def build_rollout_engine(config: Any, policy: Any, tokenizer: Any, hf_agent: HFAgent,
                         shared_llm: Any = None) -> HFRolloutEngine | VLLMRolloutEngine:
    """The engine ``config.rollout_engine`` names; ``hf_agent`` is the ``hf`` sampler on the live policy.

    ``shared_llm``: a ``vllm.LLM`` built elsewhere for a model of the same architecture (tests share one
    per session); the first :meth:`~VLLMRolloutEngine.sync` loads the policy's weights into it.
    """
    if config.rollout_engine == "hf":
        return HFRolloutEngine(hf_agent)
    settings = dict(temperature=config.temperature, top_p=config.top_p, max_new_tokens=config.max_new_tokens,
                    max_prompt_tokens=config.max_prompt_tokens or hf_agent.prompt_config.max_prompt_tokens,
                    tools=config.prompt_tools, seed=config.seed, dtype=config.vllm_dtype,
                    gpu_memory_utilization=config.vllm_gpu_memory_utilization, kv_cache_gib=config.vllm_kv_cache_gib,
                    engine=dict(config.vllm_engine))
    agent = VLLMAgent(config.model, llm=shared_llm, tokenizer=tokenizer, **settings)
    return VLLMRolloutEngine(agent)

