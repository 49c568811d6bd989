"""Tests of the SWE data generator (envs_data/swe/generator.py): real runs, real replays."""

from __future__ import annotations

import gzip
import json
import random
import re
import resource
import time
from pathlib import Path

import jsonschema
import pytest

from pivot_envs.envs_data.swe import generator as swe
from pivot_envs.envs_data.swe.repos import FAMILIES, TEMPLATES, TEST_COMMAND
from pivot_envs.types import Trajectory

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "swe-agent"


@pytest.fixture(scope="module")
def big() -> dict:
    """generate(250) once, with its CPU time (this process plus every Python run it started)."""
    before_self, before_kids = time.process_time(), resource.getrusage(resource.RUSAGE_CHILDREN)
    trajs = swe.generate(250, seed=0)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    kids_cpu = (kids.ru_utime - before_kids.ru_utime) + (kids.ru_stime - before_kids.ru_stime)
    cpu = time.process_time() - before_self + kids_cpu
    return {"trajs": trajs, "cpu": cpu}


def _dumps(trajs: list[Trajectory]) -> str:
    return "".join(json.dumps(t.to_dict(), ensure_ascii=False) + "\n" for t in trajs)


def _assistant_turns(t: Trajectory) -> list[int]:
    return [i for i, m in enumerate(t.messages) if m["role"] == "assistant"]


def _validators() -> dict[str, jsonschema.Draft202012Validator]:
    return {t["function"]["name"]: jsonschema.Draft202012Validator(t["function"]["parameters"]) for t in swe.TOOLS}


def _call(message: dict) -> tuple[str, dict]:
    fn = message["tool_calls"][0]["function"]
    return fn["name"], json.loads(fn["arguments"])


# ---------------------------------------------------------------- contract checks


def test_deterministic_and_seed_dependent():
    a, b = swe.generate(8, seed=0), swe.generate(8, seed=0)
    assert _dumps(a) == _dumps(b)
    assert _dumps(swe.generate(8, seed=1)) != _dumps(a)
    assert _dumps(swe.generate(3, seed=0)) == _dumps(a[:3]), "episode i must depend only on (seed, i)"


def test_counts_rewards_and_budget(big):
    trajs = big["trajs"]
    assert len(trajs) == 250
    turns = [len(_assistant_turns(t)) for t in trajs]
    assert sum(turns) >= 1000
    assert min(turns) >= 5 and max(turns) <= swe.MAX_TURNS
    failed = sum(1 for t in trajs if t.reward == 0.0)
    assert all(t.reward in (0.0, 1.0) for t in trajs)
    assert 0.04 * len(trajs) <= failed <= 0.18 * len(trajs)
    errors = sum(len(t.meta["error_turns"]) for t in trajs)
    assert 0.01 * sum(turns) <= errors <= 0.06 * sum(turns), "a few % of tool calls should fail"
    assert {t.meta["bug_family"] for t in trajs} == set(FAMILIES)
    # size and speed budgets of the data contract (300 episodes: < 1 MB gzipped, < 20 s of one core)
    size = len(gzip.compress(_dumps(trajs).encode("utf-8")))
    assert size * 300 / 250 < 1_000_000, f"gzipped JSONL would be {size * 300 / 250:.0f} bytes at n=300"
    assert big["cpu"] * 300 / 250 < 20, f"generate(250) used {big['cpu']:.1f} s of CPU"


def test_messages_tools_and_meta_are_well_formed(big):
    for tool in swe.TOOLS:
        jsonschema.Draft202012Validator.check_schema(tool["function"]["parameters"])
    specs = _validators()
    for t in big["trajs"]:
        assert Trajectory.from_dict(json.loads(json.dumps(t.to_dict()))).to_dict() == t.to_dict()
        assert t.tools == swe.TOOLS
        assert [m["role"] for m in t.messages[:2]] == ["system", "user"]
        meta = t.meta
        assert meta["source"] == "pivot-envs/swe" and re.fullmatch(r"swe-0-\d+", meta["id"])
        assert meta["task"] == meta["bug_family"] in FAMILIES
        assert meta["test_command"] == TEST_COMMAND and meta["repo_name"] + "/" in meta["bug_file"]
        for i in _assistant_turns(t):
            msg, result = t.messages[i], t.messages[i + 1]
            assert isinstance(msg["content"], str) and msg["content"].strip(), "every turn carries a thought"
            (call,) = msg["tool_calls"]
            assert call["type"] == "function" and call["function"]["name"] in specs
            specs[call["function"]["name"]].validate(json.loads(call["function"]["arguments"]))
            assert result["role"] == "tool" and result["tool_call_id"] == call["id"]
            assert result["name"] == call["function"]["name"]
            assert result["content"].endswith("(Current directory: /testbed)\nbash-$")
            assert result["content"].startswith("Error:") == (i in meta["error_turns"])
        assert _call(t.messages[-2])[0] == "submit"
        ids = [t.messages[i]["tool_calls"][0]["id"] for i in _assistant_turns(t)]
        assert len(set(ids)) == len(ids)


