"""PivotRL under DDP: two real processes launched by torchrun on CPU (gloo backend).

Each rank samples its own pivots; DDP all-reduces the gradients, so both ranks end every
update with the same weights; rank 0 alone writes metrics, samples and the final model, and
every rank writes its RNG state into the shared checkpoint.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.trainers.test_pivotrl_trainer import build_toy, toy_config  # noqa: E402

from pivot_envs.trainers.metrics import read_metrics  # noqa: E402

SCRIPT = '''
import json, sys
import torch
from pivot_envs.trainers.distributed import unwrap
from pivot_envs.trainers.pivotrl import PivotRLConfig, PivotRLTrainer

trainer = PivotRLTrainer(PivotRLConfig.from_dict(json.loads(open(sys.argv[1]).read())))
rank, world = trainer.dist.rank, trainer.dist.world_size
result = trainer.train()
state = {k: v.detach().cpu().clone() for k, v in unwrap(trainer.policy).state_dict().items()}
torch.save({"rank": rank, "world": world, "state": state, "steps": result.steps}, sys.argv[2] + f"/rank{rank}.pt")
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_processes_sample_different_pivots_and_end_with_identical_weights(tmp_path):
    toy = build_toy(tmp_path / "toy")
    out = tmp_path / "out"
    out.mkdir()
    cfg = toy_config(toy, tmp_path / "run", steps=2, pivots_per_step=2, group_size=4, save_every=2, log_samples=True,
                     beta=0.05, grad_accum_steps=12)  # > rows per rank: empty last micro-batches join the all-reduce
    cfg_path = tmp_path / "rl.json"
    cfg_path.write_text(json.dumps(cfg.to_dict()))
    script = tmp_path / "ddp_train.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2",
           "--master_addr", "127.0.0.1", "--master_port", str(free_port()), str(script), str(cfg_path), str(out)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]

    ranks = [torch.load(out / f"rank{r}.pt", weights_only=True) for r in (0, 1)]
    assert [(r["rank"], r["world"], r["steps"]) for r in ranks] == [(0, 2, 2), (1, 2, 2)]
    s0, s1 = ranks[0]["state"], ranks[1]["state"]
    assert all(torch.equal(s0[k], s1[k]) for k in s0)  # gradients were all-reduced: same update on both ranks
    from safetensors.torch import load_file

    initial = load_file(str(toy[0] / "model.safetensors"))
    assert not all(torch.equal(s0[k], initial[k]) for k in initial)  # and it trained

    samples = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    for step in (1, 2):
        by_rank = {r: {s["pivot_id"] for s in samples if s["step"] == step and s["rank"] == r} for r in (0, 1)}
        assert len(by_rank[0]) == 2 and len(by_rank[1]) == 2 and not by_rank[0] & by_rank[1]
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2] and all(r["groups"] == 4 for r in rows)  # global counts
    checkpoint = tmp_path / "run" / "checkpoint-000002"
    assert (checkpoint / "rng_rank0.pt").exists() and (checkpoint / "rng_rank1.pt").exists()
    assert (tmp_path / "run" / "final" / "model.safetensors").exists()
