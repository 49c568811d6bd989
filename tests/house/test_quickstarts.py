"""The README's three quickstarts, each run as a user runs it: ``python examples/quickstart_*.py`` in a fresh process.

Each example asserts what it shows (a functional pass where strict fails, rewards of a group, a replayed
episode's success, a few PivotRL steps), so a non-zero exit code is a broken quickstart.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import scaled

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def run_example(name: str, *args: str, budget: float) -> str:
    """Run ``examples/NAME`` with this interpreter (the venv's python) from the repository root; its output."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run([sys.executable, str(EXAMPLES / name), *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=scaled(budget))
    assert proc.returncode == 0, f"{name} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return proc.stdout


def test_quickstart_verify_passes_the_equivalent_call_and_strict_does_not():
    out = run_example("quickstart_verify.py", budget=60)
    assert "VerifyResult(reward=1.0, passed=True, verifier='tool_call'" in out
    assert "strict passed: False" in out


def test_quickstart_envs_steps_a_pivot_a_group_and_an_episode():
    out = run_example("quickstart_envs.py", budget=90)
    assert "expert action: 1.0" in out
    assert "group rewards: [1.0, 0.0, 0.0]" in out
    assert "episode: True" in out


@pytest.mark.skipif(importlib.util.find_spec("torch") is None or importlib.util.find_spec("transformers") is None,
                    reason="the training quickstart needs the train extra: pip install -e '.[train]'")
def test_quickstart_train_takes_a_few_pivotrl_steps_on_a_tiny_model(tmp_path):
    out = run_example("quickstart_train.py", str(tmp_path / "run"), budget=120)  # ~25 s on 2 busy cores
    assert "tiny model:" in out and "step 4:" in out
    assert (tmp_path / "run" / "pivotrl" / "final" / "config.json").exists()
    assert len((tmp_path / "run" / "pivotrl" / "metrics.jsonl").read_text().splitlines()) == 4
