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

A config dict is ``{"kind": KIND, **keyword arguments of the agent's factory}``;
``build_agent(agent.config())`` rebuilds an equivalent agent. A third-party kind
registered with :func:`~pivot_envs.agents.base.register_agent` is built from
``KIND`` (no arguments) or ``KIND:ARG`` (``ARG`` passed positionally).
"""

from __future__ import annotations

import importlib
import inspect
import json
import re
from typing import Any, Callable

from pivot_envs.agents import baselines  # noqa: F401  (registers replay / noisy_expert)
from pivot_envs.agents.base import _REGISTRY, Agent, register_agent

VALID_FORMS = (
    "hf:MODEL_DIR",
    "openai:MODEL@BASE_URL[,BASE_URL...]",
    "vllm:MODEL",
    "replay[:FILE]",
    "noisy_expert[:P]",
    '{"kind": KIND, ...} (a JSON config dict)',
)

_LAZY = {
    "hf": ("pivot_envs.agents.hf", "HFAgent"),
    "openai": ("pivot_envs.agents.openai_agent", "OpenAIAgent"),
    "vllm": ("pivot_envs.agents.vllm_agent", "VLLMAgent"),
}
_OPENAI = re.compile(r"^(?P<model>.+?)@(?P<urls>https?://.+)$")


class AgentSpecError(ValueError):
    """A spec string or config dict that names no buildable agent."""

    def __init__(self, spec: Any, problem: str):
        forms = "\n  ".join(VALID_FORMS)
        extra = sorted(set(_REGISTRY) - set(_LAZY) - {"replay", "noisy_expert"})
        more = f"\nother registered kinds: {', '.join(extra)}" if extra else ""
        super().__init__(f"bad agent spec {spec!r}: {problem}\nvalid forms:\n  {forms}{more}")


def _lazy_factory(module: str, name: str) -> Callable[..., Agent]:
    def resolve() -> Callable[..., Agent]:
        return getattr(importlib.import_module(module), name)

    def factory(*args: Any, **kwargs: Any) -> Agent:
        return resolve()(*args, **kwargs)

    factory.__name__ = f"build_{name}"
    factory.__doc__ = f"Import {module} (heavy dependencies) only when a {name} is built."
    factory.resolve = resolve  # type: ignore[attr-defined]
    return factory


for _kind, (_module, _name) in _LAZY.items():
    register_agent(_kind)(_lazy_factory(_module, _name))


def parse_agent_spec(spec: str) -> dict[str, Any]:
    """The config dict of a spec string (see the module docstring); raises :class:`AgentSpecError`."""
    if not isinstance(spec, str) or not spec.strip():
        raise AgentSpecError(spec, "expected a non-empty string")
    text = spec.strip()
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise AgentSpecError(spec, f"invalid JSON at column {exc.colno}: {exc.msg}") from None
        if not isinstance(data, dict):
            raise AgentSpecError(spec, "a JSON spec must be an object with a 'kind'")
        return data
    kind, sep, rest = text.partition(":")
    if kind == "hf":
        if not rest:
            raise AgentSpecError(spec, "hf needs a model folder or hub id: hf:MODEL_DIR")
        return {"kind": "hf", "model": rest}
    if kind == "vllm":
        if not rest:
            raise AgentSpecError(spec, "vllm needs a model: vllm:MODEL")
        return {"kind": "vllm", "model": rest}
    if kind == "openai":
        if not rest:
            raise AgentSpecError(spec, "openai needs a model: openai:MODEL@BASE_URL")
        m = _OPENAI.match(rest)
        if m is None:
            if "@" in rest:
                raise AgentSpecError(spec, "the part after '@' must be http(s):// base URLs separated by commas")
            return {"kind": "openai", "model": rest}
        urls = [u.strip() for u in m.group("urls").split(",")]
        bad = [u for u in urls if not re.match(r"^https?://[^\s/]+", u)]
        if bad:
            raise AgentSpecError(spec, f"not an http(s):// base URL: {bad[0]!r}")
        return {"kind": "openai", "model": m.group("model"), "base_urls": urls}
    if kind == "replay":
        if not sep:
            return {"kind": "replay"}
        from pathlib import Path

        if not rest.strip() or not Path(rest.strip()).is_file():
            raise AgentSpecError(spec, "replay takes no argument except a trajectory file (replay:FILE): "
                                       f"{rest.strip()!r} is no such file")
        return {"kind": "replay", "file": rest.strip()}
    if kind == "noisy_expert":
        if not sep:
            return {"kind": "noisy_expert"}
        try:
            p = float(rest)
        except ValueError:
            raise AgentSpecError(spec, f"P must be a number in [0, 1], got {rest!r}") from None
        if not 0.0 <= p <= 1.0:
            raise AgentSpecError(spec, f"P must be in [0, 1], got {p}")
        return {"kind": "noisy_expert", "p": p}
    if kind in _REGISTRY:
        return {"kind": kind, "_args": [rest]} if sep else {"kind": kind}
    raise AgentSpecError(spec, f"unknown agent kind {kind!r}")


def build_agent(spec: "str | dict[str, Any] | Agent") -> Agent:
    """An agent from a spec string, a config dict (``{"kind": ..., ...}``) or an agent (returned as is)."""
    if isinstance(spec, Agent):
        return spec
    config = parse_agent_spec(spec) if isinstance(spec, str) else spec
    if not isinstance(config, dict):
        raise AgentSpecError(spec, f"expected a spec string or a config dict, got {type(spec).__name__}")
    kwargs = dict(config)
    kind = kwargs.pop("kind", None)
    if not isinstance(kind, str) or kind not in _REGISTRY:
        raise AgentSpecError(spec, "missing 'kind'" if kind is None else f"unknown agent kind {kind!r}")
    args = kwargs.pop("_args", [])
    factory = _REGISTRY[kind]
    target = factory.resolve() if hasattr(factory, "resolve") else factory
    try:
        inspect.signature(target).bind(*args, **kwargs)
    except TypeError as exc:  # unknown or missing arguments: the user's config, not a bug
        raise AgentSpecError(spec, f"cannot build a {kind!r} agent: {exc}") from None
    except ValueError:  # no signature to check (a builtin); let the call decide
        pass
    return factory(*args, **kwargs)
