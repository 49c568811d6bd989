"""No silent multi-process runs: SFT trains data-parallel (sharded by FSDP2) under ``torchrun -m pivot_envs.cli train``, a checkpoint
of another world size is refused, a rank whose output folder is private fails at the start, and ``profile --ray``
reserves GPUs per actor. Real processes: torchrun on gloo, bubblewrap for the private folder, Ray local."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.trainers.test_pivotrl_trainer import build_toy  # noqa: E402

from pivot_envs.trainers.metrics import read_metrics  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> tuple[Path, Path]:
    return build_toy(tmp_path_factory.mktemp("toy"))


def sft_config(toy, out: Path, path: Path, **extra) -> Path:
    model, pivots = toy
    cfg = {"algorithm": "sft", "model": str(model), "pivots": str(pivots), "domain": "tool_use",
           "output_dir": str(out), "steps": 2, "batch_size": 4, "grad_accum_steps": 2, "lr": 3e-3, "save_every": 2,
           "plots": False, "device": "cpu", "log_every": 1, **extra}
    path.write_text(json.dumps(cfg))
    return path


def env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo", "PYTHONUNBUFFERED": "1"}


@pytest.mark.slow
def test_torchrun_module_cli_trains_sft_data_parallel_and_a_resume_under_another_world_size_is_refused(toy, tmp_path):
    out = tmp_path / "sft"
    cfg = sft_config(toy, out, tmp_path / "sft.json", sharding="fsdp")  # FSDP2: checkpoint and final gathered whole
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2",
           "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
           "-m", "pivot_envs.cli", "train", "--config", str(cfg)]
    proc = subprocess.run(cmd, env=env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]

    rows = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]  # one writer: rank 0 (two silent runs would write 4 rows)
    assert all(r["world_size"] == 2 and r["sharding"] == "fsdp" for r in rows)
    assert all(0 < r["params_local"] <= 0.55 * r["params_total"] for r in rows)  # rank 0 holds about half
    # the step of one process on the whole batch (each rank took half of it): same tokens, same loss
    from pivot_envs.trainers.sft import SFTConfig, train_sft

    single = train_sft(SFTConfig.from_file(cfg, overrides=[f"output_dir={tmp_path / 'single'}"]))
    one = read_metrics(single.metrics_path)
    assert [r["loss_tokens"] for r in rows] == [r["loss_tokens"] for r in one] and one[0]["world_size"] == 1
    assert [r["loss"] for r in rows] == pytest.approx([r["loss"] for r in one], rel=1e-5)
    checkpoint = out / "checkpoint-000002"
    assert (checkpoint / "rng_rank0.pt").exists() and (checkpoint / "rng_rank1.pt").exists()
    from safetensors.torch import load_file

    final, initial = load_file(str(out / "final" / "model.safetensors")), load_file(str(toy[0] / "model.safetensors"))
    assert set(final) == set(initial) and any(not torch.equal(final[k], initial[k]) for k in initial)  # whole, trained

    with pytest.raises(ValueError, match=r"written by 2 process\(es\) and this run has 1"):
        train_sft(SFTConfig.from_file(cfg, overrides=["resume_from=latest"]))


@pytest.mark.slow
@pytest.mark.slow
def test_a_one_process_command_under_torchrun_is_refused_before_it_writes(tmp_path):
    """Only ``train`` is one job over torchrun's processes: ``profile`` under it would profile twice into one
    file, so every process exits 2 with the fix and nothing is written."""
    out = tmp_path / "prof.jsonl"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2",
           "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
           "-m", "pivot_envs.cli", "profile", "--pivots", "bundled:tool_use:test", "--agent", "noisy_expert:0.5",
           "-k", "2", "-o", str(out)]
    proc = subprocess.run(cmd, env=env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and not out.exists(), proc.stdout[-2000:] + proc.stderr[-4000:]
    text = proc.stdout + proc.stderr
    assert text.count("pivot-envs profile runs in one process, but this launch started 2") == 2  # each rank says so
    assert "Run it without torchrun" in text


def test_a_rank_whose_output_folder_is_private_fails_at_the_start_with_the_fix(toy, tmp_path):
    from pivot_envs.verifiers.sandbox.bwrap import find_bwrap

    bwrap = find_bwrap()
    if bwrap is None or subprocess.run([bwrap, "--dev-bind", "/", "/", "true"], capture_output=True).returncode:
        pytest.skip("bubblewrap cannot run here")
    runs = tmp_path / "runs"
    runs.mkdir()
    cfg = sft_config(toy, runs / "sft", tmp_path / "sft.json")
    port = str(free_port())
    procs = []
    for rank in (0, 1):
        cmd = [sys.executable, "-m", "pivot_envs.cli", "train", "--config", str(cfg)]
        if rank == 1:  # rank 1 sees its own empty runs/ folder, as a node without the shared file system would
            cmd = [bwrap, "--dev-bind", "/", "/", "--tmpfs", str(runs), "--"] + cmd
        procs.append(subprocess.Popen(cmd, env={**env(), "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2",
                                                "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port},
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = [p.communicate(timeout=300) for p in procs]
    for p, (stdout, stderr) in zip(procs, results):
        assert p.returncode != 0, stdout[-2000:] + stderr[-2000:]
        text = " ".join((stdout + stderr).split())
        assert "error: output_dir" in text and "is not one folder shared by all 2 processes" in text, text[-3000:]
        assert "rank 1 on" in text and "Traceback" not in stderr  # a one-line error that names the rank
        assert "a file system every node mounts at the same path" in text
    assert not (runs / "sft" / "metrics.jsonl").exists() and not list((runs / "sft").glob("checkpoint-*"))


@pytest.mark.slow
def test_profile_ray_gpus_reserves_gpus_per_actor(tmp_path):
    ray = pytest.importorskip("ray")
    import typer
    from typer.testing import CliRunner

    from pivot_envs.cli.profile_cmd import register

    app = typer.Typer()
    register(app)
    base = ["profile", "--pivots", "bundled:tool_use:test", "--agent", "noisy_expert:0.5", "-k", "2",
            "--batch-pivots", "64", "--ray", "local", "--ray-workers", "1"]
    single = CliRunner().invoke(app, base[:-4] + ["-o", str(tmp_path / "single.jsonl")])
    assert single.exit_code == 0, single.output
    ray.init(num_cpus=1, num_gpus=1, include_dashboard=False, log_to_driver=False)  # one (declared) GPU
    try:
        ok = CliRunner().invoke(app, base + ["--ray-gpus", "1", "-o", str(tmp_path / "gpu.jsonl")])
        too_many = CliRunner().invoke(app, base + ["--ray-gpus", "2", "-o", str(tmp_path / "two.jsonl")])
    finally:
        ray.shutdown()
    assert ok.exit_code == 0, ok.output
    assert (tmp_path / "gpu.jsonl").read_text() == (tmp_path / "single.jsonl").read_text()
    assert too_many.exit_code == 2 and not (tmp_path / "two.jsonl").exists()
    assert "--ray-gpus 2: the Ray cluster (local) has 1 GPU(s)" in " ".join(too_many.output.split())
    no_ray = CliRunner().invoke(app, base[:-4] + ["--ray-gpus", "1", "-o", str(tmp_path / "x.jsonl")])
    assert no_ray.exit_code == 2 and "give --ray local" in no_ray.output


def test_the_episode_trainer_refuses_several_processes_before_loading_anything(tmp_path, monkeypatch):
    from pivot_envs.config import ConfigError
    from pivot_envs.trainers.episode_rl import EpisodeRLTrainer

    monkeypatch.setenv("WORLD_SIZE", "2")  # as torchrun sets it; the refusal comes before the process group is joined
    with pytest.raises(ConfigError, match=r"runs in one process, but this is one of 2 .*examples/trl_episodes.py"):
        EpisodeRLTrainer({"model": str(tmp_path / "no-model"), "output_dir": str(tmp_path / "run"), "device": "cpu"})
    assert not (tmp_path / "run").exists()
