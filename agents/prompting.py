"""Turn a :class:`~pivot_envs.types.Pivot` into model input, and expert actions into training targets.

The prompt is the pivot's context rendered by the tokenizer's chat template with
the pivot's tools and the open assistant turn::

    tokenizer.apply_chat_template(messages, tools=pivot.tools, add_generation_prompt=True, tokenize=False)

What the template cannot express is rendered in the Hermes format that
:func:`pivot_envs.actions.parse_action` reads back:

* a template that does not mention ``tools`` gets them in the system message
  (Hermes ``<tools>...</tools>`` block and the ``<tool_call>`` instruction);
* a template that does not mention ``tool_calls`` gets earlier assistant turns
  as their text (:func:`~pivot_envs.actions.message_text`: content, then
  ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks);
* a template that rejects the ``tool`` role gets tool results as user turns
  wrapped in ``<tool_response>`` blocks;
* a tokenizer without any chat template gets plain ChatML.

The training target of a pivot is :func:`action_target` = ``message_text(expert)``:
a model trained on it emits text that parses back into the expert's action.
Assistant messages with tool calls are passed to templates with their
``arguments`` as dicts (as ``transformers serve`` and vLLM do), so local and
server-side rendering agree.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, replace
from typing import Any, Sequence

from pivot_envs.actions import message_text
from pivot_envs.types import Message, Pivot, Tool

TOOLS_MODES = ("auto", "template", "system", "none")
TRUNCATION_MODES = ("keep_task", "left")

HERMES_TOOLS_PROMPT = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{tools}\n</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{{"name": <function-name>, "arguments": <args-json-object>}}\n</tool_call>'
)


@dataclass
class PromptConfig:
    """How pivots become prompts.

    Attributes:
        tools: where the tool specs go. ``"auto"``: the chat template's own ``tools``
            support when the template mentions ``tools``, else the system message;
            ``"template"``: always pass ``tools=`` to the template; ``"system"``: always the
            Hermes block in the system message; ``"none"``: leave tools out.
        max_prompt_tokens: longest prompt in tokens (the same cut in training and sampling);
            ``None`` keeps everything.
        truncation: how a longer prompt is cut. ``"keep_task"``: keep the *task* (the
            system message and the first user message) and the latest tokens, dropping the
            middle of the conversation — agents need the question they are answering and the
            last tool result; when the task alone takes more than half of the budget, it
            falls back to ``"left"``. ``"left"``: keep only the last ``max_prompt_tokens``.
    """

    tools: str = "auto"
    max_prompt_tokens: int | None = None
    truncation: str = "keep_task"

    def __post_init__(self) -> None:
        if self.tools not in TOOLS_MODES:
            raise ValueError(f"PromptConfig.tools must be one of {TOOLS_MODES}, got {self.tools!r}")
        if self.max_prompt_tokens is not None and self.max_prompt_tokens < 1:
            raise ValueError(f"PromptConfig.max_prompt_tokens must be >= 1 or None, got {self.max_prompt_tokens}")
        if self.truncation not in TRUNCATION_MODES:
            raise ValueError(f"PromptConfig.truncation must be one of {TRUNCATION_MODES}, got {self.truncation!r}")


def action_target(message: Message) -> str:
    """The text a model should emit for an assistant message (Hermes format; what SFT trains on)."""
    return message_text(message)


def template_text(tokenizer: Any) -> str:
    """The tokenizer's chat template source ('' when it has none)."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):  # several named templates: the default one
        template = template.get("default") or next(iter(template.values()), "")
    return template or ""


def hermes_tools_block(tools: Sequence[Tool]) -> str:
    """The Hermes/Qwen system-prompt block that declares ``tools``."""
    lines = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    return HERMES_TOOLS_PROMPT.format(tools=lines)


