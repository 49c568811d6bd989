"""A user's own world and domain, end to end, exactly as docs/worlds.md says (issue 19, part 2).

The world and the domain exist only in this file: they are written as a package into a temporary
folder beside a ``*.dist-info/entry_points.txt`` (what ``pip install`` leaves), and the folder is
put on ``sys.path``. Then, as the guide says: ``pivot-envs list`` shows them, ``pivot-envs play``
plays whole tasks (the same results at batch sizes 1 and 4), two envs stepped alternately do not
interfere, ``pivot-envs extract`` + ``pivot-envs verify --verifier world_exec`` execute rows that
carry the pivot's ``meta``, and a World instance is refused with a message that names the fix.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import gymnasium
import pytest
from typer.testing import CliRunner

import pivot_envs  # noqa: F401  (registers the env ids)
from pivot_envs import Domain, domains, success
from pivot_envs.cli import app
from pivot_envs.episodes import EpisodeEnv
from pivot_envs.verifiers import build_verifier
from pivot_envs.verifiers.rows import row_verifier_spec
from pivot_envs.worlds import (WORLDS, ToolResult, World, build_world, describe_world_spec, register_world, registry,
                               world_class, world_names)

# the broken plugins' warnings are checked once (test_list_...); elsewhere they are noise
pytestmark = [pytest.mark.filterwarnings("ignore:pivot_envs. could not load world plugin 'broken'"),
              pytest.mark.filterwarnings("ignore:pivot_envs. could not load domain plugin 'shared_stock'")]

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "worlds.md"
runner = CliRunner()

# --------------------------------------------------------------------------- the package (the guide's code)

WORLD_SOURCE = '''\
# pivot_inventory/world.py
import hashlib
import json

from pivot_envs.worlds import ToolResult, World, WorldTask


def _tool(name, description, **properties):
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": properties, "required": sorted(properties)}}}


ITEM, QUANTITY = {"type": "string"}, {"type": "integer"}
TOOLS = [_tool("get_stock", "How many of an item are in stock.", item=ITEM),
         _tool("add_stock", "Add a quantity of an item to the stock.", item=ITEM, quantity=QUANTITY),
         _tool("set_stock", "Set the stock of an item.", item=ITEM, quantity=QUANTITY)]


class InventoryWorld(World):
    """A shop's stock: get_stock, add_stock and set_stock (item names ignore case)."""

    name = "inventory"

    def __init__(self):
        self.stock = {}

    def tools(self):
        return TOOLS

    def start(self, task: WorldTask):
        self.stock = {item.lower(): int(n) for item, n in (task.config.get("stock") or {}).items()}

    def call(self, name, arguments):
        try:
            args = json.loads(arguments) if isinstance(arguments, str) else dict(arguments)
            item, quantity = str(args["item"]).lower(), int(args.get("quantity", 0))
        except (ValueError, TypeError, KeyError) as exc:
            return ToolResult(f"Error: bad arguments: {exc}", error=True)
        if name == "add_stock":
            self.stock[item] = self.stock.get(item, 0) + quantity
        elif name == "set_stock":
            self.stock[item] = quantity
        elif name != "get_stock":
            return ToolResult(f"Error: unknown tool {name}", error=True)
        return ToolResult(json.dumps({"item": item, "stock": self.stock.get(item, 0)}))

    def digest(self):
        return hashlib.sha256(json.dumps(self.stock, sort_keys=True).encode()).hexdigest()
'''

DOMAIN_SOURCE = '''\
# pivot_inventory/domain.py
from pivot_envs import Domain

DOMAIN = Domain(
    name="inventory",
    env_id="pivot/Inventory-v0",  # whole tasks: pivot/Inventory-Episode-v0
    description="a shop's stock: get, add and set item counts",
    default_verifier="tool_call",
    world="inventory",  # a registered world's name: every env and verifier builds its own
    world_keys=("stock",),  # the task meta that sets up the start state
    success_rules=("state", "facts", "stock_reported"),  # every rule that applies must pass
)
'''

RULE_SOURCE = '''\
# pivot_inventory/rules.py
import json

from pivot_envs.success import RuleVerdict


