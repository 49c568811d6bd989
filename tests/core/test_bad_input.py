"""Bad input a new user produces: every command stops with ONE line naming the culprit, or skips and keeps the rest.

Each CLI test runs the real command (typer's runner on ``pivot_envs.cli.app``) and checks the exit code,
that the message names the file and line (or the flag), that no exception escaped (no traceback), and
that good rows are kept (``--skip-bad``) or that nothing good was overwritten.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from pivot_envs.cli import app
from pivot_envs.cli.common import user_errors
from pivot_envs.formats import detect_format, read_pivots, read_trajectories, write_pivots
from pivot_envs.jsonl import BadRowError, ReadReport, iter_json_lines, write_jsonl
from pivot_envs.pipeline.extract import ExtractOptions, extract_pivots
from pivot_envs.types import Trajectory

runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def assert_one_line_error(result, *needles: str) -> str:
    """Non-zero exit through typer.Exit (no escaped exception), one error line holding every needle."""
    assert result.exit_code not in (0, None), result.output
    assert isinstance(result.exception, SystemExit), f"escaped {result.exception!r}\n{result.output}"
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.output
    for needle in needles:
        assert needle in errors[0], f"{needle!r} not in {errors[0]!r}"
    return errors[0]


def assert_ok(result):
    assert result.exit_code == 0, result.output
    assert result.exception is None, repr(result.exception)


def row(word: str) -> dict:
    """A good OpenAI chat row with one tool-call turn and one text turn (2 candidates)."""
    return {"messages": [
        {"role": "user", "content": f"look up {word}"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": json.dumps({"q": word})}}]},
        {"role": "tool", "tool_call_id": "c1", "content": f"{word}: found"},
        {"role": "assistant", "content": f"{word} is found"},
    ], "reward": 1.0}


def line(obj) -> bytes:
    return json.dumps(obj, ensure_ascii=False).encode()


def write_lines(path: Path, lines: list[bytes]) -> Path:
    data = b"\n".join(lines) + b"\n"
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


LATIN1 = line(row("café")).decode().encode("latin-1")  # one non-UTF-8 byte (0xe9)


def out_rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


# --------------------------------------------------------------------------- 1. non-UTF-8 bytes


@pytest.mark.parametrize("name", ["t.jsonl", "t.jsonl.gz"])
def test_extract_non_utf8_line_names_file_line_byte_and_skip_bad_keeps_the_rest(tmp_path, name):
    src = write_lines(tmp_path / name, [line(row("alpha")), LATIN1, line(row("gamma"))])
    out = tmp_path / "p.jsonl"
    err = assert_one_line_error(run("extract", src, "-o", out, "-d", "tool_use"),
                                f"{name}:2:", "not valid UTF-8", "0xe9", "--skip-bad")
    column = LATIN1.index(b"\xe9") + 1  # the line is ASCII before the bad byte
    assert f"at column {column}" in err
    assert not out.exists()
    result = run("extract", src, "-o", out, "-d", "tool_use", "--skip-bad")
    assert_ok(result)
    assert len(out_rows(out)) == 4  # both good rows' two turns each
    assert "not valid UTF-8" in result.output and f"{name}:2" in result.output


def test_non_utf8_first_line_does_not_hide_the_format(tmp_path):
    src = write_lines(tmp_path / "t.jsonl", [LATIN1, line(row("beta"))])
    assert detect_format(src) == "openai"
    report = ReadReport()
    trajs = read_trajectories(src, skip_bad=True, report=report)
    assert len(trajs) == 1 and report.read == 1 and report.n_skipped == 1
    assert list(report.examples.values())[0].startswith(f"{src}:1: ")


def _pivot_lines(tmp_path: Path, n_traj: int = 3) -> list[bytes]:
    pivots, _ = extract_pivots([Trajectory(messages=row(w)["messages"]) for w in ("a", "b", "c")[:n_traj]], "tool_use")
    write_pivots(pivots, tmp_path / "good.jsonl")
    return (tmp_path / "good.jsonl").read_bytes().splitlines()


@pytest.mark.parametrize("name", ["p.jsonl", "p.jsonl.gz"])
def test_read_pivots_skip_bad_keeps_good_pivots_and_names_file_line(tmp_path, name):
    """What `train`/`eval`/`profile` read pivots with: one bad byte costs one pivot."""
    lines = _pivot_lines(tmp_path)
    lines[2] = lines[2][:40] + b"\xff" + lines[2][41:]
    src = write_lines(tmp_path / name, lines)
    with pytest.raises(BadRowError, match=rf"{name}:3: .*not valid UTF-8: byte 0xff at column 41"):
        read_pivots(src)
    report = ReadReport()
    pivots = read_pivots(src, skip_bad=True, report=report)
    assert len(pivots) == len(lines) - 1 and report.n_skipped == 1
    assert f"{name}:3:" in list(report.examples.values())[0]


def test_env_show_non_utf8_pivot_file_and_skip_bad(tmp_path):
    lines = _pivot_lines(tmp_path)
    lines[1] = lines[1][:40] + b"\xff" + lines[1][41:]
    src = write_lines(tmp_path / "p.jsonl", lines)
    assert_one_line_error(run("env", "show", "--pivots", src), "p.jsonl:2:", "not valid UTF-8", "--skip-bad")
    result = run("env", "show", "--pivots", src, "--skip-bad", "--index", len(lines) - 2)
    assert_ok(result)
    assert f"({len(lines) - 1} pivots in this set)" in result.output and "skipped 1 bad row" in result.output


def test_traj_document_with_bad_utf8_names_its_line(tmp_path):
    src = tmp_path / "run.traj"
    src.write_bytes(b'{"history": [\n  {"role": "user", "content": "caf\xe9"}\n]}\n')
    assert_one_line_error(run("extract", src, "-o", tmp_path / "p.jsonl", "-d", "swe"),
                          "run.traj:2:", "not valid UTF-8: byte 0xe9 at column 35")


# --------------------------------------------------------------------------- 2. flag ranges


@pytest.mark.parametrize("value", ["-1", "0"])
def test_extract_rejects_max_turns_below_one(tmp_path, value):
    src = write_lines(tmp_path / "t.jsonl", [line(row("a"))])
    out = tmp_path / "p.jsonl"
    result = run("extract", src, "-o", out, "-d", "tool_use", "--max-turns", value)
    assert_one_line_error(result, f"--max-turns {value}", "at least 1")
    assert not out.exists()
    with pytest.raises(ValueError, match="max_turns_per_trajectory"):
        ExtractOptions(max_turns_per_trajectory=int(value))
    assert_ok(run("extract", src, "-o", out, "-d", "tool_use", "--max-turns", "1"))
    assert len(out_rows(out)) == 1


def test_extract_rejects_nan_min_reward_and_agent_ref_without_nemo_gym(tmp_path):
    src = write_lines(tmp_path / "t.jsonl", [line(row("a"))])
    assert_one_line_error(run("extract", src, "-o", tmp_path / "p.jsonl", "-d", "tool_use", "--min-reward", "nan"),
                          "--min-reward")
    assert_one_line_error(run("extract", src, "-o", tmp_path / "p.jsonl", "-d", "tool_use", "--agent-ref", "x"),
                          "--agent-ref", "nemo_gym")


@pytest.mark.parametrize("index", ["-1", "6", "100"])
def test_env_show_index_out_of_range_names_flag_and_valid_range(tmp_path, index):
    src = write_lines(tmp_path / "p.jsonl", _pivot_lines(tmp_path))  # 3 trajectories x 2 turns = 6 pivots
    assert_one_line_error(run("env", "show", "--pivots", src, "--index", index), f"--index {index}", "0..5")
    assert_ok(run("env", "show", "--pivots", src, "--index", "5"))
    assert_one_line_error(run("env", "show", "--pivots", src, "--last", "-1"), "--last -1")


# --------------------------------------------------------------------------- 3. JSON error columns


def test_truncated_line_reports_the_column_where_it_ends(tmp_path):
    truncated = '{"messages": [{"role": "user"'
    src = tmp_path / "t.jsonl"
    src.write_text(json.dumps(row("a")) + "\n" + truncated + "\n" + json.dumps(row("b")) + "\n")
    out = tmp_path / "p.jsonl"
    assert_one_line_error(run("extract", src, "-o", out, "-d", "tool_use"),
                          "t.jsonl:2:", "invalid JSON", f"at column {len(truncated) + 1}")
    assert_ok(run("extract", src, "-o", out, "-d", "tool_use", "--skip-bad"))
    assert len(out_rows(out)) == 4


def test_json_error_columns_in_the_middle_and_with_crlf_line_ends(tmp_path):
    src = tmp_path / "t.jsonl"
    src.write_bytes(b'{"a": 1,, "b": 2}\r\n{"a": 1}\r\n')
    (_, err), (_, ok) = list(iter_json_lines(src))
    assert isinstance(err, BadRowError) and "at column 9" in str(err) and ok == {"a": 1}


# --------------------------------------------------------------------------- 4. folders and paths


def test_folder_where_a_file_is_expected(tmp_path):
    folder = tmp_path / "runs"
    folder.mkdir()
    src = write_lines(tmp_path / "t.jsonl", [line(row("a"))])
    assert_one_line_error(run("extract", folder, "-o", tmp_path / "p.jsonl", "-d", "tool_use"), str(folder), ".traj")
    assert_one_line_error(run("extract", folder, "--format", "openai", "-o", tmp_path / "p.jsonl", "-d", "tool_use"),
                          str(folder), "is a folder")
    assert_one_line_error(run("extract", src, "-o", folder, "-d", "tool_use"), "-o/--output", str(folder), "is a folder")
    assert_one_line_error(run("extract", src, "-o", src / "p.jsonl", "-d", "tool_use"),
                          "-o/--output", f"{src} is a file, not a folder")
    assert_one_line_error(run("env", "show", "--pivots", folder), str(folder), "is a folder")
    with pytest.raises(ValueError, match="is a folder"):
        read_pivots(folder)


@pytest.mark.parametrize("exc, needles", [
    (IsADirectoryError(21, "Is a directory", "/data/runs"), ["/data/runs", "is a folder"]),
    (PermissionError(13, "Permission denied", "/data/out.jsonl"), ["/data/out.jsonl", "permission denied"]),
    (FileNotFoundError(2, "No such file or directory", "/data/x.jsonl"), ["/data/x.jsonl", "no such file"]),
    (NotADirectoryError(20, "Not a directory", "/data/t.jsonl/p.jsonl"), ["/data/t.jsonl/p.jsonl", "is a file"]),
    (OSError(28, "No space left on device", "/data/out.jsonl"), ["/data/out.jsonl", "No space left"]),
    (FileNotFoundError("x.jsonl: no such pivot file"), ["x.jsonl: no such pivot file"]),
    (UnicodeDecodeError("utf-8", b"caf\xe9", 3, 4, "invalid continuation byte"), ["not valid UTF-8", "0xe9"]),
    (gzip.BadGzipFile("Not a gzipped file (b'{\"')"), [".gz", "not valid gzip"]),
])
def test_user_errors_turns_path_errors_into_one_line_naming_the_path(capsys, exc, needles):
    with pytest.raises(typer.Exit) as info:
        with user_errors():
            raise exc
    assert info.value.exit_code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error:"), err
    for needle in needles:
        assert needle in err


def test_user_errors_leaves_other_os_errors_alone():
    with pytest.raises(ConnectionRefusedError):
        with user_errors():
            raise ConnectionRefusedError(111, "Connection refused")


# --------------------------------------------------------------------------- 5. what a new user gives


def test_empty_blank_array_and_pretty_printed_files(tmp_path):
    out = tmp_path / "p.jsonl"
    cases = {
        "empty.jsonl": ("", ["empty.jsonl", "empty"]),
        "blank.jsonl": ("\n  \n\n", ["blank.jsonl", "empty"]),
        "array.jsonl": (json.dumps([row("a"), row("b")]), ["array.jsonl:1", "JSON array", "jq -c"]),
        "pretty.jsonl": (json.dumps(row("a"), indent=2), ["pretty.jsonl", "pretty-printed", "one object per line"]),
        "array.json": (json.dumps([row("a")]), ["array.json", "JSON lines", "jq -c"]),
        "numbers.jsonl": ("1\n2\n", ["numbers.jsonl", "no JSON object", "line 1 holds a number"]),
    }
    for name, (text, needles) in cases.items():
        (tmp_path / name).write_text(text)
        for extra in ([], ["--skip-bad"]):
            assert_one_line_error(run("extract", tmp_path / name, "-o", out, "-d", "tool_use", *extra), *needles)
        assert_one_line_error(run("env", "show", "--pivots", tmp_path / name), name)
    assert not out.exists()


def test_missing_file(tmp_path):
    missing = tmp_path / "nope.jsonl"
    assert_one_line_error(run("extract", missing, "-o", tmp_path / "p.jsonl", "-d", "tool_use"), str(missing), "no such")
    assert_one_line_error(run("env", "show", "--pivots", missing), str(missing), "no such")


def test_rows_that_are_json_but_not_objects_are_bad_rows(tmp_path):
    src = write_lines(tmp_path / "t.jsonl", [line(row("a")), b"[1, 2]", b'"text"', b"null", line(row("b"))])
    out = tmp_path / "p.jsonl"
    assert_one_line_error(run("extract", src, "-o", out, "-d", "tool_use"), "t.jsonl:2:", "JSON object", "got a list")
    result = run("extract", src, "-o", out, "-d", "tool_use", "--skip-bad")
    assert_ok(result)
    assert len(out_rows(out)) == 4


def test_all_rows_bad_with_skip_bad_fails_and_keeps_the_old_output(tmp_path):
    src = write_lines(tmp_path / "t.jsonl", [b'{"messages": "hi"}', b'{"messages": []}'])
    out = tmp_path / "p.jsonl"
    out.write_text("previous good output\n")
    assert_one_line_error(run("extract", src, "-o", out, "-d", "tool_use", "--skip-bad"), "t.jsonl", "no good rows")
    assert out.read_text() == "previous good output\n"


def test_bom_and_crlf_are_read(tmp_path):
    src = tmp_path / "t.jsonl"
    src.write_bytes(b"\xef\xbb\xbf" + line(row("a")) + b"\r\n" + line(row("b")) + b"\r\n")
    out = tmp_path / "p.jsonl"
    assert_ok(run("extract", src, "-o", out, "-d", "tool_use"))
    assert len(out_rows(out)) == 4


def test_gz_that_is_not_gzip_and_truncated_gz(tmp_path):
    out = tmp_path / "p.jsonl"
    fake = tmp_path / "plain.jsonl.gz"
    fake.write_bytes(line(row("a")) + b"\n")
    assert_one_line_error(run("extract", fake, "-o", out, "-d", "tool_use"), "plain.jsonl.gz", "not a gzip file")
    data = gzip.compress(b"".join(line(row(f"w{i}")) + b"\n" for i in range(40)))
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(data[: len(data) - 12])
    assert_one_line_error(run("extract", cut, "-o", out, "-d", "tool_use"), "cut.jsonl.gz:", "truncated", "--skip-bad")
    result = run("extract", cut, "-o", out, "-d", "tool_use", "--skip-bad")
    assert_ok(result)
    assert len(out_rows(out)) >= 2 * 30  # the rows before the damage are kept


def test_bad_alternatives_are_a_bad_row_not_a_crash(tmp_path):
    src = write_lines(tmp_path / "t.jsonl", [line({**row("a"), "alternatives": [1]}), line(row("b"))])
    out = tmp_path / "p.jsonl"
    assert_one_line_error(run("extract", src, "-o", out, "-d", "tool_use"), "t.jsonl:1:", "alternatives")
    assert_ok(run("extract", src, "-o", out, "-d", "tool_use", "--skip-bad"))
    assert len(out_rows(out)) == 2


def test_user_data_that_looks_like_markup_is_printed_verbatim(tmp_path):
    bad = row("a")
    bad["messages"][0]["role"] = "[/x]"
    src = write_lines(tmp_path / "t.jsonl", [line(bad)])
    assert_one_line_error(run("extract", src, "-o", tmp_path / "p.jsonl", "-d", "tool_use"), "t.jsonl:1:", "'[/x]'")


def test_a_failed_write_keeps_the_existing_file(tmp_path):
    out = tmp_path / "p.jsonl.gz"
    write_jsonl(out, [{"n": 1}])
    before = out.read_bytes()

    def rows():
        yield {"n": 2}
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        write_jsonl(out, rows())
    assert out.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["p.jsonl.gz"]
    assert write_jsonl(out, [{"n": 3}]) == 1 and [r for _, r in iter_json_lines(out)] == [{"n": 3}]


def test_real_cli_process_prints_one_line_and_no_traceback(tmp_path):
    src = write_lines(tmp_path / "t.jsonl", [line(row("a")), LATIN1])
    proc = subprocess.run([sys.executable, "-c", "from pivot_envs.cli import main; main()", "extract", str(src),
                           "-o", str(tmp_path / "p.jsonl"), "-d", "tool_use"], capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()] and f"{src}:2:" in proc.stderr


@pytest.mark.parametrize("args, culprit", [
    (["data", "generate", "--domain", "search", "--n", "0", "-o", "x.jsonl"], "'--n'"),
    (["env", "show", "--index", "abc"], "'--index'"),
    (["no-such-command"], "no-such-command"),
])
def test_usage_mistakes_are_one_line_through_the_console_script(tmp_path, args, culprit):
    proc = subprocess.run([sys.executable, "-c", "from pivot_envs.cli import main; main()", *args],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and culprit in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
