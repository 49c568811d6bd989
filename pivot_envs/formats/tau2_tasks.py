"""tau2-bench tasks (``tasks.json`` of the airline or retail domain) -> trajectories of their expected actions.

tau2-bench ships tasks, not expert conversations: each task has a user scenario (what the
simulated user wants and knows) and ``evaluation_criteria.actions``, the tool calls a correct
agent makes (43 of the 50 airline tasks list some, 112 of the 114 retail tasks).
:func:`read_tau2_tasks` turns each task with actions into one :class:`~pivot_envs.types.Trajectory`:

* ``system``: the domain policy (``policy.md`` next to ``tasks.json``);
* ``user``: the user's opening, ``reason_for_call`` and ``known_info`` of the scenario (written to
  the simulated user in the second person, as tau2 gives them);
* per expected action: an ``assistant`` message with that one tool call (id ``call_<action_id>``,
  the task's arguments) and the ``tool`` message the real server returns for it, the actions
  executed in order on a fresh state of the domain's preset world
  (:func:`pivot_envs.worlds.tau2.tau2_world`: ``tau2-airline`` or ``tau2-retail``; ``run_tools=False``
  leaves the tool contents empty and infers the tool specs from the calls instead of asking the server);
* a final ``assistant`` text: the policy's transfer sentence after ``transfer_to_human_agents``,
  else a generic closing line. It is **synthetic** (``meta["final_message"] = "synthetic"``): tau2
  records no agent text; what the agent must say is in ``meta["communicate_info"]``.

The domain is ``domain=``, else the tasks' own ``user_scenario.instructions.domain``, else the folder
(``.../domains/<domain>/tasks.json``), else the tools the actions call. On the command line, ``--tasks
tau2:airline`` / ``tau2:retail`` reads the tasks of the installed server package.

What these trajectories are not: a conversation. The user turns between the actions (details,
the explicit "yes" the policy requires before a write) are absent, so a pivot cut here shows the
expected next action after the opening and the earlier results. ``reward`` is 1.0 (gold actions).

``meta``: ``id`` (``tau2-bench/<domain>/<task id>``), ``task_id``, ``tau2_domain``, ``source``
(``tau2-bench/<domain>``), ``instruction`` (the whole user scenario as text, for a user simulator)
and ``user_scenario`` (as given), ``action_ids``, ``compare_args`` (per action id, when the task
limits the compared arguments), ``communicate_info``, ``nl_assertions``, and read-only digest probes
of what the task's records are: ``user_ids`` and ``reservation_ids`` (airline; the users'
reservations at the start from ``db.json`` next to ``tasks.json``, plus those the actions name) or
``order_ids`` (retail; likewise), and ``probes`` (``WorldTask.from_trajectory(traj, keys=["probes"])``
hands them to a world; the presets need none, their digest follows the episode's writes). With the
server run: ``tool_errors`` (expected actions the server refused; 0 for every bundled task) and
``expected_digest``, the world's digest after the expected actions (compare an agent's episode with it).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pivot_envs.after import after_turn, final_answer
from pivot_envs.formats.infer_tools import infer_tools
from pivot_envs.jsonl import BadRowError, ReadReport
from pivot_envs.types import Message, Pivot, Trajectory
from pivot_envs.worlds.base import json_by_value, normalize_output
from pivot_envs.worlds.base import WorldTask
from pivot_envs.worlds.mcp import tau2_airline_probes
from pivot_envs.worlds.tau2 import tau2_probes, tau2_world
from pivot_envs.worlds.tau2_servers import TAU2_DOMAINS

SOURCE = "tau2-bench/airline"
"""The airline tasks' ``meta["source"]`` (``tau2-bench/<domain>`` in general)."""
DOMAINS = ("airline", "retail")
TRANSFER_MESSAGE = "YOU ARE BEING TRANSFERRED TO A HUMAN AGENT. PLEASE HOLD ON."
"""What the airline policy tells the agent to say after ``transfer_to_human_agents``."""
CLOSING_MESSAGE = "Your request has been taken care of. Is there anything else I can help you with?"
_USER_ID = re.compile(r"user id is\s+([A-Za-z0-9_]+)", re.IGNORECASE)


