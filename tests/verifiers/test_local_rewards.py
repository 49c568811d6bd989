"""Each domain's default verifier, fed actions that do what the expert's did and actions that do not, through the env
and through ``pivot-envs verify`` (issue 35): commands judged by what they change and show, stops by the world's
state, searches by what they retrieve, SWE calls by their tool and target."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gymnasium
import pytest
from typer.testing import CliRunner

from pivot_envs.cli import app
from pivot_envs.envs_data import load_pivots
from pivot_envs.types import Fixture, Pivot
from pivot_envs.worlds import WorldTask, build_world

REFUSAL = "I'm sorry, but I can't help with that."
ENV_IDS = {"tool_use": "pivot/ToolUse-v0", "search": "pivot/Search-v0", "swe": "pivot/SWE-v0"}
LOG = "".join(f"2024-05-0{d} 1{d}:00 {level} worker {d}\n" for d, level in
              zip(range(1, 10), ["INFO", "ERROR", "INFO", "WARN", "ERROR", "INFO", "INFO", "ERROR", "INFO"]))
FIXTURE = Fixture(files={"logs/app.log": LOG, "notes.txt": "status: draft\nowner: ops\n",
                         "docs/a.md": "# a\n", "docs/b.md": "# b\n"},
                  setup="tar -czf pkg.tgz docs", workdir="/work/shop")
COMMANDS = ["ls", "grep -c ERROR logs/app.log", "wc -l < logs/app.log", "tar -tzf pkg.tgz | sort",
            "sed -i 's/draft/final/' notes.txt", "grep -c final notes.txt"]
ANSWER = "notes.txt now says final; logs/app.log has 3 ERROR lines in 9."


def bash(command: str) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": command})}}]}


def text(content: str) -> dict[str, Any]:
    return {"role": "assistant", "content": content}


def cli(*args: str) -> None:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output


def verify_rows(rows: list[dict[str, Any]], folder: Path) -> list[dict[str, Any]]:
    """``pivot-envs verify`` on ``rows``: its output rows."""
    (folder / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cli("verify", "-i", str(folder / "rows.jsonl"), "-o", str(folder / "out.jsonl"))
    return [json.loads(line) for line in (folder / "out.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def pivot_file(tmp_path_factory: pytest.TempPathFactory, bwrap_ok: None) -> Path:
    """A user's terminal trajectory, its tool results recorded by running it, cut into pivots by the CLI."""
    folder = tmp_path_factory.mktemp("mine")
    tools = json.loads((Path(__file__).resolve().parents[2] / "envs_data" / "terminal" / "tools.json").read_text())
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You run a shell in /work/shop."},
                                      {"role": "user", "content": "Mark notes.txt final and count the ERROR lines."}]
    with build_world("terminal") as world:
        world.start(WorldTask(id="mine-1", domain="terminal", fixture=FIXTURE, tools=tools))
        for i, command in enumerate(COMMANDS):
            call = bash(command)
            call["tool_calls"][0]["id"] = f"c{i}"
            messages += [call, {"role": "tool", "tool_call_id": f"c{i}", "content": world.call("bash", {"command": command}).content}]
    messages.append(text(ANSWER))
    trajectory = {"messages": messages, "tools": tools, "fixture": FIXTURE.to_dict(), "reward": 1.0, "meta": {"id": "mine-1"}}
    (folder / "mine.jsonl").write_text(json.dumps(trajectory) + "\n")
    out = folder / "pivots.jsonl"
    cli("extract", str(folder / "mine.jsonl"), "-d", "terminal", "-o", str(out))
    return out


CASES: dict[int, tuple[list[Any], list[Any]]] = {
    # pivot index: (interchangeable actions, wrong actions)
    0: ([bash("ls -l"), bash("ls -1"), bash("ls | sort")],
        [bash("pwd"), bash("true"), bash("echo ok"), bash("cat notes.txt"), text("Done."), text(REFUSAL)]),
    1: ([bash("grep ERROR logs/app.log | wc -l"), bash("grep --count ERROR logs/app.log"), bash("grep -c 'ERROR' logs/app.log")],
        [bash("grep -c WARN logs/app.log"), bash("cat logs/app.log"), bash("ls -la"), bash("rm -rf -- ./*")]),
    2: ([bash("wc -l logs/app.log"), bash("cat logs/app.log | wc -l")], [bash("wc -w < logs/app.log"), text(ANSWER)]),
    3: ([bash("tar -tzf pkg.tgz"), bash("tar --list -zf pkg.tgz")], [bash("ls docs"), bash("tar -tzf pkg.tgz | head -n 1")]),
    4: ([bash("sed -i -e 's/draft/final/' notes.txt"), bash("sed 's/draft/final/' notes.txt > t && mv t notes.txt")],
        [bash("sed -i 's/draft/FINAL/' notes.txt"), bash("rm notes.txt"), bash("true"), text(ANSWER), text("Done.")]),
    5: ([text(ANSWER), bash("grep final notes.txt | wc -l")], [text(REFUSAL), text("Done."), text("notes.txt has 5 lines.")]),
    6: ([text(ANSWER), text("Done: 3 of the 9 lines of logs/app.log are ERROR lines, and notes.txt is final.")],
        [text("Done."), text(REFUSAL), text("There are 4 ERROR lines."), bash("grep -c ERROR logs/app.log")]),
}
"""Pivot 5 is the expert's check after its last write: the task's state is done there, so its answer is a right
stop, and "Done." is not (the answer reports the ERROR count a tool returned). At pivots 2 and 4 work is left."""


