"""veRL agent loop for whole tasks: a pivot-envs episode played by veRL's rollout server.

veRL 0.9 rolls out through agent loops (``verl/experimental/agent_loop``): for each dataset row its
``AgentLoopWorker`` instantiates the loop registered under the row's ``agent_name`` and awaits
``run(sampling_params, **row)``, which talks to the rollout servers through ``server_manager.generate``
(token ids in, token ids out) and returns an ``AgentLoopOutput``. :class:`PivotEpisodeAgentLoop`,
registered as ``pivot_envs_episode`` with veRL's ``@register``, plays the row's task in its pivot-envs
world (:class:`~pivot_envs.episodes.EpisodeEnv`):

1. the episode's start messages and the world's tools are rendered with veRL's Continuous Token builder
   (the tokenizer's chat template, as veRL's own ``ToolAgentLoop`` renders them);
2. each turn, the model's tokens come from ``server_manager.generate``; they are decoded and stepped into
   the episode (the domain's action parser: Hermes ``<tool_call>`` blocks, or a final answer);
3. the tool results (and a simulated user's reply) the world appends are rendered and appended as context
   tokens: ``response_mask`` is 1 on the model's tokens and 0 on theirs;
4. the episode ends when it terminates (an answer, a finishing tool), after ``max_turns`` assistant turns,
   or when the response reaches ``rollout.response_length`` tokens (judged where it stands);
5. ``reward_score`` is the episode's task success (1.0 / 0.0): veRL's reward loop is then skipped for the
   sample. An episode whose world or user simulator failed scores 0.0 with ``episode_error = 1`` and the
   error text in ``reward_extra_info`` (never a silent 0).

Rows: :func:`pivot_envs.integrations.verl.to_verl_episode_rows` / ``export_episode_parquet`` (each row
carries its task, so any worker can rebuild its episode). veRL config (0.9.1)::

    data.train_files=tasks.parquet                       # export_episode_parquet("bundled:search:train", ...)
    actor_rollout_ref.rollout.mode=async                  # agent loops (veRL's default in 0.9)
    actor_rollout_ref.model.external_lib=pivot_envs.integrations.verl_agent_loop   # imports it: @register runs
    # or, with loop arguments, a file for actor_rollout_ref.rollout.agent.agent_loop_config_path:
    # - name: pivot_envs_episode
    #   _target_: pivot_envs.integrations.verl_agent_loop.PivotEpisodeAgentLoop
    #   user: none
    #   max_turns: 12

Rendering follows :func:`pivot_envs.agents.prompting.render_prompt`'s ``auto`` rule: a chat template that
mentions ``tools`` gets the world's tools through ``tools=``, any other gets the Hermes ``<tools>`` block in
its system message; assistant tool calls are passed as ``tool_calls`` when the template renders them, tool
results as ``tool`` messages when the template accepts that role (else ``<tool_response>`` user turns).

This module imports veRL (``pip install verl``); :mod:`pivot_envs.integrations.verl` does not.
"""

from __future__ import annotations

import json
from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register
from verl.utils.profiler import simple_timer

from pivot_envs.agents.prompting import chat_messages, hermes_tools_block, template_text
from pivot_envs.episodes import DEFAULT_MAX_TURNS, EpisodeEnv
from pivot_envs.integrations._common import pivot_from_json, prompt_config, rendered_prompt
from pivot_envs.integrations.verl import EPISODE_AGENT_NAME, PIVOT_AGENT_NAME
from pivot_envs.types import Message, Trajectory

__all__ = ["EPISODE_AGENT_NAME", "PIVOT_AGENT_NAME", "PivotEpisodeAgentLoop", "PivotTurnAgentLoop"]


def _accepts_tool_role(tokenizer: Any) -> bool:
    probe = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}, {"role": "tool", "content": "r"}]
    try:
        tokenizer.apply_chat_template(probe, tokenize=False)
    except Exception:  # noqa: BLE001 - e.g. "roles must alternate": the template has no tool role
        return False
    return True


