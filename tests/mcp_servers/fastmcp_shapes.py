"""A FastMCP server (PyPI ``fastmcp``) whose tools return every shape of result: an empty list, a list of
objects (one or several), a list of texts, a list of pairs, a number, an object, a text, and an error.

``python fastmcp_shapes.py`` sends structured results (``structuredContent``, a list wrapped as
``{"result": [...]}``) beside the text; ``--text-only`` registers every tool without an output schema, so
only text goes out (a list as one JSON text block, an empty list as no block at all). The state (seats left)
lives in the process: a fresh process is a fresh state.

``CALLS`` are calls that return each shape, for tests and ``benchmarks/worlds/replay_mcp_lists.py``: importing this
module defines the tools as plain functions, which is how a recorder that runs the tools in-process calls them.
"""

from __future__ import annotations

import sys

from fastmcp import FastMCP

FLIGHTS = {
    "HAT001": {"flight": "HAT001", "origin": "SFO", "destination": "JFK", "seats": 3},
    "HAT002": {"flight": "HAT002", "origin": "SFO", "destination": "SEA", "seats": 0},
    "HAT003": {"flight": "HAT003", "origin": "JFK", "destination": "SEA", "seats": 5},
}


def find_flights(origin: str) -> list[dict]:
    """The flights leaving an airport (none, one or several)."""
    return [dict(f) for f in FLIGHTS.values() if f["origin"] == origin]


def airports() -> list[str]:
    """Every airport a flight leaves from or goes to."""
    return sorted({f[k] for f in FLIGHTS.values() for k in ("origin", "destination")})


def connections(origin: str) -> list[tuple[dict, dict]]:
    """Two-leg trips from an airport: pairs of flights."""
    return [(dict(a), dict(b)) for a in FLIGHTS.values() for b in FLIGHTS.values()
            if a["origin"] == origin and b["origin"] == a["destination"]]


def seats_left(flight: str) -> int:
    """Seats left on a flight."""
    return get_flight(flight)["seats"]


def get_flight(flight: str) -> dict:
    """One flight; an error for an unknown flight number."""
    if flight not in FLIGHTS:
        raise ValueError(f"flight {flight} not found")
    return dict(FLIGHTS[flight])


def book_seat(flight: str) -> str:
    """Book one seat on a flight (changes the state)."""
    record = FLIGHTS.get(flight)
    if record is None or record["seats"] < 1:
        raise ValueError(f"no seat left on {flight}")
    record["seats"] -= 1
    return f"Booked a seat on {flight}."


TOOLS = (find_flights, airports, connections, seats_left, get_flight, book_seat)

CALLS = {
    "empty list": ("find_flights", {"origin": "SEA"}),
    "one-item list": ("find_flights", {"origin": "JFK"}),
    "list of objects": ("find_flights", {"origin": "SFO"}),
    "list of texts": ("airports", {}),
    "list of pairs": ("connections", {"origin": "SFO"}),
    "number": ("seats_left", {"flight": "HAT001"}),
    "object": ("get_flight", {"flight": "HAT003"}),
    "text": ("book_seat", {"flight": "HAT001"}),
    "error": ("get_flight", {"flight": "HAT999"}),
}
"""One call per shape of result, by the shape's name."""


def build_server(text_only: bool) -> FastMCP:
    """The server; ``text_only``: no output schemas, so no structured results."""
    server = FastMCP("fastmcp-shapes")
    for tool in TOOLS:
        if text_only:
            server.tool(tool, output_schema=None)
        else:
            server.tool(tool)
    return server


if __name__ == "__main__":
    build_server("--text-only" in sys.argv[1:]).run(show_banner=False)
