"""An MCP server (the SDK's own MCPServer) whose tools return lists: it sends one text block per item."""
from mcp.server.mcpserver import MCPServer

server = MCPServer("list-results")


@server.tool()
def find_flights(origin: str) -> list[dict]:
    """Flights leaving an airport."""
    return [{"flight": "HAT001", "origin": origin, "seats": 3}, {"flight": "HAT002", "origin": origin, "seats": 0}]


@server.tool()
def status(flight: str) -> dict:
    """One flight's status."""
    return {"flight": flight, "status": "on time"}


if __name__ == "__main__":
    server.run()
