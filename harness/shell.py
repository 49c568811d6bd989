"""mini-swe-agent's extension point for the harness endpoint: an environment whose shell is the rollout's world.

mini-swe-agent (PyPI ``mini-swe-agent``) runs every command its model asks for through an *environment*
class, chosen with ``--environment-class`` (``local``, ``docker``... or any importable class). This one runs
each command as the ``bash`` tool of the rollout's world over MCP (its ``mcp_url``), so the commands change the
very work tree the terminal task is scored in, inside the world's sandbox; mini-swe-agent itself is not
changed::

    mini -c mini.yaml -c examples/mini_swe_agent.yaml -m openai/policy -t "$TASK" -y --exit-immediately \\
         --environment-class pivot_envs.harness.shell.WorldShell -c environment.mcp_url=$MCP_URL \\
         -c model.model_kwargs.api_base=$BASE_URL

The answer has mini-swe-agent's shape (``output``, ``returncode``, ``exception_info``): the world's text,
and the exit status read back from it (the terminal world writes ``Error: exit code N`` or ``[exit code: N]``
for a non-zero one). The first line ``COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`` with status 0 ends the run, as
in mini-swe-agent's own environments (the rest of the output is the submission).
"""

from __future__ import annotations

import platform
import re
from typing import Any

import anyio
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from minisweagent.exceptions import Submitted
from pydantic import BaseModel

__all__ = ["WorldShell", "WorldShellConfig"]

SUBMIT_MARKER = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
_ERROR = re.compile(r"^Error: exit code (\d+)")
_TRAILER = re.compile(r"\[exit code: (\d+)\]\s*$")


class WorldShellConfig(BaseModel):
    """``environment.*`` settings: the rollout's ``mcp_url``, the world's shell tool and a timeout."""

    mcp_url: str
    tool: str = "bash"
    timeout: int = 120
    cwd: str = ""
    env: dict[str, str] = {}


class WorldShell:
    """A mini-swe-agent environment that executes commands in the rollout's world (see the module docstring)."""

    def __init__(self, *, config_class: type = WorldShellConfig, **kwargs: Any):
        self.config = config_class(**kwargs)

    def execute(self, action: dict, cwd: str = "", *, timeout: int | None = None) -> dict[str, Any]:
        command = action.get("command", "")
        try:
            text, is_error = anyio.run(self._call, command, timeout or self.config.timeout)
            output = {"output": text, "returncode": exit_code(text, is_error), "exception_info": ""}
        except Exception as exc:  # noqa: BLE001 - reported to the model, as mini-swe-agent's own environments do
            output = {"output": "", "returncode": -1,
                      "exception_info": f"An error occurred while executing the command: {exc}",
                      "extra": {"exception_type": type(exc).__name__, "exception": str(exc)}}
        lines = output["output"].lstrip().splitlines(keepends=True)
        if lines and lines[0].strip() == SUBMIT_MARKER and output["returncode"] == 0:
            submission = "".join(lines[1:])
            raise Submitted({"role": "exit", "content": submission,
                             "extra": {"exit_status": "Submitted", "submission": submission}})
        return output

    async def _call(self, command: str, timeout: float) -> tuple[str, bool]:
        with anyio.fail_after(timeout):
            async with streamable_http_client(self.config.mcp_url) as (read, write, *_), \
                    ClientSession(read, write) as session:
                await session.initialize()
                result = await session.call_tool(self.config.tool, {"command": command})
        text = "\n".join(getattr(block, "text", "") for block in result.content)
        return text, bool(result.is_error)

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        return {**self.config.model_dump(), **platform.uname()._asdict(), **kwargs}

    def serialize(self) -> dict[str, Any]:
        return {"info": {"config": {"environment": self.config.model_dump(mode="json"),
                                    "environment_type": f"{type(self).__module__}.{type(self).__name__}"}}}


def exit_code(text: str, is_error: bool) -> int:
    """The exit status the terminal world's text reports (0 when it reports none)."""
    found = _ERROR.match(text) or _TRAILER.search(text)
    if found:
        return int(found.group(1))
    return 1 if is_error else 0
