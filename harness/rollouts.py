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
  (:class:`~pivot_envs.harness.capture.CapturedCall`); tool calls are parsed from the model's text
  (``<tool_call>`` blocks, by the domain's action parser) and returned as OpenAI ``tool_calls``
  (:mod:`pivot_envs.harness.requests`: what a request may ask, what is applied and what is only recorded);
* **tool calls** (:meth:`HarnessRollouts.call_tool`): executed in the world at once, exactly as the harness
  sent them (the world over MCP, :mod:`pivot_envs.harness.mcp`). Each is matched to the latest model
  call that asked for it (same tool, arguments equal as JSON); a call the policy never asked for is the
  harness's own (``uncaptured_tool_calls``), and a tool call the policy asked for that the harness never ran
  is counted too (``unexecuted_tool_calls``). A task with a user has one more tool, the user's
  (:mod:`pivot_envs.harness.user`): the message goes to the env's user simulator and its reply comes back.

**The episode's end.** The harness ends it with a text answer. The endpoint ends it in two cases, as the episode
env would (``cut``): a model call past the turn limit (``turn_limit``: the episode is truncated) and a user who
ended the conversation (``user_ended``). From then on the harness's model calls get a **closing answer**: an
assistant text (``finish_reason: "stop"``, the body's ``pivot_envs.cut`` naming why) that ends any harness loop
cleanly; it is not sampled, not captured and not part of the episode. Tool calls get an error result and reach
neither the world nor the user.

**Finishing** (:meth:`HarnessRollouts.finish`) judges the episode the world saw (:mod:`pivot_envs.harness.judge`)
and releases the world.

**Abandoned** rollouts: a rollout with no event for ``idle_timeout_s`` (and no call in flight) is abandoned
by a reaper thread: its env is closed, which frees the world (sandbox state, MCP server process); so is a
rollout given up with :meth:`HarnessRollouts.abandon` (a harness killed mid-rollout). A world that fails
(:class:`~pivot_envs.worlds.WorldError`) fails the rollout: ``status = "failed"`` with the error, never a 0.
"""

from __future__ import annotations

import copy
import threading
import time
from typing import Any

from pivot_envs.harness.capture import CapturedCall, capture_summary, extends_previous
from pivot_envs.harness.envs import EpisodeEnvs
from pivot_envs.harness.judge import judge_rollout
from pivot_envs.harness.policy import HarnessPolicy, PolicyRequest
from pivot_envs.harness.requests import ChatRequest, read_chat_request
from pivot_envs.harness.state import (CUT_TURN_LIMIT, CUT_USER_ENDED, STATUSES, HarnessError, HarnessRollout,
                                      ToolEvent, new_rollout_id)
from pivot_envs.harness.transcript import match_tool_call
from pivot_envs.harness.user import USER_TOOL, UserChannel, harness_expert, talks_to_user, user_tool_spec
from pivot_envs.types import Message, content_text
from pivot_envs.users import UserSimulatorError
from pivot_envs.worlds import ToolResult, WorldError

__all__ = ["CLOSING", "EpisodeEnvs", "HarnessError", "HarnessRollout", "HarnessRollouts", "OPEN_KEYS", "ToolEvent"]

OPEN_KEYS = {"env", "split", "task_id", "index", "pivot_id", "seed", "kwargs", "options", "max_turns"}
MODEL_NAME = "policy"
CLOSING = {
    CUT_TURN_LIMIT: "[The episode is over: its turn limit of {max_turns} model calls was reached.]",
    CUT_USER_ENDED: "[The episode is over: the user ended the conversation.]",
}
"""The closing answer's text, per cut (``{max_turns}`` filled in)."""


class HarnessRollouts:
    """The registry of harness rollouts (see the module docstring).

    Args:
        policy: who answers the model calls (:mod:`pivot_envs.harness.policy`).
        envs: where rollouts' envs come from (:class:`~pivot_envs.harness.envs.EpisodeEnvs`).
        idle_timeout_s: a rollout with no event for this long is abandoned (its world freed).
        max_turns: model calls a rollout may make (past it: the closing answer; the episode is truncated).
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
        "max_turns"?}`` -> ``{"rollout_id", "task_id", "pivot_id", "messages", "tools", "max_turns", "domain",
        "model", "system", "task", "user"}``."""
        options, chosen, max_turns, seed = self._read_open(spec)
        with self._lock:
            live = sum(1 for r in self._rollouts.values() if r.status == "open")
        if live >= self.max_rollouts:
            raise HarnessError(429, "env", f"{live} rollouts are open, the most this endpoint keeps: finish some")
        key, make = self.envs.key(spec)
        env = self.envs.take(key, make)
        try:
            _check_index(options, len(env.tasks))
            env.reset(seed=seed, options=options or None)
        except (KeyError, ValueError, IndexError, TypeError, HarnessError) as exc:
            self.envs.give(key, env)
            if isinstance(exc, HarnessError):
                raise
            message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
            raise HarnessError(400, chosen[0] if chosen else "options", str(message)) from None
        if env.error is not None:  # the world failed at its start: an infrastructure error
            self.envs.drop(env)
            raise HarnessError(502, "env", f"the task's world failed at its start: {env.error}")
        rollout = self._new_rollout(env, key, max_turns)
        with self._lock:
            self._rollouts[rollout.id] = rollout
        return opened_answer(rollout)

    def _read_open(self, spec: Any) -> tuple[dict[str, Any], list[str], int, int | None]:
        """``(reset options, the start fields given, max_turns, seed)`` of an open request."""
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
        return options, chosen, max_turns, seed

    def _new_rollout(self, env: Any, key: str, max_turns: int) -> HarnessRollout:
        user = UserChannel(env) if talks_to_user(env) else None
        world_tools = copy.deepcopy(env.tools)
        tools = world_tools + ([user_tool_spec()] if user is not None else [])
        return HarnessRollout(id=new_rollout_id(), env=env, env_key=key, task_id=env.task.id, pivot_id=env.pivot_id,
                              opening=copy.deepcopy(env.messages), tools=copy.deepcopy(tools),
                              world_tools=world_tools, max_turns=max_turns, user=user)

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
        request = read_chat_request(body)
        rollout = self.open_rollout(rollout_id)
        with rollout.lock:
            if not rollout.ended and len(rollout.calls) + rollout.in_flight >= rollout.max_turns:
                rollout.cut, rollout.truncated = CUT_TURN_LIMIT, True
            rollout.touch()
            if rollout.ended:
                rollout.closing_answers += 1
                return closing_body(rollout, body.get("model"))
            rollout.in_flight += 1
            index = len(rollout.calls) + rollout.in_flight - 1
            policy_request = self._policy_request(rollout, request, index)
        try:
            answer = self.policy.complete(policy_request)
        finally:
            with rollout.lock:
                rollout.in_flight -= 1
                rollout.touch()
        call = self._captured(rollout, request, answer, index)
        with rollout.lock:
            if rollout.status != "open":
                raise HarnessError(409, "rollout_id", f"rollout {rollout_id} was {rollout.status} while the policy "
                                                      "answered")
            previous = rollout.calls[-1] if rollout.calls else None
            extends = extends_previous(previous, call)
            call.retokenized = None if extends is None else not (extends or call.prompt_cut)
            call.index = len(rollout.calls)
            rollout.calls.append(call)
            rollout.call_seq.append(rollout.next_seq())
            call.latency_s = time.perf_counter() - arrived
        return _completion_body(rollout.id, call, body.get("model"))

    def _policy_request(self, rollout: HarnessRollout, request: ChatRequest, index: int) -> PolicyRequest:
        env = rollout.env
        turn = sum(1 for m in rollout.opening if m.get("role") == "assistant") + index
        expert = harness_expert(env.task, turn, rollout.user is not None)
        return PolicyRequest(messages=request.messages, tools=[] if request.tools_off else request.tools,
                             pivot_id=f"{rollout.id}@{index}", expert=expert, domain=env.domain_name,
                             body=request.rest, stop=request.stop,
                             meta={"trajectory_id": rollout.task_id, "episode": rollout.id, "episode_turn": turn})

    def _captured(self, rollout: HarnessRollout, request: ChatRequest, answer: Any, index: int) -> CapturedCall:
        """The answer as a captured call (its assistant message parsed from the text, tool-call ids made unique)."""
        if request.tools_off:
            message: Message = {"role": "assistant", "content": answer.text}
        else:
            message = answer.message if answer.message is not None else rollout.env.parse_action(answer.text).message
        message = _with_call_ids(message, rollout.id, index)
        finish = "tool_calls" if message.get("tool_calls") else ("stop" if answer.stopped else "length")
        return CapturedCall(index=index, messages=request.messages, tools=[] if request.tools_off else request.tools,
                            request=request.rest, prompt_token_ids=answer.prompt_token_ids,
                            completion_token_ids=answer.token_ids, logprobs=answer.logprobs,
                            policy_version=answer.policy_version, text=answer.text, message=message,
                            finish_reason=finish, sample_s=answer.sample_s, queue_s=answer.queued_s,
                            prompt_cut=answer.prompt_cut)

    # ------------------------------------------------------------------ tool calls (the world, the user)
    def tools_of(self, rollout_id: str) -> list[dict[str, Any]]:
        return copy.deepcopy(self.open_rollout(rollout_id).tools)

    def call_tool(self, rollout_id: str, name: str, arguments: Any) -> ToolResult:
        """Execute one tool call as the harness sent it: in the rollout's world, or to its user (see the module
        docstring)."""
        rollout = self.open_rollout(rollout_id)
        with rollout.lock:
            if rollout.status != "open":
                raise HarnessError(409, "rollout_id", f"rollout {rollout_id} is {rollout.status}")
            rollout.touch()
            if rollout.ended:
                return ToolResult(f"Error: {CLOSING[rollout.cut].format(max_turns=rollout.max_turns)} The call was not "
                                  "run.", error=True)
            if rollout.user is not None and name == USER_TOOL:
                return self._talk(rollout, arguments)
            result = self._world_call(rollout, name, arguments)
            self._record(rollout, ToolEvent(rollout.next_seq(), name, copy.deepcopy(arguments), result.content,
                                            result.error))
        return result

    def _world_call(self, rollout: HarnessRollout, name: str, arguments: Any) -> ToolResult:
        names = {str((t.get("function") or t).get("name")) for t in rollout.world_tools}
        if name not in names:
            known = ", ".join(sorted(names | ({USER_TOOL} if rollout.user is not None else set())))
            return ToolResult(f"Error: unknown tool {name!r}; available tools: {known}", error=True)
        try:
            return rollout.env.world.call(name, arguments if arguments is not None else {})
        except (ValueError, TypeError) as exc:  # arguments the world cannot read: the agent's mistake
            return ToolResult(f"Error: bad arguments for {name}: {exc}", error=True)
        except WorldError as exc:
            rollout.error = f"WorldError: {exc}"
            raise HarnessError(502, "rollout_id", f"the world of rollout {rollout.id} failed: {exc}") from None

    def _talk(self, rollout: HarnessRollout, arguments: Any) -> ToolResult:
        """The agent's message to the task's user; the user's reply as the tool's result."""
        try:
            text, reply, ended = rollout.user.send(arguments)
        except ValueError as exc:  # a message the tool cannot read: the agent's mistake
            result = ToolResult(f"Error: {exc}", error=True)
            self._record(rollout, ToolEvent(rollout.next_seq(), USER_TOOL, copy.deepcopy(arguments), result.content,
                                            True))
            return result
        except UserSimulatorError as exc:
            rollout.error = f"UserSimulatorError: {exc}"
            raise HarnessError(502, "rollout_id", f"the user simulator of rollout {rollout.id} failed: {exc}") from None
        self._record(rollout, ToolEvent(rollout.next_seq(), USER_TOOL, copy.deepcopy(arguments), text, False,
                                        user=True, reply=reply, user_ended=ended))
        if ended:
            rollout.cut = CUT_USER_ENDED
        return ToolResult(text, error=False)

    def _record(self, rollout: HarnessRollout, event: ToolEvent) -> None:
        event.call_index, event.call_id = match_tool_call(rollout.calls, event.name, event.arguments)
        if event.call_id is not None:
            rollout.calls[event.call_index].executed_tool_calls.append(event.call_id)
        rollout.events.append(event)
        rollout.touch()

    # ------------------------------------------------------------------ ending
    def finish(self, rollout_id: str, harness: dict[str, Any] | None = None) -> dict[str, Any]:
        """Judge the rollout's episode and release its world (see the module docstring); idempotent. ``harness``:
        how the harness process ended (``exit_code``, ``stderr_tail``), kept in the result."""
        rollout = self.get(rollout_id)
        with rollout.lock:
            if rollout.result is not None and rollout.status in ("finished", "failed"):
                return rollout.result
            if rollout.status == "abandoned":
                raise HarnessError(409, "rollout_id", f"rollout {rollout_id} was abandoned: {rollout.reason}")
            if rollout.in_flight:
                raise HarnessError(409, "rollout_id", f"rollout {rollout_id} has {rollout.in_flight} model call(s) in "
                                                      "flight: finish it after they are answered")
            if harness is not None:
                rollout.harness = dict(harness)
            result = judge_rollout(rollout, self.score_turns)
            rollout.result = result
            rollout.status = "failed" if result["error"] else "finished"
            result["status"] = rollout.status
            self._release(rollout, keep=rollout.status == "finished")
        self._prune()
        return result

    def abandon(self, rollout_id: str, reason: str = "given up by the caller",
                harness: dict[str, Any] | None = None) -> dict[str, Any]:
        """Give up a rollout: its world is closed and freed; a later ``finish`` answers 409."""
        rollout = self.get(rollout_id)
        with rollout.lock:
            if rollout.status == "open":
                rollout.status, rollout.reason = "abandoned", reason
                rollout.harness = dict(harness) if harness is not None else rollout.harness
                self._release(rollout, keep=False)
        self._prune()
        return self.describe(rollout)

    def describe(self, rollout: HarnessRollout) -> dict[str, Any]:
        """A rollout's state (``GET /harness/rollouts/{id}``)."""
        return {"rollout_id": rollout.id, "task_id": rollout.task_id, "status": rollout.status,
                "reason": rollout.reason, "error": rollout.error, "cut": rollout.cut, "calls": len(rollout.calls),
                "tool_calls": len(rollout.events), "idle_s": time.monotonic() - rollout.last_active,
                "harness": rollout.harness,
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


def _check_index(options: dict[str, Any], n_tasks: int) -> None:
    """An ``index`` must name one of the env's tasks (a 400 naming the range; the env itself would wrap around)."""
    if "index" not in options:
        return
    index = options["index"]
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < n_tasks:
        raise HarnessError(400, "index", f"must be an integer in [0, {n_tasks - 1}] (the env has {n_tasks} tasks), "
                                         f"got {index!r}")


def opened_answer(rollout: HarnessRollout) -> dict[str, Any]:
    """What opening a rollout answers (the HTTP face adds ``base_url`` and ``mcp_url``)."""
    opening = rollout.opening
    system = next((content_text(m.get("content")) for m in opening if m.get("role") == "system"), "")
    task = next((content_text(m.get("content")) for m in opening if m.get("role") == "user"), "")
    return {"rollout_id": rollout.id, "task_id": rollout.task_id, "pivot_id": rollout.pivot_id,
            "messages": copy.deepcopy(opening), "tools": copy.deepcopy(rollout.tools), "max_turns": rollout.max_turns,
            "domain": rollout.env.domain_name, "model": MODEL_NAME, "system": system, "task": task,
            "user": USER_TOOL if rollout.user is not None else None}


def closing_body(rollout: HarnessRollout, model: Any) -> dict[str, Any]:
    """The closing answer of an ended episode (see the module docstring): not sampled, not captured."""
    text = CLOSING[rollout.cut].format(max_turns=rollout.max_turns)
    return {
        "id": f"chatcmpl-{rollout.id}-closing-{rollout.closing_answers}", "object": "chat.completion",
        "created": int(time.time()), "model": model or MODEL_NAME,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop",
                     "logprobs": None}],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        "pivot_envs": {"cut": rollout.cut, "captured": False},
    }


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


def _completion_body(rollout_id: str, call: CapturedCall, model: Any) -> dict[str, Any]:
    """The OpenAI ``chat.completion`` answer of a captured call."""
    prompt = len(call.prompt_token_ids or [])
    completion = len(call.completion_token_ids or [])
    return {
        "id": f"chatcmpl-{rollout_id}-{call.index}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model or MODEL_NAME,
        "choices": [{"index": 0, "message": copy.deepcopy(call.message), "finish_reason": call.finish_reason,
                     "logprobs": None}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
    }
