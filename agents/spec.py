"""Build an agent from a spec string (the CLI's ``--agent``) or a config dict.

Spec strings::

    hf:MODEL_DIR                         a local transformers model (folder or hub id)
    openai:MODEL@BASE_URL[,BASE_URL...]  an OpenAI-compatible server; several URLs are used round-robin
    openai:MODEL                         the default OpenAI endpoint (OPENAI_BASE_URL / api.openai.com)
    vllm:MODEL                           an in-process vLLM engine (extra: pivot-envs[vllm])
    replay                               the expert action, n times (in an episode: the task's recorded actions)
    replay:FILE                          the actions recorded in FILE, matched by trajectory id
    noisy_expert[:P]                     the expert (or a recorded alternative), perturbed with probability P (0.5)
    {"kind": "hf", "model": "DIR", ...}  a JSON config dict (what ``Agent.config()`` returns)

A config dict is ``{"kind": KIND, **keyword arguments of the agent's factory}`` (``"name"`` works as
well as ``"kind"``, as in every other registry: :class:`pivot_envs.registry.Registry`);
``build_agent(agent.config())`` rebuilds an equivalent agent. A third-party kind
registered with :func:`~pivot_envs.agents.base.register_agent` is built from
``KIND`` (no arguments) or ``KIND:ARG`` (``ARG`` passed positionally).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pivot_envs.agents import baselines
from pivot_envs.agents.base import AGENTS, Agent

VALID_FORMS = (
    "hf:MODEL_DIR",
    "openai:MODEL@BASE_URL[,BASE_URL...]",
    "vllm:MODEL",
    "replay[:FILE]",
    "noisy_expert[:P]",
    '{"kind": KIND, ...} (a JSON config dict)',
)

_BUILT_IN = ("hf", "openai", "vllm", "replay", "noisy_expert")
_OPENAI = re.compile(r"^(?P<model>.+?)@(?P<urls>https?://.+)$")


class AgentSpecError(ValueError):
    """A spec string or config dict that names no buildable agent."""

    def __init__(self, spec: Any, problem: str):
        forms = "\n  ".join(VALID_FORMS)
        extra = sorted(set(AGENTS.names()) - set(_BUILT_IN))
        more = f"\nother registered kinds: {', '.join(extra)}" if extra else ""
        super().__init__(f"bad agent spec {spec!r}: {problem}\nvalid forms:\n  {forms}{more}")


# --------------------------------------------------------------------------- the built-in kinds' ``KIND:ARG``


def _model(kind: str, example: str):
    def parse(rest: str | None) -> dict[str, Any]:
        if not rest:
            raise ValueError(f"{kind} needs {example}")
        return {"model": rest}

    return parse


def _openai(rest: str | None) -> dict[str, Any]:
    if not rest:
        raise ValueError("openai needs a model: openai:MODEL@BASE_URL")
    m = _OPENAI.match(rest)
    if m is None:
        if "@" in rest:
            raise ValueError("the part after '@' must be http(s):// base URLs separated by commas")
        return {"model": rest}
    urls = [u.strip() for u in m.group("urls").split(",")]
    bad = [u for u in urls if not re.match(r"^https?://[^\s/]+", u)]
    if bad:
        raise ValueError(f"not an http(s):// base URL: {bad[0]!r}")
    return {"model": m.group("model"), "base_urls": urls}


def _replay(rest: str | None) -> dict[str, Any]:
    if rest is None:
        return {}
    if not rest.strip() or not Path(rest.strip()).is_file():
        raise ValueError("replay takes no argument except a trajectory file (replay:FILE): "
                         f"{rest.strip()!r} is no such file")
    return {"file": rest.strip()}


def _noisy_expert(rest: str | None) -> dict[str, Any]:
    if rest is None:
        return {}
    try:
        p = float(rest)
    except ValueError:
        raise ValueError(f"P must be a number in [0, 1], got {rest!r}") from None
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"P must be in [0, 1], got {p}")
    return {"p": p}


# the heavy backends are "module:Class" references, imported when such an agent is built
AGENTS.register("hf", "pivot_envs.agents.hf:HFAgent", arg=_model("hf", "a model folder or hub id: hf:MODEL_DIR"))
AGENTS.register("openai", "pivot_envs.agents.openai_agent:OpenAIAgent", arg=_openai)
AGENTS.register("vllm", "pivot_envs.agents.vllm_agent:VLLMAgent", arg=_model("vllm", "a model: vllm:MODEL"))
AGENTS.register("replay", baselines.ReplayAgent, arg=_replay, replace=True)
AGENTS.register("noisy_expert", baselines.NoisyExpertAgent, arg=_noisy_expert, replace=True)


AGENTS.error = AgentSpecError  # the registry's errors name the spec and list the valid forms


def parse_agent_spec(spec: str) -> dict[str, Any]:
    """The config dict of a spec string (see the module docstring); raises :class:`AgentSpecError`."""
    if not isinstance(spec, str) or not spec.strip():
        raise AgentSpecError(spec, "expected a non-empty string")
    return AGENTS.parse(spec)


def build_agent(spec: "str | dict[str, Any] | Agent") -> Agent:
    """An agent from a spec string, a config dict (``{"kind": ..., ...}``) or an agent (returned as is)."""
    if not isinstance(spec, (str, dict, Agent)):
        raise AgentSpecError(spec, f"expected a spec string or a config dict, got {type(spec).__name__}")
    return AGENTS.build(spec)
