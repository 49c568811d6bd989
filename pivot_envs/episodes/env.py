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
expert reached (:mod:`pivot_envs.episodes.tasks`). A task that lists no tools gets its world's tools.

``reset(seed, options)``: ``{"task_id": ID}`` starts at the task's first turn (the messages up to
and including the first user message, system prompt kept); ``{"pivot_id": ID}`` starts at a pivot
of a task (its context; the world replays the context's tool calls); ``{"index": I}`` the I-th
task; no option: a task drawn with the env's seeded generator. ``{"repeat": R}`` (with any of them)
marks the R-th more play of the same start in a run: it only changes the ids of the pivots the agent
sees (``TASK#R@TURN`` instead of ``TASK@TURN``), so an agent seeded by pivot id samples it anew.

``step(action)``: the action (model text or an assistant message dict) is parsed with the
domain's ``parse_action``; its tool calls are executed in the world in order and each result comes
back as a ``tool`` message; a message without tool calls goes to the user simulator, whose reply
is appended as a ``user`` message (or who ends the episode). The episode **terminates** when the
agent finishes (a text message when there is no user or the user stops, a finishing tool call
such as SWE's ``submit``) and is **truncated** after ``max_turns`` assistant turns. The reward is
0 until the end, then 1.0 on task success, else 0.0. Success is decided by the env's success policy
(``success_policy=``, :class:`~pivot_envs.episodes.policy.SuccessPolicy`: the domain's success rules
unless given; the ``success_rules=`` and ``min_fact_recall=`` keywords build one).

Per-turn rewards (``info["turn_reward"]``; the full rule: :mod:`pivot_envs.episodes.turns`): while the
episode is **on the expert's path** (it started at the task's first turn or a pivot, every earlier action
was judged equivalent to the expert's, and the same tool results and user replies came back), the turn's
reward is the verifier's reward for its action against the expert's action at that turn, at the pivot
extraction makes of that turn (:func:`pivot_envs.pipeline.extract.extract_pivots`). The verifier is the
env's ``verifier=``, else the domain's default (``tool_call`` without a domain). Off the path it is
``None`` for the rest of the episode. A verifier failure gives ``None`` and ``turn_reward_error`` naming it
(never a silent 0), and leaves the path. ``info["on_path"]`` says whether the next turn is still on it. So
replaying the expert scores 1.0 at every turn, answer turns included (``final_turn`` / ``facts``), and a
wrong first call scores 0.0 and then ``None``. ``scorer.rewards`` (the episode row's ``turn_rewards``)
lists them per agent turn; ``score_turns=False`` skips the verifier (``turn_reward`` always ``None``,
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
:func:`pivot_envs.episodes.runner.run_episodes`; the CLI is ``pivot-envs play``.
"""

from __future__ import annotations

import copy
import json
from typing import Any, Callable, Sequence

import gymnasium

from pivot_envs.actions import parse_action
from pivot_envs.domains import domain_names, get_domain
from pivot_envs.episodes.policy import SuccessPolicy
from pivot_envs.episodes.replay_check import ReplayCheck, check_replay
from pivot_envs.episodes.tasks import (ExpertOutcome, TaskSource, bundled_domain, resolve_tasks,
                                       shared_expert_outcomes, world_task)
from pivot_envs.episodes.turns import TurnScorer, turn_verifier
from pivot_envs.pipeline.extract import ExtractOptions, extract_pivots
from pivot_envs.render import render_message
from pivot_envs.spaces import UnicodeText
from pivot_envs.types import Message, Pivot, Trajectory, stable_hash
from pivot_envs.users import UserSimulatorError, build_user
from pivot_envs.worlds import ToolResult, WorldError, build_world

DEFAULT_MAX_TURNS = 30

MAX_ACTION_CHARS = 100_000
"""The action space's longest text (an assistant turn); ``action_space.sample()`` draws up to this."""
MAX_MESSAGES_CHARS = 1 << 26
"""The observation's longest ``messages`` text: a whole episode's history (actions are appended to it,
so it must hold ``max_turns`` long actions plus the tool results)."""


def episode_spaces() -> tuple[gymnasium.spaces.Dict, UnicodeText]:
    """``(observation_space, action_space)`` of an episode env: PivotEnv's shapes, sized for a history."""
    obs = gymnasium.spaces.Dict({"messages": UnicodeText(max_length=MAX_MESSAGES_CHARS), "tools": UnicodeText()})
    return obs, UnicodeText(max_length=MAX_ACTION_CHARS)


class EpisodeEnv(gymnasium.Env[dict[str, Any], str]):  # spaces.Dict is a Space[dict[str, Any]]
    """A gymnasium env that plays whole tasks in a world (see the module docstring).

    Args:
        tasks: a trajectory file, ``bundled:DOMAIN[:SPLIT]``, a list of trajectories, or ``None``
            (the domain's bundled ``split``).
        domain: a registered domain (its world, action parser, finish tools and success rules); ``None``: the
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
        success_rules: the success policy's rules instead of the domain's: registered names or rule objects
            (:mod:`pivot_envs.success`). A shorthand for ``success_policy``.
        min_fact_recall: the share of the expert's facts an information task's answer must give (default
            1.0). A shorthand for ``success_policy``.
        world_keys: the task ``meta`` keys that configure its world (default: the domain's
            ``world_keys``; without a domain :data:`~pivot_envs.episodes.tasks.GENERIC_WORLD_KEYS`).
        verifier: the verifier of the per-turn rewards (a name, config dict or Verifier); ``None``:
            the domain's default verifier (``tool_call`` without a domain).
        score_turns: compute ``info["turn_reward"]`` (see the module docstring); ``False`` skips the
            verifier calls.
        render_mode: ``"ansi"`` or ``"human"``.
        success_policy: how a finished episode is judged
            (:class:`~pivot_envs.episodes.policy.SuccessPolicy`, a list of rules or a config dict
            ``{"rules": [...], "min_fact_recall": F}``); ``None``: the domain's, with ``success_rules`` and
            ``min_fact_recall`` applied. Give either it or those two.

    The expert outcomes that the ``state`` and ``facts`` rules compare with come from ``expert_outcomes``
    (:class:`~pivot_envs.episodes.tasks.ExpertOutcomes`; by default the process's shared, bounded cache).
    """

    metadata = {"render_modes": ["ansi", "human"], "render_fps": 4}
    # the episode's state (:meth:`_clear`), declared here: reset() sets some of it before it
    pivot_id: str | None
    messages: list[Message]
    _recorded: list[int]
    done: bool

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
        success_rules: Sequence[Any] | None = None,
        min_fact_recall: float | None = None,
        world_keys: Sequence[str] | None = None,
        verifier: Any = None,
        score_turns: bool = True,
        render_mode: str | None = None,
        success_policy: Any = None,
    ):
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
        if success_policy is not None and (success_rules is not None or min_fact_recall is not None):
            raise ValueError("give success_policy= or success_rules=/min_fact_recall=, not both")
        if success_policy is None:
            self.success_policy = SuccessPolicy.for_domain(self.domain_name or None, rules=success_rules,
                                                           min_fact_recall=min_fact_recall)
        else:
            self.success_policy = SuccessPolicy.build(success_policy, self.domain_name or None)
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}")
        self.tasks: list[Trajectory] = resolve_tasks(tasks, domain=self.domain_name or None, split=split,
                                                     min_reward=min_reward)
        if not self.tasks:
            where = (f"{len(tasks)} trajectories given" if isinstance(tasks, (list, tuple))
                     else f"tasks={tasks!r}, split={split!r}")
            raise ValueError(f"no tasks ({where}): only trajectories with reward >= {min_reward} (or none) are "
                             "tasks; pass min_reward=None to keep every trajectory")
        self.expert_outcomes = shared_expert_outcomes()
        self.world = build_world(world_spec)
        self.user = build_user(user)
        self.max_turns = max_turns
        self.world_keys = tuple(world_keys) if world_keys is not None else None
        self.finish_tools = tuple(finish_tools) if finish_tools is not None else (self.domain.finish_tools if self.domain is not None else ())
        self.parse_action = self.domain.parse_action if self.domain is not None else parse_action
        self.render_mode = render_mode
        self.score_turns = bool(score_turns)
        self.scorer = TurnScorer(turn_verifier(verifier, self.domain) if self.score_turns else None, self.domain)
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
            found = self._task_index.get(str(options["task_id"]))
            if found is None:
                raise KeyError(f"task_id {options['task_id']!r} is not among this env's {len(self.tasks)} tasks")
            task_idx = found
        elif "index" in options:
            task_idx = int(options["index"]) % len(self.tasks)
        else:
            task_idx = int(self.np_random.integers(len(self.tasks)))
        repeat = options.get("repeat", 0)
        if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 0:
            raise ValueError(f"options['repeat'] must be an integer >= 0 (which play of this start), got {repeat!r}")
        self._clear()
        self.task = task = self.tasks[task_idx]
        self.pivot_id = pivot_id
        self.repeat = repeat
        if turn is None:
            first_user = next(i for i, m in enumerate(task.messages) if m.get("role") == "user")
            context = task.messages[: first_user + 1]
        else:
            context = task.messages[:turn]
        self.messages = copy.deepcopy(list(context))
        self.start_messages = len(self.messages)
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
            self.scorer.leave_path()
            return self._observation(), 0.0, True, False, self._info()
        parsed = self.parse_action(action)
        message = parsed.message
        at = len(self.messages)
        turn = self.scorer.score(parsed, self.task, self._recorded, self._assistant_turns(), at, self._tools)
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
        self.scorer.follow(turn, self.task, self._recorded, self.messages[at + 1:], failed=self.error is not None)
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
        k = self._assistant_turns()
        if k >= len(self._recorded):
            return None
        return self.task.messages[self._recorded[k]]

    def current_pivot(self) -> Pivot:
        """The episode's current state as a :class:`Pivot` for an agent: the messages so far, the tools,
        and as ``expert`` the task's recorded action at this turn (``replay`` plays it back; past the
        recording: an empty text message). ``meta`` names the task (``trajectory_id``) and the turn."""
        if self.task is None:
            raise RuntimeError("call reset() before current_pivot()")
        k = self._assistant_turns()
        recorded = self.recorded_action()
        meta: dict[str, Any] = {"trajectory_id": self.task.id, "episode": self.episode_id, "episode_turn": k}
        if self.repeat:
            meta["episode_repeat"] = self.repeat
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
        play = f"{self.episode_id}#{self.repeat}" if self.repeat else self.episode_id
        return Pivot(id=f"{play}@{k}", domain=self.domain_name, context=copy.deepcopy(self.messages),
                     expert=expert, tools=copy.deepcopy(self._tools), fixture=self.task.fixture, meta=meta)

    @property
    def expert_turns(self) -> int:
        """The expert's assistant turns from where the episode started (the most turn rewards it can earn)."""
        if self.task is None:
            return 0
        before = self._assistant_turns() - self.turns
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
        pivots, _ = extract_pivots(self.tasks, self.domain_name, ExtractOptions(min_reward=None))
        index = self.pivot_index()
        return [p.id for p in pivots if p.id in index]

    def replay_check(self) -> ReplayCheck:
        """The episode's tool results compared with the task's recorded ones while its actions were the
        recorded actions (:func:`pivot_envs.episodes.replay_check.check_replay`)."""
        if self.task is None:
            raise RuntimeError("call reset() before replay_check()")
        return check_replay(self.episode_id, self.messages, self.task.messages, self.start_messages,
                            self.world.normalize_output)

    def episode_row(self) -> dict[str, Any]:
        """The finished episode as one JSONL row (what ``pivot-envs play`` writes; it reads back as a
        trajectory: ``messages``, ``tools``, ``reward``, the rest in ``meta``)."""
        if self.task is None:
            raise RuntimeError("call reset() before episode_row()")
        return {
            "id": f"{self.episode_id}#{self.repeat}" if self.repeat else self.episode_id,
            "task_id": self.task.id,
            "pivot_id": self.pivot_id,
            "repeat": self.repeat,
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
            "turn_rewards": list(self.scorer.rewards),
            "messages": self.messages,
            "tools": self._tools,
        }

    # --- internals -----------------------------------------------------------------
    def _clear(self) -> None:
        self.pivot_id = None
        self.start_messages = 0
        self.repeat = 0
        self.messages = []
        self._encoded: list[tuple[Message, str]] = []  # (message, its JSON) for the observation
        self._tools_json: str | None = None
        self._tools: list[dict[str, Any]] = []
        self._recorded = []
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
        self.scorer.clear()

    @property
    def error(self) -> str | None:
        return self.errors[0] if self.errors else None

    def _assistant_turns(self) -> int:
        """The assistant messages so far (a pivot's context included): the index of the next expert turn."""
        return sum(1 for m in self.messages if m.get("role") == "assistant")

    def _guard(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Call ``fn``; an infrastructure failure (world or user simulator) is recorded and gives ``None``."""
        try:
            return fn(*args)
        except (WorldError, UserSimulatorError) as exc:
            self.errors.append(f"{type(exc).__name__}: {exc}")
            return None

    def _start(self, task: Trajectory, context: list[Message]) -> None:
        if self.success_policy.needs_expert_outcome:
            self.outcome = self.expert_outcomes.get(self.world, task, self.domain_name or None, self.world_keys)
        self.world.at_pivot(world_task(task, self.domain_name or None, self.world_keys), context)
        self._tools = copy.deepcopy(list(task.tools) or self.world.tools())
        self._tools_json = None
        self._tool_names = {str((t.get("function") or t).get("name")) for t in self._tools}
        self.user.start(task, self.messages)

    def _call(self, name: str, arguments: Any) -> ToolResult:
        if name not in self._tool_names:
            known = ", ".join(sorted(self._tool_names))
            return ToolResult(f"Error: unknown tool {name!r}; available tools: {known}", error=True)
        try:
            return self.world.call(name, arguments)
        except (ValueError, TypeError) as exc:  # arguments the world cannot read: the agent's mistake
            return ToolResult(f"Error: bad arguments for {name}: {exc}", error=True)

    def _judge(self, truncated: bool) -> None:
        """Judge the finished episode with the success policy (a world failure is recorded as the error)."""
        task = self.task
        assert task is not None
        digest = self._guard(self.world.digest)
        if self.error is not None:
            return
        self.digest = digest
        result = self._guard(lambda: self.success_policy.judge(
            self.messages, task, world=self.world, digest=digest, outcome=self.outcome, truncated=truncated))
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
            "turn_reward": self.scorer.reward,
            "turn_reward_error": self.scorer.error,
            "on_path": self.scorer.on_path if self.score_turns else None,
        }
        if self.done:
            info.update(success=self.success, digest=self.digest, reason=self.reason, checks=dict(self.checks),
                        truncated=self.truncated)
        return info


def _copy_message(message: Message | None) -> Message | None:
    """A private copy of a chat message (a JSON round trip: faster than ``copy.deepcopy`` for plain data)."""
    return None if message is None else json.loads(json.dumps(message, ensure_ascii=False))
