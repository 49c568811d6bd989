"""Gymnasium spaces for chat observations and text actions."""

from __future__ import annotations

import string
from typing import Any

from gymnasium import spaces


class UnicodeText(spaces.Text):
    """Any Python ``str`` of at most ``max_length`` characters (full Unicode).

    ``gymnasium.spaces.Text`` only contains strings over a finite charset; chat
    messages hold arbitrary Unicode. ``sample()`` draws printable ASCII.
    """

    def __init__(self, max_length: int = 4_000_000, seed: int | None = None):
        super().__init__(max_length=max_length, min_length=0, charset=string.printable, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"UnicodeText(max_length={self.max_length})"


def observation_space() -> spaces.Dict:
    """The observation of a PivotEnv.

    ``{"messages": <JSON text of the context messages>, "tools": <JSON text of the tool specs>}``
    (OpenAI chat format). ``json.loads`` gives back the lists; ``info["pivot_id"]`` names the pivot.
    """
    return spaces.Dict({"messages": UnicodeText(), "tools": UnicodeText()})


def action_space() -> UnicodeText:
    """The action of a PivotEnv: raw model text (an assistant message dict is accepted too)."""
    return UnicodeText()
