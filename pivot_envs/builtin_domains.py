"""The four built-in domains: conversational tool use, terminal, SWE, search.

Each is one :class:`~pivot_envs.domains.Domain` definition: its env id, bundled data, world, success rules,
finish tools and default verifier. A default verifier that can take a judge is a *recipe*
(``recipe(judge=None) -> spec``, defined next to its domain); :mod:`pivot_envs.verifiers.defaults` holds the
verifier configs they are made of and the table of what each domain gets.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from pivot_envs.domains import Domain, register_domain
from pivot_envs.envs_data import load_pivots
from pivot_envs.verifiers import verifier_names
from pivot_envs.verifiers.defaults import (
    OPEN_DOC,
    SHELL_EFFECT,
    SHELL_SAME,
    TOOL_USE_CASELESS,
    answer_spec,
    judge_spec,
)

Judge = dict[str, Any] | None
"""A judge verifier config (``{"name": "judge", ...}``; the name may be left out), or ``None``: no judge."""


def tool_use_verifier(judge: Judge = None) -> dict[str, Any]:
    """``final_turn``: calls by ``tool_call`` (names and emails caseless); answers by their facts (an answer
    stating no fact: fuzzy), the judge deciding what the facts do not accept."""
    calls = {"name": "tool_call", "argument_normalizers": dict(TOOL_USE_CASELESS)}
    return {"name": "final_turn", "calls": calls, "answer": answer_spec(judge)}


def terminal_verifier(judge: Judge = None) -> dict[str, Any]:
    """``final_turn``: calls by a cascade (``schema`` gate -> the same command's canonical spelling ->
    ``exec``, when registered, running both commands and comparing what they changed and showed -> the judge);
    a turn whose calls do not match the expert's one to one by its whole effect (``exec`` over every call);
    answers by their facts (+ judge)."""
    stages: list[dict[str, Any]] = [
        {"role": "gate", "verifier": {"name": "schema"}},
        {"role": "accept", "verifier": dict(SHELL_SAME)},
    ]
    effect = None
    if "exec" in verifier_names():
        stages.append({"role": "accept" if judge is not None else "decide", "verifier": dict(SHELL_EFFECT)})
        effect = {"name": "cascade", "stages": [{"role": "gate", "verifier": {"name": "schema"}},
                                                {"role": "decide", "verifier": dict(SHELL_EFFECT)}]}
    if judge is not None:
        stages.append({"role": "decide", "verifier": judge_spec(judge)})
    return {"name": "final_turn", "calls": {"name": "cascade", "stages": stages}, "answer": answer_spec(judge),
            "turn_effect": effect}


def swe_verifier(judge: Judge = None) -> dict[str, Any]:
    """``final_turn`` (a turn judged whole: text after the call fails, an extra call fails; no stops, the task ends
    with ``submit``) over a ``schema`` gate (arguments valid for the tool) and ``swe_call``: the paper's tool categories, each call judged by its content (an edit close to
    the expert's or with its effect, a read of the expert's file inside the repository, a test run that runs the
    tests; a command that writes or destroys only by its effect). A judge is not used."""
    calls = {"name": "cascade", "stages": [{"role": "gate", "verifier": {"name": "schema"}},
                                           {"role": "decide", "verifier": {"name": "swe_call"}}]}
    return {"name": "final_turn", "calls": calls, "world_state": False}


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


BUILTIN_DOMAINS = [
    Domain(
        name="tool_use",
        env_id="pivot/ToolUse-v0",
        description="customer-service agent: JSON-schema tools over an orders/bookings/accounts database",
        default_verifier=tool_use_verifier,
        skip_chat_only=False,
        load_pivots=partial(load_pivots, "tool_use"),
        world="tool_use",
        world_keys=("world_seed",),
        success_rules=("state", "facts"),
    ),
    Domain(
        name="terminal",
        env_id="pivot/Terminal-v0",
        description="shell tasks over file-system fixtures; one `bash` tool call per turn",
        default_verifier=terminal_verifier,
        skip_chat_only=False,
        fixture_mode="replay",
        command_argument="command",
        load_pivots=partial(load_pivots, "terminal"),
        world="terminal",
        success_rules=("state", "facts"),
    ),
    Domain(
        name="swe",
        env_id="pivot/SWE-v0",
        description="repository editing in the SWE-agent style: open_file, search_dir, edit, run_tests, submit",
        default_verifier=swe_verifier,
        skip_chat_only=True,
        load_pivots=partial(load_pivots, "swe"),
        world="swe",
        world_keys=("test_command",),
        success_rules=("tests",),
        finish_tools=("submit",),
    ),
    Domain(
        name="search",
        env_id="pivot/Search-v0",
        description="multi-hop questions answered with search(query) / open(doc_id) over a local corpus",
        default_verifier=search_verifier,
        skip_chat_only=False,
        load_pivots=partial(load_pivots, "search"),
        world="search",
        world_keys=("corpus_seed",),
        success_rules=("state", "answer"),
    ),
]


def register_builtin_domains() -> None:
    for domain in BUILTIN_DOMAINS:
        register_domain(domain, replace=True)
