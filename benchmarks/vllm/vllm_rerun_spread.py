"""How much does a rerun of the same PivotRL config (same seed, same threads, a fresh process) differ on vLLM?

Trains one short PivotRL config several times per variant (an engine and its dtype), each run in a fresh
process with its own ``PYTHONHASHSEED`` and the same ``OMP_NUM_THREADS``, then plays a fixed set of held-out
tasks at T=1 with a fixed seed with each run's final model (in a fresh process, on the ``hf`` engine in float32,
whose plays repeat bit for bit: the evaluation adds no spread of its own). The ``hf`` variant is the control.

Every run records, per step, the token ids and log-probs of every sampling call and the trainable weights after
the update, so the table says where two runs part and on which side first:

* ``tokens``: the first step whose sampled token ids differ from the first run's;
* ``logprobs``: the first step whose sampler log-probs differ (vLLM's raw log-probs; the ``hf`` sampler has none);
* ``weights``: the first step after whose update the weights differ;
* ``metrics``: the first step whose metrics row (timings left out) differs.

A step whose weights before sampling were equal but whose tokens or log-probs differ parts in the engine; a step
whose tokens and log-probs were equal but whose weights after the update differ parts in the trainer.
``--threads`` sets the torch threads of every run (as ``OMP_NUM_THREADS``: a vLLM engine keeps the count the
process started with); ``--deterministic-torch`` turns on ``torch.use_deterministic_algorithms`` in the training
processes, ``--no-shared-prompt`` sets ``shared_prompt=False``, ``--resume-at K`` adds a run per variant that is
stopped after step K and resumed in a fresh process. Results: docs/results.md ("Reruns on vLLM")::

    .venv-vllm/bin/python benchmarks/vllm/vllm_rerun_spread.py                        # the shipped 1.2M terminal base
    .venv-vllm/bin/python benchmarks/vllm/vllm_rerun_spread.py --variants vllm:bfloat16:2,hf:float32:2 --threads 2
    .venv-vllm/bin/python benchmarks/vllm/vllm_rerun_spread.py --model DIR --variants vllm:bfloat16:2 --lora-r 16 \\
        --lr 2e-4 --tools none --window 1024 --threads 2 --out benchmarks/vllm/results/vllm_rerun_spread_smollm2.json

It prints the tables and writes ``benchmarks/vllm/results/vllm_rerun_spread.json`` (``--out``); run it in the engine's
venv (``.venv-vllm``, docs/vllm.md).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TINY_BASE = ROOT / "experiments" / "base_models" / "terminal"
RUN_TIMEOUT_S = 1800


# ---------------------------------------------------------------------------------------------- one run (child)
STOPPED = 3
"""Exit status of a run stopped after ``--resume-at`` steps (as a killed run: the next resumes from its checkpoint)."""


def train_one(config_path: Path, stop_after: int = 0, deterministic: bool = False) -> int:
    """Train the config of ``config_path``; write ``trace.jsonl`` (per step: every sampling call's token ids and
    log-probs) and ``steps/step_K.safetensors`` (the trainable weights after step K) into its output folder.
    With ``stop_after`` the process ends after that step's checkpoint, without clean-up. ``deterministic``: torch's
    deterministic algorithms (``torch.use_deterministic_algorithms``) in the whole process."""
    import torch
    from pivot_envs.trainers.distributed import unwrap
    from pivot_envs.trainers.pivotrl import PivotRLTrainer
    from safetensors.torch import save_file

    if deterministic:
        torch.use_deterministic_algorithms(True)

    config = json.loads(config_path.read_text(encoding="utf-8"))
    out = Path(config["output_dir"])
    (out / "steps").mkdir(parents=True, exist_ok=True)
    trainer = PivotRLTrainer(config)
    agent = trainer.agent
    sample = agent.sample
    calls: list[dict[str, Any]] = []

    def recorded(pivots: Any, n: int, *, seed: int | None = None) -> Any:
        groups = sample(pivots, n, seed=seed)
        calls.append({"seed": seed, "pivots": [p.id for p in pivots],
                      "token_ids": [[list(c.token_ids or []) for c in g] for g in groups],
                      "logprobs": [[c.logprobs for c in g] for g in groups]})
        return groups

    agent.sample = recorded  # the trainer samples through ``self.agent.sample``
    trace = (out / "trace.jsonl").open("a" if config.get("resume_from") else "w", encoding="utf-8")

    def on_step(row: dict[str, Any]) -> None:
        policy = unwrap(trainer.policy)
        weights = {n: p.detach().to(torch.float32).contiguous().clone()
                   for n, p in policy.named_parameters() if p.requires_grad}
        save_file(weights, str(out / "steps" / f"step_{row['step']}.safetensors"))
        trace.write(json.dumps({"step": row["step"], "calls": list(calls),
                                "torch_threads": torch.get_num_threads()}) + "\n")
        trace.flush()
        calls.clear()
        if stop_after and row["step"] == stop_after:
            os._exit(STOPPED)  # no clean-up, no final model: as a killed run

    trainer.on_step = on_step
    trainer.train()
    trace.close()
    return 0


def eval_one(model: str, out: Path, args_path: Path) -> int:
    """Play the held-out tasks at T=1 with a fixed seed on the ``hf`` engine (float32); write the report."""
    from pivot_envs.experiments.engines import EngineSettings
    from pivot_envs.experiments.evaluation import Sampling, play_tasks

    a = json.loads(args_path.read_text(encoding="utf-8"))
    sampling = Sampling(engine=EngineSettings(kind="hf", tools=a["tools"]), max_new_tokens=a["max_new_tokens"],
                        max_prompt_tokens=a["window"], batch_size=16, num_threads=a["threads"])
    report = play_tasks(model, a["domain"], a["eval_tasks"], sampling, seed=a["seed"], temperature=1.0,
                        repeats=a["eval_repeats"], max_turns=a["max_turns"], limit=a["eval_limit"])
    rows = sorted(report["episodes_sampled_rows"], key=lambda r: str(r["id"]))
    out.write_text(json.dumps({"success": [bool(r.get("success")) for r in rows],
                               "transcripts": [json.dumps(r.get("messages"), sort_keys=True) for r in rows],
                               "ids": [str(r["id"]) for r in rows], "seconds": report["seconds"]}) + "\n",
                   encoding="utf-8")
    return 0


# ---------------------------------------------------------------------------------------------- the driver
def run_config(args: argparse.Namespace, model: Path, engine: str, dtype: str, out: Path) -> dict[str, Any]:
    """The PivotRL config of one run of ``model``."""
    config: dict[str, Any] = dict(
        model=str(model), domain=args.domain, split="train", output_dir=str(out), seed=args.seed, steps=args.steps,
        pivots_per_step=args.pivots_per_step, group_size=args.group_size, temperature=1.0,
        max_new_tokens=args.max_new_tokens, max_prompt_tokens=args.window, lr=args.lr, lr_schedule="constant",
        zero_variance="resample", max_resample=2, save_every=args.resume_at, plots=False, log_samples=True,
        num_threads=args.threads, rollout_engine=engine, prompt_tools=args.tools,
        shared_prompt=not args.no_shared_prompt)
    if args.micro_batch_rows:  # as the demo: micro-batches of about this many rows
        config["grad_accum_steps"] = max(1, -(-args.pivots_per_step * args.group_size // args.micro_batch_rows))
    if args.lora_r:
        config.update(lora_r=args.lora_r, lora_alpha=2 * args.lora_r, lora_target_modules="all-linear")
    if engine == "vllm":
        config.update(vllm_dtype=dtype, vllm_kv_cache_gib=1.0,
                      vllm_engine={"max_model_len": args.window + args.max_new_tokens,
                                   "max_num_batched_tokens": max(4096, args.window + args.max_new_tokens),
                                   **({"enable_prefix_caching": False} if args.no_prefix_cache else {})})
    return config


def child(args: argparse.Namespace, argv: list[str], hash_seed: int, expect: int = 0) -> float:
    """Run this script with ``argv`` in a fresh process (same threads, its own hash seed); seconds taken."""
    env = {**os.environ, "PYTHONHASHSEED": str(hash_seed), "OMP_NUM_THREADS": str(args.threads),
           "OMP_WAIT_POLICY": "PASSIVE"}
    began = time.perf_counter()
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), *argv], env=env, capture_output=True,
                          text=True, timeout=RUN_TIMEOUT_S, check=False)
    if done.returncode != expect:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return time.perf_counter() - began


def read_trace(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "trace.jsonl").read_text(encoding="utf-8").splitlines()]


def read_rows(out: Path) -> list[dict[str, Any]]:
    from pivot_envs.trainers.metrics import TIMING_KEYS, read_metrics

    return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in read_metrics(out / "metrics.jsonl")]


def max_abs(a: Path, b: Path) -> float:
    """Largest absolute difference between two safetensors files of the same tensors."""
    from safetensors.torch import load_file

    wa, wb = load_file(str(a)), load_file(str(b))
    if wa.keys() != wb.keys():
        raise ValueError(f"{a} and {b} hold different tensors")
    return max(float((wa[k].float() - wb[k].float()).abs().max()) for k in wa)


def first_step(values_a: list[Any], values_b: list[Any]) -> int | None:
    """The first step (1-based) whose values differ; ``None`` when all are equal."""
    for i, (x, y) in enumerate(zip(values_a, values_b), start=1):
        if x != y:
            return i
    return None if len(values_a) == len(values_b) else min(len(values_a), len(values_b)) + 1


def logprob_gap(call_a: list[dict[str, Any]], call_b: list[dict[str, Any]]) -> float | None:
    """Largest |log-prob difference| over the sampled tokens both runs drew alike at one step (``None``: none)."""
    worst = None
    for ca, cb in zip(call_a, call_b):
        for ga, gb, la, lb in zip(ca["token_ids"], cb["token_ids"], ca["logprobs"], cb["logprobs"]):
            for ta, tb, pa, pb in zip(ga, gb, la, lb):
                if pa is None or pb is None:
                    continue
                for t1, t2, p1, p2 in zip(ta, tb, pa, pb):
                    if t1 != t2:
                        break
                    worst = max(worst or 0.0, abs(p1 - p2))
    return worst


def same_tokens_share(call_a: list[dict[str, Any]], call_b: list[dict[str, Any]]) -> float:
    """Share of one step's first-round completions whose token ids are equal in both runs."""
    a = [t for g in call_a[0]["token_ids"] for t in g] if call_a else []
    b = [t for g in call_b[0]["token_ids"] for t in g] if call_b else []
    return sum(x == y for x, y in zip(a, b)) / max(1, len(a))


