"""``benchmarks/learning/real_model.py``: runs the demo on a model, passes any other demo option through, and copies the
report where the repository keeps it (here the smoke preset on the tiny model, seconds long)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytest.importorskip("torch")


def _wrapper():
    spec = importlib.util.spec_from_file_location("real_model_benchmark",
                                                  ROOT / "benchmarks" / "learning" / "real_model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_wrapper_passes_demo_options_through_and_copies_the_report(tmp_path):
    if not (Path(sys.executable).parent / "pivot-envs").exists():
        pytest.skip("the wrapper runs the pivot-envs of this interpreter's environment: pip install -e .")
    results = tmp_path / "results"
    code = _wrapper().main(["--model", "tiny", "--out", str(tmp_path / "demo"), "--results", str(results),
                            "--smoke", "--steps", "2", "--rl-lora-r", "2", "--arms", "base,pivotrl"])
    assert code == 0
    report = json.loads((results / "report.json").read_text())
    assert report["settings"]["steps"] == 2 and report["settings"]["rl_lora_r"] == 2
    assert set(report["arms"]) == {"base", "pivotrl"}  # the smoke preset's twelve arms cut to two: options win
    assert "--rl-lora-r 2" in report["command"] and (results / "report.md").exists()
