"""Speed of the PivotRL trainer: side by side with TRL's ``GRPOTrainer`` on CPU, and GPU figures.

Usage::

    pip install trl                       # the peer arm (dev dependency of this benchmark only)
    python benchmarks/training_speed/trainer.py          # CPU comparison (~4-5 min on 2 busy cores), then the GPU section
    python benchmarks/training_speed/trainer.py --gpu-only        # only the GPU section (on a machine with CUDA); merged
                                                   # into an existing trainer.json
    python benchmarks/training_speed/trainer.py --no-trl --sizes tiny --timing-rounds 0

CPU section (every arm in this process, one run after the other, all on ``--threads`` torch threads):

* the task: 8 toy ``tool_use`` pivots (a user asks about connectivity in 8 phrasings; the expert
  always calls ``ping()``). Per workload (``--sizes``: ``tiny`` ~0.1M parameters, where the
  loop's own overhead shows; ``small`` ~2.7M, where the matrix products dominate) a tiny
  Llama-style model (:mod:`pivot_envs.models.tiny`) is SFT-warmed on every prompt paired with
  each of ``alpha() / beta() / gamma() / ping()``, so it emits well-formed calls and picks
  ``ping`` ~1/4 of the time: groups are mixed and GRPO has something to learn;
* ``pivotrl``: :func:`pivot_envs.trainers.pivotrl.train_pivotrl` with the settings matched to
  TRL (``zero_variance="keep"`` and no strict-match diagnostics, so both arms do the same work
  per step);
* ``trl``: ``trl.GRPOTrainer`` with the same model folder, prompts (each pivot rendered by
  :func:`pivot_envs.agents.prompting.pivot_prompt`, given to TRL as a ``prompt`` string),
  G, reward (``parse_action`` + the ``tool_call`` verifier's ``verify_many``), steps and
  optimiser / loss knobs (see ``benchmarks/training_speed/trl_peer.py``); skipped with a message when TRL
  is not installed.

Two phases per workload, all runs in ABBA order (the arms swap places every round, so a drift
in the machine's load hits both alike). ``learning``: ``--learning-rounds`` runs per arm at the
workload's learning rate (the reward curves; step times while learning, which also depend on
how long each arm's completions grow). ``frozen``: ``--timing-rounds`` runs per arm at
lr = 1e-12, so both arms sample from the same policy and do the same expected work per step:
the controlled timing comparison.

Figures per arm and phase: wall seconds per step (median over the steps after ``--warmup``,
from one step's end to the next, so every per-step cost of the loop counts), the trainer's
own step time (ours: ``step_s``; TRL: ``on_step_begin`` -> ``on_step_end``), process CPU
seconds per step (less disturbed by other load on a shared machine), completion tokens per
step and per second, and the reward per step. Target: our wall time per step <= TRL's.

GPU section (only where CUDA is present; ``--gpu-only`` runs just this): a randomly
initialised model with Qwen2-0.5B's published shape (built from ``Qwen2Config``, nothing
downloaded), float32 weights with bfloat16 autocast (the trainer's CUDA default). Training:
the trainer's pieces (``pack`` -> ``completion_logprobs`` -> ``pivotrl_loss`` -> backward ->
gradient clip -> AdamW) on random token rows; tokens/s and MFU = 6 * params * tokens /
step time / peak bf16 FLOPS (dense, by GPU name). Generation: ``model.generate`` sampling
(as the ``hf`` sampler does) with a fixed number of new tokens; tokens/s.

Writes ``benchmarks/training_speed/results/trainer.json`` and ``benchmarks/training_speed/results/trainer_rewards.png``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

HERE = Path(__file__).resolve().parent
# run as a script, this folder is sys.path[0]; its profile.py would shadow the stdlib's (imported by cProfile)
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
_spec = importlib.util.spec_from_file_location("trl_peer", HERE / "trl_peer.py")
trl_peer = importlib.util.module_from_spec(_spec)
sys.modules["trl_peer"] = trl_peer
_spec.loader.exec_module(trl_peer)
INSTALL_HINT, PeerSettings, run_trl, trl_version = (trl_peer.INSTALL_HINT, trl_peer.PeerSettings, trl_peer.run_trl,
                                                    trl_peer.trl_version)

from pivot_envs.agents.prompting import PromptConfig, action_target, encode_prompt, pivot_prompt  # noqa: E402
from pivot_envs.domains import get_domain  # noqa: E402
from pivot_envs.types import Pivot  # noqa: E402
from pivot_envs.verifiers import build_verifier  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OUT_JSON = Path(__file__).resolve().parent / "results" / "trainer.json"
OUT_PNG = Path(__file__).resolve().parent / "results" / "trainer_rewards.png"

TOOLS = ("alpha", "beta", "gamma", "ping")
EXPERT_TOOL = "ping"
USERS = ("is the host up?", "check the connection", "can you reach the server?", "test the network",
         "is the service alive?", "see if the box answers", "probe the gateway", "is the link working?")
VERIFIER = "tool_call"
DOMAIN = "tool_use"
NO_GPU = "no CUDA GPU: GPU figures not measured"

PEAK_BF16_FLOPS = (  # dense bf16 tensor-core peaks from the vendors' data sheets; first match wins
    ("H200", 989e12),
    ("H100 PCIe", 756e12),
    ("H100 NVL", 835e12),
    ("H100", 989e12),  # SXM / HBM3
    ("GH200", 989e12),
    ("B200", 2250e12),
    ("A100", 312e12),
    ("L40S", 362e12),
    ("L40", 181e12),
    ("L4", 121e12),
    ("A10", 125e12),  # also matches "A10G", whose peak is lower: its MFU would read low
)

QWEN2_05B_SHAPE = dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                       intermediate_size=4864, vocab_size=151936, max_position_embeddings=32768, rope_theta=1e6,
                       rms_norm_eps=1e-6, tie_word_embeddings=True)
"""Qwen2-0.5B's published sizes (its config.json); the model is built from them with random weights."""

