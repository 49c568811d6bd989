"""A step's groups from an external harness: its runs as the trainer's rollouts, and what stops a run.

::

    groups = to_rollouts(outcomes)                  # one turn per captured call; errors left out of the loss
    fields = harness_fields(name, stats)            # the metrics row's harness columns
    check_failures(stats, max_rate=0.5, step=3)     # HarnessFailure past the threshold
    raise HarnessFailure(nothing_trained(steps))    # when no step of a run trained

A harness that fails is never a silent result. A step where the harness failed (a non-zero exit, killed, could
not start) warns on the console with the end of the harness's stderr, and the metrics row keeps it
(``harness_error``, ``harness_stderr_tail``); a step where more than ``max_harness_failure_rate`` of the runs
failed stops the run (:class:`HarnessFailure`, naming the harness's error and its stderr); a run in which no step
trained anything ends with :class:`HarnessFailure` too, saying why (failed runs, errors, groups whose episodes
all scored the same). ``pivot-envs train`` prints it and exits non-zero.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from pivot_envs.actions import parse_action
from pivot_envs.agents.base import Completion
from pivot_envs.trainers.episode_rollouts import Rollout, Turn

__all__ = ["HarnessFailure", "StepVerdict", "check_failures", "failure_text", "harness_fields", "nothing_trained",
           "to_rollouts"]

TAIL_IN_ROW = 800
"""Characters of a failed harness's stderr kept in a metrics row (its end)."""


class HarnessFailure(RuntimeError):
    """The harness failed so often that the run cannot train (the message names the harness's error)."""


@dataclass
class StepVerdict:
    """What one harness step did, for the end-of-run check: whether it updated, and why not."""

    step: int
    updated: bool
    runs: int
    harness_failures: int
    errors: int
    skipped_groups: int
    reward_mean: float | None
    first_failure: str | None


def to_rollouts(groups: Sequence[Sequence[Any]]) -> list[list[Rollout]]:
    """The trainer's rollouts of harness outcomes (:class:`~pivot_envs.harness.source.HarnessOutcome`): one turn per
    captured call (its prompt ids, its completion tokens and log-probs, its turn reward); abandoned or failed runs,
    and runs with a call without token ids, are errors (no reward)."""
    return [[_rollout(o, j) for j, o in enumerate(group)] for group in groups]


def _rollout(o: Any, index: int) -> Rollout:
    r = Rollout(task_id=o.task_id, index=index, done=True)
    if o.result is None or o.status != "finished":
        r.error = o.error or f"the harness rollout was {o.status}"
        return r
    res = o.result
    for call, reward in zip(res["calls"], res["turn_rewards"]):
        text = call["text"]
        completion = Completion(text=text, action=parse_action(text), token_ids=call["completion_token_ids"],
                                logprobs=call["logprobs"])
        r.turns.append(Turn(prompt_ids=list(call["prompt_token_ids"] or []), completion=completion, reward=reward))
    missing = [c["index"] for c in res["calls"] if not c["prompt_token_ids"] or c["completion_token_ids"] is None]
    r.tool_calls = len(res["tool_calls"])
    r.truncated = bool(res["truncated"])
    if missing:
        r.error = f"calls {missing} carry no token ids (the policy backend returned none): not trainable"
    else:
        r.success = res["success"]
    return r


def failure_text(outcome: Any, tail: int = TAIL_IN_ROW) -> str:
    """One failed run in words: its task, its error, the end of its stderr."""
    text = f"task {outcome.task_id}: {outcome.error or 'the harness failed'}"
    stderr = (outcome.stderr_tail or "").strip()
    return f"{text}; stderr ends:\n{stderr[-tail:]}" if stderr else f"{text} (no stderr)"


def harness_fields(name: str, stats: Any) -> dict[str, Any]:
    """The metrics row's harness columns of one step (``stats``: :class:`~pivot_envs.harness.source.HarnessStats`)."""
    first = stats.failures[0] if stats.failures else None
    return {"harness": name, "retokenized_calls": stats.retokenized_calls, "window_cut_calls": stats.window_cut_calls,
            "capture_overhead_ms": stats.capture_overhead_ms, "harness_runs": stats.runs,
            "harness_failures": stats.harness_failures, "harness_failure_rate": stats.failure_rate,
            "harness_abandoned": stats.abandoned, "uncaptured_tool_calls": stats.uncaptured_tool_calls,
            "unexecuted_tool_calls": stats.unexecuted_tool_calls, "user_messages": stats.user_messages,
            "cut_at_turn_limit": stats.cut_at_turn_limit,
            "harness_error": None if first is None else f"task {first.task_id}: {first.error}",
            "harness_stderr_tail": None if first is None else (first.stderr_tail or "")[-TAIL_IN_ROW:]}


def check_failures(stats: Any, max_rate: float, step: int, name: str) -> None:
    """:class:`HarnessFailure` when more than ``max_rate`` of the step's runs failed (see the module docstring)."""
    if not stats.runs or stats.failure_rate <= max_rate:
        return
    raise HarnessFailure(
        f"the harness {name!r} failed in {stats.harness_failures} of {stats.runs} runs at step {step} (more than "
        f"max_harness_failure_rate = {max_rate:g}); the run stops. First failure, {failure_text(stats.failures[0])}\n"
        "Run the harness command by hand on a task file to see why (docs/harness.md), or raise "
        "max_harness_failure_rate if failures are expected.")


def nothing_trained(steps: Sequence[StepVerdict], name: str) -> str | None:
    """Why no step of the run trained (``None`` when one did, or there were no steps)."""
    if not steps or any(s.updated for s in steps):
        return None
    runs = sum(s.runs for s in steps)
    failures = sum(s.harness_failures for s in steps)
    errors = sum(s.errors for s in steps)
    skipped = sum(s.skipped_groups for s in steps)
    rewards = [s.reward_mean for s in steps if s.reward_mean is not None]
    parts = [f"{failures} of {runs} harness runs failed", f"{errors} runs were errors (no reward)",
             f"{skipped} groups were skipped because their episodes all scored the same"
             + (f" (mean task success {sum(rewards) / len(rewards):.3f})" if rewards else "")]
    first = next((s.first_failure for s in steps if s.first_failure), None)
    text = f"no step of the run trained the policy with the harness {name!r} ({len(steps)} steps): {'; '.join(parts)}."
    return text + (f" First failure, {first}" if first else "")