def default_tasks_path(domain: str = "airline") -> Path:
    """``tasks.json`` of the installed tau2 server package of ``domain`` (FileNotFoundError if absent)."""
    if domain not in DOMAINS:
        raise ValueError(f"tau2 tasks: unknown domain {domain!r}; known: {', '.join(DOMAINS)}")
    import importlib

    try:
        package = importlib.import_module(f"tau2_{domain}_mcp")
    except ImportError:
        raise FileNotFoundError(f"tau2 {domain} tasks: give a tasks.json path, or pip install tau2-{domain}-mcp-eval "
                                f"(its package data holds data/tau2/domains/{domain}/tasks.json)") from None
    assert package.__file__ is not None  # a regular package (the eval packages are)
    return Path(package.__file__).parent / "data" / "tau2" / "domains" / domain / "tasks.json"


def read_tau2_tasks(path: str | Path | None = None, *, domain: str | None = None, world: Any = None,
                    run_tools: bool = True, skip_bad: bool = False,
                    report: ReadReport | None = None) -> list[Trajectory]:
    """The trajectories of the tasks in ``path`` (default: :func:`default_tasks_path` of ``domain``) that have actions.

    ``domain``: ``airline`` or ``retail`` (default: detected, see the module docstring; ``airline`` when
    neither is given). ``world``: the world that executes the actions (default: a new preset world of
    the domain, closed afterwards). Tasks without expected actions are skipped and counted in
    ``report`` (``no expected actions``); a malformed task raises
    :class:`~pivot_envs.jsonl.BadRowError` naming it, or is skipped with ``skip_bad``.
    """
    if domain is not None and domain not in DOMAINS:
        raise ValueError(f"tau2 tasks: unknown domain {domain!r}; known: {', '.join(DOMAINS)}")
    path = Path(path) if path is not None else default_tasks_path(domain or "airline")
    tasks = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(tasks, list):
        raise ValueError(f"{path}: expected a JSON list of tau2 tasks, got {type(tasks).__name__}")
    domain = domain or detect_domain(path, tasks)
    policy_path = path.with_name("policy.md")
    if not policy_path.is_file():
        raise FileNotFoundError(f"{path}: no policy.md next to it (the system message of every trajectory)")
    policy = policy_path.read_text(encoding="utf-8")
    db = _read_db(path.with_name("db.json"))
    report = report if report is not None else ReadReport()

    built: list[tuple[dict[str, Any], Trajectory]] = []
    for number, task in enumerate(tasks, start=1):
        try:
            traj = _trajectory(task, policy, db, domain)
        except (KeyError, TypeError, ValueError) as exc:
            err = BadRowError(str(path), number, f"[{number - 1}]", f"bad tau2 task {_task_id(task)}: {exc}")
            if not skip_bad:
                raise err from None
            report.add_bad(err)
            continue
        if traj is None:
            report.skipped["no expected actions"] += 1
            report.examples.setdefault("no expected actions", f"{path}: task {task.get('id')!r}")
            continue
        report.read += 1
        built.append((task, traj))

    trajectories = [traj for _, traj in built]
    if not run_tools:
        tools = infer_tools(t.messages for t in trajectories)
        for traj in trajectories:
            traj.tools = json.loads(json.dumps(tools))
            traj.meta["tools_inferred"] = True
        return trajectories

    own = world is None
    world = tau2_world(domain) if own else world
    try:
        tools = world.tools()
        for traj in trajectories:
            world.start(WorldTask.from_trajectory(traj, keys=["probes"]))
            errors = 0
            by_id = {}
            for message in traj.messages:
                if message["role"] == "assistant":
                    for call, result in world.execute(message):
                        by_id[call["id"]] = result
                elif message["role"] == "tool":
                    result = by_id[message["tool_call_id"]]
                    message["content"] = result.content
                    errors += result.error
            traj.tools = json.loads(json.dumps(tools))
            traj.meta["tool_errors"] = errors
            traj.meta["expected_digest"] = world.digest()
    finally:
        if own:
            world.close()
    return trajectories


