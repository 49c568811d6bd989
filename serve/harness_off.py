"""The harness routes of a server started without ``--policy``: a 404 that says how to turn the endpoint on.

Without it, ``POST /harness/rollouts`` would be FastAPI's bare ``{"detail": "Not Found"}``. Needs neither the MCP SDK
nor a policy engine (the endpoint's own modules are only imported with ``--policy``).
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.responses import JSONResponse

from pivot_envs.harness.state import PREFIX

__all__ = ["OFF", "include_off_notice"]

OFF = ("the harness endpoint is off: start the server with --policy AGENT_SPEC (hf:MODEL_DIR, vllm:MODEL, replay, "
       "or openai:MODEL@URL) to serve /harness/rollouts")


def include_off_notice(app: FastAPI) -> None:
    """Every harness route answers 404 with :data:`OFF` (also as OpenAI's error, for OpenAI clients)."""

    async def off() -> JSONResponse:
        return JSONResponse(status_code=404, content={"detail": {"field": "policy", "message": OFF},
                                                      "error": {"message": OFF, "type": "not_found", "code": 404}})

    methods = ["GET", "POST", "DELETE", "PUT", "PATCH"]
    app.add_api_route(PREFIX, off, methods=methods, include_in_schema=False)
    app.add_api_route(PREFIX + "/{rest:path}", off, methods=methods, include_in_schema=False)
