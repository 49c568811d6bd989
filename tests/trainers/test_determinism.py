"""Runs you can repeat: the same config and seed on the same machine give identical metrics and bitwise identical
weights on the HF engine, run twice or stopped after some steps and resumed (PivotRL and E2E RL).

Every run is a process of its own (``tests/trainers/determinism_run.py``: one torch thread), with its own
``PYTHONHASHSEED``: what a retrain at the same seed does, where anything that follows the iteration order of a
set of strings would part the runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from pivot_envs.trainers.metrics import TIMING_KEYS, read_metrics  # noqa: E402

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "determinism_run.py"
STOPPED = 3
RUN_TIMEOUT_S = 240


def train(trainer: str, config: dict, out: Path, hash_seed: int, stop_after: int = 0) -> subprocess.CompletedProcess:
    """One run of ``config`` into ``out`` in a fresh process."""
    out.mkdir(parents=True, exist_ok=True)
    path = out.parent / f"{out.name}.config.json"
    path.write_text(json.dumps({**config, "output_dir": str(out)}), encoding="utf-8")
    # the checkout the test runs in, ahead of whatever copy an editable install points to (a git worktree's)
    pythonpath = os.pathsep.join(p for p in (str(HERE.parents[1]), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONHASHSEED": str(hash_seed), "OMP_NUM_THREADS": "1", "PYTHONPATH": pythonpath}
    args = [sys.executable, str(SCRIPT), trainer, str(path)] + (["--stop-after", str(stop_after)] if stop_after else [])
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    assert done.returncode == (STOPPED if stop_after else 0), done.stderr[-3000:]
    return done


def weights(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(folder / "final" / "model.safetensors"))


def rows(folder: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in read_metrics(folder / "metrics.jsonl")]


def assert_identical(a: Path, b: Path) -> None:
    ra, rb = rows(a), rows(b)
    assert len(ra) == len(rb)
    for x, y in zip(ra, rb):
        assert x == y, {k: (x.get(k), y.get(k)) for k in set(x) | set(y) if x.get(k) != y.get(k)}
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    parted = [k for k in wa if not torch.equal(wa[k], wb[k])]
    assert not parted, f"weights differ in {parted[:5]}"
    if (a / "samples.jsonl").exists():
        assert (a / "samples.jsonl").read_text() == (b / "samples.jsonl").read_text()


def three_runs(trainer: str, config: dict, root: Path, stop_after: int) -> list[Path]:
    """The run twice (two hash seeds), and once stopped after ``stop_after`` steps and resumed."""
    first, second, cut = root / "first", root / "second", root / "cut"
    train(trainer, config, first, hash_seed=1)
    train(trainer, config, second, hash_seed=2)
    train(trainer, config, cut, hash_seed=3, stop_after=stop_after)
    assert not (cut / "final").exists()
    train(trainer, {**config, "resume_from": "latest"}, cut, hash_seed=4)
    return [first, second, cut]


@pytest.mark.slow
def test_pivotrl_runs_repeat_bitwise_and_a_resumed_run_equals_them(tmp_path):
    from tests.trainers.test_pivotrl_trainer import build_toy

    model, pivots = build_toy(tmp_path / "toy")
    config = dict(model=str(model), pivots=str(pivots), domain="tool_use", verifier="tool_call", steps=5,
                  pivots_per_step=2, group_size=4, max_new_tokens=24, lr=3e-3, lr_schedule="cosine", warmup_steps=1,
                  beta=0.05, num_iterations=2, zero_variance="resample", max_resample=1, num_threads=1,
                  save_every=2, plots=False, device="cpu", seed=7, log_samples=True)
    first, second, cut = three_runs("pivotrl", config, tmp_path, stop_after=3)
    assert not all(torch.equal(v, weights(first)[k]) for k, v in _initial(model).items())  # it trained
    assert_identical(first, second)
    assert_identical(first, cut)


@pytest.mark.slow
def test_e2e_runs_repeat_bitwise_and_a_resumed_run_equals_them(tmp_path, bwrap_ok):
    from tests.trainers.test_episode_rl import TASK
    from pivot_envs.agents.prompting import action_target
    from pivot_envs.episodes import resolve_tasks
    from pivot_envs.jsonl import write_jsonl
    from pivot_envs.models.tiny import build_tiny_model

    tasks = [t for t in resolve_tasks(None, domain="terminal", split="test") if t.id == TASK]
    tasks += [t for t in resolve_tasks(None, domain="terminal", split="test")[:3] if t.id != TASK][:1]
    texts = [m.get("content") or "" for t in tasks for m in t.messages] + [
        action_target(m) for t in tasks for m in t.messages if m["role"] == "assistant"]
    model = build_tiny_model(tmp_path / "model", texts, vocab_size=400, hidden_size=32, n_layers=1, n_heads=2, seed=0)
    write_jsonl(tmp_path / "tasks.jsonl", [t.to_dict() for t in tasks])
    config = dict(model=str(model), domain="terminal", tasks=str(tmp_path / "tasks.jsonl"), steps=3, tasks_per_step=2,
                  group_size=2, max_turns=2, max_new_tokens=16, lr=1e-3, turn_credit=0.5, zero_variance="keep",
                  device="cpu", save_every=1, num_threads=1, plots=False, seed=3)
    first, second, cut = three_runs("e2e", config, tmp_path, stop_after=2)
    assert_identical(first, second)
    assert_identical(first, cut)


def _initial(model: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(model / "model.safetensors"))