def detect_domain(path: Path, tasks: list[Any]) -> str:
    """The tau2 domain of ``tasks``: their scenarios' ``domain``, else the folder's name, else the tools
    the actions call; ``ValueError`` naming ``path`` when they disagree or nothing tells."""
    scenarios = [(t.get("user_scenario") or {}).get("instructions") for t in tasks if isinstance(t, dict)]
    named = {str(i.get("domain") or "") for i in scenarios if isinstance(i, dict)}
    named.discard("")
    if len(named) > 1:
        raise ValueError(f"{path}: tasks of several tau2 domains ({', '.join(sorted(named))}); "
                         "give one domain's tasks.json per read")
    if named:
        (domain,) = named
    elif path.parent.name in DOMAINS:
        domain = path.parent.name
    else:
        called = {a.get("name") for t in tasks if isinstance(t, dict)
                  for a in ((t.get("evaluation_criteria") or {}).get("actions") or []) if isinstance(a, dict)}
        scores = {d: len(called & TAU2_DOMAINS[d].write_tools) + len(called & set(_READS[d])) for d in DOMAINS}
        domain = max(scores, key=scores.__getitem__)
        if not scores[domain]:
            raise ValueError(f"{path}: cannot tell the tau2 domain of these tasks; pass domain='airline' or 'retail'")
    if domain not in DOMAINS:
        raise ValueError(f"{path}: tau2 domain {domain!r} has no preset world; known: {', '.join(DOMAINS)}")
    return domain


_READS = {"airline": ("get_reservation_details", "search_direct_flight", "search_onestop_flight", "list_all_airports"),
          "retail": ("get_order_details", "find_user_id_by_name_zip", "find_user_id_by_email", "get_product_details")}


def _task_id(task: Any) -> str:
    return repr(task.get("id")) if isinstance(task, dict) else f"(not an object: {type(task).__name__})"