class StockReported:
    """The agent's last message tells the user the stock count the last tool result returned."""

    name = "stock_reported"

    def check(self, outcome):  # outcome: pivot_envs.success.EpisodeOutcome
        results = [m["content"] for m in outcome.messages if m["role"] == "tool"]
        if not results:
            return None  # no tool result: the rule does not apply
        count = str(json.loads(results[-1]).get("stock"))
        said = [m.get("content") or "" for m in outcome.messages if m["role"] == "assistant"]
        last = said[-1] if said else ""
        return RuleVerdict(count in last.split(), f"the last answer does not give the stock count {count}",
                           {"stock_reported": count})
'''

PYPROJECT_ENTRY_POINTS = '''\
[project.entry-points."pivot_envs.worlds"]
inventory = "pivot_inventory.world:InventoryWorld"

[project.entry-points."pivot_envs.domains"]
inventory = "pivot_inventory.domain:DOMAIN"

[project.entry-points."pivot_envs.success_rules"]
stock_reported = "pivot_inventory.rules:StockReported"
'''

SHARED_DOMAIN_SOURCE = """\
from pivot_envs import Domain
from pivot_inventory.world import InventoryWorld

DOMAIN = Domain(name="shared_stock", env_id="pivot/SharedStock-v0", world=InventoryWorld())  # an instance: refused
"""
"""The mistake of issue 19: a domain whose world is one World instance, shared by every episode."""

ENTRY_POINTS_TXT = """\
[pivot_envs.domains]
inventory = pivot_inventory.domain:DOMAIN
shared_stock = pivot_inventory.shared:DOMAIN

[pivot_envs.success_rules]
stock_reported = pivot_inventory.rules:StockReported

[pivot_envs.worlds]
broken = pivot_inventory.missing:World
inventory = pivot_inventory.world:InventoryWorld
"""
"""What ``pip install`` writes for the guide's pyproject, plus two broken plugins (they only warn): a world
that does not import, and a domain with a World instance."""

ENV_ID, EPISODE_ENV_ID = "pivot/Inventory-v0", "pivot/Inventory-Episode-v0"
ITEMS = ("apples", "pears", "plums", "figs", "kiwis", "limes")
REFUSAL = "Sorry, I cannot help with that."


def install(site: Path) -> None:
    """What ``pip install --target site .`` leaves for the guide's package."""
    package = site / "pivot_inventory"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "world.py").write_text(WORLD_SOURCE)
    (package / "domain.py").write_text(DOMAIN_SOURCE)
    (package / "rules.py").write_text(RULE_SOURCE)
    (package / "shared.py").write_text(SHARED_DOMAIN_SOURCE)
    dist_info = site / "pivot_inventory-0.1.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: pivot-inventory\nVersion: 0.1\n")
    (dist_info / "entry_points.txt").write_text(ENTRY_POINTS_TXT)


@pytest.fixture
def registries(fresh_plugins):
    """The registries as a fresh process starts (tests/conftest.py: fresh_plugins)."""
    yield


@pytest.fixture
def installed(tmp_path, monkeypatch, registries) -> Path:
    """The guide's package installed: on ``sys.path`` with its entry points, and ``pivot_envs``'s import-time
    plugin loading done again (as ``import pivot_envs`` does in a new process)."""
    site = tmp_path / "site"
    install(site)
    monkeypatch.syspath_prepend(str(site))
    domains.load_plugins()
    yield site
    for name in [m for m in sys.modules if m == "pivot_inventory" or m.startswith("pivot_inventory.")]:
        del sys.modules[name]


# --------------------------------------------------------------------------- tasks


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}]}


def task(i: int, tools: list[dict[str, Any]]) -> dict[str, Any]:
    """Task ``i``: even ones add 3 of an item (a state change), odd ones ask for a count (a question);
    each starts from its own stock, so a world shared between episodes would give wrong counts."""
    item, start = ITEMS[i], i + 2
    if i % 2 == 0:
        end, call = start + 3, _call("add_stock", item=item, quantity=3)
        ask, answer = f"Please add 3 {item} to the stock.", f"Done: we now have {end} {item}."
    else:
        end, call = start, _call("get_stock", item=item)
        ask, answer = f"How many {item} do we have?", f"We have {end} {item} in stock."
    messages = [{"role": "system", "content": "You manage the shop's stock."}, {"role": "user", "content": ask}, call,
                {"role": "tool", "tool_call_id": "call_1", "name": call["tool_calls"][0]["function"]["name"],
                 "content": json.dumps({"item": item, "stock": end})},
                {"role": "assistant", "content": answer}]
    return {"messages": messages, "tools": tools, "reward": 1,
            "meta": {"id": f"task-{i}", "stock": {item: start, "other": 10 * i}}}


@pytest.fixture
def tasks(installed, tmp_path) -> Path:
    from pivot_inventory.world import TOOLS

    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(task(i, TOOLS)) + "\n" for i in range(len(ITEMS))))
    return path


def invoke(*args: Any) -> Any:
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result


def read_rows(path: Path) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in map(json.loads, path.read_text().splitlines())}


# --------------------------------------------------------------------------- the guide, step by step


def test_the_guide_shows_the_code_this_test_installs():
    guide = GUIDE.read_text(encoding="utf-8")
    for source in (WORLD_SOURCE, DOMAIN_SOURCE, RULE_SOURCE, PYPROJECT_ENTRY_POINTS):
        assert source in guide


def test_list_shows_the_installed_world_and_domain_and_broken_plugins_only_warn(installed):
    with pytest.warns(UserWarning, match=r"could not load world plugin 'broken' \(pivot_inventory.missing:World\)"):
        assert "inventory" in world_names()
    out = invoke("list").output
    assert re.search(r"│ inventory\s+│ tool_call\s+│ inventory\s+│", out), out  # the domains table
    assert re.search(r"│ inventory\s+│ plugin\s", out), out  # the worlds table: where it came from
    assert f"inventory: {ENV_ID}, {EPISODE_ENV_ID} — a shop's stock" in out
    assert "plugin not loaded: pivot_envs: could not load world plugin 'broken'" in out
    shared = next(line for line in out.splitlines() if "domain plugin 'shared_stock'" in line)
    assert "got a World instance (InventoryWorld object)" in shared and "pass its class (InventoryWorld)" in shared
    assert "shared_stock" not in domains.domain_names()
    assert "│ tool_use" in out and "world_exec" in out  # the rest is still there


def test_play_whole_tasks_gives_the_same_results_at_batch_sizes_1_and_4(tasks, tmp_path):
    played = {}
    for batch in (1, 4):
        out = tmp_path / f"replay-{batch}.jsonl"
        result = invoke("play", "--env", EPISODE_ENV_ID, "--tasks", tasks, "--agent", "replay", "-o", out,
                        "--batch-size", batch)
        assert re.search(r"task success\s+│\s+1\.000", result.output), result.output
        played[batch] = read_rows(out)
    assert sorted(played[1]) == [f"task-{i}" for i in range(len(ITEMS))]
    keys = ("success", "error", "digest", "turns", "tool_calls", "messages")
    for task_id, row in played[1].items():
        assert row["success"] is True and row["error"] is None, row
        assert {k: row[k] for k in keys} == {k: played[4][task_id][k] for k in keys}
    refused = tmp_path / "refusal.jsonl"
    invoke("play", "--env", EPISODE_ENV_ID, "--tasks", tasks, "--agent", f"constant:{REFUSAL}", "-o", refused,
           "--batch-size", 4)
    assert [r["success"] for r in read_rows(refused).values()] == [False] * len(ITEMS)  # success is measured


def play_alone(tasks: Path, index: int) -> dict[str, Any]:
    env = gymnasium.make(f"pivot_envs:{EPISODE_ENV_ID}", tasks=str(tasks)).unwrapped
    env.reset(options={"index": index})
    while not env.done:
        env.step(env.recorded_action())
    return env.episode_row()


def test_the_domains_own_success_rule_decides_with_the_built_in_ones(tasks):
    """The plugin rule fails an episode that reaches the expert's state but answers without the count; an
    unknown rule name is refused when the env is made, naming the registered ones."""
    env = gymnasium.make(f"pivot_envs:{EPISODE_ENV_ID}", tasks=str(tasks)).unwrapped
    assert env.success_policy.rules == ("state", "facts", "stock_reported")  # the domain's
    env.reset(options={"index": 0})  # 2 apples, add 3: the expert says "Done: we now have 5 apples."
    env.step(env.recorded_action())  # the expert's add_stock call
    _, _, _, _, info = env.step("Done.")
    assert info["success"] is False and info["checks"] == {"state": True, "stock_reported": False}
    assert info["reason"] == "the last answer does not give the stock count 5"
    env.reset(options={"index": 0})
    while not env.done:
        env.step(env.recorded_action())
    assert env.success is True and env.checks == {"state": True, "stock_reported": True}
    with pytest.raises(ValueError, match=r"unknown success rule 'stock_report' \(did you mean 'stock_reported'\?\)"):
        EpisodeEnv(tasks=str(tasks), domain="inventory", success_rules=["state", "stock_report"])


def test_two_envs_stepped_alternately_do_not_interfere(tasks):
    a, b = (gymnasium.make(f"pivot_envs:{EPISODE_ENV_ID}", tasks=str(tasks)).unwrapped for _ in range(2))
    assert a.world is not b.world and type(a.world).__name__ == "InventoryWorld"
    a.reset(options={"index": 0})  # 2 apples, add 3
    b.reset(options={"index": 2})  # 4 plums, add 3
    while not (a.done and b.done):
        for env in (a, b):
            if not env.done:
                env.step(env.recorded_action())
    for env, index in ((a, 0), (b, 2)):
        row = env.episode_row()
        assert row["success"] is True and row["error"] is None
        assert row["messages"] == env.task.messages  # every tool result as recorded: no other task's stock
        assert row["digest"] == play_alone(tasks, index)["digest"]


def test_verify_world_exec_executes_rows_that_carry_the_pivots_meta(tasks, tmp_path):
    pivots_path = tmp_path / "pivots.jsonl"
    invoke("extract", tasks, "-o", pivots_path, "-d", "inventory")
    pivots = [json.loads(line) for line in pivots_path.read_text().splitlines()]
    calls = {p["meta"]["trajectory_id"]: p for p in pivots if p["expert"].get("tool_calls")}
    assert calls["task-0"]["meta"]["world"] == {"config": {"stock": {"apples": 2, "other": 0}}}

    def row(row_id: str, pivot: dict[str, Any], action: dict[str, Any], **extra: Any) -> dict[str, Any]:
        return {"id": row_id, "expected": pivot["expert"], "action": action, "context": pivot["context"],
                "tools": pivot["tools"], "meta": pivot["meta"], **extra}

    add, ask = calls["task-0"], calls["task-1"]  # add 3 apples to 2; how many pears (3)
    rows = [row("set-to-5", add, _call("set_stock", item="apples", quantity=5)),
            row("set-to-4", add, _call("set_stock", item="apples", quantity=4)),
            row("upper-case", ask, _call("get_stock", item="PEARS")),
            {**row("no-meta", add, _call("set_stock", item="apples", quantity=5)), "meta": {}},
            row("names-world_exec", add, _call("set_stock", item="apples", quantity=5), verifier="world_exec"),
            row("other-world", add, add["expert"], verifier={"name": "world_exec", "world": "tool_use"})]
    src, out = tmp_path / "rows.jsonl", tmp_path / "results.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    invoke("verify", "--verifier", "world_exec", "--world", "inventory", "-i", src, "-o", out)
    got = read_rows(out)
    assert got["set-to-5"]["passed"] and got["upper-case"]["passed"]  # same state and output from 2 apples
    assert not got["set-to-4"]["passed"] and got["set-to-4"]["error"] is None
    assert not got["no-meta"]["passed"] and got["no-meta"]["error"] is None  # from 0 apples: 3 != 5
    assert got["names-world_exec"]["passed"] and got["names-world_exec"]["verifier"] == "world_exec"  # --world kept
    assert got["other-world"]["error"] and "'world'" in got["other-world"]["error"]
    assert "inventory" in got["other-world"]["error"] and "tool_use" in got["other-world"]["error"]


def test_a_world_instance_is_refused_with_a_message_that_names_the_fix(tasks):
    from pivot_inventory.world import InventoryWorld

    fix = r"pass its class \(InventoryWorld\).*register_world\('NAME', InventoryWorld\)"
    with pytest.raises(TypeError, match=fix):
        Domain(name="inventory2", env_id="pivot/Inventory2-v0", world=InventoryWorld())
    for build in (lambda: build_world(InventoryWorld()),
                  lambda: EpisodeEnv(tasks=str(tasks), domain="inventory", world=InventoryWorld()),
                  lambda: register_world("inventory2", InventoryWorld())):
        with pytest.raises(TypeError, match=fix):
            build()
    with pytest.raises(ValueError, match="World instance"):
        build_verifier({"name": "world_exec", "world": InventoryWorld()})
    assert describe_world_spec(InventoryWorld()) == "InventoryWorld instance (refused: pass its class)"
    # what the message says works: the class itself (or a registered name)
    env = EpisodeEnv(tasks=str(tasks), domain="inventory", world=InventoryWorld)
    env.reset(options={"index": 1})
    while not env.done:
        env.step(env.recorded_action())
    assert env.success is True


# --------------------------------------------------------------------------- the registry and row specs


class Counter(World):
    """A counter world for the registry tests."""

    name = "counter"

    def __init__(self, start: int = 0):
        self.start_value = self.value = start

    def tools(self):
        return []

    def start(self, task):
        self.value = self.start_value

    def call(self, name, arguments):
        self.value += 1
        return ToolResult(str(self.value))

    def digest(self):
        return str(self.value)


def test_register_world_in_process_builds_a_fresh_world_each_time(registries, monkeypatch):
    assert register_world("counter", Counter) is Counter
    first, second = build_world("counter"), build_world({"name": "counter", "start": 5})
    assert isinstance(first, Counter) and first is not second and second.value == 5
    assert world_class("counter") is Counter and "counter" in world_names()
    with pytest.raises(ValueError, match="already registered; pass replace=True"):
        register_world("counter", Counter)
    register_world("counter", lambda: Counter(7), replace=True)
    assert build_world("counter").value == 7
    with pytest.raises(TypeError, match="factory function, not a class"):
        world_class("counter")
    for bad in ("", " x", "mcp:x", "{x"):
        with pytest.raises(ValueError, match="world name"):
            register_world(bad, Counter)
    with pytest.raises(TypeError, match="zero-argument function"):
        register_world("five", 5)
    shared = Counter()
    register_world("shared", lambda: shared)
    kept = build_world("shared")
    with pytest.raises(TypeError, match="must build a fresh World on every call"):
        build_world("shared")
    assert kept is shared
    register_world("not_a_world", lambda: object())
    with pytest.raises(TypeError, match="returned object, not a World"):
        build_world("not_a_world")
    monkeypatch.setitem(WORLDS, "by_hand", "pivot_envs.envs_data.tool_use.world:ToolUseWorld")  # the old private way
    assert build_world("by_hand").name == "tool_use"
    with pytest.raises(ValueError, match=r"unknown world 'countr' \(did you mean 'counter'\?\).*register_world"):
        build_world("countr")


def test_a_row_naming_the_commands_verifier_keeps_its_parameters():
    cli = {"name": "world_exec", "world": "inventory"}
    assert row_verifier_spec(None, cli) == cli
    assert row_verifier_spec("world_exec", cli) == cli
    assert row_verifier_spec({"name": "world_exec", "world": "inventory"}, cli) == cli
    assert row_verifier_spec({"name": "world_exec", "compare_outputs": False}, cli) == {**cli, "compare_outputs": False}
    clash = r"sets 'world' to 'tool_use', but the command's world_exec verifier has world: 'inventory'"
    with pytest.raises(ValueError, match=clash):
        row_verifier_spec({"name": "world_exec", "world": "tool_use"}, cli)
    assert row_verifier_spec("strict", cli) == "strict"  # another verifier: the row's own
    assert row_verifier_spec("world_exec", "world_exec") == "world_exec"
    assert row_verifier_spec("tool_call", None) == "tool_call"