def compare(first: Path, other: Path) -> dict[str, Any]:
    """Where ``other`` parts from ``first``: per step and overall."""
    ta, tb = read_trace(first), read_trace(other)
    ra, rb = read_rows(first), read_rows(other)

    def sha(value: Any) -> str:
        return hashlib.sha256(json.dumps(value).encode()).hexdigest()

    tokens = [[sha([c["pivots"], c["token_ids"]]) for c in t["calls"]] for t in ta]
    tokens_b = [[sha([c["pivots"], c["token_ids"]]) for c in t["calls"]] for t in tb]
    logps = [[sha(c["logprobs"]) for c in t["calls"]] for t in ta]
    logps_b = [[sha(c["logprobs"]) for c in t["calls"]] for t in tb]
    steps = len(ta)
    weight_gap = [max_abs(first / "steps" / f"step_{s}.safetensors", other / "steps" / f"step_{s}.safetensors")
                  for s in range(1, steps + 1)]
    per_step = [{"step": s + 1, "same_first_round_samples": round(same_tokens_share(ta[s]["calls"], tb[s]["calls"]), 4),
                 "logprob_gap_on_equal_tokens": logprob_gap(ta[s]["calls"], tb[s]["calls"]),
                 "weight_gap_after": weight_gap[s]} for s in range(steps)]
    return {
        "first_step_tokens_differ": first_step(tokens, tokens_b),
        "first_step_logprobs_differ": first_step(logps, logps_b),
        "first_step_weights_differ": first_step([g == 0.0 for g in weight_gap], [True] * steps),
        "first_step_metrics_differ": first_step(ra, rb),
        "final_weights_max_abs": max_abs(first / "final" / "model.safetensors", other / "final" / "model.safetensors"),
        "per_step": per_step,
    }


