"""``pivot-envs serve --policy AGENT_SPEC``: the harness endpoint as a face of the serve app.

::

    pivot-envs serve --policy hf:out/tiny-terminal                       # in-process engine (hf, vllm:MODEL)
    pivot-envs serve --policy openai:Qwen/Qwen3-8B@http://10.0.0.1:8000/v1   # forward to an OpenAI-compatible server

    POST /harness/rollouts {"env": "pivot/Terminal-Episode-v0", "split": "test", "index": 0}
      -> {"rollout_id", "task_id", "base_url", "mcp_url", "model", "messages", "tools", "system", "task", "user"}
    POST /harness/rollouts/{id}/finish -> {"task_id", "success", "reward", "turn_rewards", "retokenized_calls", "calls", ...}

The routes, the capture and the world over MCP are :mod:`pivot_envs.harness` (the trainer hosts the same endpoint
for its harness rollouts, so it lives below both); this module only builds it from the command line's policy spec,
user and the served envs (a server without ``--policy`` answers the harness routes with a 404 saying so:
:mod:`pivot_envs.serve.harness_off`). Rollouts may
name any served episode env, and ``pivot/Episode-v0`` with ``kwargs`` (``{"world": "tau2-airline", "tasks":
"tau2:airline"}``).
"""

from __future__ import annotations

from typing import Any, Iterable

from pivot_envs.domains import GENERIC_EPISODE_ENV_ID
from pivot_envs.harness.envs import EpisodeEnvs
from pivot_envs.harness.http import HarnessEndpoint
from pivot_envs.harness.policy import build_policy
from pivot_envs.harness.rollouts import HarnessRollouts

__all__ = ["build_endpoint"]


def build_endpoint(policy: str | dict[str, Any], env_ids: Iterable[str], *, idle_timeout_s: float = 600.0,
                   max_turns: int = 30, user: Any = "scripted") -> HarnessEndpoint:
    """The harness endpoint of the serve app: ``policy`` answers, rollouts play the served episode ``env_ids`` with
    ``user`` as the tasks' user (reached through the user tool)."""
    allowed = set(env_ids) | {GENERIC_EPISODE_ENV_ID}
    rollouts = HarnessRollouts(build_policy(policy), EpisodeEnvs(allowed=allowed, user=user),
                               idle_timeout_s=idle_timeout_s, max_turns=max_turns)
    return HarnessEndpoint(rollouts)

