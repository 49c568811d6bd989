"""The episode a harness rollout played, as the episode env records one; and which model call asked for a tool call.

::

    messages, turn_of = transcript(rollout)     # the opening, then every turn in arrival order
    index, call_id = match_tool_call(rollout.calls, "bash", {"command": "ls"})

The transcript is what the world saw: the opening; each model call's assistant message with the tool calls the
harness executed and their results; each tool call the harness made on its own as an assistant turn of its own;
and each message to the task's user (:mod:`pivot_envs.harness.user`) as an assistant text followed by the user's
reply. ``turn_of`` names, per assistant turn after the opening, the model call it is (``None``: the harness's
own, or the second turn one model call made).
"""

from __future__ import annotations

import copy
import json
from typing import Any

from pivot_envs.harness.capture import CapturedCall
from pivot_envs.harness.state import HarnessRollout, ToolEvent
from pivot_envs.harness.user import message_argument, user_turns
from pivot_envs.types import Message

__all__ = ["match_tool_call", "transcript"]


def transcript(rollout: HarnessRollout) -> tuple[list[Message], list[int | None]]:
    """``(messages, turn_of)`` of the rollout (see the module docstring)."""
    messages = copy.deepcopy(rollout.opening)
    turn_of: list[int | None] = []
    own = [e for e in rollout.events if e.call_id is None]

    def add_own(before_seq: float) -> None:
        while own and own[0].seq < before_seq:
            event = own.pop(0)
            turn_of.extend(_add_own_event(messages, event))

    for call, seq in zip(rollout.calls, rollout.call_seq):
        add_own(seq)
        events = [e for e in rollout.events if e.call_index == call.index and e.call_id is not None]
        turns = _add_call(messages, call, events)
        turn_of.extend([call.index] + [None] * (turns - 1))
    add_own(float("inf"))
    return messages, turn_of


def _add_call(messages: list[Message], call: CapturedCall, events: list[ToolEvent]) -> int:
    """Append one model call's turns; how many assistant turns it made (its world calls in one, each user
    message in one more)."""
    world = [e for e in events if not e.user]
    emitted = {tc.get("id"): tc for tc in call.message.get("tool_calls") or []}
    turns = 0
    if world or not any(e.user for e in events):
        assistant: Message = {"role": "assistant", "content": call.message.get("content")}
        if world:
            assistant["tool_calls"] = [copy.deepcopy(emitted[e.call_id]) for e in world]
        elif assistant["content"] is None:
            assistant["content"] = ""
        messages.append(assistant)
        messages.extend(_tool_message(e.call_id, e) for e in world)
        turns += 1
    for e in events:
        if e.user:
            messages.extend(user_turns(_said(e), e.reply))
            turns += 1
    return turns


def _add_own_event(messages: list[Message], event: ToolEvent) -> list[None]:
    """A tool call no model call asked for: one assistant turn of its own (no tokens)."""
    if event.user:
        messages.extend(user_turns(_said(event), event.reply))
        return [None]
    call_id = f"harness_{event.seq}"
    messages.append({"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": event.name, "arguments": _args_text(event.arguments)}}]})
    messages.append(_tool_message(call_id, event))
    return [None]


def _tool_message(call_id: str | None, event: ToolEvent) -> Message:
    return {"role": "tool", "tool_call_id": call_id, "name": event.name, "content": event.content}


def _said(event: ToolEvent) -> str:
    return message_argument(event.arguments)


def _canonical(arguments: Any) -> Any:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            return arguments
    return json.dumps(arguments, sort_keys=True, ensure_ascii=False)


def _args_text(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)


def match_tool_call(calls: list[CapturedCall], name: str, arguments: Any) -> tuple[int | None, str | None]:
    """The latest model call with an unexecuted tool call of this name and these arguments: ``(call index, tool
    call id)``, or ``(None, None)`` (the harness's own call)."""
    want = _canonical(arguments)
    for call in reversed(calls):
        for tc in call.message.get("tool_calls") or []:
            fn = tc.get("function") or {}
            if tc.get("id") in call.executed_tool_calls or fn.get("name") != name:
                continue
            if _canonical(fn.get("arguments") or "{}") == want:
                return call.index, tc.get("id")
    return None, None