SMOKE_SHAPE = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                   intermediate_size=128, vocab_size=1024, max_position_embeddings=4096, tie_word_embeddings=True)
"""``--gpu-smoke``: a tiny shape that runs the GPU code path on CPU (checks the code, measures nothing useful)."""

UNMATCHED = [
    "group reward std: TRL's nanstd is the unbiased (n-1) std, ours the population std, so TRL's grpo advantages "
    "are sqrt((G-1)/G) times ours (0.935 at G=8); both add 1e-4 to the std",
    "random streams: sampling, data order and initial RNG differ (TRL: transformers' set_seed + RepeatSampler; "
    "ours: per-step seeded generate + PivotSampler), so the reward curves are two draws of the same process, "
    "not the same trajectory",
    "zero-variance groups: TRL always keeps them in the loss; ours skips them by default "
    "(zero_variance='skip'); the comparison runs ours with zero_variance='keep' (same work, same loss normaliser)",
    "strict-match diagnostics (strict_reward_mean, miss_rate) are off in our arm (strict_verifier=None); "
    "TRL has no counterpart",
    "TRL tokenizes the prompt text itself (tokenizer(text), add_special_tokens=True); the JSON records whether the "
    "ids equal ours (encode_prompt) for every pivot",
    "TRL logs more per step (clip ratios, completion stats, gathered metrics); that cost is inside its step time",
    "matched exactly, for the record: loss_type='grpo' = our loss_agg='sample'; num_iterations=1 uses the "
    "detached current log-probs as pi_old in both; k3 KL to a frozen copy of the initial model; torch AdamW; "
    "constant lr; no warm-up; clip 1.0; top-k off; TRL's disable_dropout=True changes nothing (the tiny Llama "
    "has no dropout)",
]


# ---------------------------------------------------------------------- the toy task and model


def call(name: str) -> dict[str, Any]:
    """An assistant message calling tool ``name`` with no arguments."""
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": "c0", "type": "function", "function": {"name": name, "arguments": "{}"}}]}


def toy_pivots() -> list[Pivot]:
    """8 pivots: a user asks about connectivity (8 phrasings); the expert always calls ``ping()``."""
    return [Pivot(id=f"bench-{k}", domain=DOMAIN, context=[{"role": "user", "content": text}], expert=call(EXPERT_TOOL))
            for k, text in enumerate(USERS)]


@dataclass(frozen=True)
class Workload:
    """One model size of the CPU comparison.

    Attributes:
        hidden: model width.
        layers: decoder layers.
        sft_steps: SFT warm-up steps (uniform over the four tools).
        sft_lr: SFT learning rate.
        lr: the RL learning rate of both arms (constant), unless ``--lr`` is given.
    """

    hidden: int
    layers: int
    sft_steps: int
    sft_lr: float
    lr: float


WORKLOADS = {
    "tiny": Workload(hidden=64, layers=2, sft_steps=60, sft_lr=1e-2, lr=1e-3),  # ~0.1M params: loop overhead
    "small": Workload(hidden=256, layers=4, sft_steps=100, sft_lr=2e-3, lr=3e-4),  # ~2.7M params: more compute
}


def build_toy_model(root: Path, pivots: Sequence[Pivot], w: Workload, *, seed: int, threads: int
                    ) -> tuple[Path, dict[str, Any]]:
    """A tiny Llama SFT-warmed on every prompt x every tool (well-formed calls, ``ping`` ~1/4 of the time)."""
    from pivot_envs.models.tiny import build_tiny_model, count_parameters, train_lm

    users = [p.context[0]["content"] for p in pivots]
    texts = [action_target(call(t)) for t in TOOLS] + users + ["<|im_start|>user\n<|im_start|>assistant\n"]
    start = time.perf_counter()
    model = build_tiny_model(root / "model", texts, vocab_size=1000, hidden_size=w.hidden, n_layers=w.layers,
                             n_heads=4, max_positions=256, seed=seed)
    examples = [([{"role": "user", "content": u}], action_target(call(t))) for u in users for t in TOOLS]
    report = train_lm(model, examples, steps=w.sft_steps, lr=w.sft_lr, batch_size=8, seed=seed, num_threads=threads)
    info = {"kind": "tiny Llama (pivot_envs.models.tiny), SFT-warmed", "parameters": count_parameters(model),
            "hidden_size": w.hidden, "layers": w.layers, "sft_steps": w.sft_steps, "sft_lr": w.sft_lr,
            "sft_final_loss": round(report.final_loss, 4), "build_s": round(time.perf_counter() - start, 2)}
    return model, info


