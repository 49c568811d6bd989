"""What the third-party harness tests share: play a harness through the endpoint, then check each episode's verdict
against the same calls replayed in the world directly."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from pivot_envs.harness.replay import replay_rollout
from pivot_envs.harness.command import HarnessSpec
from pivot_envs.harness.source import local_harness_source


def play_and_replay(agent: Any, make_env: Callable[[], Any], harness: Sequence[str], env_vars: dict[str, str],
                    task_ids: Sequence[str], group_size: int, max_turns: int) -> tuple[list[dict[str, Any]], Any]:
    """Run ``harness`` ``group_size`` times per task against its own rollout endpoint; every run must finish
    (exit 0) and its success and digest must equal its calls replayed in a fresh env. Returns the finished
    rollouts' results and the source's stats."""
    spec = HarnessSpec.build(list(harness), timeout_s=240, env=env_vars)
    source = local_harness_source(agent, make_env, spec, version=lambda: 0, max_turns=max_turns, score_turns=True)
    try:
        groups, stats = source.play([{"task_id": t} for t in task_ids], group_size)
    finally:
        source.close()
    outcomes = [o for g in groups for o in g]
    for o in outcomes:
        assert o.status == "finished" and o.exit_code == 0, (o.error, o.stderr_tail)
    env = make_env()
    try:
        replays = [replay_rollout(o.result, env) for o in outcomes]
    finally:
        env.close()
    for o, replayed in zip(outcomes, replays):
        assert replayed.tool_results_equal and replayed.error is None, o.result["tool_calls"]
        assert (replayed.success, replayed.digest) == (o.result["success"], o.result["digest"])
    return [o.result for o in outcomes], stats
