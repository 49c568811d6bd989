"""The ``search`` domain: its :class:`~pivot_envs.domains.Domain` (``DOMAIN``), its default verifier recipe and the
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

OPEN_DOC: dict[str, Any] = {"name": "tool_call", "normalizers": ["strip"]}
"""The search domain's ``open``: the same doc id, spaces around it stripped (the world strips them: ``" person-012"``
opens ``person-012``)."""


def search_verifier(judge: Judge = None) -> dict[str, Any]:
    """``final_turn``: calls by ``by_tool`` (``search``: the expert's own call, arguments equal by meaning, accepts
    without running; otherwise what the query retrieves decides (``retrieves``: the document the expert opened next
    must be among its results; no similarity of words accepts a query that does not retrieve it); ``open``: the doc id, spaces around it stripped as the world strips them; other calls
    ``tool_call``); answers by their facts (+ judge); a stop before the expert's last look-up by the facts of the
    expert's answer (every search task is an information task)."""
    search = {"name": "cascade", "stages": [
        {"role": "accept", "verifier": {"name": "tool_call"}},
        {"role": "decide", "verifier": {"name": "retrieves", "tool": "search", "open_tool": "open", "id_key": "doc_id"}},
    ]}
    calls = {"name": "by_tool", "routes": {"search": search, "open": dict(OPEN_DOC)},
             "default": {"name": "tool_call"}}
    return {"name": "final_turn", "calls": calls, "answer": answer_spec(judge)}


register_world(NAME, f"{__package__}.world:SearchWorld", origin=f"domain {__package__}")

DOMAIN = Domain(
    name=NAME,
    env_id="pivot/Search-v0",
    description="multi-hop questions answered with search(query) / open(doc_id) over a local corpus",
    default_verifier=search_verifier,
    skip_chat_only=False,
    load_pivots=partial(load_pivots, NAME, folder=Path(__file__).resolve().parent),
    world=NAME,
    world_keys=("corpus_seed",),
    success_rules=("state", "answer"),
)
