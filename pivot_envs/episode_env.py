"""``EpisodeEnv``: one task per episode, many steps, scored by task success at the end.

Where :class:`pivot_envs.env.PivotEnv` scores one action at one pivot, an episode plays a whole
task in the task's **world** (:mod:`pivot_envs.worlds`): tool calls are executed, the user is
simulated (:mod:`pivot_envs.users`), and the final reward is task success
(:mod:`pivot_envs.success`)::

    import gymnasium, json

    env = gymnasium.make("pivot_envs:pivot/ToolUse-Episode-v0", split="test", user="scripted")
    obs, info = env.reset(options={"task_id": "tool_use-0-4"})
    while True:
        action = my_policy(json.loads(obs["messages"]), json.loads(obs["tools"]))
        obs, reward, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            break
    info["success"], info["turns"], info["tool_calls"], info["error"], info["digest"]

Env ids: ``pivot/<Domain>-Episode-v0`` for every domain with a world (``pivot/ToolUse-Episode-v0``,
``pivot/Terminal-Episode-v0``, ``pivot/SWE-Episode-v0``, ``pivot/Search-Episode-v0``), and
``pivot/Episode-v0``, which takes ``world=SPEC`` (a built-in or registered world's name,
``mcp:COMMAND``, a config dict, a World subclass or a zero-argument factory) and ``tasks=``. Every
env builds its own world from the spec, so envs never share a state (a World instance is refused).

Tasks are expert trajectories (:class:`~pivot_envs.types.Trajectory`): a trajectory file (any
format :func:`pivot_envs.formats.read_trajectories` reads), ``bundled:DOMAIN[:SPLIT]``, or a list
of trajectories (or dicts); ``None``: the domain's bundled ``split``. Only successful trajectories
(``reward`` absent or >= ``min_reward``) are tasks: success is measured against the state their
expert reached. A task that lists no tools gets its world's tools.

``reset(seed, options)``: ``{"task_id": ID}`` starts at the task's first turn (the messages up to
and including the first user message, system prompt kept); ``{"pivot_id": ID}`` starts at a pivot
of a task (its context; the world replays the context's tool calls); ``{"index": I}`` the I-th
task; no option: a task drawn with the env's seeded generator.

``step(action)``: the action (model text or an assistant message dict) is parsed with the
domain's ``parse_action``; its tool calls are executed in the world in order and each result comes
back as a ``tool`` message; a message without tool calls goes to the user simulator, whose reply
is appended as a ``user`` message (or who ends the episode). The episode **terminates** when the
agent finishes (a text message when there is no user or the user stops, a finishing tool call
such as SWE's ``submit``) and is **truncated** after ``max_turns`` assistant turns. The reward is
0 until the end, then 1.0 on task success, else 0.0.

Per-turn rewards (``info["turn_reward"]``): the episode is **on the expert's path** at an agent turn
when its messages so far are the expert's up to equivalent actions, which holds when

* it started at the task's first turn or at one of its pivots (the expert's own messages),
* every earlier agent action of the episode was judged equivalent to the expert's action at its
  turn (the verifier's reward 1.0 and ``passed``), and
* everything that came back after each of those actions equals what came back to the expert: the
  same tool results (in any order within the turn; call ids aside) and the same user replies. The
  tool results stand for the world's state (no digest is taken per turn).

On the path, ``turn_reward`` is the verifier's reward (a float in [0, 1]) for this turn's action
against the expert's action at this turn, at the pivot extraction makes of that turn
(:func:`pivot_envs.pipeline.extract.extract_pivots`: the expert's messages before it as context,
the task's fixture at the turn, replayed for a ``replay`` domain such as terminal, and its world
settings). The verifier is the env's ``verifier=``, else the domain's default (``tool_call`` without
a domain). Off the path (an earlier action below 1.0, other tool results or user replies, an
earlier verifier error, a turn past the expert's last one) it is ``None``, for the rest of the
episode. A verifier failure gives ``None`` and ``turn_reward_error`` naming it (never a silent 0),
and leaves the path. ``info["on_path"]`` says whether the next turn is still on it. So replaying the
expert scores 1.0 at every turn, answer turns included (``final_turn`` / ``facts``), and a wrong first
call scores 0.0 and then ``None``. ``turn_rewards`` (the env attribute, and the episode row's key) lists
them per agent turn; ``score_turns=False`` skips the verifier (``turn_reward`` always ``None``,
``on_path`` ``None``). The step reward itself stays task success.

Observation (as PivotEnv): ``{"messages": json.dumps(messages), "tools": json.dumps(tools)}``.
``info``: ``task_id``, ``pivot_id``, ``domain``, ``expert`` (the recorded action at this turn, or
``None`` past the recording), ``turns`` (the agent's assistant turns so far; a pivot's context does not
count), ``tool_calls``, ``tool_errors``
(tool results the tools flagged as errors: the agent's mistakes), ``errors`` (infrastructure
failures: the world or the user simulator itself failed), ``error`` (the first of them, else
``None``: the episode then ends at once and its success is ``None``, never a silent 0), and at the
end ``digest`` (the world's final state), ``success``, ``reason`` and ``checks``; every step adds
``turn_reward``, ``turn_reward_error`` and ``on_path`` (see above).

Batched play over many episodes (one agent call per turn for all live episodes):
:func:`run_episodes`; the CLI is ``pivot-envs play``.
"""