def test_alternatives_are_well_formed(big):
    specs = _validators()
    with_alts = 0
    for t in big["trajs"]:
        alts = t.meta["alternatives"]
        with_alts += bool(alts)
        for key, options in alts.items():
            index = int(key)
            expert = t.messages[index]
            assert expert["role"] == "assistant" and index not in t.meta["error_turns"]
            assert options
            for alt in options:
                assert alt["role"] == "assistant" and len(alt["tool_calls"]) == 1
                fn = alt["tool_calls"][0]["function"]
                assert fn["name"] in specs
                specs[fn["name"]].validate(json.loads(fn["arguments"]))
                # key order counts: a reordered argument object is a (strict-miss) alternative
                assert fn != expert["tool_calls"][0]["function"], "an alternative must differ from the expert action"
    assert with_alts == len(big["trajs"])


# ---------------------------------------------------------------- the world is real


def _replay(t: Trajectory, runner: swe.PythonRunner) -> list[tuple[int, swe.World]]:
    """Replay the expert's calls on a fresh world; asserts every recorded tool result is reproduced."""
    world = swe.World(dict(t.fixture.files), runner)
    states = []
    for i in _assistant_turns(t):
        states.append((i, world.copy()))
        name, args = _call(t.messages[i])
        assert world.call(name, args) == t.messages[i + 1]["content"], f"{t.meta['id']} turn {i} ({name})"
    return states


def test_replaying_the_expert_reproduces_every_tool_result_and_the_outcome(big):
    with swe.PythonRunner() as runner:
        for t in big["trajs"][:20]:
            assert t.fixture.workdir == "/testbed" and 3 <= len(t.fixture.files) <= 8
            before = runner.run(t.fixture.files, ["run_tests.py"])
            assert before.rc == 1 and "FAILED" in before.output, "the fixture's tests must fail before the fix"
            bug_tests = "tests/test_" + Path(t.meta["bug_file"]).name
            assert any(f.startswith(bug_tests) for f in swe.failed_tests(before.output))
            states = _replay(t, runner)
            final = states[-1][1]  # the world just before submit
            after = runner.run(final.files, ["run_tests.py"])
            assert (after.rc == 0) == (t.reward == 1.0)
            diff = t.messages[-1]["content"]
            assert f"diff --git a/{t.meta['bug_file']} b/{t.meta['bug_file']}" in diff


def test_alternatives_have_the_same_effect_when_executed(big):
    """Viewer/editor alternatives give the very same result; shell spellings point at the same file/output."""
    checked = 0
    with swe.PythonRunner() as runner:
        for t in big["trajs"][:25]:
            for i, world in _replay(t, runner):
                expert = t.messages[i + 1]["content"]
                name, args = _call(t.messages[i])
                expert_world = world.copy()
                expert_world.call(name, args)
                for alt in t.meta["alternatives"].get(str(i), []):
                    alt_name, alt_args = _call(alt)
                    trial = world.copy()
                    out = trial.call(alt_name, alt_args)
                    checked += 1
                    assert not out.startswith("Error:"), (t.meta["id"], alt_args, out)
                    if alt_name == name and name in ("open_file", "goto", "scroll_down", "search_file", "create"):
                        assert out == expert
                    if name in ("edit", "create") or alt_args.get("command", "").startswith("rm"):
                        assert trial.files == expert_world.files
                    if alt_name == "bash" and name == "bash":
                        assert out == expert  # python3 / ./script spellings: the same real run
                    if name in ("find_file", "search_dir") or alt_name in ("find_file", "search_dir"):
                        assert t.meta["bug_file"] in out
                    if name == "search_file":
                        assert f"def {t.meta['bug_function']}(" in out
                    if name == "run_tests":
                        summary = re.compile(r"\d+ passed, \d+ failed")
                        assert summary.search(out).group() == summary.search(expert).group()
    assert checked > 100