def parse_variants(text: str) -> list[tuple[str, str, int]]:
    """``ENGINE:DTYPE:RUNS,...`` as ``(engine, dtype, runs)``; a clear error on a bad entry."""
    out = []
    for spec in text.split(","):
        parts = spec.split(":")
        if len(parts) != 3 or parts[0] not in ("hf", "vllm") or parts[1] not in ("float32", "bfloat16") \
                or not parts[2].isdigit() or int(parts[2]) < 1:
            raise SystemExit(f"--variants: {spec!r} is not ENGINE:DTYPE:RUNS (engine hf or vllm, dtype float32 or "
                             "bfloat16, runs >= 1), e.g. vllm:bfloat16:3")
        out.append((parts[0], parts[1], int(parts[2])))
    return out


def train_and_play(args: argparse.Namespace, config: dict[str, Any], work: Path, hash_seed: int,
                   resumed: bool) -> tuple[float, float]:
    """Train ``config`` in a fresh process (``resumed``: stopped after ``--resume-at`` steps, then resumed in
    another) and play the held-out tasks with its final model; seconds of each."""
    out = Path(config["output_dir"])
    path = work / f"{out.name}.json"
    mode = "deterministic" if args.deterministic_torch else "default"
    path.write_text(json.dumps(config), encoding="utf-8")
    if resumed:
        train_s = child(args, ["--train-one", str(path), str(args.resume_at), mode], hash_seed, expect=STOPPED)
        path.write_text(json.dumps({**config, "resume_from": "latest"}), encoding="utf-8")
        train_s += child(args, ["--train-one", str(path), "0", mode], hash_seed + 1)
    else:
        train_s = child(args, ["--train-one", str(path), "0", mode], hash_seed)
    eval_s = child(args, ["--eval-one", str(out / "final"), str(out / "eval.json"), str(work / "eval_args.json")],
                   hash_seed)
    return train_s, eval_s


