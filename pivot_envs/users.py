"""User simulators: who answers when the agent talks to the user in an episode.

An agent message without tool calls goes to the user simulator; its reply is appended to the
conversation as a ``user`` message, or it ends the episode. Specs (:func:`build_user`)::

    scripted                 the task's recorded user turns, in order; when they run out the user
                             ends the episode (what the expert's user said next, whatever the agent said)
    none                     tasks without a user: a message to the user ends the episode
    openai:MODEL@BASE_URL    an LLM plays the user through any OpenAI-compatible endpoint (tau-bench
    openai:MODEL             style): its system prompt holds the task's instruction (``meta["instruction"]``
                             or the first user message); it replies with one message at a time and ends
                             the conversation with a stop token (``###STOP###``)
    {"kind": "openai", "model": ..., "base_url": ..., "temperature": 0.0, ...}   a config dict

A simulator of one's own is registered by kind: ``USERS.register("polite", PoliteUser)`` (a
:class:`~pivot_envs.registry.Registry`; ``"polite:ARG"`` passes ``ARG`` as its one positional argument).

A simulator is per episode slot: :meth:`UserSimulator.start` is called at every ``reset``.
A failure of the simulator itself (the LLM endpoint is down) raises :class:`UserSimulatorError`:
the episode ends with ``info["error"]``, never a silent 0.
"""

from __future__ import annotations

import os
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Sequence

from pivot_envs.endpoint import EndpointSettings
from pivot_envs.registry import Registry
from pivot_envs.types import Message, Trajectory, content_text

STOP_TOKENS = ("###STOP###", "###TRANSFER###", "###OUT-OF-SCOPE###")
"""What an LLM user writes to end the conversation (tau-bench / tau2-bench)."""

USER_SYSTEM_PROMPT = """You are a user interacting with an agent.

Instruction: {instruction}

Rules:
- Just generate one line at a time to simulate the user's message.
- Do not give away all the instruction at once. Only provide the information that is necessary for the current step.
- Do not hallucinate information that is not provided in the instruction. If the agent asks for information you do not have, say you do not know.
- If the instruction goal is satisfied, generate '###STOP###' as a standalone message without anything else to end the conversation.
- Do not repeat the exact instruction in the conversation. Instead, use your own words to convey the same information.
- Try to make the conversation as natural as possible, and stick to the personality in the instruction."""
"""The LLM user's system prompt (tau-bench's user simulator, ``{instruction}`` filled in)."""

AGENT_GREETING = "Hi! How can I help you today?"
"""The agent's opening line in the LLM user's view (the task's first user message answers it)."""

VALID_FORMS = ("scripted", "none", "openai:MODEL@BASE_URL", "openai:MODEL", '{"kind": "openai", "model": ..., ...}')


class UserSimulatorError(RuntimeError):
    """The user simulator itself failed (an infrastructure error, not a bad agent)."""


@dataclass
class UserTurn:
    """The user's reply to an agent message.

    Attributes:
        content: what the user says (``None``: nothing; the episode may still go on or end).
        done: the user ends the episode.
    """

    content: str | None
    done: bool = False


class UserSimulator(ABC):
    """Base class: subclasses set ``kind`` and implement :meth:`reply` (and :meth:`start` when they keep state)."""

    kind: ClassVar[str] = "base"

    def start(self, task: Trajectory, context: Sequence[Message]) -> None:
        """A new episode of ``task`` begins at ``context`` (the messages the agent sees first)."""

    @abstractmethod
    def reply(self, messages: Sequence[Message]) -> UserTurn:
        """The user's answer to the last message of ``messages`` (an assistant message without tool calls)."""

    def config(self) -> dict[str, Any]:
        """What rebuilds this simulator: ``build_user(sim.config())``."""
        return {"kind": self.kind}

    def close(self) -> None:
        """Release clients (idempotent)."""


