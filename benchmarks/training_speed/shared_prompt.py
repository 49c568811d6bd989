"""What forwarding each distinct prompt once saves in a PivotRL update (issue 36: the update is the preset's cost).

A PivotRL step trains on G samples of each pivot, all after the same prompt. ``shared_prompt`` (the default,
``trainers/shared_prompt.py``) runs each prompt once and the G completions against its KV cache; ``packed``
runs every row whole. This times ``PolicyUpdate.update`` both ways, alternating (A B A B ...: a shared machine's
load hits both), on rows shaped like the real-model preset's steps (16 pivots x G = 8; prompts ~390 tokens and
actions ~33: the SmolLM2 run's 54,201 trained tokens a step over 128 rows), and prints a table:

    python benchmarks/training_speed/shared_prompt.py --model DIR [--lora-r 16] [--pivots 16] [--group 8] [--repeats 2]

``DIR``: a causal LM folder, e.g. the SmolLM2 base a real-model demo writes (``OUT/base_model``). The tokens are
random (timing does not depend on them); the optimiser steps for real (LoRA r 16 at 2e-4 by default, as in the
preset), so each run starts from a fresh policy.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from pathlib import Path


def rows(pivots: int, group: int, prompt: int, completion: int, vocab: int, seed: int) -> list:
    from pivot_envs.trainers.policy_update import Row

    rng = random.Random(seed)
    out = []
    for _ in range(pivots):
        p = [rng.randrange(10, vocab) for _ in range(prompt + rng.randrange(-40, 41))]
        for g in range(group):
            c = [rng.randrange(10, vocab) for _ in range(max(1, completion + rng.randrange(-15, 16)))]
            out.append(Row(prompt=p, completion=c, advantage=rng.choice((-1.0, 1.0)), sampler_logprobs=None))
    return out


def one_update(model: str, lora_r: int, shared: bool, data: list, threads: int) -> float:
    import torch

    from pivot_envs.trainers.config import PivotRLConfig
    from pivot_envs.trainers.distributed import DistInfo
    from pivot_envs.trainers.policy_update import PolicyUpdate

    torch.set_num_threads(threads)
    cfg = PivotRLConfig(model=model, device="cpu", lr=2e-4, lora_r=lora_r, lora_alpha=2 * lora_r, beta=0.0,
                        shared_prompt=shared)
    policy = PolicyUpdate(cfg, DistInfo(), torch.device("cpu"))
    began = time.perf_counter()
    policy.update(data)
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--lora-r", type=int, default=16)
    parser.add_argument("--pivots", type=int, default=16)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--prompt-tokens", type=int, default=390)
    parser.add_argument("--completion-tokens", type=int, default=33)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    config = json.loads((Path(args.model) / "config.json").read_text())
    data = rows(args.pivots, args.group, args.prompt_tokens, args.completion_tokens, int(config["vocab_size"]), 0)
    tokens = sum(len(r.prompt) + len(r.completion) for r in data)
    times: dict[str, list[float]] = {"packed": [], "shared prompt": []}
    loads = []
    for _ in range(args.repeats):
        for name, shared in (("packed", False), ("shared prompt", True)):
            times[name].append(one_update(args.model, args.lora_r, shared, data, args.threads))
            loads.append(os.getloadavg()[0])
    print(f"{args.pivots} pivots x G = {args.group}: {len(data)} rows, {tokens:,} tokens packed; LoRA r {args.lora_r}; "
          f"{args.threads} threads; load {min(loads):.1f}-{max(loads):.1f}\n")
    print("| update | seconds (each run) | median | trained tokens/s (packed count) |")
    print("|---|---|---|---|")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"| {name} | {', '.join(f'{t:.1f}' for t in ts)} | {med:.1f} | {tokens / med:,.0f} |")
    speedup = statistics.median(times["packed"]) / statistics.median(times["shared prompt"])
    print(f"\nshared prompt: {speedup:.2f}x faster")
    if args.json:
        args.json.write_text(json.dumps({"settings": vars(args) | {"json": None}, "rows": len(data), "tokens": tokens,
                                         "seconds": times, "speedup": speedup, "load_1m": loads}, indent=1) + "\n")


if __name__ == "__main__":
    main()