def test_every_bug_site_breaks_its_tests_and_the_fix_repairs_them():
    with swe.PythonRunner() as runner:
        for template in TEMPLATES:
            for site in template.sites:
                repo = swe.build_repo(random.Random(f"{template.key}/{site.func}/{site.family}"), template, site)
                assert runner.run(repo.fixed, ["run_tests.py"]).rc == 0
                buggy = runner.run(repo.buggy, ["run_tests.py"])
                wrong = runner.run(repo.wrong, ["run_tests.py"])
                assert buggy.rc == 1 and wrong.rc == 1, f"{template.key}/{site.func}/{site.family}"
                assert all(f.startswith(repo.test_path) for f in swe.failed_tests(buggy.output))
                obs = swe.observe(repo, runner)
                assert obs.fixed.rc == 0 and "\n" not in obs.expected and obs.actual != obs.expected
                s, e, replacement = swe.edit_for(repo.buggy[repo.path], repo.fixed[repo.path])
                world = swe.World(dict(repo.buggy), runner)
                world.call("open_file", {"path": repo.path})
                world.call("edit", {"start_line": s, "end_line": e, "replacement": replacement})
                assert world.files == repo.fixed


def test_issue_reports_show_real_behaviour(big):
    with swe.PythonRunner() as runner:
        for t in big["trajs"][:30]:
            user = t.messages[1]["content"]
            assert user.startswith("We're currently solving the following issue")
            files = {**t.fixture.files, "reproduce.py": re.search(r"```python\n(.*?)```", user, re.S).group(1)}
            result = runner.run(files, ["reproduce.py"])
            last = [line for line in result.output.strip().split("\n") if line][-1]
            assert f"`{last}`" in user, "the issue quotes the real (buggy) output"
    phrasings = {t.messages[1]["content"].split("ISSUE:\n")[1][:12] for t in big["trajs"]}
    assert len(phrasings) > 50


def test_fork_and_subprocess_runners_agree():
    repo = swe.build_repo(random.Random(7), TEMPLATES[0], TEMPLATES[0].sites[5])  # crashes with a traceback
    files = {**repo.buggy, "reproduce.py": repo.fill(repo.site.snippet)}
    with swe.PythonRunner(use_fork=True) as fork, swe.PythonRunner(use_fork=False) as spawn:
        for argv in (["reproduce.py"], ["run_tests.py"], ["run_tests.py", "tests/nope.py"], ["missing.py"]):
            a, b = fork.run(files, argv), spawn.run(files, argv)
            assert (a.rc, a.output) == (b.rc, b.output), argv
        for index in range(3):  # whole episodes are identical whichever way Python is started
            assert _dumps([swe.run_episode(5, index, fork)]) == _dumps([swe.run_episode(5, index, spawn)])
        crash = fork.run(files, ["reproduce.py"])
        assert crash.rc == 1 and 'File "/testbed/reproduce.py", line 3, in <module>' in crash.output
        assert "/tmp" not in crash.output and "^^^" not in crash.output


def test_tool_errors_are_real():
    repo = swe.build_repo(random.Random(3))
    with swe.PythonRunner() as runner:
        world = swe.World(dict(repo.buggy), runner)
        assert world.call("open_file", {"path": "nope.py"}).startswith("Error: File nope.py not found")
        assert world.call("goto", {"line_number": 3}).startswith("Error: No file open")
        assert world.call("goto", {"line": 3}).startswith("Error: invalid arguments for goto")
        world.call("open_file", {"path": repo.path})
        out = world.call("edit", {"start_line": 1, "end_line": 1, "replacement": "    x = ("})
        assert out.startswith("Error: Your proposed edit has introduced new syntax error(s)")
        assert world.files == repo.buggy, "a failing edit is not applied"
        assert world.call("create", {"filename": repo.path}).startswith("Error: File")


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data/swe-agent (real SWE-agent trajectories) is absent")
def test_tool_output_style_matches_real_swe_agent_traces(big):
    # the real traces come from a pty (CRLF line ends inside tool output); ours use LF
    real = json.loads((SHARED / "marshmallow-1867-function-calling.traj").read_text())["history"]
    texts = [m["content"][0]["text"] if isinstance(m["content"], list) else m["content"] for m in real]
    patterns = {
        "find_file": re.compile(
            r'^Found \d+ matches for "[^"]+" in /\S+:\r?\n(/\S+\n)+\(Open file: .*\)\n\(Current directory: /\S+\)\nbash-\$$'
        ),
        "view": re.compile(r"^\[File: \S+ \(\d+ lines total\)\]\r?\n(\(\d+ more lines above\)\r?\n)?(\d+:.*\r?\n)+"),
    }
    assert any(patterns["find_file"].match(text) for text in texts)
    assert any(patterns["view"].match(text) for text in texts)
    ours = [
        (t.messages[i - 1], t.messages[i]["content"]) for t in big["trajs"][:40] for i in range(3, len(t.messages), 2)
    ]
    assert any(patterns["find_file"].match(text) for call, text in ours if _call(call)[0] == "find_file")
    views = [text for call, text in ours if _call(call)[0] in ("open_file", "goto") and not text.startswith("Error:")]
    assert views and all(patterns["view"].match(text) for text in views)
