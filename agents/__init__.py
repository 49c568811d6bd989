"""Agents: policies that sample actions at pivots (local transformers, OpenAI-compatible servers, baselines).

Build one from a spec string (the CLI's ``--agent``) or a config dict::

    from pivot_envs.agents import build_agent

    agent = build_agent("noisy_expert:0.5")          # or "hf:DIR", "openai:MODEL@URL", "vllm:MODEL", "replay"
    groups = agent.sample(pivots, n=8, seed=0)       # groups[i][j]: the j-th Completion at pivots[i]

Backends with heavy dependencies (``hf``: torch/transformers, ``vllm``) are
imported only when such an agent is built.
"""

from pivot_envs.agents.base import Agent, Completion, agent_kinds, register_agent
from pivot_envs.agents.spec import AgentSpecError, build_agent, parse_agent_spec

__all__ = [
    "Agent",
    "AgentSpecError",
    "Completion",
    "agent_kinds",
    "build_agent",
    "parse_agent_spec",
    "register_agent",
]
