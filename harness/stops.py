"""A request's ``stop`` sequences applied to an answer the policy sampled in full: text and tokens cut alike.

::

    answer = cut_at_stop(answer, ["Observation:"], decode)   # decode: token ids -> text (the agent's tokenizer)

An in-process sampler (``hf``, ``vllm``) knows nothing of a harness's stop sequences, so the whole completion is
sampled and cut afterwards, as OpenAI's API answers: the text ends before the first stop sequence, which is not
returned. The trained tokens must be what the harness got: they are cut at the first token whose text reaches
into the stop sequence (the tokens before it are a prefix of the sample, so their log-probs stand), and the
log-probs with them. The answer then counts as stopped (``finish_reason: "stop"``). An answer without token ids
(the ``replay`` baseline) has its text cut alone. A forwarded request (``openai:MODEL@URL``) sends ``stop`` on to
its server.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

__all__ = ["cut_at_stop", "first_stop"]


def first_stop(text: str, stops: Sequence[str]) -> int | None:
    """The index in ``text`` where the first of ``stops`` begins (``None``: none occurs)."""
    found = [i for i in (text.find(s) for s in stops if s) if i >= 0]
    return min(found) if found else None


def cut_at_stop(answer: Any, stops: Sequence[str], decode: Callable[[list[int]], str] | None) -> Any:
    """``answer`` (a :class:`~pivot_envs.harness.policy.PolicyAnswer`) ended before the first stop sequence of its
    text (unchanged when none occurs)."""
    at = first_stop(answer.text, stops)
    if at is None:
        return answer
    text = answer.text[:at]
    tokens, logprobs = answer.token_ids, answer.logprobs
    if tokens is not None and decode is not None:
        keep = _tokens_before(tokens, at, decode)
        tokens = list(tokens[:keep])
        logprobs = None if logprobs is None else list(logprobs[:keep])
    return dataclasses.replace(answer, text=text, token_ids=tokens, logprobs=logprobs, stopped=True)


def _tokens_before(tokens: Sequence[int], at: int, decode: Callable[[list[int]], str]) -> int:
    """How many leading tokens to keep: up to and including the first whose decoded prefix passes ``at`` characters
    (the token that holds the start of the stop sequence: it was sampled, the rest was not needed)."""
    for n in range(1, len(tokens) + 1):
        if len(decode(list(tokens[:n]))) > at:
            return n
    return len(tokens)
