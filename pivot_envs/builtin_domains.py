"""The four built-in domains: conversational tool use, terminal, SWE, search."""

from __future__ import annotations

from functools import partial

from pivot_envs.domains import Domain, register_domain


def _default_verifier(domain: str) -> dict:
    from pivot_envs.verifiers.defaults import default_verifier_spec

    return default_verifier_spec(domain)


def _bundled(domain: str, split: str):
    from pivot_envs.envs_data import load_pivots

    return load_pivots(domain, split)


BUILTIN_DOMAINS = [
    Domain(
        name="tool_use",
        env_id="pivot/ToolUse-v0",
        description="customer-service agent: JSON-schema tools over an orders/bookings/accounts database",
        default_verifier=partial(_default_verifier, "tool_use"),
        skip_chat_only=False,
        load_pivots=partial(_bundled, "tool_use"),
        world="tool_use",
        world_keys=("world_seed",),
        success_rules=("state", "facts"),
    ),
    Domain(
        name="terminal",
        env_id="pivot/Terminal-v0",
        description="shell tasks over file-system fixtures; one `bash` tool call per turn",
        default_verifier=partial(_default_verifier, "terminal"),
        skip_chat_only=False,
        fixture_mode="replay",
        command_argument="command",
        load_pivots=partial(_bundled, "terminal"),
        world="terminal",
        success_rules=("state", "facts"),
    ),
    Domain(
        name="swe",
        env_id="pivot/SWE-v0",
        description="repository editing in the SWE-agent style: open_file, search_dir, edit, run_tests, submit",
        default_verifier=partial(_default_verifier, "swe"),
        skip_chat_only=True,
        load_pivots=partial(_bundled, "swe"),
        world="swe",
        world_keys=("test_command",),
        success_rules=("tests",),
        finish_tools=("submit",),
    ),
    Domain(
        name="search",
        env_id="pivot/Search-v0",
        description="multi-hop questions answered with search(query) / open(doc_id) over a local corpus",
        default_verifier=partial(_default_verifier, "search"),
        skip_chat_only=False,
        load_pivots=partial(_bundled, "search"),
        world="search",
        world_keys=("corpus_seed",),
        success_rules=("state", "answer"),
    ),
]


def register_builtin_domains() -> None:
    for domain in BUILTIN_DOMAINS:
        register_domain(domain, replace=True)