def _read_db(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def _trajectory(task: dict[str, Any], policy: str, db: dict[str, Any] | None,
                domain: str = "airline") -> Trajectory | None:
    task_id = str(task["id"])
    actions = (task.get("evaluation_criteria") or {}).get("actions") or []
    if not actions:
        return None
    scenario = task["user_scenario"]
    instructions = scenario["instructions"]
    opening = "\n\n".join(str(instructions[k]).strip() for k in ("reason_for_call", "known_info") if instructions.get(k))
    messages: list[Message] = [{"role": "system", "content": policy}, {"role": "user", "content": opening}]
    record = "reservation_id" if domain == "airline" else "order_id"
    table = "reservations" if domain == "airline" else "orders"
    users, records, compare = [], [], {}
    users += _USER_ID.findall(str(instructions.get("known_info") or ""))
    for i, action in enumerate(actions):
        name, arguments = action["name"], action.get("arguments") or {}
        if not isinstance(name, str) or not isinstance(arguments, dict):
            raise ValueError(f"task {task_id}: action {i} needs a string 'name' and an object 'arguments'")
        action_id = str(action.get("action_id") or f"{task_id}_{i}")
        call_id = f"call_{action_id}"
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": call_id, "type": "function",
             "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}}]})
        messages.append({"role": "tool", "tool_call_id": call_id, "name": name, "content": ""})
        if isinstance(arguments.get("user_id"), str):
            users.append(arguments["user_id"])
        if isinstance(arguments.get(record), str):
            records.append(arguments[record])
        if action.get("compare_args") is not None:
            compare[action_id] = action["compare_args"]
    if db is not None:
        users += [db[table][r]["user_id"] for r in records if r in db.get(table, {})]
        users = list(dict.fromkeys(users))
        start = [r for u in users for r in (db.get("users", {}).get(u) or {}).get(table, [])]
        records = start + records
    users, records = list(dict.fromkeys(users)), list(dict.fromkeys(records))
    last = actions[-1]["name"]
    messages.append({"role": "assistant", "content": TRANSFER_MESSAGE if last == "transfer_to_human_agents"
                     else CLOSING_MESSAGE})
    criteria = task.get("evaluation_criteria") or {}
    source = f"tau2-bench/{domain}"
    meta: dict[str, Any] = {
        "id": f"{source}/{task_id}",
        "task_id": task_id,
        "tau2_domain": domain,
        "source": source,
        "instruction": _instruction_text(scenario),
        "user_scenario": scenario,
        "action_ids": [str(a.get("action_id") or f"{task_id}_{i}") for i, a in enumerate(actions)],
        "communicate_info": list(criteria.get("communicate_info") or []),
        "nl_assertions": list(criteria.get("nl_assertions") or []),
        "final_message": "synthetic",
        "user_ids": users,
        f"{table[:-1]}_ids": records,
        "probes": tau2_airline_probes(users, records) if domain == "airline" else tau2_probes(domain, users, records),
    }
    if compare:
        meta["compare_args"] = compare
    return Trajectory(messages=messages, tools=[], reward=1.0, meta=meta)


def _instruction_text(scenario: dict[str, Any]) -> str:
    """The user scenario as one text (persona, then the instruction fields that are set)."""
    parts = []
    if scenario.get("persona"):
        parts.append(f"Persona:\n{str(scenario['persona']).strip()}")
    instructions = scenario.get("instructions") or {}
    if isinstance(instructions, str):
        return "\n\n".join(parts + [instructions.strip()])
    for key, title in (("domain", "Domain"), ("reason_for_call", "Reason for call"), ("known_info", "Known info"),
                       ("unknown_info", "Unknown info"), ("task_instructions", "Task instructions")):
        if instructions.get(key):
            parts.append(f"{title}:\n{str(instructions[key]).strip()}")
    return "\n\n".join(parts)


def tau2_pivots(trajectories: list[Trajectory]) -> list[Pivot]:
    """One pivot per expected action of tau2 trajectories: the context holds the task's earlier actions
    and their results; ``meta["world"]`` carries the task's digest probes (for ``world_exec``), ``meta["after"]``
    what the expert did after it (:func:`pivot_envs.pipeline.extract.after_turn`: a stop there is judged by the
    world's state)."""
    out = []
    for traj in trajectories:
        final = final_answer(traj.messages)
        for i, message in enumerate(traj.messages):
            if message.get("role") == "assistant" and message.get("tool_calls"):
                meta = {"trajectory_id": traj.id, "turn": i, "world": {"config": {"probes": traj.meta.get("probes", [])}},
                        "after": after_turn(traj.messages, i, final)}
                out.append(Pivot(id=f"{traj.id}#{i}", domain="", context=traj.messages[:i], expert=message,
                                 tools=traj.tools, meta=meta))
    return out


class Tau2Reference:
    """Executes a tau2 domain's calls with its server's own tool code, in-process, on copies of its full
    database: a reference to check worlds and verifiers against (no MCP, no probes).

    ``outcome(context, calls)`` replays the assistant tool calls of ``context``, then runs ``calls``
    (``[(name, arguments)]``) and returns the whole database as canonical JSON and the calls' outputs
    (normalised as ``world_exec`` normalises them). A call the tools refuse yields ``Error: ...``.
    """

    def __init__(self, domain: str = "airline") -> None:
        import importlib

        if domain not in DOMAINS:
            raise ValueError(f"Tau2Reference: unknown domain {domain!r}; known: {', '.join(DOMAINS)}")
        server = importlib.import_module(f"tau2_{domain}_mcp.server")
        self.domain = domain
        self._server = server
        self._base = server._base_db()

    def outcome(self, context: list[Message], calls: list[tuple[str, dict[str, Any]]]) -> tuple[str, list[str]]:
        import copy

        db = copy.deepcopy(self._base)
        for message in context:
            for call in (message.get("tool_calls") or []) if message.get("role") == "assistant" else []:
                self._run(db, call["function"]["name"], json.loads(call["function"]["arguments"] or "{}"))
        outputs = [normalize_output(self._run(db, name, args)) for name, args in calls]
        return json.dumps(json_by_value(db), sort_keys=True), outputs  # JSON numbers by value, as the worlds compare

    def _run(self, db: dict[str, Any], name: str, args: dict[str, Any]) -> str:
        try:
            return self._server._content_from_result(self._server._execute_tool(db, name, dict(args)))
        except Exception as exc:  # noqa: BLE001 - the server reports these as tool errors too
            return f"Error: {exc}"
