"""The task's user, through the harness: one tool on the rollout's MCP server that talks to the user.

An episode env hands every agent message without tool calls to its user simulator (:mod:`pivot_envs.users`):
the scripted user (the task's recorded user turns) or an LLM user (tau2's style). A harness holds its own
conversation, and its text answer ends its loop, so the user is reached the way every harness reaches the
world: a tool. A rollout of a task with a user lists one more tool, :data:`USER_TOOL`::

    send_message_to_user({"message": "Could you give me the e-mail address on your account?"})
    -> "The account email is priya_costa54@inbox.example.net."        (the user's reply, the tool's result)

The harness needs no change: it sees a tool among the world's, over MCP and in the rollout's ``tools``. Its
final text answer (a reply without tool calls) still ends the episode. When the user ends the conversation
(the scripted user's turns ran out, an LLM user's stop token) the tool says so, and the episode is over: the
endpoint answers the harness's next model call with a closing text, so its loop ends.

In the episode the world judges, a message sent with the tool is an assistant text message and the reply a
``user`` message, exactly as the episode env records a conversation: task success, the per-turn rewards and a
replay through the env (:mod:`pivot_envs.harness.replay`) read it the same way.

Which rollouts get the tool (:func:`talks_to_user`): an env whose user simulator can say something, i.e. any
user but ``none``, and the scripted user only when the task records user turns after the first (terminal tasks
and tau2 tasks record none: their harness sees the world's tools alone, as before).

The ``replay`` policy plays the expert through the harness (:func:`harness_expert`): a recorded assistant text
that the user answered in the task becomes this tool's call; the recorded final answer stays a text answer.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from pivot_envs.types import Message, Trajectory, content_text

__all__ = ["ENDED_NOTE", "USER_TOOL", "UserChannel", "harness_expert", "talks_to_user", "user_tool_spec"]

USER_TOOL = "send_message_to_user"
"""The name of the user tool."""

ENDED_NOTE = "[The user has ended the conversation. The episode is over: do not call any more tools.]"
"""What the tool adds to its answer when the user ended the conversation."""


def user_tool_spec() -> dict[str, Any]:
    """The user tool as an OpenAI function spec (the MCP face lists it like the world's tools)."""
    return {"type": "function", "function": {
        "name": USER_TOOL,
        "description": ("Send a message to the user (the customer you are helping) and wait for their reply, e.g. to "
                        "ask for details or a confirmation. The tool returns what the user answers. Your final "
                        "answer is a plain reply without a tool call: it ends the conversation."),
        "parameters": {"type": "object", "properties": {"message": {
            "type": "string", "description": "What you say to the user."}}, "required": ["message"]}}}


def talks_to_user(env: Any) -> bool:
    """Whether a rollout of ``env`` (an episode env after ``reset``) gets the user tool (see the module docstring)."""
    user = getattr(env, "user", None)
    kind = getattr(user, "kind", "none")
    if kind == "none":
        return False
    if kind == "scripted":
        return int(getattr(user, "remaining", 0)) > 0
    return True


class UserChannel:
    """One rollout's conversation with its task's user (the env's user simulator, started at the env's reset).

    The simulator sees what the episode env shows it: the opening and every message exchanged so far, the agent's
    as assistant text (tool calls and their results are never shown to a user).
    """

    def __init__(self, env: Any):
        self.env = env
        self.dialogue: list[Message] = copy.deepcopy(list(env.messages))
        self.ended = False

    def send(self, arguments: Any) -> tuple[str, str | None, bool]:
        """Send the agent's message; ``(the tool's answer, the user's reply or None, the user ended)``.

        A message the tool cannot read raises ``ValueError`` (the agent's mistake: a tool error). A failing
        simulator raises :class:`~pivot_envs.users.UserSimulatorError` (an infrastructure error)."""
        text = message_argument(arguments)
        self.dialogue.append({"role": "assistant", "content": text})
        turn = self.env.user.reply(self.dialogue)
        reply = turn.content
        if reply is not None:
            self.dialogue.append({"role": "user", "content": reply})
        self.ended = bool(turn.done)
        parts = [reply] if reply else []
        if self.ended:
            parts.append(ENDED_NOTE)
        return "\n\n".join(parts), reply, self.ended


def message_argument(arguments: Any) -> str:
    """The ``message`` argument of a user-tool call (a JSON object or its text)."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            raise ValueError(f"{USER_TOOL}: arguments are not JSON: {arguments[:200]!r}") from None
    if not isinstance(arguments, dict) or not isinstance(arguments.get("message"), str):
        raise ValueError(f'{USER_TOOL} takes {{"message": TEXT}}, got {json.dumps(arguments)[:200]}')
    return arguments["message"]


def harness_expert(task: Trajectory, turn: int, user_tool: bool) -> Message:
    """The task's recorded action at assistant turn ``turn``, as a harness with the user tool takes it: a text the
    user answered (a ``user`` message follows it in the task) becomes the user tool's call; past the recording,
    an empty text."""
    recorded = [i for i, m in enumerate(task.messages) if m.get("role") == "assistant"]
    if turn >= len(recorded):
        return {"role": "assistant", "content": ""}
    i = recorded[turn]
    message = copy.deepcopy(task.messages[i])
    answered = i + 1 < len(task.messages) and task.messages[i + 1].get("role") == "user"
    if not user_tool or message.get("tool_calls") or not answered:
        return message
    text = content_text(message.get("content"))
    return {"role": "assistant", "content": None, "tool_calls": [{
        "id": f"user_{turn}", "type": "function",
        "function": {"name": USER_TOOL, "arguments": json.dumps({"message": text}, ensure_ascii=False)}}]}


def user_turns(event_message: str, reply: str | None) -> list[Message]:
    """A user-tool exchange as the episode records it: the agent's text, then the user's reply (when any)."""
    out: list[Message] = [{"role": "assistant", "content": event_message}]
    if reply is not None:
        out.append({"role": "user", "content": reply})
    return out