class NoUser(UserSimulator):
    """No user: a message to the user ends the episode (the agent's final answer)."""

    kind = "none"

    def reply(self, messages: Sequence[Message]) -> UserTurn:
        return UserTurn(None, done=True)


class ScriptedUser(UserSimulator):
    """The task's recorded user turns after the first, in order; the user ends the episode when they run out.

    Starting at a pivot, the turns already in the context are skipped.
    """

    kind = "scripted"

    def __init__(self) -> None:
        self._turns: list[str] = []

    def start(self, task: Trajectory, context: Sequence[Message]) -> None:
        recorded = [content_text(m.get("content")) for m in task.messages if m.get("role") == "user"]
        said = sum(1 for m in context if m.get("role") == "user")
        self._turns = recorded[max(said, 1):]

    def reply(self, messages: Sequence[Message]) -> UserTurn:
        if not self._turns:
            return UserTurn(None, done=True)
        return UserTurn(self._turns.pop(0))

    @property
    def remaining(self) -> int:
        return len(self._turns)


@dataclass
class LLMUserSettings(EndpointSettings):
    """Settings of the LLM user (the endpoint's: :class:`~pivot_envs.endpoint.EndpointSettings`).

    Attributes:
        temperature: sampling temperature (tau-bench's user default: 0).
        max_tokens: longest user message.
        stop_tokens: a reply containing one of these ends the episode (the text before it is kept).
        system_prompt: the system prompt template (``{instruction}`` is filled in).
    """

    temperature: float = 0.0
    max_tokens: int = 256
    stop_tokens: Sequence[str] = STOP_TOKENS
    system_prompt: str = USER_SYSTEM_PROMPT

    def __post_init__(self) -> None:
        if self.max_tokens < 1 or self.timeout_s <= 0 or self.max_retries < 0:
            raise ValueError("LLM user: max_tokens must be >= 1, timeout_s > 0 and max_retries >= 0")
        if "{instruction}" not in self.system_prompt:
            raise ValueError("LLM user: system_prompt must contain {instruction}")
        self.stop_tokens = tuple(self.stop_tokens)


class LLMUser(UserSimulator):
    """An LLM plays the user through an OpenAI-compatible ``/chat/completions`` endpoint.

    The LLM sees its system prompt (the task's instruction), the agent's greeting, then the
    conversation with roles swapped: what the user said is its own (``assistant``) turns, the
    agent's messages to the user are ``user`` turns. Tool calls and tool results are not shown.

    Args:
        model: the model name the server expects.
        base_url: the endpoint (``.../v1``); ``None``: the client's default (``OPENAI_BASE_URL``).
        **settings: fields of :class:`LLMUserSettings`.
    """

    kind = "openai"

    def __init__(self, model: str, base_url: str | None = None, **settings: Any):
        if not model:
            raise ValueError("LLM user: model must be a non-empty model name")
        self.model = model
        self.base_url = base_url
        self.settings = LLMUserSettings(**settings)
        self.instruction = ""
        self.requests = 0
        self._client: Any = None

    def start(self, task: Trajectory, context: Sequence[Message]) -> None:
        self.instruction = task_instruction(task)

    def prompt(self, messages: Sequence[Message]) -> list[Message]:
        """The LLM user's chat messages for the conversation ``messages``."""
        out: list[Message] = [{"role": "system", "content": self.settings.system_prompt.format(instruction=self.instruction)},
                              {"role": "user", "content": AGENT_GREETING}]
        for m in messages:
            role = m.get("role")
            text = content_text(m.get("content")).strip()
            if role == "user" and text:
                out.append({"role": "assistant", "content": text})
            elif role == "assistant" and not m.get("tool_calls") and text:
                out.append({"role": "user", "content": text})
        return out

    def reply(self, messages: Sequence[Message]) -> UserTurn:
        import openai

        client = self._get_client()
        body: dict[str, Any] = {"model": self.model, "messages": self.prompt(messages),
                                "temperature": self.settings.temperature, "max_tokens": self.settings.max_tokens,
                                "seed": self.settings.seed}
        where = self.base_url or "the default endpoint"
        try:
            self.requests += 1
            resp = client.chat.completions.create(**body, extra_body=dict(self.settings.extra_body) or None)
        except openai.OpenAIError as exc:
            raise UserSimulatorError(f"LLM user: no answer from {where} for model {self.model!r}: "
                                     f"{type(exc).__name__}: {exc}") from exc
        if not resp.choices:
            raise UserSimulatorError(f"LLM user: {where} answered with no choices for model {self.model!r}")
        return self.parse(resp.choices[0].message.content or "")

    def parse(self, text: str) -> UserTurn:
        """A reply text as a :class:`UserTurn`: a stop token ends the episode; the text before it is kept."""
        for token in self.settings.stop_tokens:
            if token in text:
                before = text.split(token, 1)[0].strip()
                return UserTurn(before or None, done=True)
        return UserTurn(text.strip() or None)

    def config(self) -> dict[str, Any]:
        from dataclasses import asdict

        out = {"kind": self.kind, "model": self.model, **asdict(self.settings)}
        out["stop_tokens"] = list(self.settings.stop_tokens)
        if self.base_url:
            out["base_url"] = self.base_url
        return out

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def _get_client(self) -> Any:
        if self._client is None:
            from openai import OpenAI

            key = os.environ.get(self.settings.api_key_env) or "EMPTY"
            self._client = OpenAI(base_url=self.base_url, api_key=key, timeout=self.settings.timeout_s,
                                  max_retries=self.settings.max_retries)
        return self._client


