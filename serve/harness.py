"""``pivot-envs serve --policy AGENT_SPEC``: the harness endpoint as a face of the serve app.

::

    pivot-envs serve --policy hf:out/tiny-terminal                       # in-process engine (hf, vllm:MODEL)
    pivot-envs serve --policy openai:Qwen/Qwen3-8B@http://10.0.0.1:8000/v1   # forward to an OpenAI-compatible server

    POST /harness/rollouts {"env": "pivot/Terminal-Episode-v0", "split": "test", "index": 0}
      -> {"rollout_id", "task_id", "base_url", "mcp_url", "messages", "tools"}
    POST /harness/rollouts/{id}/finish -> {"task_id", "success", "reward", "turn_rewards", "retokenized_calls", "calls", ...}

The routes, the capture and the world over MCP are :mod:`pivot_envs.trainers.harness_http` (the trainer hosts
the same endpoint for its harness rollouts, so it lives below both); this module only builds it from the
command line's policy spec and the served envs. Rollouts may name any served episode env, and
``pivot/Episode-v0`` with ``kwargs`` (``{"world": "tau2-airline", "tasks": "tau2:airline"}``).
"""

from __future__ import annotations

from typing import Any, Iterable

from pivot_envs.agents.spec import build_agent, parse_agent_spec
from pivot_envs.domains import GENERIC_EPISODE_ENV_ID
from pivot_envs.trainers.harness_http import HarnessEndpoint
from pivot_envs.trainers.harness_policy import EnginePolicy, HarnessPolicy, UpstreamPolicy
from pivot_envs.trainers.harness_rollouts import EpisodeEnvs, HarnessRollouts

__all__ = ["build_endpoint", "build_policy"]


def build_policy(spec: str | dict[str, Any]) -> HarnessPolicy:
    """The endpoint's policy from an agent spec: ``openai:MODEL@URL`` forwards to that server (its first URL);
    any other agent (``hf:DIR``, ``vllm:MODEL``, ``replay``...) answers in-process."""
    config = parse_agent_spec(spec) if isinstance(spec, str) else dict(spec)
    if config.get("kind") == "openai":
        urls = config.get("base_urls") or []
        if not urls:
            raise ValueError(f"--policy {spec!r}: name the server: openai:MODEL@http://HOST:PORT/v1")
        return UpstreamPolicy(config["model"], urls[0])
    return EnginePolicy(build_agent(config))


def build_endpoint(policy: str | dict[str, Any], env_ids: Iterable[str], *, idle_timeout_s: float = 600.0,
                   max_turns: int = 30) -> HarnessEndpoint:
    """The harness endpoint of the serve app: ``policy`` answers, rollouts play the served episode ``env_ids``."""
    allowed = set(env_ids) | {GENERIC_EPISODE_ENV_ID}
    rollouts = HarnessRollouts(build_policy(policy), EpisodeEnvs(allowed=allowed), idle_timeout_s=idle_timeout_s,
                               max_turns=max_turns)
    return HarnessEndpoint(rollouts)