from __future__ import annotations

import copy
import json
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import gymnasium

from pivot_envs.render import render_message
from pivot_envs.spaces import UnicodeText
from pivot_envs.types import Message, Pivot, Trajectory, stable_hash

TaskSource = Any
"""A trajectory file, ``bundled:DOMAIN[:SPLIT]``, a list of trajectories (or dicts), or ``None``."""

BUNDLED = "bundled:"


DEFAULT_MAX_TURNS = 30

DOMAINLESS_VERIFIER = "tool_call"
"""The per-turn verifier of an episode env without a domain (and without ``verifier=``)."""

MAX_ACTION_CHARS = 100_000
"""The action space's longest text (an assistant turn); ``action_space.sample()`` draws up to this."""
MAX_MESSAGES_CHARS = 1 << 26
"""The observation's longest ``messages`` text: a whole episode's history (actions are appended to it,
so it must hold ``max_turns`` long actions plus the tool results)."""


def episode_spaces() -> tuple[gymnasium.spaces.Dict, UnicodeText]:
    """``(observation_space, action_space)`` of an episode env: PivotEnv's shapes, sized for a history."""
    obs = gymnasium.spaces.Dict({"messages": UnicodeText(max_length=MAX_MESSAGES_CHARS), "tools": UnicodeText()})
    return obs, UnicodeText(max_length=MAX_ACTION_CHARS)


# --------------------------------------------------------------------------- tasks


def resolve_tasks(source: TaskSource, *, domain: str | None = None, split: str = "train",
                  min_reward: float | None = 1.0) -> list[Trajectory]:
    """The tasks of ``source`` (see the module docstring): successful trajectories, ids unique.

    Raises ``ValueError`` / ``FileNotFoundError`` naming the source and the fix.
    """
    from pivot_envs.sources import resolve_trajectories

    trajs = resolve_trajectories(source, domain=domain, split=split, kind="task")
    label = str(source) if isinstance(source, (str, Path)) else (
        f"bundled:{domain}:{split}" if source is None else "the task list")
    tasks = [t for t in trajs if min_reward is None or t.reward is None or t.reward >= min_reward]
    seen: set[str] = set()
    for t in tasks:
        if t.id in seen:
            raise ValueError(f"{label}: two tasks have the id {t.id!r}; task ids must be unique")
        seen.add(t.id)
        if not any(m.get("role") == "user" for m in t.messages):
            raise ValueError(f"{label}: task {t.id!r} has no user message (an episode starts at the first one)")
    return tasks


def bundled_domain(source: TaskSource) -> str | None:
    """The domain of a ``bundled:DOMAIN[:SPLIT]`` source, else ``None``."""
    if isinstance(source, str) and source.startswith(BUNDLED):
        return source[len(BUNDLED):].partition(":")[0] or None
    return None


# --------------------------------------------------------------------------- the expert's outcome


@dataclass(frozen=True)
class ExpertOutcome:
    """What the expert's trajectory did to a fresh world.

    Attributes:
        start_digest: the digest of the task's start state.
        expert_digest: the digest after replaying every tool call of the expert, in order.
        facts: the facts the expert told the user (:func:`pivot_envs.success.expert_facts`).
    """

    start_digest: str
    expert_digest: str
    facts: tuple[str, ...] = ()

    @property
    def read_only(self) -> bool:
        """The expert changed no state: an information task."""
        return self.start_digest == self.expert_digest


_EXPERT_CACHE: dict[tuple[str, str], ExpertOutcome] = {}
_EXPERT_LOCK = threading.Lock()


def expert_outcome(world: Any, task: Trajectory, domain: str | None = None,
                   world_keys: Sequence[str] | None = None) -> ExpertOutcome:
    """Replay ``task``'s expert tool calls in a fresh start of ``world`` (cached per world config and task).

    Leaves ``world`` in the expert's final state; raises :class:`~pivot_envs.worlds.WorldError`
    when the world fails.
    """
    from pivot_envs.success import expert_facts

    key = (_world_identity(world),
           stable_hash(domain, None if world_keys is None else list(world_keys), task.to_dict()))
    with _EXPERT_LOCK:
        hit = _EXPERT_CACHE.get(key)
    if hit is not None:
        return hit
    world.start(world_task(task, domain, world_keys))
    start = world.digest()
    for message in task.messages:
        if message.get("role") == "assistant":
            world.execute(message)
    outcome = ExpertOutcome(start, world.digest(), tuple(expert_facts(task.messages)))
    with _EXPERT_LOCK:
        _EXPERT_CACHE[key] = outcome
    return outcome


