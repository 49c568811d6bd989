"""Results you can trust (issue 29), through the CLI, on a world written outside the project.

The user's key-value store (``tests/user_worlds/pivot_kvstore``: ``put``, ``get``, ``delete``, ``list_keys``)
is installed into a temporary site folder with its entry points, as ``pip install`` leaves it, plus two
mistakes a user makes: a domain that forgets ``world_keys`` (its world starts empty) and a domain entry point
that does not import. Each silent wrong result of the issue is replayed and must now be right or an error:

1. results do not change with ``--batch-size`` (``noisy_expert``, and the tiny hf model at T=1);
2. a refusal, "Done." or another value than the store's does not pass an answer;
3. a replay in a world that starts in the wrong state reports the differing tool results (and with
   ``--strict-replay`` is an error);
4. resuming a file that another run wrote is refused;
5. a failing entry point is named where it is used; ``verify --report`` names the verifiers the rows used;
   ``list`` shows success rules and whole descriptions.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from pivot_envs.facts import answer_facts

import pivot_envs  # noqa: F401  (registers the env ids)
from pivot_envs import domains
from pivot_envs.cli import app

pytestmark = [pytest.mark.filterwarnings("ignore:pivot_envs. could not load domain plugin 'kvbroken'")]

USER_WORLDS = Path(__file__).resolve().parents[1] / "user_worlds"
ENV_ID, NO_KEYS_ENV_ID = "pivot/KVStore-Episode-v0", "pivot/KVStoreNoKeys-Episode-v0"
REFUSAL = "Sorry, I cannot help with that."

NO_KEYS_SOURCE = '''\
from pivot_envs import Domain

# the mistake: no world_keys, so the world never sees a task's start store
DOMAIN = Domain(name="kvstore_nokeys", env_id="pivot/KVStoreNoKeys-v0", world="kvstore",
                default_verifier="final_turn", success_rules=("state", "facts"))
'''

ENTRY_POINTS_TXT = """\
[pivot_envs.domains]
kvbroken = pivot_kvstore.missing:DOMAIN
kvstore = pivot_kvstore.domain:DOMAIN
kvstore_nokeys = pivot_kvstore.nokeys:DOMAIN

[pivot_envs.worlds]
kvstore = pivot_kvstore.world:KVStoreWorld
"""

runner = CliRunner()


@pytest.fixture
def installed(tmp_path, monkeypatch, fresh_plugins) -> Path:
    """The user's package installed in a site folder with its entry points; plugins loaded as at import."""
    site = tmp_path / "site"
    shutil.copytree(USER_WORLDS / "pivot_kvstore", site / "pivot_kvstore")
    (site / "pivot_kvstore" / "nokeys.py").write_text(NO_KEYS_SOURCE)
    dist_info = site / "pivot_kvstore-0.1.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: pivot-kvstore\nVersion: 0.1\n")
    (dist_info / "entry_points.txt").write_text(ENTRY_POINTS_TXT)
    monkeypatch.syspath_prepend(str(site))
    domains.load_plugins()
    yield site
    for name in [m for m in sys.modules if m == "pivot_kvstore" or m.startswith("pivot_kvstore.")]:
        del sys.modules[name]


@pytest.fixture
def tasks(installed, tmp_path) -> Path:
    from pivot_kvstore.tasks import make_tasks

    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(t) + "\n" for t in make_tasks(20)))
    return path


def invoke(*args: Any, ok: bool = True) -> Any:
    result = runner.invoke(app, [str(a) for a in args])
    if ok:
        assert result.exit_code == 0, result.output
    return result


def flat(output: str) -> str:
    """The output with its line breaks and table borders folded (a narrow console wraps long messages)."""
    return " ".join(output.replace("│", " ").split())


def rows_of(path: Path) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in map(json.loads, path.read_text().splitlines())}


def success_cell(output: str) -> str:
    return re.search(r"task success\s+│\s+([0-9.]+|-)", output).group(1)


# --------------------------------------------------------------------------- 1. batch size


def test_noisy_expert_plays_the_same_episodes_at_batch_sizes_1_3_and_16(tasks, tmp_path):
    played = {}
    for batch in (1, 3, 16):
        out = tmp_path / f"noisy-{batch}.jsonl"
        invoke("play", "--env", ENV_ID, "--tasks", tasks, "--agent", "noisy_expert:0.3", "-o", out, "--batch-size", batch)
        played[batch] = rows_of(out)
    assert len(played[1]) == 20
    assert played[1] == played[3] == played[16]  # every field of every row, success included
    successes = {r["success"] for r in played[1].values()}
    assert successes == {True, False}  # the perturbations do change outcomes: the check has teeth


