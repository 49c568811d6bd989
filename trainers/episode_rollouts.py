"""Whole-episode rollouts for multi-turn RL: plain groups (end-to-end GRPO) and ARPO's entropy branching.

::

    from pivot_envs.trainers.episode_rollouts import ArpoRule, RolloutPlan, play_groups

    groups, stats = play_groups(make_env, agent, tasks, RolloutPlan(group_size=8), seed=0)
    groups[i][j].success, groups[i][j].turns[t].completion.token_ids, stats.rollout_turns

A **rollout** is one episode of a task played by the policy in the task's world
(:class:`pivot_envs.episodes.EpisodeEnv`): every assistant turn keeps the prompt token ids the
sampler saw and the sampled completion (its token ids are what the loss is taken over; tool results
and user replies are only ever in later prompts, so they are masked by construction). The episode's
reward is task success. All live rollouts advance together: each round is ONE ``agent.sample`` call
over every live episode, so one round costs one model call per live episode — a **rollout turn**.

Plain groups (``RolloutPlan(arpo=None)``): ``group_size`` rollouts per task from the task's start.

ARPO (Dong et al. 2025, arXiv 2507.19849; ``RolloutPlan(arpo=ArpoRule(...))``):

1. start ``initial`` rollouts per task; the entropy ``H_init`` of the first ``k`` tokens of each
   rollout's first turn is its reference;
2. at every later turn that follows a tool result, the same entropy ``H_t`` of the turn just sampled
   gives ``dH = H_t - H_init`` and ``P = alpha + beta * dH``; when ``P > tau`` the state before that
   turn is *branched*: ``branches`` (Z) more continuations are sampled there (one extra call for all
   branch points of the round), each continuing as its own rollout that shares the turns before the
   branch point with its parent;
3. until the task's budget of ``group_size`` (M) rollouts is spent; when every rollout of a task has
   ended with budget left, fresh rollouts from the start fill it (as the reference implementation).

Entropy is the full-distribution entropy of each of the first ``k`` completion tokens (a teacher-forced
forward of the policy, ``entropy_fn``), averaged and divided by ``log V`` (so 0 <= H <= 1,
:func:`~.logprobs.normalised_entropy`; the
reference code divides by ``log V`` too). A branch re-creates its parent's state by replaying the
parent's earlier actions in a fresh env (worlds are deterministic; replayed steps are tool calls of
the world, not model calls, and are counted apart as ``replayed_steps``).

Shared prefixes and the soft advantage attribution: a branch's rollout carries its parent's turns
before the branch point with the same token ids, so in the loss the shared tokens appear once per
rollout through them, each time with that rollout's advantage; the importance ratio of those tokens is
the same in every copy, so their gradient is the mean advantage of the rollouts sharing them times
their number — ARPO's soft advantage estimation.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from pivot_envs.agents.base import Completion
from pivot_envs.agents.prompting import encode_prompt
from pivot_envs.episodes.turns import TurnVerdict
from pivot_envs.types import Trajectory

EntropyFn = Callable[[Sequence[Sequence[int]], Sequence[Sequence[int]]], list[float]]
"""``entropy_fn(prompts, completions)`` -> per row, the normalised entropy of its first tokens."""


@dataclass(frozen=True)
class ArpoRule:
    """ARPO's branching rule: branch where ``alpha + beta * (H_t - H_init) > tau``.

    Attributes:
        initial: N, rollouts started per task from the start.
        branches: Z, continuations sampled at a branch point.
        entropy_tokens: k, the first tokens of a turn whose entropy is measured.
        alpha, beta, tau: the rule's constants (defaults: branch when the entropy rose by more than
            ``(tau - alpha) / beta`` = 0.05 of ``log V``).
    """

    initial: int = 2
    branches: int = 2
    entropy_tokens: int = 8
    alpha: float = 0.5
    beta: float = 1.0
    tau: float = 0.55

    def __post_init__(self) -> None:
        if self.initial < 1 or self.branches < 1 or self.entropy_tokens < 1:
            raise ValueError("ArpoRule: initial, branches and entropy_tokens must be >= 1, got "
                             f"{self.initial}, {self.branches}, {self.entropy_tokens}")
        if self.beta < 0:
            raise ValueError(f"ArpoRule.beta must be >= 0 (more entropy = more branching), got {self.beta}")

    def score(self, entropy: float, initial_entropy: float) -> float:
        """``P = alpha + beta * (H_t - H_init)``."""
        return self.alpha + self.beta * (entropy - initial_entropy)

    def fires(self, entropy: float, initial_entropy: float) -> bool:
        """Branch here: ``P > tau``."""
        return self.score(entropy, initial_entropy) > self.tau


@dataclass(frozen=True)
class RolloutPlan:
    """How many rollouts per task and how they are started.

    Attributes:
        group_size: M, rollouts per task (the GRPO group; ARPO's budget).
        arpo: the branching rule; ``None``: ``group_size`` independent rollouts per task.
        workers: threads for env resets, steps and replays.
    """

    group_size: int = 8
    arpo: ArpoRule | None = None
    workers: int = 1

    def __post_init__(self) -> None:
        if self.group_size < 2:
            raise ValueError(f"RolloutPlan.group_size must be >= 2 (GRPO compares a group), got {self.group_size}")
        if self.arpo is not None and self.arpo.initial > self.group_size:
            raise ValueError(f"ARPO starts {self.arpo.initial} rollouts per task but the budget group_size is "
                             f"{self.group_size}: set initial <= group_size")


@dataclass
class Turn:
    """One assistant turn of a rollout.

    Attributes:
        prompt_ids: the prompt token ids the turn was sampled from (history cut as the sampler cuts it).
        completion: the sampled turn (``token_ids`` enter the loss).
        entropy: normalised entropy of its first ``k`` tokens (ARPO only; else ``None``).
        shared: the turn was inherited from the parent rollout (sampled once, before the branch point).
        reward: the env's ``turn_reward`` for it (the domain verifier's score while the episode is on the
            expert's path; ``None`` off the path, or when the env does not score turns).
        verdict: what judged it (:class:`~pivot_envs.episodes.turns.TurnVerdict`: the action, the expert's pivot,
            the verifier's result), where the env scored it; else ``None``.
    """

    prompt_ids: list[int]
    completion: Completion
    entropy: float | None = None
    shared: bool = False
    reward: float | None = None
    verdict: TurnVerdict | None = None


@dataclass
class Rollout:
    """One episode of one task.

    Attributes:
        task_id: the task (the GRPO group).
        index: its number within the task's group.
        turns: the assistant turns, in order.
        success: task success (``None`` on an infrastructure error: then it is left out of the group).
        error: the infrastructure error, if any.
        tool_calls: tool calls executed by this rollout's own turns (not the shared ones).
        truncated: ended by the turn limit.
        parent: index of the rollout it branched from (``None``: started from the task's start).
        branch_turn: the turn at which it branched off (its turns before it are shared).
        initial_entropy: ``H_init`` (ARPO).
    """

    task_id: str
    index: int
    turns: list[Turn] = field(default_factory=list)
    success: bool | None = None
    error: str | None = None
    tool_calls: int = 0
    truncated: bool = False
    parent: int | None = None
    branch_turn: int | None = None
    initial_entropy: float | None = None
    env: Any = field(default=None, repr=False, compare=False)
    done: bool = False

    @property
    def reward(self) -> float | None:
        return None if self.success is None else float(self.success)


@dataclass
class RolloutStats:
    """Costs of one :func:`play_groups` call.

    Attributes:
        rollout_turns: model calls: completions sampled (shared turns are not sampled again).
        rounds: ``agent.sample`` rounds.
        tool_calls: tool calls executed by sampled turns.
        replayed_steps: env steps replayed to re-create branch points (not model calls).
        rollouts: rollouts played.
        branches: ``(task_id, parent index, turn, P)`` of every branch point.
        topped_up: rollouts started from the task's start because its rollouts ended with budget left.
        entropy_rows: rows whose entropy was measured (ARPO's extra forward passes).
    """

    rollout_turns: int = 0
    rounds: int = 0
    tool_calls: int = 0
    replayed_steps: int = 0
    rollouts: int = 0
    branches: list[tuple[str, int, int, float]] = field(default_factory=list)
    topped_up: int = 0
    entropy_rows: int = 0


def play_groups(
    make_env: Callable[[], Any],
    agent: Any,
    tasks: Sequence[Trajectory],
    plan: RolloutPlan,
    *,
    seed: int = 0,
    encode: Callable[[Any], list[int]] | None = None,
    entropy_fn: EntropyFn | None = None,
) -> tuple[list[list[Rollout]], RolloutStats]:
    """Play ``plan.group_size`` rollouts of every task (see the module docstring).

    Args:
        make_env: a new :class:`~pivot_envs.episodes.EpisodeEnv` that knows every task of ``tasks``.
        agent: ``agent.sample(pivots, n, seed=...)`` returning completions with ``token_ids``.
        tasks: the tasks of this call (one group each).
        encode: pivot -> prompt token ids (default: the ``hf`` agent's own encoding).
        entropy_fn: required with ARPO.

    Returns the rollouts per task (in the order of ``tasks``) and the costs.
    """
    if plan.arpo is not None and entropy_fn is None:
        raise ValueError("ARPO needs entropy_fn (the policy's entropy of the first tokens of a turn)")
    if encode is None:
        def encode(pivot: Any) -> list[int]:
            return encode_prompt(agent.tokenizer, pivot, agent.prompt_config)

    stats = RolloutStats()
    pool = _EnvPool(make_env)
    executor = ThreadPoolExecutor(plan.workers) if plan.workers > 1 else None
    first = plan.arpo.initial if plan.arpo is not None else plan.group_size
    groups: list[list[Rollout]] = [[] for _ in tasks]

    def parallel(fn: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
        if executor is None or len(items) < 2:
            return [fn(x) for x in items]
        return list(executor.map(fn, items))

    def start(group: int, count: int) -> list[Rollout]:
        fresh = [Rollout(task_id=tasks[group].id, index=len(groups[group]) + i) for i in range(count)]
        groups[group].extend(fresh)
        for r in fresh:
            r.env = pool.take()
        parallel(lambda r: _reset(r), fresh)
        return fresh

    try:
        live: list[Rollout] = []
        for g in range(len(tasks)):
            live += start(g, first)
        stats.rollouts += len(live)
        while True:
            live = [r for r in live if not _finish_if_failed(r, pool)]
            busy = {r.task_id for r in live}
            refill = [(g, plan.group_size - len(groups[g])) for g in range(len(tasks))
                      if tasks[g].id not in busy and len(groups[g]) < plan.group_size]
            for g, count in refill:  # every rollout of this task ended with budget left: fresh ones fill it
                live += start(g, count)
                stats.topped_up += count
                stats.rollouts += count
            if refill:
                continue
            if not live:
                break
            stats.rounds += 1
            pivots = [r.env.current_pivot() for r in live]
            prompts = [encode(p) for p in pivots]
            samples = agent.sample(pivots, 1, seed=_round_seed(seed, stats.rounds, 0))
            turns = [Turn(prompt, group[0]) for prompt, group in zip(prompts, samples)]
            stats.rollout_turns += len(turns)
            branched: list[Rollout] = []
            if plan.arpo is not None:
                branched = _arpo_round(plan.arpo, live, pivots, turns, groups, tasks, plan.group_size, agent,
                                       entropy_fn, pool, parallel, stats, seed)
            for r, turn in zip(live, turns):
                r.turns.append(turn)
            moving = live + branched
            steps = [(r, r.turns[-1]) for r in moving]
            parallel(lambda pair: _step(pair[0], pair[1]), steps)
            stats.rollouts += len(branched)
            live = []
            for r in moving:
                if r.done:
                    stats.tool_calls += r.tool_calls
                    pool.give(r.env)
                    r.env = None
                else:
                    live.append(r)
    finally:
        if executor is not None:
            executor.shutdown(wait=True)
        pool.close()
    return groups, stats


# --------------------------------------------------------------------------- ARPO


def _arpo_round(rule: ArpoRule, live: list[Rollout], pivots: list[Any], turns: list[Turn],
                groups: list[list[Rollout]], tasks: Sequence[Trajectory], budget: int, agent: Any,
                entropy_fn: EntropyFn | None, pool: "_EnvPool", parallel: Callable[..., list[Any]],
                stats: RolloutStats, seed: int) -> list[Rollout]:
    """Measure entropies, decide branch points, sample and set up the branches; returns the new rollouts."""
    assert entropy_fn is not None
    group_of = {t.id: i for i, t in enumerate(tasks)}
    need = [i for i, r in enumerate(live) if not r.turns or _after_tool(pivots[i])]
    if need:
        values = entropy_fn([turns[i].prompt_ids for i in need],
                            [list(turns[i].completion.token_ids or [])[: rule.entropy_tokens] for i in need])
        stats.entropy_rows += len(need)
        for i, value in zip(need, values):
            turns[i].entropy = float(value)
    points: list[tuple[int, list[Rollout]]] = []  # (live index, the branches reserved there)
    for i, r in enumerate(live):
        h = turns[i].entropy
        if not r.turns:
            if r.initial_entropy is None:
                r.initial_entropy = h
            continue
        if h is None or r.initial_entropy is None:
            continue
        g = group_of[r.task_id]
        room = budget - len(groups[g])
        if room <= 0 or not rule.fires(h, r.initial_entropy):
            continue
        reserved = [Rollout(task_id=r.task_id, index=len(groups[g]) + j, parent=r.index, branch_turn=len(r.turns),
                            initial_entropy=r.initial_entropy) for j in range(min(rule.branches, room))]
        groups[g].extend(reserved)  # the budget is taken now
        points.append((i, reserved))
        stats.branches.append((r.task_id, r.index, len(r.turns), rule.score(h, r.initial_entropy)))
    if not points:
        return []
    # one call: Z continuations at every branch point (the state the parent's turn was just sampled in)
    extra = agent.sample([pivots[i] for i, _ in points], max(len(b) for _, b in points),
                         seed=_round_seed(seed, stats.rounds, 1))
    new: list[Rollout] = []
    for (i, reserved), samples in zip(points, extra):
        parent = live[i]
        for child, completion in zip(reserved, samples):
            child.turns = [Turn(t.prompt_ids, t.completion, t.entropy, shared=True, reward=t.reward, verdict=t.verdict)
                           for t in parent.turns]
            child.turns.append(Turn(turns[i].prompt_ids, completion))
            child.env = pool.take()
            new.append(child)
        stats.rollout_turns += len(reserved)
    prefixes = [(child, [t.completion for t in child.turns[:-1]]) for child in new]
    parallel(lambda pair: _replay(pair[0], pair[1]), prefixes)
    stats.replayed_steps += sum(len(p) for _, p in prefixes)
    return new


def _after_tool(pivot: Any) -> bool:
    """The state follows a tool result (the last message is a tool message)."""
    return bool(pivot.context) and pivot.context[-1].get("role") == "tool"


# --------------------------------------------------------------------------- env handling


class _EnvPool:
    """Envs reused across rollouts (a world session is opened per reset, the env object is kept)."""

    def __init__(self, make_env: Callable[[], Any]):
        self.make_env = make_env
        self.free: list[Any] = []
        self.all: list[Any] = []

    def take(self) -> Any:
        if self.free:
            return self.free.pop()
        env = self.make_env()
        self.all.append(env)
        return env

    def give(self, env: Any) -> None:
        if env is not None:
            self.free.append(env)

    def close(self) -> None:
        for env in self.all:
            env.close()


def _reset(r: Rollout) -> None:
    # repeat = the rollout's index: the pivot ids of the group's rollouts differ, so an agent seeded by
    # (seed, pivot id, sample) draws each rollout anew
    r.env.reset(options={"task_id": r.task_id, "repeat": r.index})
    if r.env.error is not None:
        r.error = r.env.error


def _step(r: Rollout, turn: Turn) -> None:
    env = r.env
    if r.error is not None:  # its reset or replay failed: no reward, nothing to play
        r.done, r.success = True, None
        return
    before = env.tool_calls
    env.step(turn.completion.action if turn.completion.action is not None else turn.completion.text)
    scorer = getattr(env, "scorer", None)
    turn.reward = getattr(scorer, "reward", None)
    turn.verdict = getattr(scorer, "verdict", None)
    r.tool_calls += env.tool_calls - before
    if env.done:
        r.done = True
        r.truncated = bool(env.truncated)
        r.error = env.error
        r.success = None if env.error is not None else env.success


def _replay(r: Rollout, prefix: Sequence[Completion]) -> None:
    """Re-create the state at ``r``'s branch point: reset, then the parent's earlier actions."""
    env = r.env
    env.reset(options={"task_id": r.task_id, "repeat": r.index})
    for c in prefix:
        if env.error is not None or env.done:
            break
        env.step(c.action if c.action is not None else c.text)
    if env.error is not None:
        r.error = env.error
    elif env.done:
        r.error = "replaying the parent's turns ended the episode early (the world is not deterministic)"


def _finish_if_failed(r: Rollout, pool: _EnvPool) -> bool:
    """End a rollout whose reset or replay failed (infrastructure error: no reward)."""
    if r.error is None or r.done:
        return r.done
    r.done, r.success = True, None
    pool.give(r.env)
    r.env = None
    return True


def _round_seed(seed: int, round_: int, part: int) -> int:
    return (int(seed) * 1_000_003 + round_ * 7919 + part) % (2**63)
