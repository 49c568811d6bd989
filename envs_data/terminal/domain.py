"""The ``terminal`` domain: its :class:`~pivot_envs.domains.Domain` (``DOMAIN``), its default verifier recipe and the
verifier configs only it uses, and its world's registration (by the domain's name, so ``build_world(NAME)`` and
``World.config()`` rebuild it in any process that imports pivot_envs)."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from pivot_envs.domains import Domain
from pivot_envs.envs_data import load_pivots
from pivot_envs.verifiers.defaults import Judge, answer_spec, judge_spec
from pivot_envs.worlds import register_world

from . import NAME

SHELL_SAME: dict[str, Any] = {"name": "fuzzy", "target": "argument:command", "scorer": "ratio", "threshold": 100,
                              "normalizers": ["shell_words"]}
"""The terminal cascade's cheap accept: the same command in its canonical spelling (rapidfuzz over
``shell_words``: quoting and spacing between words; :mod:`pivot_envs.verifiers.helpers.shell_words`). Only the
threshold 100 is sound: one character less can be another file or another flag. Every other difference goes on
to ``exec``, which runs both commands."""

SHELL_EFFECT: dict[str, Any] = {"name": "exec", "command_from_content": "fenced", "output": "information",
                                "ignore_paths": []}
"""The terminal cascade's decider: both commands run from the pivot's state; the same file changes, agreeing
exit statuses, and an output that carries what the expert's showed without being a dump
(:mod:`pivot_envs.verifiers.helpers.information`). A text reply is no command (``fenced``). Every path counts, as in the
terminal world's digest: a task may be to delete ``__pycache__`` folders, which ``exec`` leaves out by default."""


def terminal_verifier(judge: Judge = None) -> dict[str, Any]:
    """``final_turn``: calls by a cascade (``schema`` gate -> the same command's canonical spelling ->
    ``exec``, running both commands and comparing what they changed and showed -> the judge);
    a turn whose calls do not match the expert's one to one by its whole effect (``exec`` over every call);
    answers by their facts (+ judge)."""
    stages: list[dict[str, Any]] = [
        {"role": "gate", "verifier": {"name": "schema"}},
        {"role": "accept", "verifier": dict(SHELL_SAME)},
        {"role": "accept" if judge is not None else "decide", "verifier": dict(SHELL_EFFECT)},
    ]
    effect = {"name": "cascade", "stages": [{"role": "gate", "verifier": {"name": "schema"}},
                                            {"role": "decide", "verifier": dict(SHELL_EFFECT)}]}
    if judge is not None:
        stages.append({"role": "decide", "verifier": judge_spec(judge)})
    return {"name": "final_turn", "calls": {"name": "cascade", "stages": stages}, "answer": answer_spec(judge),
            "turn_effect": effect}


register_world(NAME, f"{__package__}.world:TerminalWorld", origin=f"domain {__package__}")

DOMAIN = Domain(
    name=NAME,
    env_id="pivot/Terminal-v0",
    description="shell tasks over file-system fixtures; one `bash` tool call per turn",
    default_verifier=terminal_verifier,
    skip_chat_only=False,
    fixture_mode="replay",
    command_argument="command",
    load_pivots=partial(load_pivots, NAME, folder=Path(__file__).resolve().parent),
    world=NAME,
    success_rules=("state", "facts"),
)
