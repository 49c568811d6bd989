"""``sharding: fsdp`` (torch FSDP2) against DDP: two real processes under ``torchrun -m pivot_envs.cli train`` on
CPU (gloo), the toy model, one step from the same weights and seeds (so the sampled tokens are the same)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("torch.distributed.fsdp", reason="FSDP2 needs torch >= 2.6")

from tests.trainers.test_pivotrl_trainer import build_toy, toy_config  # noqa: E402

from pivot_envs.trainers.metrics import read_metrics  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(cfg: dict, path: Path) -> None:
    path.write_text(json.dumps({"algorithm": "pivotrl", **cfg}))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2",
           "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
           "-m", "pivot_envs.cli", "train", "--config", str(path)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]


def weights(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def change(after: dict, before: dict) -> torch.Tensor:
    return torch.cat([(after[k].double() - before[k].double()).flatten() for k in sorted(before)])


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> tuple[Path, Path]:
    return build_toy(tmp_path_factory.mktemp("toy"))


@pytest.mark.slow
def test_fsdp_step_equals_ddp_step_holds_half_the_parameters_and_resumes(toy, tmp_path):
    # beta: pi_0 sharded too; two iterations: a second update with ratios != 1 (the first one's loss is ~0)
    common = dict(pivots_per_step=4, group_size=8, num_iterations=2, beta=0.05, save_every=1, save_total_limit=None)
    ddp = toy_config(toy, tmp_path / "ddp", steps=1, **common).to_dict()
    fsdp = toy_config(toy, tmp_path / "fsdp", steps=2, sharding="fsdp", **common).to_dict()
    torchrun(ddp, tmp_path / "ddp.json")
    torchrun(fsdp, tmp_path / "fsdp.json")
    shutil.copytree(tmp_path / "fsdp", tmp_path / "resumed")  # as if killed after the first checkpoint
    for later in ("checkpoint-000002", "final"):
        shutil.rmtree(tmp_path / "resumed" / later)
    torchrun({**fsdp, "output_dir": str(tmp_path / "resumed"), "resume_from": "latest"}, tmp_path / "resumed.json")

    d_rows, f_rows = read_metrics(tmp_path / "ddp" / "metrics.jsonl"), read_metrics(tmp_path / "fsdp" / "metrics.jsonl")
    d, f = d_rows[0], f_rows[0]
    assert (d["world_size"], d["sharding"], f["world_size"], f["sharding"]) == (2, "none", 2, "fsdp")
    assert d["params_local"] == d["params_total"] == f["params_total"]
    assert f["params_local"] <= 0.55 * f["params_total"]
    assert d["completion_len_mean"] == f["completion_len_mean"] and d["reward_mean"] == f["reward_mean"]  # same tokens
    assert f["loss"] == pytest.approx(d["loss"], rel=1e-4) and f["kl"] == pytest.approx(d["kl"], rel=1e-4, abs=1e-9)

    initial = weights(Path(toy[0]))
    d_change = change(weights(tmp_path / "ddp" / "final"), initial)
    f_change = change(weights(tmp_path / "fsdp" / "checkpoint-000001" / "model"), initial)  # gathered whole
    assert d_change.norm() > 0
    assert (f_change - d_change).norm() <= 0.01 * d_change.norm()

    # resumed from the sharded run's first checkpoint (AdamW state as each rank's shard): the same second step and
    # the same final weights
    shards = tmp_path / "fsdp" / "checkpoint-000001" / "optimizer_shards"
    assert (shards / ".metadata").exists() and len(list(shards.glob("*.distcp"))) == 2
    r_rows = read_metrics(tmp_path / "resumed" / "metrics.jsonl")
    assert r_rows[-1]["step"] == 2 and r_rows[-1]["loss"] == pytest.approx(f_rows[1]["loss"], rel=1e-6)
    f_final, r_final = weights(tmp_path / "fsdp" / "final"), weights(tmp_path / "resumed" / "final")
    assert all(torch.allclose(f_final[k], r_final[k], rtol=0, atol=1e-6) for k in f_final)
    assert set(f_final) == set(initial)  # the final model is whole


@pytest.mark.slow
def test_fsdp_with_lora_bfloat16_gathers_and_activation_checkpointing_trains_and_saves_a_merged_model(toy, tmp_path):
    cfg = toy_config(toy, tmp_path / "lora", steps=1, pivots_per_step=2, group_size=4, sharding="fsdp", lora_r=4,
                     lora_alpha=8, lr=5e-2, beta=0.05, gradient_checkpointing=True, fsdp_param_dtype="bfloat16").to_dict()
    torchrun(cfg, tmp_path / "lora.json")
    row = read_metrics(tmp_path / "lora" / "metrics.jsonl")[0]
    assert row["sharding"] == "fsdp" and row["params_local"] <= 0.55 * row["params_total"]
    assert row["loss"] is not None and row["updated"]
    initial, final = weights(Path(toy[0])), weights(tmp_path / "lora" / "final")
    assert set(final) == set(initial)  # merged into the base: no adapter keys
    assert any(not torch.equal(final[k], initial[k]) for k in initial)