def _rows(pivots: list[Pivot]) -> list[tuple[Pivot, Any, bool]]:
    return [(pivots[i], action, label) for i, (right, wrong) in CASES.items()
            for label, actions in ((True, right), (False, wrong)) for action in actions]


@pytest.mark.slow
def test_terminal_commands_and_stops_through_the_env_and_the_cli(pivot_file: Path, tmp_path: Path) -> None:
    pivots = [Pivot.from_dict(json.loads(line)) for line in pivot_file.read_text().splitlines()]
    assert [p.meta["turn"] for p in pivots] == [2, 4, 6, 8, 10, 12, 14]
    rows = _rows(pivots)
    env = gymnasium.make("pivot_envs:pivot/Terminal-v0", pivots=str(pivot_file))
    env_verdicts = []
    for pivot, action, _ in rows:
        env.reset(options={"pivot_id": pivot.id})
        _, reward, _, _, info = env.step(action)
        assert info["error"] is None, info
        env_verdicts.append((reward == 1.0, info["reason"]))
    wrong = [(p.meta["turn"], a, why) for (p, a, label), (ok, why) in zip(rows, env_verdicts) if ok != label]
    assert not wrong, wrong
    file_rows = [{"id": n, "expected": p.expert, "action": a, "tools": p.tools, "context": p.context,
                  "fixture": p.fixture.to_dict() if p.fixture else None, "domain": "terminal", "meta": p.meta}
                 for n, (p, a, _) in enumerate(rows)]
    out = verify_rows(file_rows, tmp_path)
    assert [r["passed"] for r in out] == [ok for ok, _ in env_verdicts]
    assert not any(r["error"] for r in out)
    stop = env_verdicts[[i for i, (p, a, _) in enumerate(rows) if p.meta["turn"] == 12 and a == text(ANSWER)][0]]
    assert "final state" in stop[1]
    early = env_verdicts[[i for i, (p, a, _) in enumerate(rows) if p.meta["turn"] == 10 and a == text(ANSWER)][0]]
    assert "work left" in early[1]


def _bundled(domain: str, pick: Any) -> Pivot:
    return next(p for p in load_pivots(domain, "test") if pick(p))


def _call(pivot: Pivot, **changes: Any) -> dict[str, Any]:
    fn = pivot.expert["tool_calls"][0]["function"]
    args = {**json.loads(fn["arguments"]), **changes}
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": "x", "type": "function", "function": {"name": fn["name"], "arguments": json.dumps(args)}}]}


def _name(pivot: Pivot) -> str:
    return pivot.expert["tool_calls"][0]["function"]["name"] if pivot.expert.get("tool_calls") else ""


@pytest.mark.parametrize("domain", ["tool_use", "search", "swe"])
def test_each_domains_default_verifier_through_the_env_and_the_cli(domain: str, tmp_path: Path) -> None:
    if domain == "tool_use":
        pivot = _bundled(domain, lambda p: _name(p) == "find_customer_by_email")
        email = json.loads(pivot.expert["tool_calls"][0]["function"]["arguments"])["email"]
        right = [_call(pivot, email=email.upper()), _call(pivot, email=f" {email} ".strip())]
        wrong = [_call(pivot, email="someone.else@example.com"), text(REFUSAL), text("Done.")]
    elif domain == "search":
        pivot = _bundled(domain, lambda p: _name(p) == "search" and len(json.loads(
            p.expert["tool_calls"][0]["function"]["arguments"])["query"].split()) >= 3
            and any("open" in json.dumps(c) for c in p.meta["after"]["calls"][:1]))
        query = json.loads(pivot.expert["tool_calls"][0]["function"]["arguments"])["query"]
        right = [_call(pivot, query=" ".join(reversed(query.split()))), _call(pivot, query=query.split()[0] + " "
                                                                             + query.split()[1])]
        wrong = [_call(pivot, query="completely unrelated words"), text(REFUSAL), text("Done.")]
    else:
        pivot = _bundled(domain, lambda p: _name(p) == "open_file")
        path = json.loads(pivot.expert["tool_calls"][0]["function"]["arguments"])["path"]
        right = [_call(pivot, path="./" + path), bash(f"cat {path}")]
        wrong = [_call(pivot, path="setup.py"), bash("python -m pytest"), text(REFUSAL), text("Done.")]
    env = gymnasium.make(f"pivot_envs:{ENV_IDS[domain]}", split="test")
    env.reset(options={"pivot_id": pivot.id})
    verdicts = [r == 1.0 for r, _ in env.unwrapped.step_many(right + wrong)]
    assert verdicts == [True] * len(right) + [False] * len(wrong), (pivot.expert, verdicts)
    rows = [{"id": n, "expected": pivot.expert, "action": a, "tools": pivot.tools, "context": pivot.context,
             "domain": domain, "meta": pivot.meta} for n, a in enumerate(right + wrong)]
    out = verify_rows(rows, tmp_path)
    assert [r["passed"] for r in out] == verdicts and not any(r["error"] for r in out)