# ---------------------------------------------------------------------- the two arms


@dataclass
class Run:
    """Per-step stamps of one training run of one arm (lists aligned with the steps).

    Attributes:
        end_wall, end_cpu: ``perf_counter`` / ``process_time`` when each step ended.
        inner: the trainer's own step seconds (ours: ``step_s``; TRL: ``on_step_begin`` -> ``on_step_end``).
        tokens: sampled completion tokens per step.
        rewards: mean verifier reward per step.
        seconds: wall time of the whole call from loading the model (ours also saves ``final/``; TRL saves nothing).
        extra: arm-specific details for the JSON.
    """

    end_wall: list[float] = field(default_factory=list)
    end_cpu: list[float] = field(default_factory=list)
    inner: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    rewards: list[float | None] = field(default_factory=list)
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


def run_ours(model_dir: Path, pivots_path: Path, s: PeerSettings, out_dir: Path) -> Run:
    """Our trainer with the settings matched to TRL."""
    import torch

    from pivot_envs.trainers.pivotrl import PivotRLConfig, train_pivotrl

    cfg = PivotRLConfig(
        model=str(model_dir), pivots=str(pivots_path), output_dir=str(out_dir), overwrite_output_dir=True,
        domain=DOMAIN, verifier=VERIFIER, strict_verifier=None, seed=s.seed,
        steps=s.steps, pivots_per_step=s.pivots_per_step, group_size=s.group_size,
        temperature=s.temperature, top_p=s.top_p, max_new_tokens=s.max_new_tokens,
        lr=s.lr, lr_schedule="constant", warmup_steps=0, weight_decay=s.weight_decay, betas=s.adam_betas,
        adam_eps=s.adam_eps, max_grad_norm=s.max_grad_norm, num_iterations=s.num_iterations,
        eps_low=s.epsilon, eps_high=s.epsilon, beta=s.beta, loss_agg="sample", advantage="grpo", eps_std=1e-4,
        zero_variance="keep", save_every=0, plots=False, log_every=10**6, device="cpu", num_threads=s.threads,
    )
    run = Run()
    threads: list[int] = []

    def on_step(row: dict[str, Any]) -> None:
        run.end_wall.append(time.perf_counter())
        run.end_cpu.append(time.process_time())
        run.inner.append(row["step_s"])
        run.tokens.append(round((row["tokens_per_s"] or 0.0) * row["step_s"]))
        run.rewards.append(row["reward_mean"])
        run.extra.setdefault("sample_s", []).append(row["sample_s"])
        run.extra.setdefault("update_s", []).append(row["update_s"])
        threads.append(torch.get_num_threads())

    start = time.perf_counter()
    train_pivotrl(cfg, on_step=on_step)
    run.seconds = time.perf_counter() - start
    run.extra["threads_seen"] = sorted(set(threads))
    run.extra["config"] = {k: v for k, v in cfg.to_dict().items() if k not in ("model", "pivots", "output_dir")}
    return run


def run_peer(model_dir: Path, pivots: list[Pivot], prompts: list[str], s: PeerSettings, out_dir: Path) -> Run:
    """TRL's GRPOTrainer (``benchmarks/training_speed/trl_peer.py``) on the same model, prompts and verifier."""
    peer = run_trl(model_dir, pivots, prompts, build_verifier(VERIFIER), s, out_dir,
                   parse=get_domain(DOMAIN).parse_action)
    recs = peer["records"]
    return Run(end_wall=[r.end_wall for r in recs], end_cpu=[r.end_cpu for r in recs],
               inner=[r.end_wall - r.begin_wall for r in recs], tokens=[r.completion_tokens for r in recs],
               rewards=[r.reward_mean for r in recs], seconds=peer["seconds"],
               extra={"config": peer["config"], "prompt_ids": peer["tokenizer_prompt_ids"],
                      "masked": sum(r.masked for r in recs), "threads_seen": peer["threads_seen"]})


