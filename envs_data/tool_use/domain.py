"""The ``tool_use`` domain: its :class:`~pivot_envs.domains.Domain` (``DOMAIN``), its default verifier recipe and the
verifier configs only it uses, and its world's registration (by the domain's name, so ``build_world(NAME)`` and
``World.config()`` rebuild it in any process that imports pivot_envs)."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from pivot_envs.domains import Domain
from pivot_envs.envs_data import load_pivots
from pivot_envs.verifiers.defaults import Judge, answer_spec
from pivot_envs.worlds import register_world

from . import NAME

TOOL_USE_CASELESS: dict[str, list[str]] = {
    key: ["strip", "lower"] for key in ("email", "first_name", "last_name", "name")
}
"""Arguments the bundled customer-service tools look up case-insensitively (emails, names)."""


def tool_use_verifier(judge: Judge = None) -> dict[str, Any]:
    """``final_turn``: calls by ``tool_call`` (names and emails caseless); answers by their facts (an answer
    stating no fact: fuzzy), the judge deciding what the facts do not accept."""
    calls = {"name": "tool_call", "argument_normalizers": dict(TOOL_USE_CASELESS)}
    return {"name": "final_turn", "calls": calls, "answer": answer_spec(judge)}


register_world(NAME, f"{__package__}.world:ToolUseWorld", origin=f"domain {__package__}")

DOMAIN = Domain(
    name=NAME,
    env_id="pivot/ToolUse-v0",
    description="customer-service agent: JSON-schema tools over an orders/bookings/accounts database",
    default_verifier=tool_use_verifier,
    skip_chat_only=False,
    load_pivots=partial(load_pivots, NAME, folder=Path(__file__).resolve().parent),
    world=NAME,
    world_keys=("world_seed",),
    success_rules=("state", "facts"),
)
