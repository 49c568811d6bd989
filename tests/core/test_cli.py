"""The pivot-envs command line, end to end (in-process through typer's runner)."""

import json

import pytest
from typer.testing import CliRunner

from pivot_envs.cli import app
from tests.conftest import shared_file

runner = CliRunner()


def run(*args):
    result = runner.invoke(app, [str(a) for a in args])
    return result


def test_list_shows_domains_env_ids_and_verifiers():
    out = run("list").output
    for name in ("pivot/ToolUse-v0", "pivot/Terminal-v0", "pivot/SWE-v0", "pivot/Search-v0", "pivot/ToolUse-Episode-v0",
                 "pivot/Episode-v0", "tool_call", "fuzzy", "exec", "judge", "world_exec"):
        assert name in out


def test_extract_tau_bench_to_pivots_and_nemo_gym(tmp_path):
    src = shared_file("tau-bench/gpt-4o-airline.jsonl")
    out = tmp_path / "p.jsonl"
    result = run("extract", src, "-o", out, "--domain", "tool_use", "--min-reward", "1", "--keep-tool-errors")
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert sum(1 for r in rows if r["expert"].get("tool_calls")) == 347
    assert "candidates kept" in result.output and "trajectory_below_min_reward" in result.output
    nemo = tmp_path / "n.jsonl"
    assert run("extract", src, "-o", nemo, "-d", "tool_use", "--output-format", "nemo_gym").exit_code == 0
    first = json.loads(nemo.read_text().splitlines()[0])
    assert "responses_create_params" in first and "expected_action" in first


def test_extract_bad_row_names_file_and_line_and_skip_bad_keeps_going(tmp_path):
    good = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}], "reward": 1}
    src = tmp_path / "t.jsonl"
    src.write_text(json.dumps(good) + "\n{oops\n" + json.dumps({**good, "messages": [{"role": "user", "content": "hey"}, {"role": "assistant", "content": "yo"}]}) + "\n")
    out = tmp_path / "p.jsonl"
    result = run("extract", src, "-o", out, "-d", "tool_use")
    assert result.exit_code == 2 and "t.jsonl:2" in result.output and "--skip-bad" in result.output
    result = run("extract", src, "-o", out, "-d", "tool_use", "--skip-bad")
    assert result.exit_code == 0, result.output
    assert len(out.read_text().splitlines()) == 2  # both good rows' turns, none lost


def test_data_generate_and_env_show(tmp_path):
    out = tmp_path / "g.jsonl"
    result = run("data", "generate", "--domain", "search", "--n", "5", "-o", out)
    assert result.exit_code == 0, result.output
    assert len(out.read_text().splitlines()) == 5
    pivots = tmp_path / "p.jsonl"
    assert run("extract", out, "-o", pivots, "-d", "search").exit_code == 0
    shown = run("env", "show", "--domain", "search", "--pivots", pivots, "--index", "1")
    assert shown.exit_code == 0 and "EXPERT" in shown.output
    assert run("env", "show", "--domain", "search", "--pivots", pivots, "--id", "missing").exit_code == 2


def test_unknown_domain_is_a_clean_error(tmp_path):
    result = run("data", "generate", "--domain", "nope", "-o", tmp_path / "x.jsonl")
    assert result.exit_code == 2 and "nope" in result.output


def _verify_rows(path):
    tools = [{"type": "function", "function": {"name": "get_order", "parameters": {
        "type": "object", "properties": {"order_id": {"type": "string"}, "verbose": {"type": "boolean", "default": False}},
        "required": ["order_id"]}}}]
    call = lambda args: {"role": "assistant", "content": None, "tool_calls": [  # noqa: E731
        {"id": "1", "type": "function", "function": {"name": "get_order", "arguments": json.dumps(args)}}]}
    rows = [
        {"id": "same", "expected": call({"order_id": "A1"}), "action": call({"order_id": "A1"}), "tools": tools},
        {"id": "default", "expected": call({"order_id": "A1"}), "action": '{"name": "get_order", "arguments": {"verbose": false, "order_id": "A1"}}', "tools": tools},
        "not json",
        {"id": "wrong", "expected": call({"order_id": "A1"}), "action": call({"order_id": "B2"}), "tools": tools},
        {"id": "noaction", "expected": "x"},
    ]
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))


@pytest.mark.parametrize("workers", [1, 2])
def test_verify_batch_keeps_order_reports_bad_lines_and_miss_rate(tmp_path, workers):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    _verify_rows(src)
    result = run("verify", "--input", src, "--output", out, "--verifier", "tool_call", "--workers", workers, "--report")
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == ["same", "default", None, "wrong", "noaction"]
    assert [r["passed"] for r in rows] == [True, True, False, False, False]
    assert "in.jsonl:3" in rows[2]["error"] and "'action'" in rows[4]["error"]
    assert rows[0]["error"] is None and rows[3]["error"] is None
    assert "miss rate" in result.output and "0.500" in result.output  # 2 functional passes, 1 of them strict


def test_verify_one_off_and_config_file(tmp_path):
    result = run("verify", "--verifier", "fuzzy", "--expected", "The answer is Paris", "--action", "the answer is paris.")
    assert result.exit_code == 0 and json.loads(result.output)["passed"] is True
    cfg = tmp_path / "v.yaml"
    cfg.write_text("name: fuzzy\nthreshold: 100\nscorer: ratio\n")
    result = run("verify", "--config", cfg, "--expected", "abc", "--action", "abd")
    assert result.exit_code == 0 and json.loads(result.output)["passed"] is False
    bad = run("verify", "--verifier", "nope", "--expected", "a", "--action", "a")
    assert bad.exit_code != 0 and "nope" in bad.output


def test_verifier_demo_section_writes_reports(tmp_path, monkeypatch):
    import math

    from pivot_envs.env import PivotEnv
    from pivot_envs.experiments.verifier_demo import run_demo, run_domain

    report = run_demo(tmp_path, n_pivots=5, seed=0)
    assert set(report["domains"]) == {"tool_use", "terminal", "swe", "search"}
    for summary in report["domains"].values():
        # errors (0 on an idle machine; a loaded one may have some) are counted apart, never as reward 0
        assert summary["expert_pass"] == 1.0 and isinstance(summary["errors"], int) and summary["errors"] >= 0
    table = (tmp_path / "report.md").read_text()
    assert "| tool_use |" in table and "| errors |" in table

    # every alternative's result made an error: they are counted and left out of the rates
    step_many = PivotEnv.step_many

    def alternatives_error(self, actions):
        scored = step_many(self, actions)
        return [scored[0], *[(0.0, {**info, "error": "injected"}) for _, info in scored[1:-1]], scored[-1]]

    monkeypatch.setattr(PivotEnv, "step_many", alternatives_error)
    summary = run_domain("tool_use", 5, 0)
    assert summary.alternatives > 0 and summary.errors == summary.alternatives
    assert math.isnan(summary.alt_functional_pass) and math.isnan(summary.miss_rate)
    assert summary.expert_pass == 1.0 and not math.isnan(summary.perturbed_functional_pass)  # still scored
