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


def test_a_parts_seconds_count_every_call_that_worked_on_it(tmp_path, monkeypatch):
    """An arm's part (here its training) interrupted once and finished by a second call: ``parts/train.json``
    keeps both calls' wall time in ``seconds``, and the finishing call's own timing in ``last_call_seconds``."""
    import time

    from pivot_envs.experiments import arms

    per_arm = arms.ArmSettings(max_new_tokens=8, steps=4, pivots_per_step=2, group_size=2, beta=0.0, eval_k=1)
    settings = arms.RunSettings(root=str(tmp_path), domain="terminal", base_model="m", val_pivots="v",
                                test_pivots="t", max_context_tokens=64, per_arm=per_arm)
    spec = arms.RunSpec("sft", 0, evals=("test",))
    calls = []

    def part(spec, settings, name, folder):
        calls.append(name)
        time.sleep(0.2)
        if len(calls) == 1:
            raise KeyboardInterrupt  # the first call is stopped mid-training
        return {"kind": "sft", "steps": 4, "seconds": 0.05}

    monkeypatch.setattr(arms, "_run_part", part)
    with pytest.raises(KeyboardInterrupt):
        arms.execute_part(spec, settings, "train")
    assert not arms.part_done(spec, settings, "train")
    result = arms.execute_part(spec, settings, "train")
    saved = json.loads((arms.run_dir(spec, settings) / "parts" / "train.json").read_text())
    assert saved == result and calls == ["train", "train"]
    assert saved["last_call_seconds"] == 0.05
    assert saved["seconds"] >= 0.4  # two calls of 0.2 s each
    assert arms.parts_seconds(arms.run_dir(spec, settings)) == saved["seconds"]  # what the run cost


def test_the_report_says_when_the_stage_clock_missed_the_runs_work():
    """A demo resumed over calls made before its stage clock was kept: its stages hold 60 min, its runs' parts
    180 min by their own clocks. The report's wall time is the larger, said to be a lower bound."""
    from pivot_envs.experiments.work_time import least_wall_seconds, runs_seconds_lines

    stages = {"data": 300.0, "profile": 300.0, "select": 1200.0, "arms": 1800.0}
    missed = {"wall_seconds": 3600.0, "stage_seconds": stages, "timings": {"runs_s": 10800.0},
              "settings": {"workers": 1}}
    assert least_wall_seconds(missed) == 600.0 + 10800.0
    line = " ".join(runs_seconds_lines(missed))
    assert "took 10800 s by their parts' own clocks" in line and "took at least 190.0 min" in line
    whole = {**missed, "timings": {"runs_s": 2950.0}}  # the runs fit inside their stages: nothing missed
    assert least_wall_seconds(whole) == 3600.0 and "missed" not in " ".join(runs_seconds_lines(whole))
    two = {**missed, "timings": {"runs_s": 5800.0}, "settings": {"workers": 2}}  # two runs at once share the wall
    assert least_wall_seconds(two) == 3600.0
    assert runs_seconds_lines({"wall_seconds": 1.0, "stage_seconds": stages, "timings": {}}) == []
