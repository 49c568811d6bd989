"""The prompt format a model was trained with, kept beside its weights.

A model learns one prompt format: where the tool specs go (:class:`~pivot_envs.agents.prompting.PromptConfig`
``tools``) and how long a prompt may be (``max_prompt_tokens``). Sampled in another format, it acts worse with
no error: the shipped SmolLM2 warm-up, trained with the tools left out of the prompt, wins 0.37 of its
validation tasks in its own format and 0.13 when the tool specs are put back in.

So whoever writes a model folder (the trainers, the demo's bases) writes ``prompt_format.json`` beside the
weights::

    {"tools": "none", "max_prompt_tokens": 1024}

and the local agents (``hf``, ``vllm``) and trainers read it when their own setting is left at ``None``.
An explicit setting always wins. A folder without the file (any model from elsewhere) keeps the defaults:
``tools="auto"`` and a prompt window from the model's context length.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pivot_envs.agents.prompting import TOOLS_MODES

PROMPT_FORMAT_FILE = "prompt_format.json"
DEFAULT_TOOLS = "auto"


def write_prompt_format(folder: str | Path, *, tools: str | None, max_prompt_tokens: int | None) -> Path:
    """Write ``folder/prompt_format.json`` (``tools`` ``None`` is written as the default, ``auto``); a file that
    already says the same is left as it is, so writing a finished folder's record again changes none of its files."""
    tools = DEFAULT_TOOLS if tools is None else tools
    _check(tools, max_prompt_tokens, where=str(folder))
    path = Path(folder) / PROMPT_FORMAT_FILE
    text = json.dumps({"tools": tools, "max_prompt_tokens": max_prompt_tokens}) + "\n"
    if not (path.is_file() and path.read_text(encoding="utf-8") == text):
        path.write_text(text, encoding="utf-8")
    return path


def read_prompt_format(model: Any) -> dict[str, Any]:
    """The recorded format of a model folder: ``{"tools": ..., "max_prompt_tokens": ...}``, or ``{}`` when
    ``model`` is not a folder (a hub id, a loaded model) or the folder has no record.

    Raises:
        ValueError: the record is not the JSON object above (the message names the file and the fix).
    """
    if not isinstance(model, (str, Path)):
        return {}
    path = Path(model) / PROMPT_FORMAT_FILE
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: line {exc.lineno}: not JSON ({exc.msg}); write "
                         '{"tools": "auto", "max_prompt_tokens": null} or delete the file') from exc
    if not isinstance(data, dict) or set(data) - {"tools", "max_prompt_tokens"}:
        raise ValueError(f"{path}: expected an object with the keys tools and max_prompt_tokens only, got {data!r}")
    tools, window = data.get("tools", DEFAULT_TOOLS), data.get("max_prompt_tokens")
    _check(tools, window, where=str(path))
    return {"tools": tools, "max_prompt_tokens": window}


def resolve_prompt_format(tools: str | None, max_prompt_tokens: int | None, model: Any) -> tuple[str, int | None]:
    """``(tools, max_prompt_tokens)``: each explicit value when given, else the model folder's recorded one, else
    the default (``auto``; ``None`` for the window: the caller's default). The record is read once."""
    recorded = read_prompt_format(model) if tools is None or max_prompt_tokens is None else {}
    return (recorded.get("tools", DEFAULT_TOOLS) if tools is None else tools,
            recorded.get("max_prompt_tokens") if max_prompt_tokens is None else max_prompt_tokens)


def _check(tools: Any, window: Any, *, where: str) -> None:
    if tools not in TOOLS_MODES:
        raise ValueError(f"{where}: tools must be one of {', '.join(TOOLS_MODES)}, got {tools!r}")
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
        raise ValueError(f"{where}: max_prompt_tokens must be an integer >= 1 or null, got {window!r}")
