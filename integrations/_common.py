"""What the TRL and veRL adapters share: a pivot's prompt, its JSON round trip, and scoring.

A trainer's dataset holds each pivot twice: as its prompt, and serialised (``Pivot.to_dict`` as a JSON
string, so that parquet / Arrow columns never have to unify the nested shapes of different pivots) for the
reward, which rebuilds the pivot and scores the model's text with the pivot's verifier.

The prompt is rendered as profiling renders it (:func:`rendered_prompt`): ``pivot-envs profile``'s local
agents (``hf``, ``vllm``) and the bundled trainers all call
:func:`pivot_envs.agents.prompting.encode_prompt` with one :class:`~pivot_envs.agents.prompting.PromptConfig`
(:func:`prompt_config`: explicit settings, else the model folder's ``prompt_format.json``, else
``tools="auto"``). For a tool-aware chat template that passes each pivot's tools to the template
(``tools=``); a trainer that renders the prompt itself can only pass one tool list for all rows, so the
adapters hand it the rendered text. :func:`prompt_messages` (text-only messages, Hermes ``<tools>`` block in
the system message) is the fallback without a tokenizer: it is the profiled prompt only for templates
that know neither tools nor the ``tool`` role.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Sequence

from pivot_envs.agents.prompt_format import resolve_prompt_format
from pivot_envs.agents.prompting import (
    PromptConfig,
    chat_messages,
    encode_prompt,
    hermes_tools_block,
    pivot_prompt,
)
from pivot_envs.verifiers.batch import VerifierResolver, verify_batch

from pivot_envs.actions import parse_action
from pivot_envs.domains import get_domain
from pivot_envs.types import Action, Message, Pivot, VerifyResult

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

    Neither is the profiled prompt of a tool-aware template (which gets each pivot's tools through
    ``tools=``): with a tokenizer at hand, use :func:`rendered_prompt`.
    """
    if mode not in PROMPT_MODES:
        raise ValueError(f"prompt mode must be one of {PROMPT_MODES}, got {mode!r}")
    if mode == "messages":
        return chat_messages(pivot.context)
    tools_text = hermes_tools_block(pivot.tools) if pivot.tools else None
    return chat_messages(pivot.context, tool_calls_as_text=True, tool_role=False, tools_text=tools_text)


def prompt_config(model: Any = None, *, tools: str | None = None, max_prompt_tokens: int | None = None,
                  truncation: str = "keep_task") -> PromptConfig:
    """The prompt config profiling and the bundled trainers use for ``model`` (a model folder, a hub id, a
    loaded tokenizer or model: its ``name_or_path``): each explicit setting, else the one recorded in the
    model folder's ``prompt_format.json`` (:mod:`pivot_envs.agents.prompt_format`), else ``tools="auto"``
    and no window. Pass the ``max_prompt_tokens`` you profiled with: the ``hf`` agent's own default window
    depends on its ``max_new_tokens``."""
    if model is not None and not isinstance(model, str):
        model = getattr(model, "name_or_path", None) or getattr(getattr(model, "config", None), "_name_or_path", None)
    tools, window = resolve_prompt_format(tools, max_prompt_tokens, model)
    return PromptConfig(tools=tools, max_prompt_tokens=window, truncation=truncation)


@dataclass(frozen=True)
class RenderedPrompt:
    """A pivot's prompt as profiling renders it.

    Attributes:
        text: the prompt text (:func:`~pivot_envs.agents.prompting.pivot_prompt`; when the window cut it,
            the text of the kept tokens).
        ids: its token ids (:func:`~pivot_envs.agents.prompting.encode_prompt`): what profiling samples from.
        tokenizer_text: the text whose ``tokenizer(tokenizer_text)["input_ids"]`` (special tokens added as the
            tokenizer adds them by default, which is how TRL tokenizes a plain-text prompt) is ``ids``: ``text``
            without a leading BOS the tokenizer adds itself.
    """

    text: str
    ids: list[int]
    tokenizer_text: str


def rendered_prompt(pivot: Pivot, tokenizer: Any, config: PromptConfig | None = None) -> RenderedPrompt:
    """``pivot``'s prompt exactly as profiling and the bundled trainers render it for ``tokenizer`` with
    ``config`` (default: :func:`prompt_config` of the tokenizer's folder): the shared entry point of the
    TRL and veRL adapters.

    Raises:
        ValueError: the window cut the prompt and the kept tokens do not survive decoding and encoding
            again, or the tokenizer's special tokens cannot be matched (the message says what to change).
    """
    config = config if config is not None else prompt_config(tokenizer)
    ids = list(encode_prompt(tokenizer, pivot, config))
    text = pivot_prompt(tokenizer, pivot, config)
    if _ids(tokenizer, text, special=False) != ids:  # the window cut it: the kept tokens' text
        text = tokenizer.decode(ids)
        if _ids(tokenizer, text, special=False) != ids:
            raise ValueError(f"pivot {pivot.id!r}: its prompt is longer than max_prompt_tokens="
                             f"{config.max_prompt_tokens} and the kept tokens do not encode back to themselves "
                             "after decoding; raise max_prompt_tokens or leave the longer pivots out")
    bos = getattr(tokenizer, "bos_token", None)
    for candidate in (text, text[len(bos):] if bos and text.startswith(bos) else None):
        if candidate is not None and _ids(tokenizer, candidate, special=True) == ids:
            return RenderedPrompt(text=text, ids=ids, tokenizer_text=candidate)
    raise ValueError(f"pivot {pivot.id!r}: tokenizer(text) adds special tokens the rendered prompt cannot match "
                     f"(first ids {_ids(tokenizer, text, special=True)[:4]} vs {ids[:4]}); tokenize the prompt with "
                     "add_special_tokens=False, or use RenderedPrompt.ids")


def _ids(tokenizer: Any, text: str, *, special: bool) -> list[int]:
    return list(tokenizer(text, add_special_tokens=special, verbose=False)["input_ids"])


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
    return score_actions(texts, pivots, verifier)[1]


def score_actions(texts: Sequence[str | Message], pivots: Sequence[Pivot],
                  verifier: Any = None) -> tuple[list[Action | None], list[VerifyResult]]:
    """:func:`score`, with the parsed actions (``None`` where the parser rejected the text)."""
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
    return actions, out