def run_summary(out: Path, first: Path | None, run: dict[str, Any]) -> dict[str, Any]:
    """``run`` with the run's rewards, its evaluation and, against the variant's ``first`` run, where it parts."""
    played = json.loads((out / "eval.json").read_text(encoding="utf-8"))
    run.update({"torch_threads_in_run": sorted({t["torch_threads"] for t in read_trace(out)}),
                "reward_mean": [r.get("reward_mean") for r in read_rows(out)],
                "eval_success": round(sum(played["success"]) / len(played["success"]), 4),
                "eval_episodes": len(played["success"])})
    if first is not None:
        run.update(compare(first, out))
        first_played = json.loads((first / "eval.json").read_text(encoding="utf-8"))
        same = sum(x == y for x, y in zip(first_played["transcripts"], played["transcripts"]))
        run["eval_same_transcripts"] = round(same / len(played["success"]), 4)
    return run


def measure(args: argparse.Namespace, work: Path, save: Any) -> dict[str, Any]:
    """Every variant's runs, their comparison with the variant's first run and their evaluations."""
    import shutil

    (work / "eval_args.json").write_text(json.dumps({k: getattr(args, k) for k in (
        "tools", "max_new_tokens", "window", "threads", "domain", "eval_tasks", "seed", "eval_repeats", "max_turns",
        "eval_limit")}), encoding="utf-8")
    model = work / "model"  # a copy: the runs read the model outside the source tree
    if not model.exists():
        shutil.copytree(args.model, model)
    result: dict[str, Any] = {"variants": []}
    hash_seed = 0
    for engine, dtype, runs in parse_variants(args.variants):
        variant: dict[str, Any] = {"engine": engine, "dtype": dtype, "runs": []}
        result["variants"].append(variant)
        first: Path | None = None
        for k in range(runs + (1 if args.resume_at else 0)):
            resumed = k == runs  # the extra run: stopped after --resume-at steps, resumed in a fresh process
            out = work / f"{engine}-{dtype}-{k}"
            train_s, eval_s = train_and_play(args, run_config(args, model, engine, dtype, out), work, hash_seed + 1,
                                             resumed)
            hash_seed += 2 if resumed else 1
            run = run_summary(out, first, {"run": k, "resumed_after": args.resume_at if resumed else None,
                                           "train_s": round(train_s, 1), "eval_s": round(eval_s, 1)})
            first = first or out
            variant["runs"].append(run)
            print(run_line(variant, run), flush=True)
            save(result)
    return result


def run_line(variant: dict[str, Any], run: dict[str, Any]) -> str:
    def show(value: Any) -> str:
        return "-" if value is None else str(value)

    rewards = " ".join("-" if r is None else f"{r:.3f}" for r in run["reward_mean"])
    if run["run"] == 0:
        parted = "(reference)"
        gap = "-"
        same = "-"
    else:
        parted = " / ".join(f"{side} {show(run[f'first_step_{side}_differ'])}"
                            for side in ("tokens", "logprobs", "weights", "metrics"))
        gap = f"{run['final_weights_max_abs']:.3g}"
        same = f"{run['eval_same_transcripts']:.0%}"
    name = f"{run['run']}, resumed after step {run['resumed_after']}" if run.get("resumed_after") else run["run"]
    return (f"| {variant['engine']} {variant['dtype']} | {name} | {rewards} | {parted} | {gap} | "
            f"{run['eval_success']:.3f} ({run['eval_episodes']}) | {same} | "
            f"{run['train_s']:.0f} + {run['eval_s']:.0f} |")