@register(EPISODE_AGENT_NAME)
class PivotEpisodeAgentLoop(AgentLoopBase):
    """A pivot-envs episode as a veRL agent loop (see the module docstring).

    Args (from an ``agent_loop_config_path`` entry; veRL passes its own arguments to ``AgentLoopBase``):
        user: the episode's user simulator (``"none"``: the first answer ends the episode).
        max_turns: the agent's assistant turns before the episode is truncated.
        score_turns: compute the per-turn rewards on the expert's path (``turn_scores`` in the output's
            extra fields); off by default: the reward is task success.
        world: a world spec instead of the domain's (see :class:`~pivot_envs.episodes.EpisodeEnv`).
    """

    def __init__(self, *args: Any, user: Any = "none", max_turns: int = DEFAULT_MAX_TURNS, score_turns: bool = False,
                 world: Any = None, tools: Any = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        del tools  # veRL's own tool registry: the episode's tools are its world's
        self.user = user
        self.max_turns = int(max_turns)
        self.score_turns = bool(score_turns)
        self.world = world
        self.response_length = self.rollout_config.response_length
        source = template_text(self.tokenizer)
        self.template_tools = "tools" in source
        self.calls_as_text = "tool_calls" not in source
        self.tool_role = _accepts_tool_role(self.tokenizer) if source else False

    # --- the episode ------------------------------------------------------------------------------
    def _env(self, extra_info: dict[str, Any]) -> EpisodeEnv:
        spec = extra_info.get("task")
        if not spec:
            raise ValueError(f"the row has no extra_info.task (the task trajectory as JSON); agent_name "
                             f"{EPISODE_AGENT_NAME!r} plays rows written by pivot_envs.integrations.verl."
                             "to_verl_episode_rows / export_episode_parquet")
        task = Trajectory.from_dict(json.loads(spec) if isinstance(spec, str) else dict(spec))
        env = EpisodeEnv([task], domain=extra_info.get("domain") or None, world=self.world, user=self.user,
                         max_turns=self.max_turns, min_reward=None, score_turns=self.score_turns)
        env.reset(options={"task_id": task.id})
        return env

    def _chat(self, messages: list[Message], tools: list[dict[str, Any]]) -> list[Message]:
        """The episode's messages as the chat template renders them (see the module docstring)."""
        tools_text = hermes_tools_block(tools) if (tools and not self.template_tools) else None
        return chat_messages(messages, tool_calls_as_text=self.calls_as_text, tool_role=self.tool_role,
                             tools_text=tools_text)

    # --- veRL's entry point ----------------------------------------------------------------------------
    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        extra_info = dict(kwargs.get("extra_info") or {})
        env = await self.loop.run_in_executor(None, self._env, extra_info)
        try:
            return await self._play(env, sampling_params)
        finally:
            await self.loop.run_in_executor(None, env.close)

    async def _play(self, env: EpisodeEnv, sampling_params: dict[str, Any]) -> AgentLoopOutput:
        tools = list(env.tools)
        template_tools = tools if (self.template_tools and tools) else None
        metrics: dict[str, Any] = {}
        request_id = uuid4().hex
        token_ids = await self.ct_build_initial_tokens(self._chat(env.messages, tools), tools=template_tools)
        response_mask: list[int] = []
        logprobs: list[float] = []
        while True:
            with simple_timer("generate_sequences", metrics):
                output = await self.server_manager.generate(request_id=request_id, prompt_ids=token_ids,
                                                            sampling_params=sampling_params)
            merged, response_mask, probs = await self.ct_merge_assistant_token(
                token_ids, output.token_ids, response_mask, logprobs if (logprobs or output.log_probs) else None,
                assistant_logprobs=output.log_probs or None)
            token_ids, logprobs = merged.token_ids, probs or []
            text = self.tokenizer.decode(output.token_ids, skip_special_tokens=True)
            before = len(env.messages)
            with simple_timer("tool_calls", metrics):
                _, _, terminated, truncated, _ = await self.loop.run_in_executor(None, env.step, text)
            if terminated or truncated or env.done:
                break
            if len(response_mask) >= self.response_length:
                break
            previous = self._chat(env.messages[: before + 1], tools)
            merged, mask, probs = await self.ct_merge_context_msg(previous, self._chat(env.messages, tools),
                                                                  token_ids, response_mask, logprobs or None,
                                                                  tools=template_tools)
            if len(mask) >= self.response_length:
                break
            token_ids, response_mask, logprobs = merged.token_ids, mask, probs or []
        if not env.done:  # cut by the response budget: judge it where it stands
            env.done = True
            env._judge(truncated=True)
        return self._output(env, token_ids, response_mask, logprobs, metrics)

    def _output(self, env: EpisodeEnv, token_ids: list[int], response_mask: list[int], logprobs: list[float],
                metrics: dict[str, Any]) -> AgentLoopOutput:
        error = env.error
        success = env.success
        reward = 1.0 if (error is None and success) else 0.0
        n = self.response_length
        start = len(token_ids) - len(response_mask)  # as veRL's ToolAgentLoop splits prompt and response
        out = AgentLoopOutput(
            prompt_ids=token_ids[:start],
            response_ids=token_ids[start:][:n],
            response_mask=response_mask[:n],
            response_logprobs=logprobs[:n] if logprobs else None,
            reward_score=reward,
            num_turns=len(env.messages) - env.start_messages + 1,
            metrics=metrics,
        )
        out.extra_fields["reward_extra_info"] = {
            "success": reward,
            "episode_error": float(error is not None),
            "episode_error_message": str(error or ""),
            "turns": float(env.turns),
            "tool_calls": float(env.tool_calls),
            "tool_errors": float(env.tool_errors),
        }
        out.extra_fields["turn_scores"] = list(env.scorer.rewards) if self.score_turns else []
        out.extra_fields["tool_rewards"] = []
        return out


@register(PIVOT_AGENT_NAME)
class PivotTurnAgentLoop(AgentLoopBase):
    """One turn at a pivot, its prompt rendered as profiling rendered it.

    Rows: :func:`pivot_envs.integrations.verl.to_verl_rows` with ``agent_loop=True`` (``agent_name``
    :data:`PIVOT_AGENT_NAME`; the pivot in ``reward_model.ground_truth``). The prompt is
    :func:`pivot_envs.integrations._common.rendered_prompt`'s token ids for the rollout's tokenizer with the model
    folder's prompt settings (:func:`~pivot_envs.integrations._common.prompt_config`: ``prompt_tools`` and
    ``max_prompt_tokens`` override them): the same ids ``pivot-envs profile``, the bundled trainer and the TRL
    adapter use, so D_adv is measured on the prompts that are trained. One ``server_manager.generate`` call;
    ``reward_score`` is left to veRL's reward loop (``compute_score`` with the documented keys).
    """

    def __init__(self, *args: Any, prompt_tools: str | None = None, max_prompt_tokens: int | None = None,
                 tools: Any = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        del tools  # veRL's own tool registry: a pivot's tools are its own
        model = self.config.actor_rollout_ref.model.path
        self.prompt = prompt_config(model, tools=prompt_tools, max_prompt_tokens=max_prompt_tokens)
        self.response_length = self.rollout_config.response_length

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        reward_model = kwargs.get("reward_model") or {}
        if "ground_truth" not in reward_model:
            raise ValueError(f"the row has no reward_model.ground_truth (the pivot as JSON); agent_name "
                             f"{PIVOT_AGENT_NAME!r} plays rows written by pivot_envs.integrations.verl.to_verl_rows")
        pivot = pivot_from_json(reward_model["ground_truth"])
        prompt_ids = rendered_prompt(pivot, self.tokenizer, self.prompt).ids
        metrics: dict[str, Any] = {}
        with simple_timer("generate_sequences", metrics):
            output = await self.server_manager.generate(request_id=uuid4().hex, prompt_ids=prompt_ids,
                                                        sampling_params=sampling_params)
        response = list(output.token_ids)[: self.response_length]
        logprobs = list(output.log_probs)[: self.response_length] if output.log_probs else None
        return AgentLoopOutput(prompt_ids=prompt_ids, response_ids=response, response_mask=[1] * len(response),
                               response_logprobs=logprobs, num_turns=2, metrics=metrics)
