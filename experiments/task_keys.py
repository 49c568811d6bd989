"""What makes two tasks the same task: their request and their start state (the demo keeps held-out tasks,
validation tasks and every trajectory a model learns from apart by these keys)."""

from __future__ import annotations

from typing import Any

from pivot_envs.types import stable_hash


def request_text(trajectory: Any) -> str:
    """The task's request: its first user message, whitespace folded."""
    first = next((m for m in trajectory.messages if m.get("role") == "user"), {})
    return " ".join(str(first.get("content") or "").split())


def request_key(trajectory: Any) -> str:
    """A short hash of the task: its request (the first user message, whitespace folded) and its start state
    (the fixture; many generated tasks share a request and differ in the files they start from)."""
    fixture = trajectory.fixture.to_dict() if getattr(trajectory, "fixture", None) is not None else None
    return stable_hash(request_text(trajectory), fixture)


def fresh_tasks(generated: Any, seen: set[str], n: int) -> list[Any]:
    """The first ``n`` successful trajectories of ``generated`` whose task is not in ``seen`` (and not repeated);
    ``seen`` is not changed."""
    seen = set(seen)
    out = []
    for t in generated:
        if len(out) >= n:
            break
        if t.reward == 1.0 and request_key(t) not in seen:
            seen.add(request_key(t))
            out.append(t)
    return out