def step_lines(result: dict[str, Any]) -> list[str]:
    """Per step, every later run against its variant's first: share of first-round samples alike, weight gap."""
    header = ("| variant | run | step | first-round samples as run 0 | max abs weight difference after the step | "
              "max abs log-prob difference on equal tokens |")
    lines = [header, "|---|---|---|---|---|---|"]
    for v in result["variants"]:
        for run in v["runs"][1:]:
            for s in run["per_step"]:
                gap = s["logprob_gap_on_equal_tokens"]
                lines.append(f"| {v['engine']} {v['dtype']} | {run['run']} | {s['step']} | "
                             f"{s['same_first_round_samples']:.0%} | {s['weight_gap_after']:.3g} | "
                             f"{'-' if gap is None else f'{gap:.3g}'} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--train-one"]:
        return train_one(Path(argv[1]), int(argv[2]), argv[3] == "deterministic")
    if argv[:1] == ["--eval-one"]:
        return eval_one(argv[1], Path(argv[2]), Path(argv[3]))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(TINY_BASE), help="a model folder (default: the shipped tiny base)")
    parser.add_argument("--variants", default="vllm:bfloat16:3,vllm:float32:2,hf:float32:2",
                        help="ENGINE:DTYPE:RUNS,...: the runs of each are compared with its first")
    parser.add_argument("--domain", default="terminal")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--pivots-per-step", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--window", type=int, default=256, help="prompt window in tokens")
    parser.add_argument("--tools", default="auto", help="where tool specs go in the prompt (auto, none)")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--lora-r", type=int, default=0, help="LoRA rank (0: full fine-tuning)")
    parser.add_argument("--micro-batch-rows", type=int, default=0,
                        help="micro-batches of about this many rows, as the demo's micro_batch_rows (0: one)")
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS and num_threads of every run")
    parser.add_argument("--resume-at", type=int, default=0,
                        help="one more run per variant, stopped after this step and resumed in a fresh process")
    parser.add_argument("--deterministic-torch", action="store_true",
                        help="torch.use_deterministic_algorithms(True) in every training process")
    parser.add_argument("--no-shared-prompt", action="store_true",
                        help="shared_prompt=False: every row forwards its own prompt (no indexed KV cache)")
    parser.add_argument("--no-prefix-cache", action="store_true", help="turn vLLM's prefix cache off")
    parser.add_argument("--eval-tasks", default="bundled:terminal:test")
    parser.add_argument("--eval-limit", type=int, default=51, help="held-out tasks played")
    parser.add_argument("--eval-repeats", type=int, default=2, help="plays of each task at T=1")
    parser.add_argument("--max-turns", type=int, default=8)
    parser.add_argument("--work", type=Path, default=None, help="where the runs go (default: a temporary folder)")
    parser.add_argument("--out", type=Path,
                        default=Path(__file__).resolve().parent / "results" / "vllm_rerun_spread.json")
    args = parser.parse_args(argv)
    parse_variants(args.variants)  # a bad entry fails before any run
    if args.resume_at and not 0 < args.resume_at < args.steps:
        raise SystemExit(f"--resume-at {args.resume_at}: use a step in 1..{args.steps - 1} (or 0: no resumed run)")
    model = Path(args.model).resolve()
    shown = str(model.relative_to(ROOT)) if model.is_relative_to(ROOT) else args.model
    args.out.parent.mkdir(parents=True, exist_ok=True)
    print("| variant | run | sampled reward mean per step | first step that differs from run 0 | final weights "
          "max abs diff | held-out T=1 success (episodes) | transcripts as run 0 | train + eval s |")
    print("|---|---|---|---|---|---|---|---|")

    def save(result: dict[str, Any]) -> None:
        settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                    if k not in ("work", "out")} | {"model": shown}
        shown_argv = [a for i, a in enumerate(argv)  # where the runs and the file went does not change the numbers
                      if a not in ("--work", "--out") and (i == 0 or argv[i - 1] not in ("--work", "--out"))]
        args.out.write_text(json.dumps({"command": " ".join(["python", "benchmarks/vllm/vllm_rerun_spread.py", *shown_argv]),
                                        "model": shown, "settings": settings, **result}, indent=1) + "\n",
                            encoding="utf-8")

    if args.work is None:
        with tempfile.TemporaryDirectory(prefix="rerun_spread_") as tmp:
            result = measure(args, Path(tmp), save)
    else:
        args.work.mkdir(parents=True, exist_ok=True)
        result = measure(args, args.work, save)
    print()
    print("\n".join(step_lines(result)))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
