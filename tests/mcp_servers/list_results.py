"""An MCP server (the SDK's own MCPServer) whose tools return lists: it sends one text block per item, and no
block at all for an empty list. ``--text-only``: no structured results either (``structured_output=False``, as
servers built on the SDK's FastMCP 1.x often do), so the blocks are all a client gets."""
import sys

from mcp.server.mcpserver import MCPServer

FLIGHTS = [{"flight": "HAT001", "origin": "SFO", "seats": 3}, {"flight": "HAT002", "origin": "SFO", "seats": 0},
           {"flight": "HAT003", "origin": "JFK", "seats": 5}]
STRUCTURED = False if "--text-only" in sys.argv[1:] else None  # None: the SDK decides from the return type

server = MCPServer("list-results")


@server.tool(structured_output=STRUCTURED)
def find_flights(origin: str) -> list[dict]:
    """Flights leaving an airport (none, one or several)."""
    return [dict(f) for f in FLIGHTS if f["origin"] == origin]


@server.tool(structured_output=STRUCTURED)
def status(flight: str) -> dict:
    """One flight's status."""
    return {"flight": flight, "status": "on time"}


if __name__ == "__main__":
    server.run()