@pytest.mark.slow
def test_the_tiny_hf_model_at_temperature_1_plays_the_same_episodes_at_any_batch_size(terminal_base, tmp_path):
    # one torch thread: two threads that wait on each other crawl beside a busy neighbour (CI machines are shared)
    agent = json.dumps({"kind": "hf", "model": str(terminal_base), "temperature": 1.0, "max_new_tokens": 48,
                        "num_threads": 1})
    played = {}
    for batch in (1, 3, 16):
        out = tmp_path / f"hf-{batch}.jsonl"
        invoke("play", "--env", "pivot/Terminal-Episode-v0", "--agent", agent, "--limit", 6, "--max-turns", 3,
               "-o", out, "--batch-size", batch)
        played[batch] = rows_of(out)
    assert played[1] == played[3] == played[16]
    turns = [r["turns"] for r in played[1].values()]
    assert max(turns) > 1 and len({json.dumps(r["messages"]) for r in played[1].values()}) == 6  # sampled, multi-turn


# --------------------------------------------------------------------------- 2. final answers


def test_a_refusal_done_or_another_value_does_not_pass_an_answer_of_the_users_world(tasks, tmp_path):
    pivots = tmp_path / "pivots.jsonl"
    invoke("extract", tasks, "-o", pivots, "-d", "kvstore")
    answers = [p for p in map(json.loads, pivots.read_text().splitlines()) if not p["expert"].get("tool_calls")]
    assert len(answers) == 20
    lookup = next(p for p in answers if "value" in p["context"][-1]["content"] and p["meta"]["trajectory_id"] == "kv-0-0")
    stored = json.loads(lookup["context"][-1]["content"])["value"]
    rows = [{"id": f"{p['meta']['trajectory_id']}:{name}", "expected": p["expert"], "context": p["context"],
             "tools": p["tools"], "meta": p["meta"], "domain": "kvstore", "action": text}
            for p in answers for name, text in (("refusal", REFUSAL), ("done", "Done."), ("expert", p["expert"]["content"]))]
    rows.append({**rows[0], "id": "other-value", "action": lookup["expert"]["content"].replace(stored, "eight@example.com")})
    src, out = tmp_path / "rows.jsonl", tmp_path / "verdicts.jsonl"
    src.write_text("".join(json.dumps({**r, "expected": lookup["expert"], "context": lookup["context"]}
                                      if r["id"] == "other-value" else r) + "\n" for r in rows))
    result = invoke("verify", "-i", src, "-o", out, "--report")
    got = rows_of(out)
    refused = [k for k, r in got.items() if k.endswith(":refusal") and r["passed"]]
    assert refused == [], refused
    # "Done." is right only where the expert's own answer is a bare confirmation of a write the world already holds
    # (issue 35); wherever the expert's answer reports a value a tool returned, it fails
    reporting = {p["meta"]["trajectory_id"] for p in answers if answer_facts(p["context"], p["expert"]["content"])}
    done = [k for k, r in got.items() if k.endswith(":done") and r["passed"]]
    assert reporting and not [k for k in done if k.split(":")[0] in reporting], done
    assert all("final state" in got[k]["reason"] for k in done)
    assert all(r["passed"] for k, r in got.items() if k.endswith(":expert"))
    assert got["other-value"]["passed"] is False and "eight@example.com" in got["other-value"]["reason"]
    assert all(r["verified_by"] == "final_turn" for r in got.values())
    assert "functional pass rate (final_turn)" in flat(result.output)
    refused = tmp_path / "refusal-episodes.jsonl"
    invoke("play", "--env", ENV_ID, "--tasks", tasks, "--agent", f"constant:{REFUSAL}", "-o", refused)
    assert not any(r["success"] for r in rows_of(refused).values())


# --------------------------------------------------------------------------- 3. replays check the world


def test_a_replay_in_a_world_that_starts_empty_reports_every_differing_tool_result(tasks, tmp_path):
    good = tmp_path / "good.jsonl"
    result = invoke("play", "--env", ENV_ID, "--tasks", tasks, "--agent", "replay", "-o", good)
    assert success_cell(result.output) == "1.000"
    assert re.search(r"as recorded \(share\)\s+│\s+1\.000", result.output), result.output
    assert all(r["tool_results_match"] is True for r in rows_of(good).values())

    empty = tmp_path / "no-keys.jsonl"
    result = invoke("play", "--env", NO_KEYS_ENV_ID, "--tasks", tasks, "--agent", "replay", "-o", empty)
    rows = rows_of(empty)
    wrong = [r for r in rows.values() if r["tool_results_match"] is False]
    assert wrong and all(r["error"] is None for r in rows.values())
    mismatch = rows["kv-0-0"]["tool_result_mismatch"]  # a lookup: get answers found: false
    assert mismatch.startswith("task kv-0-0, turn 1 (message 3, tool get): recorded ") and '"found":false' in mismatch
    share = float(re.search(r"as recorded \(share\)\s+│\s+([0-9.]+)", result.output).group(1))
    assert share < 1.0 and "differ from the recorded ones" in flat(result.output)

    strict = tmp_path / "strict.jsonl"
    result = invoke("play", "--env", NO_KEYS_ENV_ID, "--tasks", tasks, "--agent", "replay", "--strict-replay", "-o", strict)
    rows = rows_of(strict)
    assert rows["kv-0-0"]["success"] is None and rows["kv-0-0"]["error"].startswith("replay: a tool result differs")
    assert sum(1 for r in rows.values() if r["error"]) == len(wrong)
    refused = invoke("play", "--env", ENV_ID, "--tasks", tasks, "--agent", "noisy_expert:0.3", "--strict-replay",
                     "-o", tmp_path / "x.jsonl", ok=False)
    assert refused.exit_code != 0 and "only with --agent replay" in flat(refused.output)