def summarise(runs: list[Run], warmup: int) -> dict[str, Any]:
    """Medians over the steps after ``warmup`` of every run (a step = end of the previous step -> its end)."""
    first = max(1, warmup)  # the first step has no previous end
    wall, cpu, inner, tokens = [], [], [], 0
    for run in runs:
        wall += [run.end_wall[i] - run.end_wall[i - 1] for i in range(first, len(run.end_wall))]
        cpu += [run.end_cpu[i] - run.end_cpu[i - 1] for i in range(first, len(run.end_cpu))]
        inner += run.inner[first:]
        tokens += sum(run.tokens[first:])
    rewards = runs[0].rewards
    return {
        "runs": len(runs),
        "measured_steps": len(wall),
        "step_wall_s_median": _r(statistics.median(wall)) if wall else None,
        "step_wall_s_mean": _r(statistics.fmean(wall)) if wall else None,
        "step_inner_s_median": _r(statistics.median(inner)) if inner else None,
        "step_cpu_s_median": _r(statistics.median(cpu)) if cpu else None,
        "completion_tokens_per_step_mean": _r(tokens / len(wall)) if wall else None,
        "tokens_per_s": _r(tokens / sum(wall)) if wall and sum(wall) > 0 else None,
        "total_s_per_run": [_r(run.seconds) for run in runs],
        "reward_curve": [None if r is None else round(r, 4) for r in rewards],
        "reward_first5_mean": _mean(rewards[:5]),
        "reward_last5_mean": _mean(rewards[-5:]),
        "same_rewards_every_run": all(run.rewards == rewards for run in runs),
        "step_wall_s_run1": [_r(b - a) for a, b in zip(runs[0].end_wall[first - 1 :], runs[0].end_wall[first:])],
    }


