"""What the expert did after a turn of its trajectory: the record a pivot carries in ``meta["after"]``.

Whether stopping at a pivot is right depends on what the expert went on to do (:mod:`pivot_envs.verifiers.stop`):
its later tool calls (replayed, they tell whether the world already holds the task's final state), its final
answer, and that answer's facts, with those no tool had returned by the pivot's turn. Extraction
(:func:`pivot_envs.pipeline.extract.extract_pivots`) and the tau2 reader record it for every pivot.
"""

from __future__ import annotations

from typing import Any

from pivot_envs.facts import answer_facts
from pivot_envs.types import Message, content_text


def after_turn(messages: list[Message], i: int, final: tuple[str | None, list[str]] | None = None) -> dict[str, Any]:
    """What the expert did after assistant turn ``i``, which decides whether stopping there is right
    (:mod:`pivot_envs.verifiers.final_turn`): ``calls``, its later assistant turns that made tool calls (the
    calls only), ``answer``, the text of its last turn when that turn made no call (else ``None``), ``facts``,
    the facts of that answer (:func:`pivot_envs.facts.answer_facts`: values tools returned that it repeats),
    and ``pending``, those of them that no tool had returned before turn ``i`` (the expert found them later).
    ``final``: the trajectory's ``(answer, facts)`` (:func:`final_answer`), computed when not given."""
    answer, facts = final_answer(messages) if final is None else final
    later = [{"role": "assistant", "content": None, "tool_calls": m["tool_calls"]}
             for m in messages[i + 1:] if m.get("role") == "assistant" and m.get("tool_calls")]
    found = set(answer_facts(messages[:i], answer)) if facts and answer else set()
    return {"calls": later, "answer": answer, "facts": list(facts), "pending": [f for f in facts if f not in found]}


def final_answer(messages: list[Message]) -> tuple[str | None, list[str]]:
    """The expert's final answer (the text of its last assistant turn, when that turn made no call) and its facts."""
    last = max((j for j, m in enumerate(messages) if m.get("role") == "assistant"), default=None)
    if last is None or messages[last].get("tool_calls"):
        return None, []
    answer = content_text(messages[last].get("content"))
    return answer, answer_facts(messages[:last], answer)
