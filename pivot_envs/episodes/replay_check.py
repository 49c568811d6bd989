"""Replays that check the world: every tool result of an episode against the one the task recorded.

A replay (``pivot-envs play --agent replay``) plays a task's recorded actions back; its task success says
little unless the world also answered as it did when the task was recorded. A world that starts in the
wrong state (a forgotten ``world_keys`` entry, a seed that does not reach the world) still reaches the
expert's digest when every call writes, and answers every read with the wrong value.
:func:`check_replay` compares, message by message, the tool results the episode got with the recorded
ones while the episode's actions are the recorded actions, after the world's output normalisation
(:meth:`pivot_envs.worlds.World.normalize_output`: canonical JSON with numbers by value, else whitespace
collapsed; an MCP world compares as its server sends values, so a recorded ``[]`` equals a reply with no
block: :mod:`pivot_envs.worlds.mcp_results`). Where an action differs from the recording the comparison stops:
the rest is another episode.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from pivot_envs.facts import call_keys
from pivot_envs.types import Message, content_text


@dataclass
class ReplayCheck:
    """The tool results of one episode compared with the recorded ones.

    Attributes:
        compared: tool results compared (the ones returned while the actions were the recorded ones).
        matched: of those, the ones equal to the recording.
        mismatch: the first difference, naming the task, the turn and where the two differ; ``None``.
    """

    compared: int = 0
    matched: int = 0
    mismatch: str | None = None

    @property
    def match(self) -> bool | None:
        """Every compared tool result was as recorded; ``None`` when none was compared."""
        return None if self.compared == 0 else self.matched == self.compared

    def row_fields(self) -> dict[str, Any]:
        """The episode row's fields: ``tool_results_match``, ``tool_results_compared``, ``tool_results_matched``,
        ``tool_result_mismatch``."""
        return {"tool_results_match": self.match, "tool_results_compared": self.compared,
                "tool_results_matched": self.matched, "tool_result_mismatch": self.mismatch}


def check_replay(task_id: str, messages: Sequence[Message], recorded: Sequence[Message], start: int,
                 normalize: Callable[[Any], str]) -> ReplayCheck:
    """Compare the tool results of ``messages`` (an episode whose first ``start`` messages were its
    starting context) with ``recorded`` (the task's messages), position by position, until an assistant
    action differs from the recorded one."""
    out = ReplayCheck()
    turn = sum(1 for m in messages[:start] if m.get("role") == "assistant")
    for i in range(start, min(len(messages), len(recorded))):
        got, want = messages[i], recorded[i]
        if got.get("role") == "assistant":
            if call_keys([got]) != call_keys([want]) or (not got.get("tool_calls") and content_text(got.get("content"))
                                               != content_text(want.get("content"))):
                break  # off the recording: what follows is another episode
            turn += 1
            continue
        if got.get("role") != "tool" or want.get("role") != "tool":
            continue
        a, b = normalize(content_text(got.get("content"))), normalize(content_text(want.get("content")))
        out.compared += 1
        if a == b:
            out.matched += 1
        elif out.mismatch is None:
            out.mismatch = f"task {task_id}, turn {turn} (message {i}, tool {got.get('name') or '?'}): {first_difference(b, a)}"
    return out


def first_difference(expected: str, got: str, context: int = 30) -> str:
    """Where two texts first differ, with a little context: ``recorded ...'X'... , replayed ...'Y'...``."""
    k = next((j for j, (x, y) in enumerate(zip(expected, got)) if x != y), min(len(expected), len(got)))
    lo = max(0, k - context)

    def window(text: str) -> str:
        return ("..." if lo else "") + repr(text[lo : k + context]) + ("..." if k + context < len(text) else "")

    return f"recorded {window(expected)}, replayed {window(got)}"