def _mean(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return round(sum(vals) / len(vals), 4) if vals else None


def _r(x: float) -> float:
    return round(float(x), 5)


FROZEN_LR = 1e-12
"""Learning rate of the timing-control runs: the policy stays (numerically) where it starts, so both arms sample
from the same distribution and do the same expected work per step (completion lengths set the cost of a step)."""


def cpu_section(args: argparse.Namespace) -> dict[str, Any]:
    """Both arms on every workload of ``args.sizes``: learning runs, then frozen-policy timing runs."""
    import torch
    from transformers import AutoTokenizer

    pivots = toy_pivots()
    base = PeerSettings(steps=args.steps, pivots_per_step=args.pivots_per_step, group_size=args.group_size,
                        max_new_tokens=args.max_new_tokens, beta=args.beta, seed=args.seed, threads=args.threads)
    out: dict[str, Any] = {
        "settings": {**asdict(base), "lr": "per workload (see workloads.*.lr)", "frozen_lr": FROZEN_LR,
                     "learning_rounds": args.learning_rounds, "timing_rounds": args.timing_rounds,
                     "timing_steps": args.timing_steps,
                     "warmup_steps_excluded": args.warmup, "verifier": VERIFIER,
                     "task": f"{len(pivots)} toy tool_use pivots (connectivity questions), expert = ping(); "
                             "SFT uniform over alpha/beta/gamma/ping"},
        "threads_note": f"torch.set_num_threads({args.threads}) for both arms",
        "phases": {"learning": f"{args.learning_rounds} run(s) per arm at the workload's lr, ABBA order: reward "
                               "curves (of the first run), step times while learning (completion lengths drift "
                               "differently in the two arms' runs)",
                   "frozen": f"lr={FROZEN_LR:g}, {args.timing_rounds} run(s) of {args.timing_steps} steps per arm in "
                             "ABBA order: the controlled timing comparison (same policy, same expected completion "
                             "lengths); step times pooled over the runs"},
        "workloads": {},
    }
    peer_skip = None
    if args.no_trl:
        peer_skip = "--no-trl"
    elif trl_version() is None:
        peer_skip = f"TRL is not installed: the TRL arm is skipped; {INSTALL_HINT}"
        print(peer_skip, flush=True)
    arms = ["pivotrl"] if peer_skip else ["pivotrl", "trl"]
    for size in args.sizes:
        w = WORKLOADS[size]
        lr = args.lr if args.lr is not None else w.lr
        phases = [("learning", lr, args.steps)] * args.learning_rounds
        phases += [("frozen", FROZEN_LR, args.timing_steps)] * args.timing_rounds
        # ABBA...: the arms swap order every round, so a drift in the machine's load hits both alike
        plan = [(phase, phase_lr, steps, arms if r % 2 == 0 else arms[::-1])
                for r, (phase, phase_lr, steps) in enumerate(phases)]
        runs: dict[tuple[str, str], list[Run]] = {}
        loads: dict[tuple[str, str], list[float]] = {}
        with tempfile.TemporaryDirectory() as tmp_name:
            tmp = Path(tmp_name)
            model, info = build_toy_model(tmp, pivots, w, seed=args.seed, threads=args.threads)
            pivots_path = tmp / "pivots.jsonl"
            pivots_path.write_text("".join(json.dumps(p.to_dict()) + "\n" for p in pivots), encoding="utf-8")
            tokenizer = AutoTokenizer.from_pretrained(model)
            prompt_config = PromptConfig(tools="auto")
            prompts = [pivot_prompt(tokenizer, p, prompt_config) for p in pivots]
            our_prompt_ids = [encode_prompt(tokenizer, p, prompt_config) for p in pivots]
            n = 0
            for phase, phase_lr, steps, order in plan:
                settings = dataclasses.replace(base, lr=phase_lr, steps=steps)
                for arm in order:
                    n += 1
                    print(f"[{size}] {phase} {arm} (lr {phase_lr:g}), {settings.steps} steps ...", flush=True)
                    loads.setdefault((phase, arm), []).append(round(os.getloadavg()[0], 2))
                    if arm == "pivotrl":
                        run = run_ours(model, pivots_path, settings, tmp / f"run-{n}")
                    else:
                        run = run_peer(model, pivots, prompts, settings, tmp / f"run-{n}")
                    runs.setdefault((phase, arm), []).append(run)
        result: dict[str, Any] = {"model": info, "lr": lr, "arms": {}}
        for arm in arms:
            first = next(r for key, rs in runs.items() if key[1] == arm for r in rs)
            entry: dict[str, Any] = {"threads_seen": first.extra["threads_seen"], "config": first.extra["config"]}
            if arm == "trl":
                entry = {"version": trl_version(), **entry,
                         "prompt_ids_equal_ours": first.extra["prompt_ids"] == our_prompt_ids,
                         "masked_samples": first.extra["masked"]}
            for phase in ("learning", "frozen"):
                if (phase, arm) not in runs:
                    continue
                phase_runs = runs[(phase, arm)]
                summary = {"load_avg_1m_before_runs": loads[(phase, arm)], **summarise(phase_runs, args.warmup)}
                if arm == "pivotrl":
                    for key in ("sample_s", "update_s"):
                        summary[f"{key}_median"] = _r(statistics.median(
                            x for run in phase_runs for x in run.extra[key][args.warmup:]))
                if phase == "frozen":  # its reward curve is the starting policy's accuracy, not a learning curve
                    for key in ("reward_curve", "reward_first5_mean", "reward_last5_mean"):
                        summary.pop(key)
                    summary["reward_mean"] = _mean([r for run in phase_runs for r in run.rewards])
                entry[phase] = summary
            result["arms"][arm] = entry
        if peer_skip:
            result["arms"]["trl"] = {"skipped": peer_skip}
        else:
            ours, peer = result["arms"]["pivotrl"], result["arms"]["trl"]
            result["comparison"] = {phase: _compare(ours.get(phase), peer.get(phase)) for phase in ("learning", "frozen")}
        out["workloads"][size] = result
    out["torch_threads_after"] = torch.get_num_threads()
    out["unmatched_knobs"] = UNMATCHED
    return out


def _compare(ours: dict[str, Any] | None, peer: dict[str, Any] | None) -> dict[str, Any] | None:
    if not ours or not peer or not ours.get("step_wall_s_median") or not peer.get("step_wall_s_median"):
        return None
    ratio = ours["step_wall_s_median"] / peer["step_wall_s_median"]
    return {
        "ours_over_trl_wall_per_step": round(ratio, 3),
        "ours_over_trl_cpu_per_step": round(ours["step_cpu_s_median"] / peer["step_cpu_s_median"], 3),
        "ours_over_trl_tokens_per_s": round(ours["tokens_per_s"] / peer["tokens_per_s"], 3),
        "ours_over_trl_tokens_per_step": round(ours["completion_tokens_per_step_mean"]
                                               / peer["completion_tokens_per_step_mean"], 3),
        "target": "ours wall time per step <= TRL's", "meets_target": ratio <= 1.0,
    }


# ---------------------------------------------------------------------- GPU section


def peak_bf16_flops(name: str) -> float | None:
    """Dense bf16 peak of a GPU by its name (``torch.cuda.get_device_name``); None when unknown."""
    for key, flops in PEAK_BF16_FLOPS:
        if key.lower() in name.lower():
            return flops
    return None


def gpu_section(args: argparse.Namespace) -> dict[str, Any]:
    """Training tokens/s + MFU and generation tokens/s of a Qwen2-0.5B-shaped model (random weights)."""
    import torch

    smoke = args.gpu_smoke
    if not smoke and not torch.cuda.is_available():
        print(NO_GPU, flush=True)
        return {"measured": False, "reason": NO_GPU}
    from transformers import Qwen2Config, Qwen2ForCausalLM

    device = torch.device("cpu" if smoke else "cuda")
    if smoke:  # spare CPU threads spin against other load on a shared machine
        torch.set_num_threads(args.threads)
    shape = SMOKE_SHAPE if smoke else QWEN2_05B_SHAPE
    rows, prompt_len, completion_len = (4, 16, 16) if smoke else (args.gpu_rows, args.gpu_prompt_tokens,
                                                                  args.gpu_completion_tokens)
    gen_rows, gen_prompt, gen_new = (4, 8, 8) if smoke else (args.gpu_gen_rows, args.gpu_gen_prompt_tokens,
                                                            args.gpu_gen_new_tokens)
    steps, warmup = (2, 1) if smoke else (args.gpu_steps, 2)
    torch.manual_seed(0)
    config = Qwen2Config(**shape, attn_implementation="sdpa")
    model = Qwen2ForCausalLM(config).to(device)  # float32 weights, as the trainer's full fine-tuning on CUDA
    model.train()
    params = sum(p.numel() for p in model.parameters())
    autocast = (torch.autocast(device_type="cuda", dtype=torch.bfloat16) if device.type == "cuda"
                else contextlib.nullcontext())
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu (smoke run)"
    peak = peak_bf16_flops(name) if device.type == "cuda" else None
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)

    # --- training: the trainer's update on random rows (advantages +-1, old log-probs = detached)
    gen = torch.Generator().manual_seed(0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    oom_retries = []
    while True:
        try:
            step_s = _train_steps(model, optimizer, rows, prompt_len, completion_len, shape["vocab_size"], gen,
                                  device, autocast, sync, warmup, steps)
            break
        except torch.cuda.OutOfMemoryError:  # not seen on CPU; halve the rows and try again
            optimizer.zero_grad(set_to_none=True)
            torch.cuda.empty_cache()
            oom_retries.append(rows)
            if rows == 1:
                raise
            rows //= 2
    tokens = rows * (prompt_len + completion_len)
    flops = 6 * params * tokens / step_s
    train = {"rows": rows, "prompt_tokens": prompt_len, "completion_tokens": completion_len,
             "tokens_per_step": tokens, "measured_steps": steps, "step_s_median": _r(step_s),
             "tokens_per_s": round(tokens / step_s, 1), "model_flops_per_s": flops,
             "mfu": round(flops / peak, 4) if peak else None, "out_of_memory_at_rows": oom_retries}

    # --- generation: sampling as the hf sampler does (autocast, temperature 1, top-k off), fixed length
    model.eval()
    gen_ids = torch.randint(0, shape["vocab_size"], (gen_rows, gen_prompt), generator=gen).to(device)
    kwargs = dict(attention_mask=torch.ones_like(gen_ids), do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                  pad_token_id=0, eos_token_id=None)
    with torch.no_grad(), autocast:
        model.generate(gen_ids, max_new_tokens=4, min_new_tokens=4, **kwargs)  # warm-up
        sync()
        t0 = time.perf_counter()
        out = model.generate(gen_ids, max_new_tokens=gen_new, min_new_tokens=gen_new, **kwargs)
        sync()
        gen_s = time.perf_counter() - t0
    new_tokens = int(out.shape[0] * (out.shape[1] - gen_prompt))
    generate = {"rows": gen_rows, "prompt_tokens": gen_prompt, "new_tokens_per_row": gen_new, "seconds": _r(gen_s),
                "tokens_per_s": round(new_tokens / gen_s, 1)}
    out_dict: dict[str, Any] = {
        "measured": not smoke, "smoke_run_on_cpu": smoke, "device": name, "torch": torch.__version__,
        "model": "Qwen2ForCausalLM from Qwen2Config with Qwen2-0.5B's sizes, random weights" if not smoke
        else "tiny Qwen2 shape (smoke run)", "shape": shape, "parameters": params,
        "precision": "float32 weights, bfloat16 autocast" if device.type == "cuda" else "float32",
        "peak_bf16_flops": peak, "train": train, "generate": generate,
        "mfu_formula": "6 * parameters (embeddings included, tied) * tokens per step (prompt + completion) / "
                       "median step time / peak dense bf16 FLOPS",
    }
    if device.type == "cuda":
        out_dict["max_memory_allocated_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
        if peak is None:
            out_dict["note"] = f"no peak FLOPS known for {name!r}: MFU not computed"
    return out_dict


def _train_steps(model: Any, optimizer: Any, rows: int, prompt_len: int, completion_len: int, vocab: int,
                 gen: Any, device: Any, autocast: Any, sync: Any, warmup: int, steps: int) -> float:
    """Median seconds of the trainer's update (log-probs, loss, backward, clip, AdamW) on random rows."""
    import torch

    from pivot_envs.trainers.logprobs import completion_logprobs
    from pivot_envs.trainers.token_batch import pack
    from pivot_envs.trainers.loss import pivotrl_loss

    prompts = torch.randint(0, vocab, (rows, prompt_len), generator=gen).tolist()
    completions = torch.randint(0, vocab, (rows, completion_len), generator=gen).tolist()
    batch = pack(prompts, completions, pad_id=0, device=device)
    advantages = (torch.arange(rows, device=device) % 2 * 2 - 1).float()
    times = []
    for step in range(warmup + steps):
        sync()
        t0 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        with autocast:
            logp, _ = completion_logprobs(model, batch, with_entropy=True)
            loss = pivotrl_loss(logp, logp.detach(), None, advantages, batch.completion_mask).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        sync()
        if step >= warmup:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


# ---------------------------------------------------------------------- output


def plot(result: dict[str, Any], path: Path) -> Path | None:
    """Per workload: reward per step of both arms side by side, and wall time per step of both."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        result["notes"].append("matplotlib missing: no PNG")
        return None
    cpu = result.get("cpu", {})
    workloads = cpu.get("workloads", {})
    if not workloads:
        return None
    fig, grid = plt.subplots(len(workloads), 3, figsize=(15, 3.6 * len(workloads)), squeeze=False)
    warm = cpu.get("settings", {}).get("warmup_steps_excluded", 0)
    for axes, (size, w) in zip(grid, workloads.items()):
        arms = w["arms"]
        labels = {"pivotrl": "pivot-envs PivotRL", "trl": f"TRL GRPOTrainer {arms['trl'].get('version', '')}".strip()}
        tag = f"[{size}: {w['model']['parameters'] / 1e6:.2f}M params, lr {w['lr']:g}]"
        for ax, arm in zip(axes[:2], ("pivotrl", "trl")):
            data = arms.get(arm, {})
            curve = data.get("learning", {}).get("reward_curve")
            ax.set_title(f"{labels[arm]} {tag}", fontsize=9)
            ax.set_xlabel("step")
            ax.set_ylabel("mean verifier reward")
            ax.set_ylim(-0.02, 1.02)
            ax.grid(alpha=0.3)
            if curve:
                xs = [i + 1 for i, v in enumerate(curve) if v is not None]
                ax.plot(xs, [v for v in curve if v is not None], marker=".", color="C0" if arm == "pivotrl" else "C1")
            else:
                ax.text(0.5, 0.5, data.get("skipped", "not run"), ha="center", va="center", wrap=True,
                        transform=ax.transAxes, fontsize=8)
        ax = axes[2]
        for arm, color in (("pivotrl", "C0"), ("trl", "C1")):
            for phase, style in (("learning", "-"), ("frozen", ":")):
                series = arms.get(arm, {}).get(phase, {}).get("step_wall_s_run1")
                if series:
                    first = max(1, warm) + 1
                    ax.plot(range(first, first + len(series)), series, style, marker=".", color=color,
                            label=f"{labels[arm]}, {phase}")
        ax.set_title(f"wall s per step, first run {tag}", fontsize=9)
        ax.set_xlabel("step")
        ax.set_ylabel("seconds")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=8)
    s = cpu["settings"]
    fig.suptitle(f"same model, prompts, verifier (tool_call); G={s['group_size']}, {s['pivots_per_step']} pivots/step, "
                 f"max_new_tokens={s['max_new_tokens']}, beta={s['beta']}; CPU fp32, {s['threads']} torch thread(s)",
                 fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def print_table(result: dict[str, Any]) -> None:
    cpu = result.get("cpu", {})
    fields = [("wall s/step (median)", "step_wall_s_median"), ("trainer's own s/step (median)", "step_inner_s_median"),
              ("process CPU s/step (median)", "step_cpu_s_median"), ("completion tokens/s", "tokens_per_s"),
              ("completion tokens/step", "completion_tokens_per_step_mean"),
              ("reward, first 5 steps", "reward_first5_mean"), ("reward, last 5 steps", "reward_last5_mean"),
              ("reward (frozen policy)", "reward_mean")]
    for size, w in cpu.get("workloads", {}).items():
        ours, peer = w["arms"]["pivotrl"], w["arms"]["trl"]
        peer_name = f"TRL {peer['version']}" if "version" in peer else "TRL"
        head = f"CPU [{size}: {w['model']['parameters'] / 1e6:.2f}M params, {cpu['settings']['threads']} thread]"
        print(f"\n{head:36s}  {'learning runs':^26s}  {'frozen policy (timing)':^26s}")
        print(f"{'':36s}  {'pivot-envs':>12s}  {peer_name:>12s}  {'pivot-envs':>12s}  {peer_name:>12s}")
        for label, key in fields:
            cells = [arm.get(phase, {}).get(key) for phase in ("learning", "frozen") for arm in (ours, peer)]
            print(f"{label:36s}  " + "  ".join(f"{_fmt(c):>12s}" for c in cells))
        if "skipped" in peer:
            print("TRL arm:", peer["skipped"])
        for phase, comp in (w.get("comparison") or {}).items():
            if comp:
                verdict = "ok" if comp["meets_target"] else "MISSED"
                print(f"ours / TRL, {phase:8s}: wall per step {comp['ours_over_trl_wall_per_step']:.3f} "
                      f"(target <= 1: {verdict}), CPU per step {comp['ours_over_trl_cpu_per_step']:.3f}, "
                      f"tokens per step {comp['ours_over_trl_tokens_per_step']:.3f}, "
                      f"tokens/s {comp['ours_over_trl_tokens_per_s']:.3f}")
    gpu = result.get("gpu", {})
    if gpu.get("train"):
        t, g = gpu["train"], gpu["generate"]
        tag = "SMOKE: cpu, tiny shape" if gpu.get("smoke_run_on_cpu") else gpu["device"]
        mfu = f"{t['mfu']:.1%}" if t.get("mfu") is not None else "n/a"
        print(f"\nGPU [{tag}]: train {t['tokens_per_s']:.0f} tokens/s ({t['step_s_median']:.3f} s/step, MFU {mfu}); "
              f"generate {g['tokens_per_s']:.0f} tokens/s")
    elif gpu:
        print("\nGPU:", gpu.get("reason"))


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4f}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=30, help="training steps per arm")
    parser.add_argument("--warmup", type=int, default=2, help="first steps left out of the timings")
    parser.add_argument("--pivots-per-step", type=int, default=4, help="distinct pivots (prompts) per step")
    parser.add_argument("--group-size", type=int, default=8, help="G: samples per pivot (TRL num_generations)")
    parser.add_argument("--max-new-tokens", type=int, default=32, help="longest completion")
    parser.add_argument("--lr", type=float, default=None,
                        help="constant AdamW learning rate of both arms (default: per workload, tiny 1e-3, small 3e-4)")
    parser.add_argument("--beta", type=float, default=0.01, help="k3 KL coefficient (both arms load a reference)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads for both arms")
    parser.add_argument("--sizes", type=lambda v: [x for x in v.split(",") if x], default=list(WORKLOADS),
                        help=f"comma-separated CPU workloads among {', '.join(WORKLOADS)}")
    parser.add_argument("--learning-rounds", type=int, default=2,
                        help="learning runs per arm and workload (ABBA order; the same seed: same rewards)")
    parser.add_argument("--timing-rounds", type=int, default=4,
                        help="frozen-policy timing runs per arm and workload (ABBA order; 0: none)")
    parser.add_argument("--timing-steps", type=int, default=20, help="steps of each frozen-policy timing run")
    parser.add_argument("--no-trl", action="store_true", help="skip the TRL arm")
    parser.add_argument("--gpu-only", action="store_true", help="only the GPU section")
    parser.add_argument("--no-gpu", action="store_true", help="skip the GPU section")
    parser.add_argument("--gpu-smoke", action="store_true",
                        help="run the GPU code path on CPU with a tiny shape (a code check; no GPU figures)")
    parser.add_argument("--gpu-rows", type=int, default=8, help="GPU training rows per step (halved on OOM)")
    parser.add_argument("--gpu-prompt-tokens", type=int, default=512, help="GPU training prompt tokens per row")
    parser.add_argument("--gpu-completion-tokens", type=int, default=512, help="GPU training completion tokens per row")
    parser.add_argument("--gpu-steps", type=int, default=5, help="timed GPU training steps (after 2 warm-up)")
    parser.add_argument("--gpu-gen-rows", type=int, default=64, help="GPU generation rows (pivots x G)")
    parser.add_argument("--gpu-gen-prompt-tokens", type=int, default=256, help="GPU generation prompt tokens")
    parser.add_argument("--gpu-gen-new-tokens", type=int, default=256, help="GPU generation new tokens per row")
    parser.add_argument("--out", type=Path, default=OUT_JSON, help="results JSON")
    parser.add_argument("--png", type=Path, default=OUT_PNG, help="reward-curve PNG")
    args = parser.parse_args(argv)

    import torch
    import transformers

    transformers.utils.logging.set_verbosity_error()  # no "Loading weights" bars and notices
    transformers.utils.logging.disable_progress_bar()
    warnings.filterwarnings("ignore", category=FutureWarning)  # e.g. TRL passing transformers' renamed options
    start = time.perf_counter()
    result: dict[str, Any] = {"benchmark": "trainer", "python": platform.python_version(),
                              "platform": platform.platform(), "cpu_count": os.cpu_count(),
                              "torch": torch.__version__, "transformers": transformers.__version__,
                              "trl": trl_version(), "notes": []}
    unknown = [x for x in args.sizes if x not in WORKLOADS]
    if unknown:
        parser.error(f"--sizes: unknown workload {unknown[0]!r}; choose among {', '.join(WORKLOADS)}")
    if not args.gpu_only:
        result["cpu"] = cpu_section(args)
    if not args.no_gpu:
        result["gpu"] = gpu_section(args)
    elapsed = round(time.perf_counter() - start, 1)
    result["wall_s"] = elapsed
    out = args.out
    if args.gpu_only and out.exists():  # keep the CPU figures of an earlier run; replace the GPU ones
        result = {**json.loads(out.read_text(encoding="utf-8")), "gpu": result["gpu"],
                  "gpu_wall_s": elapsed}
    print_table(result)
    png = plot(result, args.png) if not args.gpu_only else None
    if png is not None:
        result["png"] = str(png.relative_to(ROOT)) if png.is_relative_to(ROOT) else str(png)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=_json_default) + "\n", encoding="utf-8")
    print(f"wrote {out}" + (f" and {png}" if png is not None else "") + f" in {elapsed:.0f} s")
    return result


def _json_default(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return str(value)


if __name__ == "__main__":
    main()