def chat_messages(
    context: Sequence[Message],
    *,
    tool_calls_as_text: bool = False,
    tool_role: bool = True,
    tools_text: str | None = None,
) -> list[Message]:
    """Copy ``context`` into messages a chat template renders.

    Args:
        context: OpenAI chat messages.
        tool_calls_as_text: render assistant tool calls into the content (Hermes text)
            instead of passing ``tool_calls`` (with dict ``arguments``).
        tool_role: keep ``role: tool`` messages; ``False`` turns them into user turns with
            ``<tool_response>`` blocks.
        tools_text: appended to the system message (a new one is prepended when absent).
    """
    out: list[Message] = []
    for msg in context:
        role = msg.get("role")
        content = msg.get("content")
        if not isinstance(content, str):
            content = _content_text(content)
        if role == "assistant" and msg.get("tool_calls"):
            if tool_calls_as_text:
                out.append({"role": "assistant", "content": message_text(msg)})
            else:
                out.append({"role": "assistant", "content": content, "tool_calls": [_dict_args(c) for c in msg["tool_calls"]]})
        elif role == "tool" and not tool_role:
            body = f"<tool_response>\n{content}\n</tool_response>"
            if out and out[-1]["role"] == "user" and out[-1].get("_tool_response"):
                out[-1]["content"] += "\n" + body
            else:
                out.append({"role": "user", "content": body, "_tool_response": True})
        else:
            item: Message = {"role": role, "content": content}
            if role == "tool" and msg.get("tool_call_id") is not None:
                item["tool_call_id"] = msg["tool_call_id"]
            if role == "tool" and msg.get("name") is not None:
                item["name"] = msg["name"]
            out.append(item)
    for item in out:
        item.pop("_tool_response", None)
    if tools_text:
        if out and out[0]["role"] == "system":
            out[0] = {**out[0], "content": (out[0]["content"] + "\n\n" + tools_text).strip()}
        else:
            out.insert(0, {"role": "system", "content": tools_text})
    return out


def render_prompt(tokenizer: Any, context: Sequence[Message], tools: Sequence[Tool], config: PromptConfig | None = None) -> str:
    """The prompt text (context + open assistant turn) of a conversation, see the module docstring."""
    config = config or PromptConfig()
    source = template_text(tokenizer)
    mode = config.tools
    if mode == "auto":
        mode = "template" if "tools" in source else "system"
    tools_text = hermes_tools_block(tools) if (mode == "system" and tools) else None
    template_tools = list(tools) if (mode == "template" and tools) else None
    as_text = "tool_calls" not in source
    if not source:
        return _chatml(chat_messages(context, tool_calls_as_text=True, tools_text=tools_text))
    messages = chat_messages(context, tool_calls_as_text=as_text, tools_text=tools_text)
    try:
        return tokenizer.apply_chat_template(messages, tools=template_tools, add_generation_prompt=True, tokenize=False)
    except Exception:  # noqa: BLE001 - e.g. "roles must alternate" or an unknown 'tool' role: retry in Hermes text
        messages = chat_messages(context, tool_calls_as_text=True, tool_role=False, tools_text=tools_text)
        return tokenizer.apply_chat_template(messages, tools=template_tools, add_generation_prompt=True, tokenize=False)


def pivot_prompt(tokenizer: Any, pivot: Pivot, config: PromptConfig | None = None) -> str:
    """The prompt text of ``pivot``."""
    return render_prompt(tokenizer, pivot.context, pivot.tools, config)


def encode_prompt(tokenizer: Any, pivot: Pivot, config: PromptConfig | None = None) -> list[int]:
    """Prompt token ids of ``pivot`` (the template text carries its own special tokens), cut to
    ``config.max_prompt_tokens`` as ``config.truncation`` says."""
    config = config or PromptConfig()
    ids = list(_encode(tokenizer, pivot_prompt(tokenizer, pivot, config)))
    limit = config.max_prompt_tokens
    if limit is None or len(ids) <= limit:
        return ids
    if config.truncation == "keep_task":
        head = task_prefix_length(tokenizer, pivot, config, ids)
        if 0 < head <= limit // 2:
            return ids[:head] + ids[len(ids) - (limit - head) :]
    return ids[-limit:]


def task_prefix_length(tokenizer: Any, pivot: Pivot, config: PromptConfig, ids: Sequence[int]) -> int:
    """How many leading tokens of ``ids`` (the encoded prompt) render the task: the common prefix
    of ``ids`` and the prompt of the messages up to the first user message (``0`` without one)."""
    first_user = next((i for i, m in enumerate(pivot.context) if m.get("role") == "user"), None)
    if first_user is None or first_user == len(pivot.context) - 1:
        return 0
    task = _encode(tokenizer, pivot_prompt(tokenizer, replace(pivot, context=list(pivot.context[: first_user + 1])),
                                           config))
    n = 0
    for a, b in zip(ids, task):
        if a != b:
            break
        n += 1
    return n


def _encode(tokenizer: Any, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]


def _chatml(messages: list[Message]) -> str:
    parts = [f"<|im_start|>{m['role']}\n{m.get('content') or ''}<|im_end|>\n" for m in messages]
    return "".join(parts) + "<|im_start|>assistant\n"


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, list):  # OpenAI content parts
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content)


def _dict_args(call: dict[str, Any]) -> dict[str, Any]:
    call = copy.deepcopy(call)
    fn = call.get("function", call)
    args = fn.get("arguments")
    if isinstance(args, str):
        try:
            fn["arguments"] = json.loads(args)
        except json.JSONDecodeError:
            pass  # keep the verbatim string; templates print it as is
    return call