def _world_identity(world: Any) -> str:
    """The world's class and config: two worlds that only share a ``name`` (or a config) never share an outcome."""
    cls = type(world)
    return f"{cls.__module__}.{cls.__qualname__}:" + json.dumps(world.config(), sort_keys=True, default=str)


GENERIC_WORLD_KEYS: tuple[str, ...] = ("probes",)
"""The task ``meta`` keys handed to a world when there is no domain: an MCP world's per-task digest
probes (:mod:`pivot_envs.worlds.mcp`; tau2 tasks carry them)."""


def world_task(task: Trajectory, domain: str | None, keys: Sequence[str] | None = None) -> Any:
    """The :class:`~pivot_envs.worlds.WorldTask` of ``task``: the ``keys`` of its ``meta`` (default: its
    domain's ``world_keys``, or :data:`GENERIC_WORLD_KEYS` without a domain)."""
    from pivot_envs.worlds import WorldTask

    if keys is None:
        if domain:
            from pivot_envs.domains import get_domain

            keys = get_domain(domain).world_keys
        else:
            keys = GENERIC_WORLD_KEYS
    return WorldTask.from_trajectory(task, domain or "", keys=keys)


# --------------------------------------------------------------------------- the env


class EpisodeEnv(gymnasium.Env[dict[str, str], str]):
    """A gymnasium env that plays whole tasks in a world (see the module docstring).

    Args:
        tasks: a trajectory file, ``bundled:DOMAIN[:SPLIT]``, a list of trajectories, or ``None``
            (the domain's bundled ``split``).
        domain: a registered domain (its world, action parser and success rules); ``None``: the
            domain of a ``bundled:`` source, else the domain named like the world, else none
            (generic: default parser, ``state`` + ``facts`` success).
        world: the world spec (a built-in or registered world's name, ``mcp:COMMAND``, a config dict,
            a World subclass or a zero-argument factory; see :mod:`pivot_envs.worlds`); ``None``: the
            domain's world. The env builds its own world from it (a World instance is refused:
            ``TypeError``, it would be shared).
        user: the user simulator (``scripted``, ``none``, ``openai:MODEL@URL``, a config dict or a
            :class:`~pivot_envs.users.UserSimulator`).
        max_turns: the agent's assistant turns before the episode is truncated.
        split: the bundled split when ``tasks`` is ``None``.
        min_reward: trajectories below this reward are not tasks (``None``: keep all).
        finish_tools: tool names whose call ends the episode (default: the domain's ``finish_tools``).
        success_rules: override the domain's success rules: registered names or rule objects
            (:mod:`pivot_envs.success`).
        min_fact_recall: the share of the expert's facts an information task's answer must give.
        world_keys: the task ``meta`` keys that configure its world (default: the domain's
            ``world_keys``; without a domain :data:`GENERIC_WORLD_KEYS`).
        verifier: the verifier of the per-turn rewards (a name, config dict or Verifier); ``None``:
            the domain's default verifier (:data:`DOMAINLESS_VERIFIER` without a domain).
        score_turns: compute ``info["turn_reward"]`` (see the module docstring); ``False`` skips the
            verifier calls.
        render_mode: ``"ansi"`` or ``"human"``.
    """

    metadata = {"render_modes": ["ansi", "human"], "render_fps": 4}

    def __init__(
        self,
        tasks: TaskSource = None,
        domain: str | None = None,
        world: Any = None,
        user: Any = "scripted",
        max_turns: int = DEFAULT_MAX_TURNS,
        split: str = "train",
        min_reward: float | None = 1.0,
        finish_tools: Sequence[str] | None = None,
        success_rules: Sequence[str] | None = None,
        min_fact_recall: float = 1.0,
        world_keys: Sequence[str] | None = None,
        verifier: Any = None,
        score_turns: bool = True,
        render_mode: str | None = None,
    ):
        from pivot_envs.actions import parse_action
        from pivot_envs.domains import domain_names, get_domain
        from pivot_envs.success import rules_for, success_rules as check_rules
        from pivot_envs.users import build_user
        from pivot_envs.worlds import build_world

        if domain is None:
            domain = bundled_domain(tasks)
            if domain is None and isinstance(world, str) and world in domain_names():
                domain = world
        self.domain = get_domain(domain) if domain else None
        self.domain_name: str = self.domain.name if self.domain is not None else ""
        world_spec = world if world is not None else (self.domain.world if self.domain is not None else None)
        if world_spec is None:
            what = f"domain {self.domain_name!r} has no world" if self.domain is not None else "no domain and no world given"
            raise ValueError(f"episodes need a world: {what}; pass world= (a world name, mcp:COMMAND, "
                             "a config dict, a World subclass or a factory)")
        if not isinstance(max_turns, int) or max_turns < 1:
            raise ValueError(f"max_turns must be an integer >= 1, got {max_turns!r}")
        if not 0.0 <= float(min_fact_recall) <= 1.0:
            raise ValueError(f"min_fact_recall must be in [0, 1], got {min_fact_recall!r}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}")
        self.tasks: list[Trajectory] = resolve_tasks(tasks, domain=self.domain_name or None, split=split,
                                                     min_reward=min_reward)
        if not self.tasks:
            where = (f"{len(tasks)} trajectories given" if isinstance(tasks, (list, tuple))
                     else f"tasks={tasks!r}, split={split!r}")
            raise ValueError(f"no tasks ({where}): only trajectories with reward >= {min_reward} (or none) are "
                             "tasks; pass min_reward=None to keep every trajectory")
        self.rules = tuple(success_rules) if success_rules is not None else rules_for(self.domain_name)
        check_rules(self.rules)  # an unknown name fails here, not at the end of the first episode
        self.world = build_world(world_spec)
        self.user = build_user(user)
        self.max_turns = max_turns
        self.min_fact_recall = float(min_fact_recall)
        self.world_keys = tuple(world_keys) if world_keys is not None else None
        self.finish_tools = tuple(finish_tools) if finish_tools is not None else (self.domain.finish_tools if self.domain is not None else ())
        self.parse_action = self.domain.parse_action if self.domain is not None else parse_action
        self.render_mode = render_mode
        self.score_turns = bool(score_turns)
        self.turn_verifier = self._build_turn_verifier(verifier) if self.score_turns else None
        self._turn_pivots: dict[tuple[str, int], Pivot] = {}
        self.observation_space, self.action_space = episode_spaces()
        self._task_index = {t.id: i for i, t in enumerate(self.tasks)}
        self._pivot_index: dict[str, tuple[int, int]] | None = None
        self.task: Trajectory | None = None
        self._clear()

    # --- gymnasium API -------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = options or {}
        turn: int | None = None
        pivot_id = None
        if "pivot_id" in options:
            pivot_id = str(options["pivot_id"])
            index = self.pivot_index().get(pivot_id)
            if index is None:
                raise KeyError(f"pivot_id {pivot_id!r} is not a turn of this env's {len(self.tasks)} tasks")
            task_idx, turn = index
        elif "task_id" in options:
            task_idx = self._task_index.get(str(options["task_id"]))
            if task_idx is None:
                raise KeyError(f"task_id {options['task_id']!r} is not among this env's {len(self.tasks)} tasks")
        elif "index" in options:
            task_idx = int(options["index"]) % len(self.tasks)
        else:
            task_idx = int(self.np_random.integers(len(self.tasks)))
        self._clear()
        self.task = task = self.tasks[task_idx]
        self.pivot_id = pivot_id
        if turn is None:
            first_user = next(i for i, m in enumerate(task.messages) if m.get("role") == "user")
            context = task.messages[: first_user + 1]
        else:
            context = task.messages[:turn]
        self.messages = copy.deepcopy(list(context))
        self._recorded = [i for i, m in enumerate(task.messages) if m.get("role") == "assistant"]
        self._guard(self._start, task, context)
        if self.render_mode == "human":
            self.render()
        return self._observation(), self._info()

    def step(self, action: str | Message):
        if self.task is None:
            raise RuntimeError("call reset() before step()")
        if self.done:
            raise RuntimeError("the episode is over: call reset()")
        if self.error is not None:  # the world failed at reset: the episode ends with the error
            self.done = True
            self._leave_path()
            return self._observation(), 0.0, True, False, self._info()
        parsed = self.parse_action(action)
        message = parsed.message
        at = len(self.messages)
        turn = self._score_turn(parsed, at)
        self.messages.append(message)
        self.turns += 1
        terminated = False
        calls = message.get("tool_calls") or []
        if calls:
            for call in calls:
                fn = call.get("function") or {}
                name = str(fn.get("name", ""))
                result = self._guard(self._call, name, fn.get("arguments") or "{}")
                if result is None:  # infrastructure failure
                    break
                self.tool_calls += 1
                self.tool_errors += int(result.error)
                self.messages.append(result.message(str(call.get("id") or f"call_{self.tool_calls}"), name))
                if name in self.finish_tools:
                    terminated = True
        else:
            reply = self._guard(self.user.reply, self.messages)
            if reply is not None:
                if reply.content is not None:
                    self.messages.append({"role": "user", "content": reply.content})
                terminated = bool(reply.done)
        self._follow_path(turn, at)
        if self.error is not None:
            self.done = True
            return self._observation(), 0.0, True, False, self._info()
        truncated = not terminated and self.turns >= self.max_turns
        reward = 0.0
        if terminated or truncated:
            self.done = True
            self.truncated = truncated
            self._judge(truncated)
            reward = 1.0 if self.success else 0.0
        if self.render_mode == "human":
            self.render()
        return self._observation(), reward, terminated or (self.error is not None), truncated, self._info()

    def render(self) -> str | None:
        if self.task is None:
            raise RuntimeError("call reset() before render()")
        head = (f"episode {self.episode_id}  domain={self.domain_name or '-'}  turns={self.turns}/{self.max_turns}  "
                f"tool_calls={self.tool_calls}" + (f"  success={self.success}" if self.done else ""))
        text = "\n".join([head, *(render_message(m) for m in self.messages)])
        if self.render_mode == "human":
            print(text)
            return None
        return text

    def close(self) -> None:
        self.world.close()
        self.user.close()

    # --- what agents need -------------------------------------------------------------
    @property
    def episode_id(self) -> str:
        """The task id, or the pivot id for an episode started at a pivot."""
        if self.task is None:
            return ""
        return self.pivot_id or self.task.id

    @property
    def tools(self) -> list[dict[str, Any]]:
        return self._tools

    def recorded_action(self) -> Message | None:
        """The recorded assistant message at this point of the episode (by assistant-turn count), or ``None``."""
        if self.task is None:
            return None
        k = sum(1 for m in self.messages if m.get("role") == "assistant")
        if k >= len(self._recorded):
            return None
        return self.task.messages[self._recorded[k]]

    def current_pivot(self) -> Pivot:
        """The episode's current state as a :class:`Pivot` for an agent: the messages so far, the tools,
        and as ``expert`` the task's recorded action at this turn (``replay`` plays it back; past the
        recording: an empty text message). ``meta`` names the task (``trajectory_id``) and the turn."""
        if self.task is None:
            raise RuntimeError("call reset() before current_pivot()")
        k = sum(1 for m in self.messages if m.get("role") == "assistant")
        recorded = self.recorded_action()
        meta: dict[str, Any] = {"trajectory_id": self.task.id, "episode": self.episode_id, "episode_turn": k}
        if recorded is not None:
            i = self._recorded[k]
            meta["turn"] = i
            alternatives = self.task.meta.get("alternatives")
            alts = alternatives.get(str(i)) if isinstance(alternatives, dict) else None
            if alts:
                meta["alternatives"] = alts
        for key in ("task", "task_id", "source"):
            if key in self.task.meta:
                meta[key] = self.task.meta[key]
        expert = copy.deepcopy(recorded) if recorded is not None else {"role": "assistant", "content": ""}
        return Pivot(id=f"{self.episode_id}@{k}", domain=self.domain_name, context=copy.deepcopy(self.messages),
                     expert=expert, tools=copy.deepcopy(self._tools), fixture=self.task.fixture, meta=meta)

    @property
    def expert_turns(self) -> int:
        """The expert's assistant turns from where the episode started (the most turn rewards it can earn)."""
        if self.task is None:
            return 0
        before = sum(1 for m in self.messages if m.get("role") == "assistant") - self.turns
        return max(0, len(self._recorded) - before)

    def pivot_index(self) -> dict[str, tuple[int, int]]:
        """Pivot id -> ``(task index, message index)`` for every assistant turn of every task (the ids
        extraction gives: ``stable_hash(domain, trajectory id, turn)``)."""
        if self._pivot_index is None:
            self._pivot_index = {
                stable_hash(self.domain_name, t.id, i): (ti, i)
                for ti, t in enumerate(self.tasks)
                for i, m in enumerate(t.messages)
                if m.get("role") == "assistant" and any(x.get("role") == "user" for x in t.messages[:i])
            }
        return self._pivot_index

    def pivot_ids(self) -> list[str]:
        """The ids of the tasks' pivots, as the domain's extraction keeps them (every assistant turn
        after the first user message when there is no domain)."""
        if self.domain is None:
            return list(self.pivot_index())
        from pivot_envs.pipeline.extract import ExtractOptions, extract_pivots

        pivots, _ = extract_pivots(self.tasks, self.domain_name, ExtractOptions(min_reward=None))
        index = self.pivot_index()
        return [p.id for p in pivots if p.id in index]

    def episode_row(self) -> dict[str, Any]:
        """The finished episode as one JSONL row (what ``pivot-envs play`` writes; it reads back as a
        trajectory: ``messages``, ``tools``, ``reward``, the rest in ``meta``)."""
        if self.task is None:
            raise RuntimeError("call reset() before episode_row()")
        return {
            "id": self.episode_id,
            "task_id": self.task.id,
            "pivot_id": self.pivot_id,
            "domain": self.domain_name,
            "success": self.success,
            "reward": None if self.success is None else float(self.success),
            "turns": self.turns,
            "tool_calls": self.tool_calls,
            "tool_errors": self.tool_errors,
            "truncated": self.truncated,
            "error": self.error,
            "digest": self.digest,
            "reason": self.reason,
            "turn_rewards": list(self.turn_rewards),
            "messages": self.messages,
            "tools": self._tools,
        }

    # --- internals -----------------------------------------------------------------
    def _clear(self) -> None:
        self.pivot_id: str | None = None
        self.messages: list[Message] = []
        self._encoded: list[tuple[Message, str]] = []  # (message, its JSON) for the observation
        self._tools_json: str | None = None
        self._tools: list[dict[str, Any]] = []
        self._recorded: list[int] = []
        self.turns = 0
        self.tool_calls = 0
        self.tool_errors = 0
        self.errors: list[str] = []
        self.done = False
        self.truncated = False
        self.digest: str | None = None
        self.success: bool | None = None
        self.reason = ""
        self.checks: dict[str, bool] = {}
        self.outcome: ExpertOutcome | None = None
        self._tool_names: set[str] = set()
        self.turn_rewards: list[float | None] = []  # per agent turn (see the module docstring)
        self.turn_reward: float | None = None  # this step's
        self.turn_reward_error: str | None = None
        self.turn_reward_errors: list[str] = []  # the per-turn verifier failures of the episode
        self.on_path = True

    @property
    def error(self) -> str | None:
        return self.errors[0] if self.errors else None

    def _guard(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Call ``fn``; an infrastructure failure (world or user simulator) is recorded and gives ``None``."""
        from pivot_envs.users import UserSimulatorError
        from pivot_envs.worlds import WorldError

        try:
            return fn(*args)
        except (WorldError, UserSimulatorError) as exc:
            self.errors.append(f"{type(exc).__name__}: {exc}")
            return None

    def _start(self, task: Trajectory, context: list[Message]) -> None:
        if {"state", "facts"} & set(self.rules):
            self.outcome = expert_outcome(self.world, task, self.domain_name or None, self.world_keys)
        self.world.at_pivot(world_task(task, self.domain_name or None, self.world_keys), context)
        self._tools = copy.deepcopy(list(task.tools) or self.world.tools())
        self._tools_json = None
        self._tool_names = {str((t.get("function") or t).get("name")) for t in self._tools}
        self.user.start(task, self.messages)

    def _call(self, name: str, arguments: Any) -> Any:
        from pivot_envs.worlds import ToolResult

        if name not in self._tool_names:
            known = ", ".join(sorted(self._tool_names))
            return ToolResult(f"Error: unknown tool {name!r}; available tools: {known}", error=True)
        try:
            return self.world.call(name, arguments)
        except (ValueError, TypeError) as exc:  # arguments the world cannot read: the agent's mistake
            return ToolResult(f"Error: bad arguments for {name}: {exc}", error=True)

    def _judge(self, truncated: bool) -> None:
        from pivot_envs.success import task_success

        assert self.task is not None
        digest = self._guard(self.world.digest)
        if self.error is not None:
            return
        self.digest = digest
        outcome = self.outcome
        result = self._guard(lambda: task_success(
            self.domain_name, self.messages, self.task, digest=digest,
            start_digest=outcome.start_digest if outcome else None,
            expert_digest=outcome.expert_digest if outcome else None,
            facts=list(outcome.facts) if outcome else None, world=self.world, truncated=truncated,
            min_fact_recall=self.min_fact_recall, rules=self.rules))
        if result is None:
            return
        self.success = result.success
        self.reason = result.reason
        self.checks = dict(result.checks)

    def _observation(self) -> dict[str, str]:
        # messages are only ever appended: each is encoded once, the list text is joined per step
        cache = self._encoded
        if len(cache) > len(self.messages) or (cache and cache[0][0] is not self.messages[0]):
            cache.clear()  # a new episode (reset) or messages replaced
        for message in self.messages[len(cache):]:
            cache.append((message, json.dumps(message, ensure_ascii=False)))
        if self._tools_json is None:
            self._tools_json = json.dumps(self._tools, ensure_ascii=False)
        return {"messages": "[" + ", ".join(text for _, text in cache) + "]", "tools": self._tools_json}

    # --- per-turn rewards (the expert's path; see the module docstring) ---------------
    def _build_turn_verifier(self, spec: Any) -> Any:
        """The verifier of the per-turn rewards: ``spec``, else the domain's default."""
        from pivot_envs.verifiers import build_verifier

        if spec is None:
            spec = self.domain.verifier_spec() if self.domain is not None else DOMAINLESS_VERIFIER
        return build_verifier(spec)

    def _leave_path(self) -> None:
        """This step gets no turn reward, and the episode is off the expert's path from now on."""
        self.turn_reward = self.turn_reward_error = None
        self.turn_rewards.append(None)
        self.on_path = False

    def _score_turn(self, action: Any, at: int) -> int | None:
        """Judge ``action`` (the parsed action about to be appended at message ``at``) against the
        expert's action at this turn while on the path; returns the expert turn's index in
        ``_recorded``, or ``None`` when the turn is off the path."""
        k = sum(1 for m in self.messages if m.get("role") == "assistant")
        if not (self.score_turns and self.on_path) or k >= len(self._recorded) or self._recorded[k] != at:
            self._leave_path()
            return None
        result = self.turn_verifier.safe_verify(action, self._turn_pivot(k))
        if result.error:
            self._leave_path()
            self.turn_reward_error = f"{result.verifier}: {result.error}"
            self.turn_reward_errors.append(self.turn_reward_error)
            return None
        self.turn_reward = min(1.0, max(0.0, float(result.reward)))
        self.turn_reward_error = None
        self.turn_rewards.append(self.turn_reward)
        self.on_path = bool(result.passed) and self.turn_reward >= 1.0
        return k if self.on_path else None

    def _follow_path(self, turn: int | None, at: int) -> None:
        """After the step of expert turn ``turn`` (its action at message ``at``): the episode stays on the
        path when what came back (tool results, user replies) is what came back to the expert."""
        if turn is None or not self.on_path:
            return
        assert self.task is not None
        end = self._recorded[turn + 1] if turn + 1 < len(self._recorded) else len(self.task.messages)
        if self.error is not None or not same_observations(self.messages[at + 1:], self.task.messages[at + 1:end]):
            self.on_path = False

    def _turn_pivot(self, k: int) -> Pivot:
        """The expert's pivot at its ``k``-th assistant turn (as extraction makes it; cached per task and turn)."""
        assert self.task is not None
        i = self._recorded[k]
        key = (self.task.id, i)
        pivot = self._turn_pivots.get(key)
        if pivot is None:
            pivot = expert_pivot(self.task, i, self.domain, self._tools)
            if len(self._turn_pivots) >= 4096:
                self._turn_pivots.clear()
            self._turn_pivots[key] = pivot
        return pivot

    def _info(self) -> dict[str, Any]:
        info: dict[str, Any] = {
            "task_id": self.task.id if self.task is not None else None,
            "pivot_id": self.pivot_id,
            "domain": self.domain_name,
            "expert": _copy_message(self.recorded_action()) if not self.done else None,
            "turns": self.turns,
            "tool_calls": self.tool_calls,
            "tool_errors": self.tool_errors,
            "errors": list(self.errors),
            "error": self.error,
            "turn_reward": self.turn_reward,
            "turn_reward_error": self.turn_reward_error,
            "on_path": self.on_path if self.score_turns else None,
        }
        if self.done:
            info.update(success=self.success, digest=self.digest, reason=self.reason, checks=dict(self.checks),
                        truncated=self.truncated)
        return info


def expert_pivot(task: Trajectory, i: int, domain: Any, tools: list[dict[str, Any]]) -> Pivot:
    """The pivot of ``task``'s assistant turn ``i``: the domain's extraction of it
    (:func:`pivot_envs.pipeline.extract.extract_pivots`: context, expert, fixture at the turn, world
    settings), or without a domain the plain cut; ``tools`` stand in for a task that lists none."""
    import dataclasses

    if domain is not None:
        from pivot_envs.pipeline.extract import _make_pivot

        pivot = _make_pivot(task, i, domain)
    else:
        pivot = Pivot(id=stable_hash("", task.id, i), domain="", context=task.messages[:i], expert=task.messages[i],
                      tools=task.tools, fixture=task.fixture, meta={"trajectory_id": task.id, "turn": i})
    return pivot if pivot.tools else dataclasses.replace(pivot, tools=list(tools))


def same_observations(agent: Sequence[Message], expert: Sequence[Message]) -> bool:
    """Whether the messages that came back after an agent's action (tool results, user replies) are the
    ones that came back to the expert: the same roles in order, the same contents (a turn's tool results
    in any order; tool-call ids and names aside)."""
    from pivot_envs.types import content_text

    if [m.get("role") for m in agent] != [m.get("role") for m in expert]:
        return False

    def keys(messages: Sequence[Message]) -> list[tuple[str, str]]:
        return [(str(m.get("role")), content_text(m.get("content"))) for m in messages]

    return keys(agent) == keys(expert) or sorted(keys(agent)) == sorted(keys(expert))


def _copy_message(message: Message | None) -> Message | None:
    """A private copy of a chat message (a JSON round trip: faster than ``copy.deepcopy`` for plain data)."""
    return None if message is None else json.loads(json.dumps(message, ensure_ascii=False))


# --------------------------------------------------------------------------- batched play


@dataclass(frozen=True)
class EpisodeStart:
    """Where one episode starts: a task's first turn, or one of its pivots."""

    task_id: str
    pivot_id: str | None = None

    @property
    def id(self) -> str:
        return self.pivot_id or self.task_id

    def options(self) -> dict[str, str]:
        return {"pivot_id": self.pivot_id} if self.pivot_id else {"task_id": self.task_id}


def episode_starts(env: EpisodeEnv, from_pivots: bool = False) -> list[EpisodeStart]:
    """One start per task (its first turn), or per pivot of the tasks (``from_pivots``), in task order."""
    if not from_pivots:
        return [EpisodeStart(t.id) for t in env.tasks]
    index = env.pivot_index()
    return [EpisodeStart(env.tasks[index[p][0]].id, p) for p in env.pivot_ids()]


def run_episodes(
    make_env: Callable[[], EpisodeEnv],
    starts: Iterable[EpisodeStart],
    agent: Any,
    *,
    batch_size: int = 16,
    workers: int = 1,
    seed: int = 0,
    on_done: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Play every start with ``agent``; returns the episode rows (:meth:`EpisodeEnv.episode_row`) in
    the order the episodes finished.

    Up to ``batch_size`` episodes are live at once, each in its own env (``make_env()``, reused for
    the next start when one finishes); every round advances all live episodes by one turn with ONE
    ``agent.sample(pivots, 1, seed=...)`` call, seeded from ``seed`` and the round. Resets and steps (world and user-simulator calls)
    run on ``workers`` threads. ``on_done(row)`` is called as each episode finishes.
    """
    from pivot_envs.agents import build_agent

    if batch_size < 1 or workers < 1:
        raise ValueError(f"batch_size and workers must be >= 1, got {batch_size} and {workers}")
    agent = build_agent(agent)
    queue = deque(starts)
    envs: list[EpisodeEnv] = []
    rows: list[dict[str, Any]] = []
    pool = ThreadPoolExecutor(workers) if workers > 1 else None

    def parallel(fn: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
        if pool is None or len(items) < 2:
            return [fn(x) for x in items]
        return list(pool.map(fn, items))

    def finish(env: EpisodeEnv) -> None:
        row = env.episode_row()
        rows.append(row)
        if on_done is not None:
            on_done(row)

    def fill(slots: list[EpisodeEnv]) -> list[EpisodeEnv]:
        """Reset idle envs with the next starts; the ones whose reset already failed finish at once."""
        live: list[EpisodeEnv] = []
        while slots and queue:
            batch = [(env, queue.popleft()) for env in slots[: len(queue)]]
            slots = slots[len(batch):]
            parallel(lambda pair: pair[0].reset(options=pair[1].options()), batch)
            for env, _ in batch:
                if env.error is not None:
                    env.done = True
                    finish(env)
                    slots.append(env)
                else:
                    live.append(env)
        return live

    try:
        while len(envs) < min(batch_size, len(queue)):
            envs.append(make_env())
        live = fill(list(envs))
        round_ = 0
        while live:
            pivots = [env.current_pivot() for env in live]
            # a seed per round: agents that seed a sample by (seed, pivot id) would otherwise replay a
            # repeat of a task that starts in a later round exactly as its first play
            groups = agent.sample(pivots, 1, seed=int(stable_hash("episode-round", seed, round_), 16) % (2**63))
            round_ += 1
            actions = [g[0].action for g in groups]
            parallel(lambda pair: pair[0].step(pair[1]), list(zip(live, actions)))
            idle = []
            still = []
            for env in live:
                if env.done:
                    finish(env)
                    idle.append(env)
                else:
                    still.append(env)
            live = still + fill(idle)
    finally:
        if pool is not None:
            pool.shutdown(wait=True)
        for env in envs:
            env.close()
    return rows


def summarize_rows(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Task success per domain and over all rows: ``{"domains": {d: summary}, "overall": summary}``,
    a summary being ``{"episodes", "success" (over episodes without an error), "errors", "truncated",
    "turns_mean", "tool_calls_mean"}``."""

    def summary(group: Sequence[dict[str, Any]]) -> dict[str, Any]:
        scored = [r for r in group if r.get("error") is None and r.get("success") is not None]
        return {
            "episodes": len(group),
            "success": (sum(bool(r["success"]) for r in scored) / len(scored)) if scored else float("nan"),
            "errors": len(group) - len(scored),
            "truncated": sum(bool(r.get("truncated")) for r in group),
            "turns_mean": (sum(int(r.get("turns") or 0) for r in group) / len(group)) if group else float("nan"),
            "tool_calls_mean": (sum(int(r.get("tool_calls") or 0) for r in group) / len(group)) if group else float("nan"),
        }

    domains: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        domains.setdefault(str(r.get("domain") or "-"), []).append(r)
    return {"domains": {d: summary(g) for d, g in sorted(domains.items())}, "overall": summary(rows)}
