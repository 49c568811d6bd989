"""Judging a finished harness rollout the way its episode env judges an episode.

::

    result = judge_rollout(rollout, score_turns=True)   # what POST /harness/rollouts/{id}/finish answers

The episode is the rollout's transcript (:mod:`pivot_envs.harness.transcript`): the env's success policy judges
it against the world's final digest and the expert's outcome
(:meth:`~pivot_envs.episodes.policy.SuccessPolicy.judge`), and the per-turn rewards follow the env's rule
(:class:`~pivot_envs.episodes.turns.TurnScorer`: the domain verifier's reward while the episode is on the expert's
path), one per model call. The episode is **truncated** as the env truncates one: the harness asked for a model
call past the turn limit, or its last allowed call made tool calls. A world that fails is the rollout's error
(``success`` ``None``), never a 0.
"""

from __future__ import annotations

import copy
from typing import Any

from pivot_envs.episodes.turns import TurnScorer, turn_verifier
from pivot_envs.harness.capture import capture_summary
from pivot_envs.harness.state import CUT_TURN_LIMIT, HarnessRollout
from pivot_envs.harness.transcript import transcript
from pivot_envs.types import Message
from pivot_envs.worlds import WorldError

__all__ = ["judge_rollout", "truncated"]


def truncated(rollout: HarnessRollout) -> bool:
    """The episode was cut by its turn limit (see the module docstring)."""
    if rollout.cut == CUT_TURN_LIMIT:
        return True
    if rollout.cut is not None or len(rollout.calls) < rollout.max_turns:
        return False
    return bool(rollout.calls[-1].message.get("tool_calls"))


def judge_rollout(rollout: HarnessRollout, score_turns: bool) -> dict[str, Any]:
    """The finish answer of ``rollout`` (its env still attached)."""
    env = rollout.env
    messages, turn_of = transcript(rollout)
    cut_short = truncated(rollout)
    success = reason = digest = error = None
    checks: dict[str, Any] = {}
    try:
        digest = env.world.digest()
        verdict = env.success_policy.judge(messages, env.task, world=env.world, digest=digest,
                                           outcome=env.outcome, truncated=cut_short)
        success, reason, checks = verdict.success, verdict.reason, dict(verdict.checks)
    except WorldError as exc:
        error = f"WorldError: {exc}"
    error = error or rollout.error
    episode_rewards, reward_errors = turn_rewards(rollout, messages) if score_turns and not error else ([], [])
    per_call: list[float | None] = [None] * len(rollout.calls)
    for turn, call_index in enumerate(turn_of):
        if call_index is not None and turn < len(episode_rewards):
            per_call[call_index] = episode_rewards[turn]
    summary = capture_summary(rollout.calls)
    return {
        "rollout_id": rollout.id, "task_id": rollout.task_id, "pivot_id": rollout.pivot_id,
        "domain": env.domain_name, "success": None if error else success,
        "reward": None if error or success is None else float(success),
        "turn_rewards": per_call, "episode_turn_rewards": episode_rewards, "turn_reward_errors": reward_errors,
        "retokenized_calls": summary["retokenized_calls"],
        "calls": [c.wire() for c in rollout.calls], "messages": messages, "tools": copy.deepcopy(rollout.world_tools),
        "tool_calls": _tool_calls(rollout), "user_messages": sum(1 for e in rollout.events if e.user),
        "uncaptured_tool_calls": sum(1 for e in rollout.events if e.call_id is None),
        "unexecuted_tool_calls": _unexecuted(rollout),
        "truncated": cut_short, "cut": rollout.cut, "closing_answers": rollout.closing_answers,
        "digest": digest, "reason": reason, "checks": checks, "error": error,
        "capture": summary, "policy_versions": sorted({c.policy_version for c in rollout.calls}),
        "harness": copy.deepcopy(rollout.harness),
    }


def _tool_calls(rollout: HarnessRollout) -> list[dict[str, Any]]:
    return [{"name": e.name, "arguments": e.arguments, "content": e.content, "error": e.error,
             "call_index": e.call_index, "call_id": e.call_id, "user": e.user} for e in rollout.events]


def _unexecuted(rollout: HarnessRollout) -> int:
    matched = {(e.call_index, e.call_id) for e in rollout.events if e.call_id is not None}
    emitted = [(c.index, tc.get("id")) for c in rollout.calls for tc in c.message.get("tool_calls") or []]
    return sum(1 for x in emitted if x not in matched)


def turn_rewards(rollout: HarnessRollout, messages: list[Message]) -> tuple[list[float | None], list[str]]:
    """The env's per-turn rule over the episode's assistant turns after the opening."""
    env = rollout.env
    verifier = env.scorer.verifier
    if verifier is None:
        verifier = turn_verifier(None, env.domain)
    scorer = TurnScorer(verifier, env.domain)
    task = env.task
    recorded = [i for i, m in enumerate(task.messages) if m.get("role") == "assistant"]
    k = sum(1 for m in rollout.opening if m.get("role") == "assistant")
    at = len(rollout.opening)
    while at < len(messages):
        end = at + 1
        while end < len(messages) and messages[end].get("role") != "assistant":
            end += 1
        turn = scorer.score(env.parse_action(messages[at]), task, recorded, k, at, rollout.world_tools)
        scorer.follow(turn, task, recorded, messages[at + 1:end], failed=False)
        k += 1
        at = end
    return list(scorer.rewards), list(scorer.errors)
