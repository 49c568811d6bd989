"""What the TRL and veRL adapters share: a pivot's prompt messages, its JSON round trip, and scoring.

A trainer's dataset holds each pivot twice: as prompt messages the trainer renders with the model's
chat template, and serialised (``Pivot.to_dict`` as a JSON string, so that parquet / Arrow columns
never have to unify the nested shapes of different pivots) for the reward, which rebuilds the pivot
and scores the model's text with the pivot's verifier.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from pivot_envs.actions import parse_action
from pivot_envs.agents.prompting import chat_messages, hermes_tools_block
from pivot_envs.domains import get_domain
from pivot_envs.types import Action, Message, Pivot, VerifyResult
from pivot_envs.verifiers.batch import VerifierResolver, verify_batch

PROMPT_MODES = ("hermes", "messages")


def prompt_messages(pivot: Pivot, mode: str = "hermes") -> list[Message]:
    """The chat messages a trainer renders for ``pivot``.

    ``"hermes"`` (default): text-only ``{"role", "content"}`` messages. The pivot's tools go into the
    system message as the Hermes ``<tools>`` block with the ``<tool_call>`` instruction, earlier tool
    calls become ``<tool_call>`` text and tool results ``<tool_response>`` user turns — what
    :func:`pivot_envs.actions.parse_action` reads back, and what any chat template renders (a
    uniform shape also keeps Arrow/parquet columns simple).
    ``"messages"``: the context as OpenAI messages (``tool_calls`` with dict arguments, ``tool``
    role), tools left out: for templates that render tools themselves (pass them separately).
    """
    if mode not in PROMPT_MODES:
        raise ValueError(f"prompt mode must be one of {PROMPT_MODES}, got {mode!r}")
    if mode == "messages":
        return chat_messages(pivot.context)
    tools_text = hermes_tools_block(pivot.tools) if pivot.tools else None
    return chat_messages(pivot.context, tool_calls_as_text=True, tool_role=False, tools_text=tools_text)


def pivot_json(pivot: Pivot) -> str:
    """The pivot serialised for a dataset column (``Pivot.to_dict`` as compact JSON)."""
    return json.dumps(pivot.to_dict(), ensure_ascii=False, separators=(",", ":"))


def pivot_from_json(text: str | dict[str, Any] | Pivot) -> Pivot:
    """The pivot of a :func:`pivot_json` column value (a dict or a Pivot pass through)."""
    if isinstance(text, Pivot):
        return text
    return Pivot.from_dict(json.loads(text) if isinstance(text, (str, bytes)) else dict(text))


def parse_for(pivot: Pivot, raw: str | Message) -> Action:
    """``raw`` parsed with the action parser of the pivot's domain (the default parser without one)."""
    if pivot.domain:
        try:
            return get_domain(pivot.domain).parse_action(raw)
        except KeyError:
            pass
    return parse_action(raw)


def score(texts: Sequence[str | Message], pivots: Sequence[Pivot], verifier: Any = None) -> list[VerifyResult]:
    """Score ``texts[i]`` at ``pivots[i]`` in one :func:`verify_batch` call.

    ``verifier``: a name, config or Verifier for every pivot; ``None``: each pivot's domain default.
    A text the parser rejects is an error result (never a silent 0).
    """
    resolver = verifier if isinstance(verifier, VerifierResolver) else VerifierResolver(verifier)
    actions: list[Action | None] = []
    errors: dict[int, str] = {}
    for i, (raw, pivot) in enumerate(zip(texts, pivots)):
        try:
            actions.append(parse_for(pivot, raw))
        except Exception as exc:  # noqa: BLE001 - a parser bug masks its sample, not the batch
            actions.append(None)
            errors[i] = f"parse_action raised {type(exc).__name__}: {exc}"
    keep = [i for i in range(len(actions)) if i not in errors]
    results = verify_batch([actions[i] for i in keep], [pivots[i] for i in keep], resolver.for_pivot)  # type: ignore[misc]
    out: list[VerifyResult] = [VerifyResult.failure("parse_action", errors.get(i, "")) for i in range(len(actions))]
    for i, r in zip(keep, results):
        out[i] = r
    return out
