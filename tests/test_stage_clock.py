"""The demo's stage clock: a stage's time is kept over resumed calls, interrupted ones included."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap

import pytest

from pivot_envs.experiments.stage_clock import StageClock, sigterm_as_exit


def test_time_adds_up_over_calls_and_a_failed_stage_still_counts(tmp_path):
    path = tmp_path / "timings.json"
    assert StageClock(path).run("data", lambda: 7) == 7

    def broken():
        raise RuntimeError("stage failed")

    with pytest.raises(RuntimeError, match="stage failed"):
        StageClock(path).run("select", broken)
    first = json.loads(path.read_text())
    assert set(first) == {"data", "select"}
    again = StageClock(path)  # a resumed call reads what the earlier ones spent
    again.add("select", 5.0)
    assert again.seconds["select"] == pytest.approx(first["select"] + 5.0, abs=0.01)
    assert again.total() == pytest.approx(first["data"] + first["select"] + 5.0, abs=0.02)


def test_a_sigterm_mid_stage_writes_the_time_spent_and_exits_143(tmp_path):
    path = tmp_path / "timings.json"
    script = textwrap.dedent(f"""
        import time
        from pathlib import Path
        from pivot_envs.experiments.stage_clock import StageClock, sigterm_as_exit

        def stage():
            print("started", flush=True)
            time.sleep(120)

        with sigterm_as_exit():
            StageClock(Path({str(path)!r})).run("arms", stage)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "started"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 143
    finally:
        proc.kill()
    seconds = json.loads(path.read_text())
    assert list(seconds) == ["arms"] and seconds["arms"] >= 0


def test_the_default_sigterm_handler_is_back_after_the_block():
    outer = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        with sigterm_as_exit():
            assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
            with pytest.raises(SystemExit) as exited:
                signal.raise_signal(signal.SIGTERM)
            assert exited.value.code == 143
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, outer)
