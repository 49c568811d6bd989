"""An API key on every route of ``pivot-envs serve``: what a server bound beyond loopback needs.

::

    pivot-envs serve --host 0.0.0.0 --policy hf:out/tiny --api-key "$KEY"     # or PIVOT_ENVS_API_KEY=$KEY
    curl -H "Authorization: Bearer $KEY" http://HOST:8000/health

A server that anyone on the network can reach opens rollouts and runs commands in their worlds for whoever asks,
so :class:`ApiKeyMiddleware` (pure ASGI, outside every other middleware) refuses a request without the key before
any route sees it: 401 with a JSON body naming the header, and OpenAI's error shape, so an OpenAI client shows
the message. The key travels as OpenAI clients and MCP clients send one: ``Authorization: Bearer KEY`` (an
``OpenAI(api_key=KEY)`` client; an MCP client given that header), or ``X-API-Key: KEY``. That covers every route:
NeMo Gym's, gymnasium over HTTP, OpenEnv (its WebSocket is closed before it is accepted), the harness endpoint and
each rollout's ``base_url`` and ``mcp_url``. Keys are compared in constant time.

:func:`check_binding` is the command line's rule: a host beyond loopback needs a key, unless the operator says
otherwise out loud (``--insecure-no-key``).
"""

from __future__ import annotations

import hmac
import ipaddress
import json
from typing import Any

__all__ = ["API_KEY_ENV", "ApiKeyMiddleware", "check_binding", "is_loopback"]

API_KEY_ENV = "PIVOT_ENVS_API_KEY"
"""The environment variable ``pivot-envs serve`` reads its key from when ``--api-key`` is not given."""
CLOSE_UNAUTHORIZED = 4401
"""The WebSocket close code of a refused handshake (4000-4999: for applications)."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an interface to bind) is reachable from this machine only."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_binding(host: str, api_key: str | None, insecure: bool) -> str | None:
    """The problem with serving on ``host`` with ``api_key`` (``None``: none)."""
    if api_key is not None and not api_key.strip():
        return "the API key is empty: give a secret of your own (--api-key or $" + API_KEY_ENV + ")"
    if api_key or insecure or is_loopback(host):
        return None
    return (f"--host {host} reaches beyond this machine, and anyone who reaches the port could open rollouts and run "
            f"commands in their worlds: give a key (--api-key KEY, or ${API_KEY_ENV}), which every request must send "
            "as 'Authorization: Bearer KEY'; or pass --insecure-no-key to serve without one on purpose")


class ApiKeyMiddleware:
    """Refuse every HTTP request and WebSocket handshake that does not carry ``key`` (see the module docstring)."""

    def __init__(self, app: Any, key: str):
        if not key:
            raise ValueError("ApiKeyMiddleware needs a non-empty key")
        self.app = app
        self._key = key.encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket") or self._allowed(scope):
            await self.app(scope, receive, send)
        elif scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": CLOSE_UNAUTHORIZED})
        else:
            await _unauthorized(send)

    def _allowed(self, scope: dict[str, Any]) -> bool:
        headers = dict(scope.get("headers") or [])
        given = headers.get(b"x-api-key")
        auth = headers.get(b"authorization", b"")
        if given is None and auth[:7].lower() == b"bearer ":
            given = auth[7:].strip()
        return given is not None and hmac.compare_digest(given, self._key)


async def _unauthorized(send: Any) -> None:
    message = ("this server requires an API key: send 'Authorization: Bearer KEY' (an OpenAI client's api_key, an "
               "MCP client's headers) or 'X-API-Key: KEY'")
    body = json.dumps({"detail": {"field": "Authorization", "message": message},
                       "error": {"message": message, "type": "invalid_request_error", "param": None,
                                 "code": "invalid_api_key"}}).encode()
    await send({"type": "http.response.start", "status": 401,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"www-authenticate", b'Bearer realm="pivot-envs"')]})
    await send({"type": "http.response.body", "body": body})
