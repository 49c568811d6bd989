"""The harness rollout registry: one task (or pivot) per rollout, played by an external harness.

::

    rollouts = HarnessRollouts(EnginePolicy(agent), envs=EpisodeEnvs(allowed={"pivot/Terminal-Episode-v0"}))
    opened = rollouts.open({"env": "pivot/Terminal-Episode-v0", "split": "test", "index": 0})
    rollouts.chat(opened["rollout_id"], {"messages": opened["messages"], "tools": opened["tools"]})  # OpenAI answer
    rollouts.call_tool(opened["rollout_id"], "bash", {"command": "ls"})                               # the world
    result = rollouts.finish(opened["rollout_id"])   # success, reward, turn_rewards, calls, messages...

A rollout holds an :class:`~pivot_envs.episodes.env.EpisodeEnv` reset at the task's start (or a pivot):
its world is the state the harness acts on and the state the task is scored in. The harness owns the
loop; the endpoint sees two kinds of events, kept in arrival order:

* **model calls** (:meth:`HarnessRollouts.chat`): answered by the policy and captured
  (:class:`~pivot_envs.trainers.harness_capture.CapturedCall`); tool calls are parsed from the model's text
  (``<tool_call>`` blocks, by the domain's action parser) and returned as OpenAI ``tool_calls``;
* **tool calls** (:meth:`HarnessRollouts.call_tool`): executed in the world at once, exactly as the harness
  sent them (the world over MCP, :mod:`pivot_envs.trainers.harness_mcp`). Each is matched to the latest model
  call that asked for it (same tool, arguments equal as JSON); a call the policy never asked for is the
  harness's own (``uncaptured_tool_calls``), and a tool call the policy asked for that the harness never ran
  is counted too (``unexecuted_tool_calls``).

**Finishing** (:meth:`HarnessRollouts.finish`) builds the episode the world saw: the opening messages, then
each model call's assistant message with the tool calls the harness executed and their results (a harness's
own call as an assistant turn of its own), and judges it as the env judges an episode: the env's success
policy on these messages, the world's final digest and the expert's outcome
(:meth:`~pivot_envs.episodes.policy.SuccessPolicy.judge`). The per-turn rewards follow the env's rule
(:class:`~pivot_envs.episodes.turns.TurnScorer`: the domain verifier's reward while the episode is on the
expert's path), one per model call. There is no user simulator: the harness holds the conversation, and its
last text answer is the final answer.

**Abandoned** rollouts: a rollout with no event for ``idle_timeout_s`` (and no call in flight) is abandoned
by a reaper thread: its env is closed, which frees the world (sandbox state, MCP server process); so is a
rollout given up with :meth:`HarnessRollouts.abandon` (a harness killed mid-rollout). A world that fails
(:class:`~pivot_envs.worlds.WorldError`) fails the rollout: ``status = "failed"`` with the error, never a 0.
"""

from __future__ import annotations

import copy
import json
import os
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Collection

import gymnasium

from pivot_envs.episodes.turns import TurnScorer, turn_verifier
from pivot_envs.trainers.harness_capture import CapturedCall, capture_summary, extends_previous
from pivot_envs.trainers.harness_policy import HarnessPolicy, PolicyRequest
from pivot_envs.types import Message
from pivot_envs.worlds import ToolResult, WorldError

__all__ = ["EpisodeEnvs", "HarnessError", "HarnessRollout", "HarnessRollouts", "ToolEvent"]

STATUSES = ("open", "finished", "abandoned", "failed")
OPEN_KEYS = {"env", "split", "task_id", "index", "pivot_id", "seed", "kwargs", "options", "max_turns"}


