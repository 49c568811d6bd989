"""What the harness endpoint records of every model call a harness makes (issue 28).

A harness (an agent loop someone else wrote) calls the policy through its rollout's OpenAI-compatible
``base_url``. Each call is kept as a :class:`CapturedCall`: the messages and tools exactly as the harness
sent them, the prompt token ids as the policy's tokenizer rendered them, the sampled completion's token
ids and their log-probs, the policy version that sampled them and the latency::

    call = CapturedCall(index=0, messages=[...], tools=[...], prompt_token_ids=[...], completion_token_ids=[...],
                        logprobs=[...], policy_version=3, text="...", message={...}, latency_s=0.21)
    extends_previous(previous_call, call)   # does this prompt start with the previous prompt + completion?

**Retokenization.** A trainer that wants one sequence per episode would splice call ``i+1``'s prompt onto
call ``i``'s prompt and completion. That is only sound when the new prompt *starts with* the old prompt
followed by the sampled tokens. It does not when the harness edited its history (dropped a message,
summarised, reformatted a tool call) or when the chat template renders the assistant turn differently from
the tokens the model sampled (a structured ``tool_calls`` field rendered as text, a different end-of-turn
token). :func:`extends_previous` checks it token by token and a call where it fails is marked
``retokenized``; the rollout counts them. One more reason never counts as retokenization: a prompt the policy's
window cut (``prompt_cut``: longer than ``max_prompt_tokens``, its middle dropped as training drops it) cannot
extend the previous one, whatever the harness did; such calls are counted apart (``window_cut_calls``). Nothing is
ever spliced: the trainer trains on each call as its own row (its prompt, its completion), so a retokenized call
costs nothing but is reported.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from pivot_envs.types import Message

__all__ = ["CapturedCall", "capture_summary", "extends_previous"]


@dataclass
class CapturedCall:
    """One ``chat/completions`` call of a harness, as the endpoint saw and answered it.

    Attributes:
        index: the call's number within its rollout (0-based).
        messages: the request's ``messages``, as sent.
        tools: the request's ``tools``, as sent (``[]`` when none).
        request: the other request fields (``model``, ``temperature``...), as sent; recorded, not applied
            (the policy samples with its own settings: they are the behaviour policy the trainer assumes).
        prompt_token_ids: the prompt as the policy's tokenizer rendered it (``None`` from an upstream server
            that does not return token ids).
        completion_token_ids: the sampled tokens, end-of-sequence included when the model stopped.
        logprobs: the sampler's log-prob of each completion token (``None`` when the backend gives none).
        policy_version: the optimiser updates of the weights that sampled it.
        text: the completion's text.
        message: the assistant message returned to the harness (``tool_calls`` parsed from the text).
        finish_reason: ``stop``, ``tool_calls`` or ``length``.
        latency_s: seconds from the request's arrival to the answer.
        sample_s: seconds of it the policy spent sampling (the batch the call was in).
        queue_s: seconds of it the call waited for the policy (other calls' batch being sampled).
        retokenized: this call's prompt does not start with the previous call's prompt + completion, and the
            window did not cut it (``None``: not checkable, a call without token ids).
        prompt_cut: the policy's window cut the prompt (it reached ``max_prompt_tokens``).
        executed_tool_calls: ids of this call's tool calls that the harness then executed in the world.
    """

    index: int
    messages: list[Message]
    tools: list[dict[str, Any]]
    request: dict[str, Any] = field(default_factory=dict)
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    policy_version: int = 0
    text: str = ""
    message: Message = field(default_factory=lambda: {"role": "assistant", "content": ""})
    finish_reason: str = "stop"
    latency_s: float = 0.0
    sample_s: float = 0.0
    queue_s: float = 0.0
    retokenized: bool | None = False
    prompt_cut: bool = False
    executed_tool_calls: list[str] = field(default_factory=list)

    @property
    def overhead_s(self) -> float:
        """What the endpoint added to the policy's time (rendering, parsing, recording, routing): the latency less
        the sampling and the wait for the sampler."""
        return max(0.0, self.latency_s - self.sample_s - self.queue_s)

    @property
    def trainable(self) -> bool:
        """The call carries the token ids a trainer needs (prompt and completion)."""
        return bool(self.prompt_token_ids) and self.completion_token_ids is not None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def wire(self) -> dict[str, Any]:
        """The call as ``POST /harness/rollouts/{id}/finish`` lists it (the contract's keys first)."""
        return {"prompt_token_ids": self.prompt_token_ids, "completion_token_ids": self.completion_token_ids,
                "logprobs": self.logprobs, "policy_version": self.policy_version, "index": self.index,
                "text": self.text, "message": self.message, "finish_reason": self.finish_reason,
                "latency_s": self.latency_s, "sample_s": self.sample_s, "queue_s": self.queue_s,
                "overhead_s": self.overhead_s, "retokenized": self.retokenized, "prompt_cut": self.prompt_cut,
                "executed_tool_calls": list(self.executed_tool_calls), "messages": self.messages,
                "tools": self.tools, "request": self.request}


def extends_previous(previous: CapturedCall | None, call: CapturedCall) -> bool | None:
    """Whether ``call``'s prompt tokens start with ``previous``'s prompt followed by its completion.

    The first call of a rollout extends nothing and counts as extending (``True``). Without token ids on
    either side (an upstream server or a baseline that returns none) nothing can be checked: ``None``.
    """
    if previous is None:
        return True
    if not previous.trainable or not call.prompt_token_ids:
        return None
    head: Sequence[int] = list(previous.prompt_token_ids or []) + list(previous.completion_token_ids or [])
    return len(call.prompt_token_ids) >= len(head) and call.prompt_token_ids[: len(head)] == head


def capture_summary(calls: Sequence[CapturedCall]) -> dict[str, Any]:
    """Counts over a rollout's calls: ``calls``, ``retokenized_calls``, ``window_cut_calls``, ``completion_tokens``,
    ``untrainable_calls`` and the mean ``capture_overhead_ms``."""
    overhead = [c.overhead_s for c in calls]
    return {
        "calls": len(calls),
        "retokenized_calls": sum(1 for c in calls if c.retokenized is True),
        "window_cut_calls": sum(1 for c in calls if c.prompt_cut),
        "completion_tokens": sum(len(c.completion_token_ids or []) for c in calls),
        "untrainable_calls": sum(1 for c in calls if not c.trainable),
        "capture_overhead_ms": 1000.0 * sum(overhead) / len(overhead) if overhead else None,
    }
