"""The settings every client of an OpenAI-compatible ``/chat/completions`` endpoint shares: the ``openai`` agent's
(:class:`~pivot_envs.agents.openai_agent.OpenAISettings`) and the LLM user's
(:class:`~pivot_envs.users.LLMUserSettings`) extend :class:`EndpointSettings` with their own sampling knobs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class EndpointSettings:
    """How a client reaches its endpoint.

    Attributes:
        timeout_s: timeout of one request, seconds.
        max_retries: the ``openai`` client's retries of one request (connection errors, 408/409/429, 5xx).
        api_key_env: environment variable holding the API key (``"EMPTY"`` when unset).
        seed: the requests' seed (whether the server honours it is up to the server).
        extra_body: extra JSON fields of every request (server-specific options).
    """

    timeout_s: float = 120.0
    max_retries: int = 3
    api_key_env: str = "OPENAI_API_KEY"
    seed: int = 0
    extra_body: dict[str, Any] = field(default_factory=dict)