def task_instruction(task: Trajectory) -> str:
    """What the simulated user wants: ``meta["instruction"]`` (tau-bench tasks), else the first user message."""
    instruction = task.meta.get("instruction")
    if isinstance(instruction, str) and instruction.strip():
        return instruction.strip()
    for m in task.messages:
        if m.get("role") == "user":
            return content_text(m.get("content")).strip()
    return ""


_OPENAI = re.compile(r"^(?P<model>.+?)@(?P<url>https?://\S+)$")

UserSpec = Any
"""A spec string, a config dict, or a :class:`UserSimulator` (see the module docstring)."""


def _user_error(spec: Any, problem: str) -> ValueError:
    return ValueError(f"bad user simulator {spec!r}: {problem}; expected one of {', '.join(VALID_FORMS)}")


def _openai_user(rest: str | None) -> dict[str, Any]:
    """``openai:MODEL[@BASE_URL]`` -> the LLM user's keyword arguments."""
    if not rest:
        raise ValueError("openai needs a model: openai:MODEL@BASE_URL")
    m = _OPENAI.match(rest)
    if m is None:
        if "@" in rest:
            raise ValueError("the part after '@' must be an http(s):// base URL")
        return {"model": rest}
    return {"model": m.group("model"), "base_url": m.group("url")}


USERS: Registry[type[UserSimulator]] = Registry("user simulator", key="kind", aliases=("name",),
                                                instance_of=UserSimulator, error=_user_error)
"""The user simulator registry (``USERS.register(KIND, factory)`` adds one; :func:`build_user` builds from it)."""
USERS.register("scripted", ScriptedUser)
USERS.register("none", NoUser)
USERS.register("openai", LLMUser, arg=_openai_user)


def parse_user_spec(spec: str) -> dict[str, Any]:
    """The config dict of a user spec string; ``ValueError`` naming the valid forms."""
    if not isinstance(spec, str) or not spec.strip():
        raise _user_error(spec, "expected a non-empty string")
    return USERS.parse(spec)


def build_user(spec: UserSpec) -> UserSimulator:
    """A user simulator from a spec string, a config dict or a simulator (returned as is)."""
    if not isinstance(spec, (str, dict, UserSimulator)):
        raise _user_error(spec, "expected a spec string or a config dict")
    try:
        return USERS.build(spec)
    except TypeError as exc:  # the LLM user's settings: an unknown or mistyped one
        raise _user_error(spec, str(exc)) from None
