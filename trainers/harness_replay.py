"""Replay a finished harness rollout in a fresh world, through the episode env: does the same episode get the same verdict?

::

    replayed = replay_rollout(result, env)      # env: a fresh EpisodeEnv over the rollout's task
    replayed.success == result["success"], replayed.digest == result["digest"], replayed.tool_results_equal

The endpoint judges what the harness did in the live world. This check plays the same episode again the
ordinary way: :meth:`EpisodeEnv.reset <pivot_envs.episodes.env.EpisodeEnv.reset>` at the rollout's task (or
pivot), then :meth:`~pivot_envs.episodes.env.EpisodeEnv.step` with every assistant turn of the rollout's
episode that made tool calls (the env executes them in its own world), then the final text answer (the
episode's last assistant message without tool calls, as :func:`pivot_envs.success.final_answer` finds it;
an empty one when there is none), which ends the episode with no user (a rollout cut by its turn limit
replays its tool turns only, the last one truncating the episode as the limit did). Worlds are deterministic, so the
tool results, the final digest and task success must come out equal: any difference means the endpoint's
world and the env's disagree (the benchmark's "success through the endpoint = replay" row).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pivot_envs.success import final_answer

__all__ = ["ReplayResult", "replay_rollout"]


@dataclass
class ReplayResult:
    """The replayed episode: its verdict, its digest, and whether every tool result equals the live one."""

    success: bool | None
    digest: str | None
    error: str | None
    steps: int
    tool_results_equal: bool


def replay_rollout(result: dict[str, Any], env: Any) -> ReplayResult:
    """Replay the finished rollout ``result`` in ``env`` (an :class:`~pivot_envs.episodes.env.EpisodeEnv` over its
    task, built with ``user="none"``; see the module docstring)."""
    options = {"pivot_id": result["pivot_id"]} if result.get("pivot_id") else {"task_id": result["task_id"]}
    env.reset(options=options)
    start = len(env.messages)
    messages = result["messages"]
    turns = [m for m in messages[start:] if m.get("role") == "assistant" and m.get("tool_calls")]
    answer = final_answer(messages[start:]) or ""
    if result.get("truncated"):  # the turn limit ended it: the last turn truncates the replay too
        steps = turns
        env.max_turns = max(1, len(steps))
    else:
        steps = turns + [{"role": "assistant", "content": answer}]
        env.max_turns = len(steps) + 1
    for message in steps:
        if env.done or env.error is not None:
            break
        env.step(message)
    live = [m.get("content") for m in messages[start:] if m.get("role") == "tool"]
    replayed = [m.get("content") for m in env.messages[start:] if m.get("role") == "tool"]
    return ReplayResult(success=env.success, digest=env.digest, error=env.error, steps=len(steps),
                        tool_results_equal=live == replayed)
