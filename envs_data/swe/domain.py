"""The ``swe`` domain: its :class:`~pivot_envs.domains.Domain` (``DOMAIN``), its default verifier recipe and the
verifier configs only it uses, and its world's registration (by the domain's name, so ``build_world(NAME)`` and
``World.config()`` rebuild it in any process that imports pivot_envs)."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from pivot_envs.domains import Domain
from pivot_envs.envs_data import load_pivots
from pivot_envs.verifiers.defaults import Judge
from pivot_envs.worlds import register_world

from . import NAME


def swe_verifier(judge: Judge = None) -> dict[str, Any]:
    """``final_turn`` (a turn judged whole: text after the call fails, an extra call fails; no stops, the task ends
    with ``submit``) over a ``schema`` gate (arguments valid for the tool) and ``swe_call``: the paper's tool categories, each call judged by its content (an edit close to
    the expert's or with its effect, a read of the expert's file inside the repository, a test run that runs the
    tests; a command that writes or destroys only by its effect). A judge is not used."""
    calls = {"name": "cascade", "stages": [{"role": "gate", "verifier": {"name": "schema"}},
                                           {"role": "decide", "verifier": {"name": "swe_call"}}]}
    return {"name": "final_turn", "calls": calls, "world_state": False}


register_world(NAME, f"{__package__}.world:SWEWorld", origin=f"domain {__package__}")

DOMAIN = Domain(
    name=NAME,
    env_id="pivot/SWE-v0",
    description="repository editing in the SWE-agent style: open_file, search_dir, edit, run_tests, submit",
    default_verifier=swe_verifier,
    skip_chat_only=True,
    load_pivots=partial(load_pivots, NAME, folder=Path(__file__).resolve().parent),
    world=NAME,
    world_keys=("test_command",),
    success_rules=("tests",),
    finish_tools=("submit",),
)
