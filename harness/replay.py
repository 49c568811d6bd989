"""Replay a finished harness rollout in a fresh world, through the episode env: does the same episode get the same verdict?

::

    replayed = replay_rollout(result, env)      # env: a fresh EpisodeEnv over the rollout's task, the rollout's user
    replayed.success == result["success"], replayed.digest == result["digest"], replayed.tool_results_equal

The endpoint judges what the harness did in the live world. This check plays the same episode again the
ordinary way: :meth:`EpisodeEnv.reset <pivot_envs.episodes.env.EpisodeEnv.reset>` at the rollout's task (or
pivot), then :meth:`~pivot_envs.episodes.env.EpisodeEnv.step` with every assistant turn of the rollout's
episode that made tool calls (the env executes them in its own world) or that the user answered (a message sent
with the user tool: the env's own user simulator replies), then the final text answer (the episode's last
assistant message without tool calls, as :func:`pivot_envs.success.final_answer` finds it; an empty one when
there is none), which ends the episode. A rollout whose user ended the conversation ends at that message; one cut
by its turn limit replays its turns only, the last one truncating the episode as the limit did. Worlds and the
scripted user are deterministic, so the tool results, the user's replies, the final digest and task success must
come out equal: any difference means the endpoint's episode and the env's disagree (the benchmark's "success
through the endpoint = replay" row). The env must have the rollout's user simulator (``user="none"`` for a
rollout without the user tool). One episode cannot be replayed: a harness that answered in text while the
scripted user still had turns ended its episode there, where the env's user goes on; the replay says so in
``error``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pivot_envs.success import final_answer
from pivot_envs.types import Message

__all__ = ["ReplayResult", "replay_rollout", "replay_steps"]


@dataclass
class ReplayResult:
    """The replayed episode: its verdict, its digest, and whether every tool result and user reply equals the live
    one."""

    success: bool | None
    digest: str | None
    error: str | None
    steps: int
    tool_results_equal: bool


def replay_steps(messages: list[Message], start: int, ended_by_user: bool, truncated: bool) -> list[Message]:
    """The assistant turns to step after the opening (``messages[:start]``), the final answer last."""
    tail = messages[start:]
    steps = [m for i, m in enumerate(tail) if m.get("role") == "assistant"
             and (m.get("tool_calls") or (i + 1 < len(tail) and tail[i + 1].get("role") == "user"))]
    if truncated:
        return steps
    if ended_by_user:  # the user's last reply ended it: the message it answered is the last step
        last = max((i for i, m in enumerate(tail) if m.get("role") == "assistant"), default=None)
        if last is not None and tail[last] not in steps:
            steps.append(tail[last])
        return steps
    return steps + [{"role": "assistant", "content": final_answer(tail) or ""}]


def replay_rollout(result: dict[str, Any], env: Any) -> ReplayResult:
    """Replay the finished rollout ``result`` in ``env`` (an :class:`~pivot_envs.episodes.env.EpisodeEnv` over its
    task with the rollout's user simulator; see the module docstring)."""
    options = {"pivot_id": result["pivot_id"]} if result.get("pivot_id") else {"task_id": result["task_id"]}
    env.reset(options=options)
    start = len(env.messages)
    messages = result["messages"]
    steps = replay_steps(messages, start, result.get("cut") == "user_ended", bool(result.get("truncated")))
    env.max_turns = max(1, len(steps)) if result.get("truncated") else len(steps) + 1
    for message in steps:
        if env.done or env.error is not None:
            break
        env.step(message)
    error = env.error
    if error is None and not env.done:
        error = ("the episode did not end where the harness ended it: the env's user went on after the final "
                 "answer (a harness's text answer ends its episode)")
    return ReplayResult(success=env.success, digest=env.digest, error=error, steps=len(steps),
                        tool_results_equal=_said(messages[start:]) == _said(env.messages[start:]))


def _said(messages: list[Message]) -> list[Any]:
    """What the world and the user answered, in order."""
    return [(m.get("role"), m.get("content")) for m in messages if m.get("role") in ("tool", "user")]
