"""Trajectories -> pivot candidates (the paper's D_cand): one per assistant turn.

Each assistant turn ``i`` of a trajectory becomes a :class:`~pivot_envs.types.Pivot`
with ``context = messages[:i]`` and ``expert = messages[i]``, unless a filter
drops it. The :class:`ExtractAudit` counts every kept and skipped turn by reason.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable

from pivot_envs.domains import Domain, get_domain
from pivot_envs.after import after_turn, final_answer
from pivot_envs.types import Fixture, Message, Pivot, Trajectory, content_text, stable_hash


@dataclass
class ExtractOptions:
    """Which assistant turns become pivot candidates.

    Attributes:
        min_reward: keep only trajectories whose reward is >= this (trajectories without
            a reward are dropped when it is set).
        skip_tool_errors: drop turns whose tool call was answered by a tool error
            (a tool message matching ``error_pattern``).
        skip_chat_only: drop turns without tool calls; ``None`` = the domain's default.
        dedup: drop a turn whose (context, normalised action) pair was already seen in a task with
            the same setup: the same tools (in any order), world settings (``meta["world"]``) and
            start fixture (tool-call ids are ignored; arguments compared as canonical JSON). Two
            tasks that open alike but start from different states keep their pivots.
        max_turns_per_trajectory: keep at most this many (the first ones) per trajectory.
        error_pattern: regex (case-insensitive) on the tool message content marking an error.
    """

    min_reward: float | None = None
    skip_tool_errors: bool = True
    skip_chat_only: bool | None = None
    dedup: bool = True
    max_turns_per_trajectory: int | None = None
    error_pattern: str = r"^\s*(error\b|exception\b|traceback \(most recent call last\))"

    def __post_init__(self) -> None:
        cap = self.max_turns_per_trajectory
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
            raise ValueError(f"max_turns_per_trajectory must be a whole number >= 1 or None (no cap): got {cap!r}")
        if self.min_reward is not None and self.min_reward != self.min_reward:
            raise ValueError("min_reward must be a number or None: got nan")
        try:
            re.compile(self.error_pattern)
        except re.error as exc:
            raise ValueError(f"error_pattern {self.error_pattern!r} is not a valid regex: {exc}") from None


@dataclass
class ExtractAudit:
    """What extraction kept and dropped."""

    trajectories: int = 0
    trajectories_used: int = 0
    kept: Counter = field(default_factory=Counter)  # by kind: tool_call / text
    skipped: Counter = field(default_factory=Counter)  # by reason

    @property
    def candidates(self) -> int:
        return sum(self.kept.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "trajectories": self.trajectories,
            "trajectories_used": self.trajectories_used,
            "candidates": self.candidates,
            "kept": dict(self.kept),
            "skipped": dict(self.skipped),
        }


def extract_pivots(
    trajectories: Iterable[Trajectory],
    domain: str | Domain,
    options: ExtractOptions | None = None,
) -> tuple[list[Pivot], ExtractAudit]:
    """Cut trajectories into pivot candidates; returns the pivots and an audit."""
    dom = get_domain(domain) if isinstance(domain, str) else domain
    opts = options or ExtractOptions()
    skip_chat = dom.skip_chat_only if opts.skip_chat_only is None else opts.skip_chat_only
    error_re = re.compile(opts.error_pattern, re.IGNORECASE)
    audit = ExtractAudit()
    seen: set[str] = set()
    pivots: list[Pivot] = []
    for traj in trajectories:
        audit.trajectories += 1
        if opts.min_reward is not None and (traj.reward is None or traj.reward < opts.min_reward):
            n_turns = sum(1 for m in traj.messages if m.get("role") == "assistant")
            audit.skipped["trajectory_below_min_reward"] += n_turns
            continue
        audit.trajectories_used += 1
        kept_here = 0
        final: tuple[str | None, list[str]] | None = None
        setup = task_setup_key(traj, dom) if opts.dedup else ""
        for i, msg in enumerate(traj.messages):
            if msg.get("role") != "assistant":
                continue
            reason = _skip_reason(traj.messages, i, skip_chat, opts.skip_tool_errors, error_re)
            if reason is None and opts.dedup:
                key = stable_hash(dom.name, setup, normalized_context(traj.messages[:i]), normalized_action(msg))
                reason = "duplicate" if key in seen else None
                seen.add(key)
            if reason is None and opts.max_turns_per_trajectory is not None and kept_here >= opts.max_turns_per_trajectory:
                reason = "turn_cap"
            if reason is not None:
                audit.skipped[reason] += 1
                continue
            kept_here += 1
            final = final_answer(traj.messages) if final is None else final
            pivot = make_pivot(traj, i, dom, final)
            audit.kept[pivot.meta["kind"]] += 1
            pivots.append(pivot)
    return pivots, audit


def _skip_reason(messages: list[Message], i: int, skip_chat: bool, skip_errors: bool, error_re: re.Pattern) -> str | None:
    msg = messages[i]
    if not msg.get("tool_calls"):
        return "chat_only" if skip_chat else None
    if skip_errors and any(error_re.search(content_text(m.get("content"))) for m in tool_results(messages, i)):
        return "tool_error"
    return None


def tool_results(messages: list[Message], i: int) -> list[Message]:
    """The tool messages answering the calls of assistant message ``i``."""
    ids = {c.get("id") for c in messages[i].get("tool_calls") or []}
    out = []
    for m in messages[i + 1:]:
        if m.get("role") != "tool":
            break
        if m.get("tool_call_id") in ids or not m.get("tool_call_id") or None in ids:
            out.append(m)
    return out


def task_setup_key(traj: Trajectory, dom: Domain) -> str:
    """What a task starts from besides its messages: its tools (order free), its world settings
    (:func:`world_meta`, for a domain with a world) and its start fixture, as one hash."""
    tools = sorted(json.dumps(t, sort_keys=True, ensure_ascii=False) for t in traj.tools)
    world = world_meta(traj, dom) if dom.world is not None else None
    fixture = traj.fixture.to_dict() if traj.fixture is not None else None
    return stable_hash(tools, world, fixture)


def normalized_action(message: Message) -> Any:
    """A canonical form of an assistant action: calls with canonical JSON arguments, or folded text."""
    calls = []
    for call in message.get("tool_calls") or []:
        fn = call.get("function", {})
        args = fn.get("arguments", "")
        try:
            args = json.dumps(json.loads(args) if isinstance(args, str) else args, sort_keys=True)
        except (json.JSONDecodeError, TypeError):
            args = " ".join(str(args).split())
        calls.append([fn.get("name"), args])
    if calls:
        return sorted(calls)
    return " ".join(content_text(message.get("content")).split()).lower()


def normalized_context(messages: list[Message]) -> list[Any]:
    """Context messages without per-run ids, for de-duplication."""
    out = []
    for m in messages:
        if m.get("role") == "assistant":
            out.append(["assistant", normalized_action(m)])
        else:
            out.append([m.get("role"), " ".join(content_text(m.get("content")).split())])
    return out


def make_pivot(traj: Trajectory, i: int, dom: Domain, final: tuple[str | None, list[str]] | None = None) -> Pivot:
    """The pivot of ``traj``'s assistant turn ``i`` (``final``: the trajectory's :func:`final_answer`, computed
    when not given)."""
    expert = traj.messages[i]
    meta: dict[str, Any] = {
        "trajectory_id": traj.id,
        "turn": i,
        "kind": "tool_call" if expert.get("tool_calls") else "text",
    }
    for key in ("source", "task", "task_id"):
        if key in traj.meta:
            meta[key] = traj.meta[key]
    if traj.reward is not None:
        meta["trajectory_reward"] = traj.reward
    recorded = traj.meta.get("alternatives")
    alternatives = recorded.get(str(i)) if isinstance(recorded, dict) else None
    if alternatives:
        meta["alternatives"] = alternatives
    if dom.world is not None:
        meta["world"] = world_meta(traj, dom)
    meta["after"] = after_turn(traj.messages, i, final)
    return Pivot(
        id=stable_hash(dom.name, traj.id, i),
        domain=dom.name,
        context=traj.messages[:i],
        expert=expert,
        tools=traj.tools,
        fixture=fixture_at(traj, i, dom),
        meta=meta,
    )


def world_meta(traj: Trajectory, dom: Domain) -> dict[str, Any]:
    """What rebuilds the task's world at a pivot: its ``world_keys`` settings, and the task's start
    fixture when the pivot's own fixture is a replayed one (``fixture_mode="replay"``)."""
    out: dict[str, Any] = {"config": {k: traj.meta[k] for k in dom.world_keys if k in traj.meta}}
    if dom.fixture_mode == "replay" and traj.fixture is not None:
        out["fixture"] = traj.fixture.to_dict()
    return out


def fixture_at(traj: Trajectory, i: int, dom: Domain) -> Fixture | None:
    """The environment state before turn ``i``: static, or rebuilt by replaying earlier commands."""
    base = traj.fixture
    if base is None or dom.fixture_mode == "static":
        return base
    commands = []
    for m in traj.messages[:i]:
        for call in m.get("tool_calls") or [] if m.get("role") == "assistant" else []:
            try:
                args = json.loads(call.get("function", {}).get("arguments") or "{}")
            except json.JSONDecodeError:
                continue
            command = args.get(dom.command_argument) if isinstance(args, dict) else None
            if isinstance(command, str) and command.strip():
                commands.append(f"(\n{command}\n)")
    setup = "\n".join(part for part in [base.setup.strip(), *commands] if part)
    return Fixture(files=dict(base.files), setup=setup, workdir=base.workdir)
