"""Memory a rank holds under the bundled trainer's two layouts: ``sharding: none`` (DDP) and ``sharding: fsdp``.

::

    python benchmarks/training_speed/sharding_memory.py            # measures on gloo (2 CPU processes), then prints the tables

1. Measured: the demo's terminal base model (a 1.2M-parameter Llama, ``experiments/base_models/terminal``) is
   wrapped as the trainer wraps it (:func:`pivot_envs.trainers.sharding.wrap_policy`) in two processes under
   ``torchrun`` on gloo, takes one AdamW step, and each rank counts what it holds: ``params_local``, the bytes of
   its parameters, gradients and AdamW state, and those of a sharded reference model.
2. Computed: bytes per parameter a rank holds per path (weights, gradients and AdamW moments in float32; the
   reference in bfloat16 as the trainer loads it on CUDA; a LoRA base in bfloat16, frozen), and from them the
   per-rank memory for 7B, 14B and 32B models at W = 1, 8, 64. Activations, the KV cache of rollouts and the
   transient gathered layer of FSDP (one decoder layer's weights at a time, in the gather dtype, plus the
   embeddings and head of the root, which stay gathered between a forward and its backward) come on top.

Not measured here: GPU memory (the project's machine has no GPU; NCCL not run).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "experiments" / "base_models" / "terminal"

BYTES = {  # bytes per parameter held by one rank, before dividing by W for the sharded paths
    "weights fp32": 4, "grads fp32": 4, "AdamW m+v fp32": 8, "reference bf16": 2, "LoRA base bf16": 2,
}


def per_param(path: str, world: int) -> float:
    """Bytes per model parameter one rank holds on ``path`` in a run of ``world`` processes."""
    full = BYTES["weights fp32"] + BYTES["grads fp32"] + BYTES["AdamW m+v fp32"]
    ref = BYTES["reference bf16"]
    table = {
        "DDP": full, "DDP + reference": full + ref,
        "FSDP": full / world, "FSDP + reference": (full + ref) / world,
        "LoRA, DDP": BYTES["LoRA base bf16"], "LoRA, FSDP": BYTES["LoRA base bf16"] / world,
    }
    return table[path]


def measure(sharding: str) -> None:
    """One rank of the gloo measurement (run under torchrun): prints a JSON line of what this rank holds."""
    import torch
    from transformers import AutoModelForCausalLM

    from pivot_envs.trainers.distributed import init_distributed, shutdown
    from pivot_envs.trainers.sharding import param_counts, shard, wrap_policy

    dist = init_distributed("cpu")
    device = torch.device("cpu")
    model = wrap_policy(AutoModelForCausalLM.from_pretrained(TINY, dtype=torch.float32), dist, device, sharding)
    ref = AutoModelForCausalLM.from_pretrained(TINY, dtype=torch.bfloat16).eval().requires_grad_(False)
    ref = shard(ref, dist, device) if sharding == "fsdp" else ref
    optim = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.arange(16).reshape(1, 16)
    model(input_ids=ids).logits.float().pow(2).mean().backward()
    optim.step()

    def local(t):
        return t.to_local() if hasattr(t, "to_local") else t

    params = list(optim.param_groups[0]["params"])
    total, mine = param_counts(model)
    held = {
        "params_total": total, "params_local": mine,
        "weights": sum(local(p).numel() * local(p).element_size() for p in params),
        "grads": sum(local(p.grad).numel() * local(p.grad).element_size() for p in params if p.grad is not None),
        "adamw": sum(local(v).numel() * local(v).element_size() for s in optim.state.values()
                     for k, v in s.items() if k != "step"),
        "reference": sum(local(p).numel() * local(p).element_size() for p in ref.parameters()),
    }
    print("MEASURED " + json.dumps({"rank": dist.rank, "sharding": sharding, **held}), flush=True)
    shutdown(dist)


def run_measurement() -> list[dict]:
    rows = []
    for sharding in ("none", "fsdp"):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
               "--master_port", str(port), __file__, "--measure", sharding]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
        with tempfile.TemporaryDirectory() as tmp:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=tmp)
        if proc.returncode:
            raise SystemExit(proc.stdout[-2000:] + proc.stderr[-4000:])
        rows += [json.loads(line.split("MEASURED ", 1)[1]) for line in proc.stdout.splitlines() if "MEASURED " in line]
    return sorted(rows, key=lambda r: (r["sharding"], r["rank"]))


def main() -> None:
    measured = run_measurement()
    print("Measured on gloo, 2 processes, the terminal base model (float32 policy, bfloat16 reference), after one "
          "AdamW step:\n")
    print("| sharding | rank | params_total | params_local | local share | weights+grads+AdamW B/param | "
          "reference B/param |")
    print("|---|---|---|---|---|---|---|")
    for r in measured:
        state = (r["weights"] + r["grads"] + r["adamw"]) / r["params_total"]
        print(f"| {r['sharding']} | {r['rank']} | {r['params_total']:,} | {r['params_local']:,} | "
              f"{r['params_local'] / r['params_total']:.3f} | {state:.2f} | {r['reference'] / r['params_total']:.2f} |")

    paths = ["DDP", "DDP + reference", "FSDP", "FSDP + reference", "LoRA, DDP", "LoRA, FSDP"]
    worlds = (1, 8, 64)
    print("\nComputed bytes per parameter a rank holds (fp32 weights, grads, AdamW m+v; bf16 reference; bf16 frozen "
          "LoRA base, adapters not counted):\n")
    print("| path | " + " | ".join(f"W = {w}" for w in worlds) + " |")
    print("|---|" + "---|" * len(worlds))
    for path in paths:
        print(f"| {path} | " + " | ".join(f"{per_param(path, w):.3g}" for w in worlds) + " |")
    print("\nComputed GB a rank holds (1 GB = 1e9 bytes; activations, rollout KV cache and FSDP's gathered layer "
          "not included):\n")
    print("| model | path | " + " | ".join(f"W = {w}" for w in worlds) + " |")
    print("|---|---|" + "---|" * len(worlds))
    for size in (7, 14, 32):
        for path in ("DDP + reference", "FSDP + reference", "LoRA, FSDP"):
            print(f"| {size}B | {path} | " + " | ".join(f"{size * per_param(path, w):.1f}" for w in worlds) + " |")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--measure":
        measure(sys.argv[2])
    else:
        main()
