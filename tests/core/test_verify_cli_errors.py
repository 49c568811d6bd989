"""``pivot-envs verify`` on bad input: a user's mistake is ONE line naming the culprit and a non-zero exit.

Mistakes in the command (the verifier name, the verifier config, input/output paths) are caught before
any row is verified; a bad row is an error row naming ``FILE:LINE`` and the other rows are kept.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pivot_envs.cli import app
from pivot_envs.config import ConfigError
from pivot_envs.verifiers import build_verifier

runner = CliRunner()

GOOD = {"id": "a", "expected": "The answer is Paris", "action": "the answer is paris."}
OTHER = {"id": "b", "expected": "hello there", "action": "goodbye"}


def run(*args):
    return runner.invoke(app, ["verify", *(str(a) for a in args)])


def one_line_error(result, *needles: str) -> str:
    """The single error line of a failed run; asserts a non-zero exit, no traceback, every needle in it."""
    assert result.exit_code != 0, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


@pytest.fixture
def rows(tmp_path: Path) -> Path:
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps(OTHER) + "\n")
    return path


def results(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# --------------------------------------------------------------------------- the verifier


def test_an_unknown_verifier_fails_before_any_row_is_read(rows, tmp_path):
    out = tmp_path / "out.jsonl"
    line = one_line_error(run("-i", rows, "-o", out, "--verifier", "nope"), "--verifier nope", "unknown verifier 'nope'",
                          "known: ", "fuzzy", "tool_call")
    assert "did you mean" not in line  # nothing close: the catalog is the hint
    one_line_error(run("-i", rows, "-o", out, "--verifier", "fuzy"), "unknown verifier 'fuzy' (did you mean 'fuzzy'?)")
    one_line_error(run("--verifier", "nope", "--expected", "a", "--action", "a"), "unknown verifier 'nope'")
    assert not out.exists()


def test_a_misspelt_key_in_the_verifier_config_names_the_file_line_and_the_fix(rows, tmp_path):
    out = tmp_path / "out.jsonl"
    cfg = tmp_path / "fuzzy.yaml"
    cfg.write_text("name: fuzzy\nnormalisers: [lower]\n")
    one_line_error(run("-i", rows, "-o", out, "--config", cfg),
                   f"{cfg}:2: unknown key 'normalisers' (did you mean 'normalizers'?) for verifier 'fuzzy'",
                   "valid keys: binary, normalizers, scorer, target, threshold")
    assert not out.exists()
    nested = tmp_path / "cascade.yaml"
    nested.write_text("name: cascade\nstages:\n  - role: gate\n    verifier: schema\n  - role: accept\n"
                      "    verifier:\n      name: fuzzy\n      normalisers: [lower]\n")
    one_line_error(run("-i", rows, "-o", out, "--config", nested), f"{nested}:8: unknown key 'normalisers'")
    as_json = tmp_path / "v.json"
    as_json.write_text(json.dumps({"name": "any", "verifiers": ["strict", {"name": "tool_cal"}]}))
    one_line_error(run("-i", rows, "-o", out, "--config", as_json),
                   f"{as_json}: unknown verifier 'tool_cal' (did you mean 'tool_call'")
    no_name = tmp_path / "noname.yaml"
    no_name.write_text("threshold: 90\n")
    one_line_error(run("-i", rows, "-o", out, "--config", no_name), str(no_name), "'name' field")
    bad_value = tmp_path / "value.yaml"
    bad_value.write_text("name: fuzzy\nthreshold: 120\n")
    one_line_error(run("-i", rows, "-o", out, "--config", bad_value), str(bad_value), "threshold must be in [0, 100]")
    assert not out.exists()


@pytest.mark.parametrize("spec", [
    {"name": "fuzzy", "normalisers": ["lower"]},
    {"name": "cascade", "stages": [{"role": "gate", "verifier": "schema"},
                                   {"role": "accept", "verifier": {"name": "fuzzy", "normalisers": []}}]},
    {"name": "all", "verifiers": ["schema", {"name": "fuzzy", "normalisers": []}]},
    {"name": "any", "verifiers": [{"name": "fuzzy", "normalisers": []}]},
    {"name": "by_tool", "routes": {"search": {"name": "fuzzy", "normalisers": []}}},
    {"name": "tool_call", "text_verifier": {"name": "fuzzy", "normalisers": []}},
])
def test_build_verifier_rejects_unknown_parameters_in_python_too(spec):
    with pytest.raises(ConfigError, match=r"unknown key 'normalisers' \(did you mean 'normalizers'\?\) for verifier "
                                          r"'fuzzy'; valid keys: binary, normalizers") as err:
        build_verifier(spec)
    assert isinstance(err.value, ValueError) and err.value.key == "normalisers"
    with pytest.raises(ConfigError, match=r"unknown verifier 'fuzzzy' \(did you mean 'fuzzy'\?\); known: all, any"):
        build_verifier({"name": "by_tool", "text": "fuzzzy"})
    assert build_verifier({"name": "fuzzy", "normalizers": ["lower"]}).config()["normalizers"] == ["lower"]


# --------------------------------------------------------------------------- files that cannot be read


def test_broken_yaml_in_the_config_is_one_line_with_file_and_line(rows, tmp_path):
    cfg = tmp_path / "v.yaml"
    cfg.write_text("name: fuzzy\nthreshold: [90\n")
    one_line_error(run("-i", rows, "-o", tmp_path / "out.jsonl", "--config", cfg), f"{cfg}:3: not valid YAML")
    one_line_error(run("--config", cfg, "--expected", "a", "--action", "a"), f"{cfg}:3: not valid YAML")


def test_a_folder_where_a_file_is_expected(rows, tmp_path):
    folder = tmp_path / "folder"
    folder.mkdir()
    one_line_error(run("-i", folder, "-o", tmp_path / "out.jsonl", "--verifier", "fuzzy"), f"-i {folder}: is a folder")
    one_line_error(run("-i", rows, "-o", tmp_path / "out.jsonl", "--config", folder), f"--config {folder}: is a folder")
    one_line_error(run("-i", rows, "-o", folder, "--verifier", "fuzzy"), f"-o {folder}: is a folder",
                   str(folder / "results.jsonl"))
    one_line_error(run("--verifier", "fuzzy", "--expected", "a", "--action", "a", "--tools", folder), f"--tools {folder}")


def test_a_non_utf8_line_is_one_error_row_and_the_other_rows_are_verified(tmp_path):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_bytes(json.dumps(GOOD).encode() + b"\n" + b'{"id": "caf\xe9", "expected": "a", "action": "a"}\n'
                    + json.dumps(OTHER).encode() + b"\n")
    result = run("-i", src, "-o", out, "--verifier", "fuzzy")
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    got = results(out)
    assert [r["id"] for r in got] == ["a", None, "b"]
    assert got[0]["passed"] is True and got[2]["passed"] is False and got[2]["error"] is None
    assert f"{src}:2" in got[1]["error"] and "UTF-8" in got[1]["error"]
    assert f"{src}:2" in " ".join(result.output.split())  # the bad row is reported on screen too


def test_a_non_utf8_config_is_one_line_naming_the_file(rows, tmp_path):
    cfg = tmp_path / "v.yaml"
    cfg.write_bytes(b"name: fuzzy\n# caf\xe9\n")
    one_line_error(run("-i", rows, "-o", tmp_path / "out.jsonl", "--config", cfg), f"{cfg}:2: not UTF-8 text",
                   "save the file as UTF-8")


def test_bad_tools_file_for_a_one_off_is_one_line(tmp_path):
    tools = tmp_path / "tools.json"
    tools.write_text('[{"type": "function",]\n')
    one_line_error(run("--verifier", "tool_call", "--expected", "a", "--action", "a", "--tools", tools),
                   f"--tools {tools}:1: not valid JSON")


# --------------------------------------------------------------------------- rows


def test_rows_without_expected_or_action_are_error_rows_naming_file_line_and_field(tmp_path):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("\n".join(json.dumps(r) for r in (GOOD, {"id": "x", "action": "a"}, {"id": "y", "expected": "a"},
                                                     OTHER)) + "\n")
    result = run("-i", src, "-o", out, "--verifier", "fuzzy")
    assert result.exit_code == 0, result.output
    got = results(out)
    assert [r["id"] for r in got] == ["a", "x", "y", "b"]
    assert got[1]["error"] == f"{src}:2: field 'expected' is missing (an assistant message or text)"
    assert got[2]["error"] == f"{src}:3: field 'action' is missing (an assistant message or text)"
    assert got[0]["error"] is None and got[3]["error"] is None and got[0]["passed"] is True


# --------------------------------------------------------------------------- the installed command


def test_the_real_command_prints_one_line_and_no_traceback(rows, tmp_path):
    cfg = tmp_path / "v.yaml"
    cfg.write_text("name: fuzzy\nnormalisers: [lower]\n")
    for args, needle in (
        (["--verifier", "nope"], "unknown verifier 'nope'"),
        (["--config", str(cfg)], f"{cfg}:2: unknown key 'normalisers' (did you mean 'normalizers'?)"),
        (["--config", str(tmp_path)], "is a folder"),
    ):
        proc = subprocess.run([sys.executable, "-c", "from pivot_envs.cli import main; main()", "verify", "-i", str(rows),
                               "-o", str(tmp_path / "out.jsonl"), *args],
                              capture_output=True, text=True, timeout=120, env={"COLUMNS": "80", **_env()})
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr and proc.stdout == ""
        assert len(proc.stderr.strip().splitlines()) == 1 and needle in proc.stderr, proc.stderr
    assert not (tmp_path / "out.jsonl").exists()


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k != "COLUMNS"}
