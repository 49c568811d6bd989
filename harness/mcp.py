"""A rollout's world over MCP (streamable HTTP): the very tools the task is scored in, for a harness's MCP client.

::

    face = WorldOverMCP(rollouts)          # one MCP server for every rollout (the official ``mcp`` SDK)
    app.router.routes.append(face.route("/harness/rollouts/{rollout_id}/mcp"))
    async with face.running():             # the SDK's session manager, for the app's lifetime
        ...

``tools/list`` gives the rollout's tools (the task's OpenAI function specs as MCP tools: ``name``,
``description``, ``parameters`` as ``inputSchema``; for a task with a user, the user tool too:
:mod:`pivot_envs.harness.user`); ``tools/call`` runs one call in the rollout's world (or sends it to its user)
(:meth:`~pivot_envs.harness.rollouts.HarnessRollouts.call_tool`, in a worker thread: worlds block)
and answers its text, with ``isError`` when the tool reported an error. The rollout is the one in the URL
path, so each rollout's ``mcp_url`` reaches its own world and nothing else. The SDK runs stateless with
JSON answers: every request stands alone (no MCP session to lose), which suits short-lived rollouts and
many at once. An unknown or ended rollout, or a world that failed, is an MCP error naming it.
"""

from __future__ import annotations

import contextlib
from typing import Any, AsyncIterator

import anyio
import mcp_types as types
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from starlette.routing import Route

from pivot_envs.harness.rollouts import HarnessRollouts
from pivot_envs.harness.state import HarnessError

__all__ = ["WorldOverMCP", "mcp_tools"]

SERVER_NAME = "pivot-envs-world"


def mcp_tools(tools: list[dict[str, Any]]) -> list[types.Tool]:
    """OpenAI function specs as MCP tools."""
    out = []
    for spec in tools:
        fn = spec.get("function") or spec
        schema = fn.get("parameters") or {"type": "object", "properties": {}}
        out.append(types.Tool(name=str(fn.get("name")), description=fn.get("description") or "", input_schema=schema))
    return out


class WorldOverMCP:
    """The MCP face of every rollout's world (see the module docstring)."""

    def __init__(self, rollouts: HarnessRollouts):
        self.rollouts = rollouts
        self.server: Server = Server(SERVER_NAME, on_list_tools=self._list_tools, on_call_tool=self._call_tool)
        self.manager = StreamableHTTPSessionManager(self.server, stateless=True, json_response=True)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Run the SDK's session manager (enter once, for the app's lifetime)."""
        async with self.manager.run():
            yield

    def route(self, path: str) -> Route:
        """A Starlette route (every method) of the MCP endpoint at ``path`` (with a ``{rollout_id}`` parameter)."""
        return Route(path, endpoint=_ASGIEndpoint(self.manager), methods=["GET", "POST", "DELETE"])

    # ------------------------------------------------------------------ handlers
    async def _list_tools(self, ctx: Any, params: Any) -> types.ListToolsResult:
        rollout_id = _rollout_id(ctx)
        try:
            tools = self.rollouts.tools_of(rollout_id)
        except HarnessError as exc:
            raise MCPError(code=types.INVALID_PARAMS, message=exc.message) from None
        return types.ListToolsResult(tools=mcp_tools(tools))

    async def _call_tool(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        rollout_id = _rollout_id(ctx)
        try:
            result = await anyio.to_thread.run_sync(self.rollouts.call_tool, rollout_id, params.name,
                                                    dict(params.arguments or {}))
        except HarnessError as exc:
            raise MCPError(code=types.INVALID_PARAMS if exc.status < 500 else types.INTERNAL_ERROR,
                           message=exc.message) from None
        return types.CallToolResult(content=[types.TextContent(text=result.content)], is_error=bool(result.error))


class _ASGIEndpoint:
    """The SDK's request handler as a plain ASGI app (a Starlette route with a path parameter; no redirect)."""

    def __init__(self, manager: StreamableHTTPSessionManager):
        self.manager = manager

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.manager.handle_request(scope, receive, send)


def _rollout_id(ctx: Any) -> str:
    request = getattr(ctx, "request", None)
    params = getattr(request, "path_params", None) or {}
    rollout_id = params.get("rollout_id")
    if not rollout_id:
        raise MCPError(code=types.INVALID_REQUEST, message="no rollout in the URL: use the mcp_url a rollout was given")
    return str(rollout_id)