# --------------------------------------------------------------------------- 4. resumes check what they resume


def test_resuming_a_file_that_another_run_played_is_refused(tasks, tmp_path):
    out = tmp_path / "episodes.jsonl"
    invoke("play", "--env", ENV_ID, "--tasks", tasks, "--agent", "replay", "-o", out)
    again = invoke("play", "--env", ENV_ID, "--tasks", tasks, "--agent", "replay", "-o", out)
    assert "20 of 20 episodes already played" in flat(again.output) and success_cell(again.output) == "1.000"
    refused = invoke("play", "--env", ENV_ID, "--tasks", tasks, "--agent", f"constant:{REFUSAL}", "-o", out, ok=False)
    assert refused.exit_code != 0
    assert 'played with agent {"kind": "replay"}' in flat(refused.output) and "--force" in refused.output
    other_seed = invoke("play", "--env", ENV_ID, "--tasks", tasks, "--agent", "replay", "--seed", 1, "-o", out, ok=False)
    assert other_seed.exit_code != 0 and "seed 0" in flat(other_seed.output)
    forced = invoke("play", "--env", ENV_ID, "--tasks", tasks, "--agent", f"constant:{REFUSAL}", "-o", out, "--force")
    assert success_cell(forced.output) == "0.000"
    assert {r["run"]["agent"]["kind"] for r in rows_of(out).values()} == {"constant"}
    legacy = tmp_path / "legacy.jsonl"
    legacy.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "run"}) + "\n" for r in rows_of(out).values()))
    unknown = invoke("play", "--env", ENV_ID, "--tasks", tasks, "--agent", f"constant:{REFUSAL}", "-o", legacy, ok=False)
    assert unknown.exit_code != 0 and "do not record who played them" in flat(unknown.output)


# --------------------------------------------------------------------------- 5. the smaller ones


def test_a_domain_entry_point_that_fails_is_named_where_it_is_used(tasks, tmp_path):
    extract = invoke("extract", tasks, "-o", tmp_path / "p.jsonl", "-d", "kvbroken", ok=False)
    assert extract.exit_code != 0
    assert "domain 'kvbroken' is an installed plugin that did not load" in flat(extract.output)
    assert "pivot_kvstore.missing" in flat(extract.output)
    play = invoke("play", "--env", "pivot/KVBroken-Episode-v0", "--tasks", tasks, "--agent", "replay",
                  "-o", tmp_path / "e.jsonl", ok=False)
    assert play.exit_code != 0 and "plugins that did not load" in flat(play.output) and "'kvbroken'" in flat(play.output)


def test_list_shows_success_rules_and_whole_descriptions(installed):
    out = invoke("list").output
    assert "kvstore: pivot/KVStore-v0, pivot/KVStore-Episode-v0" in out
    assert re.search(r"kvstore: .*task success: state, facts", out)
    text = flat(out)
    assert "the expert stopped and the action made a call -> 0. Each child runs once per batch." in text  # whole
    assert "success rules" in out and "the agent's final state is the state the expert reached" in text


def test_verify_report_without_a_verifier_names_the_verifier_each_row_used(tasks, tmp_path):
    pivots = tmp_path / "pivots.jsonl"
    invoke("extract", tasks, "-o", pivots, "-d", "kvstore")
    rows = [{"id": p["id"], "expected": p["expert"], "action": p["expert"], "context": p["context"],
             "tools": p["tools"], "meta": p["meta"], "domain": "kvstore"} for p in map(json.loads, pivots.read_text().splitlines())]
    rows[0]["verifier"] = "strict"
    src = tmp_path / "rows.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = invoke("verify", "-i", src, "--report").output
    label = re.search(r"functional pass rate \(([^)]*)\)", flat(out)).group(1)
    assert label == f"final_turn: {len(rows) - 1} rows, strict: 1 rows"
