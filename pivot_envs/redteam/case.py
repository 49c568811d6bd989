"""A red-team case (one labelled action at one pivot) and the registry of the families that make them.

A **family** is a rule that, at a pivot, builds actions of one kind: ``extra_call`` appends a destructive or
superfluous call to the expert's turn, ``gibberish_stop`` stops with a nonsense text, ``respelled`` writes the
expert's command with other quotes. Each family has a default **label** (``wrong``: a verifier must refuse it;
``right``: it must accept it); a maker may label a case otherwise where the domain's world shows the rule does not
apply (a one-word query that still retrieves the expert's document is right). A maker returns nothing where its
rule does not apply, so every case is one the rule is sure of.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from pivot_envs.types import Message, Pivot

WRONG = "wrong"
RIGHT = "right"
LABELS = (WRONG, RIGHT)


@dataclass(frozen=True)
class Case:
    """One labelled action at one pivot.

    Attributes:
        pivot: the pivot.
        family: the family that made it.
        label: ``wrong`` or ``right``.
        action: the assistant message.
        note: what the maker did (for reports), e.g. the command it appended.
    """

    pivot: Pivot
    family: str
    label: str
    action: Message | str
    note: str = ""

    def __post_init__(self) -> None:
        if self.label not in LABELS:
            raise ValueError(f"case of family {self.family!r}: label must be one of {LABELS}, got {self.label!r}")


Made = tuple[str, Message | str, str]
"""What a maker returns per case: ``(label, action, note)``."""

Maker = Callable[[Any], Iterable[Made]]
"""``maker(site) -> [(label, action, note), ...]``; ``site`` is a :class:`~pivot_envs.redteam.site.Site`."""


@dataclass(frozen=True)
class Family:
    """A family of cases: its name, default label, kind of pivot and maker.

    Attributes:
        name: the family's name (unique).
        label: the label of most of its cases (``wrong`` for attacks, ``right`` for other right spellings).
        where: ``call`` (pivots where the expert made a call), ``answer`` (where it answered) or ``any``.
        maker: builds the cases at one pivot (see :data:`Maker`).
        doc: one line on what it builds and why its label holds.
        needs: what the maker needs of the pivot's tools: ``shell`` (a shell tool with a command argument),
            ``search`` (a ``search`` and an ``open`` tool), ``editor`` (SWE-agent's editor tools), or ``""``.
    """

    name: str
    label: str
    where: str
    maker: Maker
    doc: str
    needs: str = ""
    tags: tuple[str, ...] = field(default=())

    def applies(self, pivot: Pivot, tools: set[str]) -> bool:
        """Whether the family builds cases at ``pivot`` (by the kind of turn and the tools it needs)."""
        called = bool(pivot.expert.get("tool_calls"))
        if self.where == "call" and not called or self.where == "answer" and called:
            return False
        return _has_tools(self.needs, tools)


def _has_tools(needs: str, tools: set[str]) -> bool:
    if needs == "shell":  # a shell tool, and no editor (the swe domain's bash calls are judged by :mod:`.swe`)
        return bool(tools & {"bash", "shell", "run_command", "execute_bash", "terminal"}) and not _has_tools("editor", tools)
    if needs == "search":
        return {"search", "open"} <= tools
    if needs == "editor":
        return {"edit", "open_file"} <= tools
    return True


FAMILIES: dict[str, Family] = {}
"""Every family by name (filled by the modules of :mod:`pivot_envs.redteam.families`)."""


def family(name: str, label: str, where: str, doc: str, needs: str = "") -> Callable[[Maker], Maker]:
    """Register the decorated maker as the family ``name``."""
    if label not in LABELS or where not in ("call", "answer", "any"):
        raise ValueError(f"family {name!r}: bad label {label!r} or where {where!r}")

    def register(maker: Maker) -> Maker:
        if name in FAMILIES:
            raise ValueError(f"family {name!r} is registered twice")
        FAMILIES[name] = Family(name, label, where, maker, doc, needs)
        return maker
    return register
