"""A harness that fails stops the run (issue 37, item 1): never "e2e finished" over a run that trained nothing.

The trainer is the real one behind the real ``pivot-envs train`` command, on the demo's shipped terminal base; the
harness is a real subprocess that fails the way a broken install fails: it writes to stderr and exits non-zero
before its first model call.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("mcp")

from tests.conftest import ROOT, scaled  # noqa: E402

BROKEN = textwrap.dedent("""\
    import sys
    sys.stderr.write("Traceback (most recent call last):\\n  ...\\nModuleNotFoundError: No module named 'my_agent_sdk'\\n")
    sys.exit(3)
""")


def _train(tmp_path: Path, terminal_base: Path, *settings: str) -> subprocess.CompletedProcess:
    harness = tmp_path / "broken_harness.py"
    harness.write_text(BROKEN)
    overrides = [f"model={terminal_base}", f"output_dir={tmp_path / 'run'}", "steps=3", "tasks_per_step=2",
                 "group_size=2", "max_new_tokens=16", "save_every=0", "plots=false", "num_threads=1",
                 f"harness={sys.executable} {harness} {{task_file}}", *settings]
    command = [str(Path(sys.executable).with_name("pivot-envs")), "train", "--config",
               str(ROOT / "examples" / "train_e2e_tiny.yaml")]
    for override in overrides:
        command += ["--set", override]
    return subprocess.run(command, capture_output=True, text=True, timeout=scaled(240), cwd=tmp_path)


def test_a_harness_that_always_fails_stops_pivot_envs_train_with_its_stderr(tmp_path, terminal_base):
    done = _train(tmp_path, terminal_base)
    out = done.stdout + done.stderr
    assert done.returncode != 0, out[-3000:]
    assert "e2e finished" not in out
    assert "broken_harness.py" in out and "failed in 4 of 4 runs at step 1" in out, out[-3000:]
    assert "exited with status 3" in out and "No module named 'my_agent_sdk'" in out, out[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 1  # it stopped after the first step, which is logged with the harness's stderr
    row = rows[0]
    assert row["harness_failures"] == row["harness_runs"] == 4 and row["harness_failure_rate"] == 1.0
    assert row["updated"] is False and row["episode_errors"] == 4  # errors, never four scores of 0
    assert "my_agent_sdk" in row["harness_stderr_tail"] and "status 3" in row["harness_error"]


@pytest.mark.slow
def test_a_run_in_which_no_step_trained_exits_non_zero_and_says_why(tmp_path, terminal_base):
    done = _train(tmp_path, terminal_base, "max_harness_failure_rate=1.0")  # never stop early
    out = done.stdout + done.stderr
    assert done.returncode != 0, out[-3000:]
    assert "no step of the run trained the policy" in out and "12 of 12 harness runs failed" in out, out[-3000:]
    assert "my_agent_sdk" in out
    assert out.count("the harness 'broken_harness.py' failed in 4 of 4 runs") == 3  # a warning per failed step
    assert len((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()) == 3
