"""The agent protocol: any policy that samples actions at pivots.

An agent takes a batch of pivots and a group size ``n`` and returns ``n``
completions per pivot, each with the raw text, the parsed action and — when
the backend gives them — the sampled token ids and their log-probs::

    agent = build_agent("noisy_expert:0.5")
    groups = agent.sample(pivots, n=8, seed=0)      # groups[i][j]: j-th sample at pivots[i]

Agents are built from a spec string (the CLI's ``--agent``) or a config dict, and
``config()`` returns a dict that rebuilds them (so Ray can ship them).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Sequence

from pivot_envs.registry import ArgParser, Registry
from pivot_envs.types import Action, Pivot

_REGISTRY: dict[str, Callable[..., "Agent"]] = {}
"""Kind -> agent factory: the store of :data:`AGENTS`."""


@dataclass
class Completion:
    """One sampled action.

    Attributes:
        text: the raw model text (for message-returning APIs: the Hermes rendering of the message).
        action: the parsed action.
        token_ids: ids of the sampled completion tokens, when the backend gives them.
        logprobs: log-probs of those tokens under the sampling policy, when given.
    """

    text: str
    action: Action
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None


class Agent:
    """Base class: subclasses set ``kind`` and implement :meth:`sample`."""

    kind: ClassVar[str] = "base"

    def sample(self, pivots: Sequence[Pivot], n: int, *, seed: int | None = None) -> list[list[Completion]]:  # pragma: no cover
        raise NotImplementedError

    async def asample(self, pivots: Sequence[Pivot], n: int, *, seed: int | None = None) -> list[list[Completion]]:
        """Async form; the default runs :meth:`sample` in a worker thread."""
        return await asyncio.to_thread(self.sample, pivots, n, seed=seed)

    def config(self) -> dict[str, Any]:  # pragma: no cover
        raise NotImplementedError

    def close(self) -> None:
        """Release resources (servers, models). Idempotent."""


AGENTS: Registry[Callable[..., Agent]] = Registry("agent kind", key="kind", aliases=("name",), entries=_REGISTRY,
                                                  instance_of=Agent)
"""The agent registry: :func:`register_agent` adds to it; :func:`pivot_envs.agents.spec.build_agent` builds from it
(and gives its errors the valid forms)."""


def register_agent(kind: str, *, arg: ArgParser | str | None = None,
                   replace: bool = True) -> Callable[[Callable[..., Agent]], Callable[..., Agent]]:
    """Register an agent factory under ``kind`` (the part of a spec before the first ':').

    ``arg`` says how ``KIND:TEXT`` passes ``TEXT``: positionally (``None``), as the keyword it names, or
    through a parser returning keyword arguments (see :class:`pivot_envs.registry.Registry`). A kind
    registered again replaces the earlier factory (``replace=False`` refuses instead).
    """

    def deco(factory: Callable[..., Agent]) -> Callable[..., Agent]:
        return AGENTS.register(kind, factory, arg=arg, replace=replace)

    return deco


def agent_kinds() -> list[str]:
    return AGENTS.names()