class HarnessError(Exception):
    """A request the registry refuses: ``status`` is the HTTP status, ``field`` what was wrong."""

    def __init__(self, status: int, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.status, self.field, self.message = status, field, message

    def detail(self) -> dict[str, str]:
        return {"field": self.field, "message": self.message}


@dataclass
class ToolEvent:
    """One tool call the harness made in the world (through MCP), and what the world answered.

    ``call_index``/``call_id``: the model call (and its tool call) it matched; ``None``: the harness's own.
    """

    seq: int
    name: str
    arguments: Any
    content: str
    error: bool
    call_index: int | None = None
    call_id: str | None = None


@dataclass
class HarnessRollout:
    """One rollout: its env (world), what it opened with, the captured calls and the tool events."""

    id: str
    env: Any
    env_key: str
    task_id: str
    pivot_id: str | None
    opening: list[Message]
    tools: list[dict[str, Any]]
    max_turns: int
    created: float = field(default_factory=time.monotonic)
    last_active: float = field(default_factory=time.monotonic)
    status: str = "open"
    calls: list[CapturedCall] = field(default_factory=list)
    events: list[ToolEvent] = field(default_factory=list)
    call_seq: list[int] = field(default_factory=list)
    seq: int = 0
    in_flight: int = 0
    truncated: bool = False
    error: str | None = None
    reason: str | None = None
    result: dict[str, Any] | None = None
    lock: threading.RLock = field(default_factory=threading.RLock)

    def touch(self) -> None:
        self.last_active = time.monotonic()

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq


class EpisodeEnvs:
    """Episode envs by spec, pooled: ``take(spec)`` gives a free env for the spec (made when none is free).

    Args:
        allowed: the episode env ids a request may name (``None``: any registered ``*-Episode-v0`` id).
        default: a zero-argument factory of the env used when a request names none (the trainer's).
        user: the user simulator of envs made from an id (``none``: the harness holds the conversation).
    """

    def __init__(self, allowed: Collection[str] | None = None, default: Callable[[], Any] | None = None,
                 user: str = "none"):
        self.allowed = set(allowed) if allowed is not None else None
        self.default = default
        self.user = user
        self._free: dict[str, list[Any]] = {}
        self._lock = threading.Lock()
        self.in_use = 0
        self.made = 0
        self.closed = 0

    def key(self, spec: dict[str, Any]) -> tuple[str, Callable[[], Any]]:
        """``(pool key, factory)`` of an open request's ``env``, ``split`` and ``kwargs``."""
        env_id = spec.get("env")
        if env_id is None:
            if self.default is None:
                raise HarnessError(422, "env", "missing: name an episode env id, e.g. pivot/Terminal-Episode-v0")
            return "default", self.default
        if not isinstance(env_id, str):
            raise HarnessError(422, "env", f"must be an env id string, got {type(env_id).__name__}")
        known = self.known_ids()
        if env_id not in known:
            raise HarnessError(400, "env", f"unknown episode env {env_id!r}; served: {', '.join(sorted(known))}")
        kwargs = spec.get("kwargs") or {}
        if not isinstance(kwargs, dict):
            raise HarnessError(422, "kwargs", "must be an object of the env's keyword arguments")
        split = spec.get("split")
        settings = {**kwargs, **({"split": split} if split is not None else {})}
        settings.setdefault("user", self.user)

        def make() -> Any:
            try:
                return gymnasium.make(env_id, **settings).unwrapped
            except (TypeError, ValueError, KeyError) as exc:
                raise HarnessError(400, "kwargs", f"{env_id} cannot be made with {sorted(settings)}: {exc}") from None

        return json.dumps([env_id, settings], sort_keys=True, default=str), make

    def known_ids(self) -> set[str]:
        if self.allowed is not None:
            return set(self.allowed)
        return {k for k in gymnasium.registry if k.startswith("pivot/") and k.endswith("Episode-v0")}

    def take(self, key: str, make: Callable[[], Any]) -> Any:
        with self._lock:
            free = self._free.get(key)
            env = free.pop() if free else None
            self.in_use += 1
        if env is None:
            try:
                env = make()
            except BaseException:
                with self._lock:
                    self.in_use -= 1
                raise
            with self._lock:
                self.made += 1
        return env

    def give(self, key: str, env: Any) -> None:
        """Back to the pool (its world session ends at its next reset)."""
        with self._lock:
            self.in_use -= 1
            self._free.setdefault(key, []).append(env)

    def drop(self, env: Any) -> None:
        """Close an env for good: its world is freed (sandbox state dropped, MCP server stopped)."""
        with self._lock:
            self.in_use -= 1
            self.closed += 1
        env.close()

    def close(self) -> None:
        with self._lock:
            envs = [e for pool in self._free.values() for e in pool]
            self._free.clear()
        for env in envs:
            env.close()

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {"worlds_in_use": self.in_use, "worlds_pooled": sum(len(p) for p in self._free.values()),
                    "worlds_made": self.made, "worlds_closed": self.closed}


class HarnessRollouts:
    """The registry of harness rollouts (see the module docstring).

    Args:
        policy: who answers the model calls (:mod:`pivot_envs.trainers.harness_policy`).
        envs: where rollouts' envs come from (:class:`EpisodeEnvs`).
        idle_timeout_s: a rollout with no event for this long is abandoned (its world freed).
        max_turns: model calls a rollout may make (the next one is refused with 403; the episode is truncated).
        score_turns: compute the per-turn rewards at finish (the domain verifier; a sandbox run for terminal).
        max_rollouts: the most rollouts open at once (429 beyond).
        keep_finished: finished/abandoned rollouts kept for ``GET`` (oldest dropped first).
    """

    def __init__(self, policy: HarnessPolicy, envs: EpisodeEnvs, *, idle_timeout_s: float = 600.0,
                 max_turns: int = 30, score_turns: bool = True, max_rollouts: int = 4096, keep_finished: int = 4096):
        if idle_timeout_s <= 0 or max_turns < 1:
            raise ValueError("HarnessRollouts: idle_timeout_s must be > 0 and max_turns >= 1")
        self.policy = policy
        self.envs = envs
        self.idle_timeout_s = float(idle_timeout_s)
        self.max_turns = int(max_turns)
        self.score_turns = bool(score_turns)
        self.max_rollouts = int(max_rollouts)
        self.keep_finished = int(keep_finished)
        self._rollouts: dict[str, HarnessRollout] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._reaper = threading.Thread(target=self._reap_loop, name="harness-reaper", daemon=True)
        self._reaper.start()

    # ------------------------------------------------------------------ opening
    def open(self, spec: dict[str, Any]) -> dict[str, Any]:
        """Open a rollout: ``{"env"?, "split"?, "task_id" | "index" | "pivot_id"?, "seed"?, "kwargs"?, "options"?,
        "max_turns"?}`` -> ``{"rollout_id", "task_id", "pivot_id", "messages", "tools", "max_turns"}``."""
        if not isinstance(spec, dict):
            raise HarnessError(422, "<body>", "must be a JSON object")
        unknown = sorted(set(spec) - OPEN_KEYS)
        if unknown:
            raise HarnessError(422, unknown[0], f"unknown field; a rollout takes {', '.join(sorted(OPEN_KEYS))}")
        options = dict(spec.get("options") or {})
        chosen = [k for k in ("task_id", "index", "pivot_id") if spec.get(k) is not None]
        if len(chosen) > 1:
            raise HarnessError(422, chosen[1], f"give at most one of task_id, index, pivot_id; got {', '.join(chosen)}")
        for k in chosen:
            options[k] = spec[k]
        max_turns = spec.get("max_turns", self.max_turns)
        if not isinstance(max_turns, int) or max_turns < 1:
            raise HarnessError(422, "max_turns", f"must be an integer >= 1, got {max_turns!r}")
        seed = spec.get("seed")
        if seed is not None and not isinstance(seed, int):
            raise HarnessError(422, "seed", f"must be an integer, got {seed!r}")
        with self._lock:
            live = sum(1 for r in self._rollouts.values() if r.status == "open")
        if live >= self.max_rollouts:
            raise HarnessError(429, "env", f"{live} rollouts are open, the most this endpoint keeps: finish some")
        key, make = self.envs.key(spec)
        env = self.envs.take(key, make)
        try:
            env.reset(seed=seed, options=options or None)
        except (KeyError, ValueError, IndexError, TypeError) as exc:
            self.envs.give(key, env)
            name = chosen[0] if chosen else "options"
            message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
            raise HarnessError(400, name, str(message)) from None
        if env.error is not None:  # the world failed at its start: an infrastructure error
            self.envs.drop(env)
            raise HarnessError(502, "env", f"the task's world failed at its start: {env.error}")
        rollout = HarnessRollout(id=new_rollout_id(), env=env, env_key=key, task_id=env.task.id, pivot_id=env.pivot_id,
                                 opening=copy.deepcopy(env.messages), tools=copy.deepcopy(env.tools),
                                 max_turns=max_turns)
        with self._lock:
            self._rollouts[rollout.id] = rollout
        return {"rollout_id": rollout.id, "task_id": rollout.task_id, "pivot_id": rollout.pivot_id,
                "messages": copy.deepcopy(rollout.opening), "tools": copy.deepcopy(rollout.tools),
                "max_turns": max_turns, "domain": env.domain_name}

    def get(self, rollout_id: str) -> HarnessRollout:
        with self._lock:
            rollout = self._rollouts.get(rollout_id)
        if rollout is None:
            raise HarnessError(404, "rollout_id", f"unknown rollout {rollout_id!r} (finished long ago, or never opened)")
        return rollout

    def open_rollout(self, rollout_id: str) -> HarnessRollout:
        """The rollout, which must still be open (409 naming its status otherwise)."""
        rollout = self.get(rollout_id)
        if rollout.status != "open":
            why = f": {rollout.reason or rollout.error}" if (rollout.reason or rollout.error) else ""
            raise HarnessError(409, "rollout_id", f"rollout {rollout_id} is {rollout.status}{why}")
        return rollout

    # ------------------------------------------------------------------ model calls
    def chat(self, rollout_id: str, body: dict[str, Any]) -> dict[str, Any]:
        """Answer one ``chat/completions`` request of the rollout's harness (an OpenAI ``chat.completion``)."""
        arrived = time.perf_counter()
        messages, tools, rest = _chat_request(body)
        rollout = self.open_rollout(rollout_id)
        with rollout.lock:
            if len(rollout.calls) + rollout.in_flight >= rollout.max_turns:
                rollout.truncated = True
                raise HarnessError(403, "messages", f"rollout {rollout_id} reached its turn limit ({rollout.max_turns} "
                                                    "model calls): finish it")
            rollout.in_flight += 1
            rollout.touch()
            index = len(rollout.calls) + rollout.in_flight - 1
            env = rollout.env
            turn = sum(1 for m in rollout.opening if m.get("role") == "assistant") + index
            recorded = [m for m in env.task.messages if m.get("role") == "assistant"]
            expert = copy.deepcopy(recorded[turn]) if turn < len(recorded) else {"role": "assistant", "content": ""}
        request = PolicyRequest(messages=messages, tools=tools, pivot_id=f"{rollout_id}@{index}", expert=expert,
                                domain=env.domain_name, body=rest,
                                meta={"trajectory_id": rollout.task_id, "episode": rollout_id, "episode_turn": turn})
        try:
            answer = self.policy.complete(request)
        finally:
            with rollout.lock:
                rollout.in_flight -= 1
                rollout.touch()
        message = answer.message if answer.message is not None else env.parse_action(answer.text).message
        message = _with_call_ids(message, rollout_id, index)
        finish = "tool_calls" if message.get("tool_calls") else ("stop" if answer.stopped else "length")
        call = CapturedCall(index=index, messages=messages, tools=tools, request=rest,
                            prompt_token_ids=answer.prompt_token_ids, completion_token_ids=answer.token_ids,
                            logprobs=answer.logprobs, policy_version=answer.policy_version, text=answer.text,
                            message=message, finish_reason=finish, sample_s=answer.sample_s,
                            queue_s=answer.queued_s)
        with rollout.lock:
            if rollout.status != "open":
                raise HarnessError(409, "rollout_id", f"rollout {rollout_id} was {rollout.status} while the policy "
                                                      "answered")
            previous = rollout.calls[-1] if rollout.calls else None
            extends = extends_previous(previous, call)
            call.retokenized = None if extends is None else not extends
            call.index = len(rollout.calls)
            rollout.calls.append(call)
            rollout.call_seq.append(rollout.next_seq())
            call.latency_s = time.perf_counter() - arrived
        return _completion_body(rollout_id, call, body.get("model"))

    # ------------------------------------------------------------------ tool calls (the world)
    def tools_of(self, rollout_id: str) -> list[dict[str, Any]]:
        return copy.deepcopy(self.open_rollout(rollout_id).tools)

    def call_tool(self, rollout_id: str, name: str, arguments: Any) -> ToolResult:
        """Execute one tool call in the rollout's world, as the harness sent it (see the module docstring)."""
        rollout = self.open_rollout(rollout_id)
        with rollout.lock:
            if rollout.status != "open":
                raise HarnessError(409, "rollout_id", f"rollout {rollout_id} is {rollout.status}")
            rollout.touch()
            names = {str((t.get("function") or t).get("name")) for t in rollout.tools}
            if name not in names:
                result = ToolResult(f"Error: unknown tool {name!r}; available tools: {', '.join(sorted(names))}",
                                    error=True)
            else:
                try:
                    result = rollout.env.world.call(name, arguments if arguments is not None else {})
                except (ValueError, TypeError) as exc:  # arguments the world cannot read: the agent's mistake
                    result = ToolResult(f"Error: bad arguments for {name}: {exc}", error=True)
                except WorldError as exc:
                    self._fail(rollout, f"WorldError: {exc}")
                    raise HarnessError(502, "rollout_id", f"the world of rollout {rollout_id} failed: {exc}") from None
            index, call_id = _match(rollout.calls, name, arguments)
            if call_id is not None:
                rollout.calls[index].executed_tool_calls.append(call_id)
            rollout.events.append(ToolEvent(rollout.next_seq(), name, copy.deepcopy(arguments), result.content,
                                            result.error, index, call_id))
            rollout.touch()
        return result

    # ------------------------------------------------------------------ ending
    def finish(self, rollout_id: str) -> dict[str, Any]:
        """Judge the rollout's episode and release its world (see the module docstring); idempotent."""
        rollout = self.get(rollout_id)
        with rollout.lock:
            if rollout.result is not None and rollout.status in ("finished", "failed"):
                return rollout.result
            if rollout.status == "abandoned":
                raise HarnessError(409, "rollout_id", f"rollout {rollout_id} was abandoned: {rollout.reason}")
            if rollout.in_flight:
                raise HarnessError(409, "rollout_id", f"rollout {rollout_id} has {rollout.in_flight} model call(s) in "
                                                      "flight: finish it after they are answered")
            result = self._judge(rollout)
            rollout.result = result
            rollout.status = "failed" if result["error"] else "finished"
            result["status"] = rollout.status
            self._release(rollout, keep=rollout.status == "finished")
        self._prune()
        return result

    def abandon(self, rollout_id: str, reason: str = "given up by the caller") -> dict[str, Any]:
        """Give up a rollout: its world is closed and freed; a later ``finish`` answers 409."""
        rollout = self.get(rollout_id)
        with rollout.lock:
            if rollout.status == "open":
                rollout.status, rollout.reason = "abandoned", reason
                self._release(rollout, keep=False)
        self._prune()
        return self.describe(rollout)

    def describe(self, rollout: HarnessRollout) -> dict[str, Any]:
        """A rollout's state (``GET /harness/rollouts/{id}``)."""
        return {"rollout_id": rollout.id, "task_id": rollout.task_id, "status": rollout.status,
                "reason": rollout.reason, "error": rollout.error, "calls": len(rollout.calls),
                "tool_calls": len(rollout.events), "idle_s": time.monotonic() - rollout.last_active,
                **{k: v for k, v in capture_summary(rollout.calls).items() if k != "calls"}}

    def list(self) -> list[dict[str, Any]]:
        with self._lock:
            rollouts = list(self._rollouts.values())
        return [self.describe(r) for r in rollouts]

    def stats(self) -> dict[str, Any]:
        with self._lock:
            counts = {s: sum(1 for r in self._rollouts.values() if r.status == s) for s in STATUSES}
        return {**counts, **self.envs.stats()}

    def reap(self) -> list[str]:
        """Abandon every open rollout idle for ``idle_timeout_s`` with no model call in flight; their ids."""
        now = time.monotonic()
        with self._lock:
            idle = [r for r in self._rollouts.values()
                    if r.status == "open" and r.in_flight == 0 and now - r.last_active > self.idle_timeout_s]
        for r in idle:
            self.abandon(r.id, f"no request for {self.idle_timeout_s:g} s (the harness stopped or was killed)")
        return [r.id for r in idle]

    def close(self) -> None:
        """Abandon what is open, stop the reaper, close the pooled envs."""
        self._stop.set()
        with self._lock:
            open_ids = [r.id for r in self._rollouts.values() if r.status == "open"]
        for rid in open_ids:
            self.abandon(rid, "the endpoint closed")
        self.envs.close()

    # ------------------------------------------------------------------ internals
    def _judge(self, rollout: HarnessRollout) -> dict[str, Any]:
        env = rollout.env
        messages, turn_of = transcript(rollout)
        success = reason = digest = error = None
        checks: dict[str, Any] = {}
        try:
            digest = env.world.digest()
            verdict = env.success_policy.judge(messages, env.task, world=env.world, digest=digest,
                                               outcome=env.outcome, truncated=rollout.truncated)
            success, reason, checks = verdict.success, verdict.reason, dict(verdict.checks)
        except WorldError as exc:
            error = f"WorldError: {exc}"
        error = error or rollout.error
        episode_rewards, reward_errors = self._turn_rewards(rollout, messages) if self.score_turns and not error \
            else ([], [])
        per_call: list[float | None] = [None] * len(rollout.calls)
        for turn, call_index in enumerate(turn_of):
            if call_index is not None and turn < len(episode_rewards):
                per_call[call_index] = episode_rewards[turn]
        summary = capture_summary(rollout.calls)
        matched = {(e.call_index, e.call_id) for e in rollout.events if e.call_id is not None}
        emitted = [(c.index, tc.get("id")) for c in rollout.calls for tc in c.message.get("tool_calls") or []]
        return {
            "rollout_id": rollout.id, "task_id": rollout.task_id, "pivot_id": rollout.pivot_id,
            "domain": env.domain_name, "success": None if error else success,
            "reward": None if error or success is None else float(success),
            "turn_rewards": per_call, "episode_turn_rewards": episode_rewards, "turn_reward_errors": reward_errors,
            "retokenized_calls": summary["retokenized_calls"],
            "calls": [c.wire() for c in rollout.calls], "messages": messages, "tools": copy.deepcopy(rollout.tools),
            "tool_calls": [{"name": e.name, "arguments": e.arguments, "content": e.content, "error": e.error,
                            "call_index": e.call_index, "call_id": e.call_id} for e in rollout.events],
            "uncaptured_tool_calls": sum(1 for e in rollout.events if e.call_id is None),
            "unexecuted_tool_calls": sum(1 for x in emitted if x not in matched),
            "truncated": rollout.truncated, "digest": digest, "reason": reason, "checks": checks, "error": error,
            "capture": summary, "policy_versions": sorted({c.policy_version for c in rollout.calls}),
        }

    def _turn_rewards(self, rollout: HarnessRollout, messages: list[Message]) -> tuple[list[float | None], list[str]]:
        """The env's per-turn rule over the episode's assistant turns after the opening."""
        env = rollout.env
        verifier = env.turn_verifier
        if verifier is None:
            verifier = turn_verifier(None, env.domain)
        scorer = TurnScorer(verifier, env.domain)
        task = env.task
        recorded = [i for i, m in enumerate(task.messages) if m.get("role") == "assistant"]
        k = sum(1 for m in rollout.opening if m.get("role") == "assistant")
        at = len(rollout.opening)
        while at < len(messages):
            message = messages[at]
            end = at + 1
            while end < len(messages) and messages[end].get("role") != "assistant":
                end += 1
            turn = scorer.score(env.parse_action(message), task, recorded, k, at, rollout.tools)
            scorer.follow(turn, task, recorded, messages[at + 1:end], failed=False)
            k += 1
            at = end
        return list(scorer.rewards), list(scorer.errors)

    def _fail(self, rollout: HarnessRollout, error: str) -> None:
        rollout.error = error

    def _release(self, rollout: HarnessRollout, keep: bool) -> None:
        env, rollout.env = rollout.env, None
        if env is None:
            return
        if keep:
            self.envs.give(rollout.env_key, env)
        else:
            self.envs.drop(env)

    def _prune(self) -> None:
        with self._lock:
            done = [r for r in self._rollouts.values() if r.status != "open"]
            for r in done[: max(0, len(done) - self.keep_finished)]:
                del self._rollouts[r.id]

    def _reap_loop(self) -> None:
        every = min(5.0, self.idle_timeout_s / 4)
        while not self._stop.wait(every):
            self.reap()


# --------------------------------------------------------------------------- helpers


def new_rollout_id() -> str:
    """A fresh rollout id tagged with this process (``w<pid>-<hex>``, the service's id convention)."""
    return f"w{os.getpid()}-{uuid.uuid4().hex[:24]}"


def transcript(rollout: HarnessRollout) -> tuple[list[Message], list[int | None]]:
    """The episode the world saw: the opening, each model call's assistant message with the tool calls the
    harness executed (and their results), and each tool call the harness made on its own as an assistant turn
    of its own, in arrival order. Also, per assistant turn after the opening, the model call it is (``None``:
    the harness's own)."""
    messages = copy.deepcopy(rollout.opening)
    turn_of: list[int | None] = []
    own = [e for e in rollout.events if e.call_id is None]

    def add_own(before_seq: float) -> None:
        while own and own[0].seq < before_seq:
            e = own.pop(0)
            call_id = f"harness_{e.seq}"
            messages.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": e.name, "arguments": _args_text(e.arguments)}}]})
            messages.append({"role": "tool", "tool_call_id": call_id, "name": e.name, "content": e.content})
            turn_of.append(None)

    for call, seq in zip(rollout.calls, rollout.call_seq):
        add_own(seq)
        events = [e for e in rollout.events if e.call_index == call.index and e.call_id is not None]
        emitted = {tc.get("id"): tc for tc in call.message.get("tool_calls") or []}
        assistant: Message = {"role": "assistant", "content": call.message.get("content")}
        if events:
            assistant["tool_calls"] = [copy.deepcopy(emitted[e.call_id]) for e in events]
        elif assistant["content"] is None:
            assistant["content"] = ""
        messages.append(assistant)
        turn_of.append(call.index)
        for e in events:
            messages.append({"role": "tool", "tool_call_id": e.call_id, "name": e.name, "content": e.content})
    add_own(float("inf"))
    return messages, turn_of


def _chat_request(body: Any) -> tuple[list[Message], list[dict[str, Any]], dict[str, Any]]:
    """``(messages, tools, the other fields)`` of a chat request; :class:`HarnessError` naming a bad field."""
    if not isinstance(body, dict):
        raise HarnessError(422, "<body>", "must be a JSON object (an OpenAI chat.completions request)")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise HarnessError(422, "messages", "must be a non-empty list of chat messages")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise HarnessError(422, f"messages[{i}]", "must be an object with a 'role'")
    tools = body.get("tools") or []
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise HarnessError(422, "tools", "must be a list of OpenAI tool specs")
    if body.get("n") not in (None, 1):
        raise HarnessError(422, "n", f"the harness endpoint answers one choice per call (n=1), got n={body.get('n')!r}")
    if body.get("stream"):
        raise HarnessError(422, "stream", "streaming is not supported by the harness endpoint: send stream=false")
    rest = {k: v for k, v in body.items() if k not in ("messages", "tools")}
    normalised = [{**m, "role": "system"} if m.get("role") == "developer" else m for m in messages]
    return copy.deepcopy(normalised), copy.deepcopy(tools), rest


def _with_call_ids(message: Message, rollout_id: str, index: int) -> Message:
    """The answer with unique tool-call ids (``call_<rollout>_<call>_<j>``: harnesses match results by them)."""
    message = copy.deepcopy(message)
    calls = message.get("tool_calls") or []
    tag = rollout_id.rsplit("-", 1)[-1][:12]
    for j, c in enumerate(calls):
        c["id"] = f"call_{tag}_{index}_{j}"
        c.setdefault("type", "function")
    if calls and not (message.get("content") or "").strip():
        message["content"] = None
    if not calls:
        message.pop("tool_calls", None)
        message["content"] = message.get("content") or ""
    return message


def _canonical(arguments: Any) -> Any:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            return arguments
    return json.dumps(arguments, sort_keys=True, ensure_ascii=False)


def _args_text(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)


def _match(calls: list[CapturedCall], name: str, arguments: Any) -> tuple[int | None, str | None]:
    """The latest model call with an unexecuted tool call of this name and these arguments."""
    want = _canonical(arguments)
    for call in reversed(calls):
        for tc in call.message.get("tool_calls") or []:
            fn = tc.get("function") or {}
            if tc.get("id") in call.executed_tool_calls or fn.get("name") != name:
                continue
            if _canonical(fn.get("arguments") or "{}") == want:
                return call.index, tc.get("id")
    return None, None


def _completion_body(rollout_id: str, call: CapturedCall, model: Any) -> dict[str, Any]:
    """The OpenAI ``chat.completion`` answer of a captured call."""
    prompt = len(call.prompt_token_ids or [])
    completion = len(call.completion_token_ids or [])
    return {
        "id": f"chatcmpl-{rollout_id}-{call.index}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model or "policy",
        "choices": [{"index": 0, "message": copy.deepcopy(call.message), "finish_reason": call.finish_reason,
                     "logprobs": None}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
    }
