"""The demo's arms: one training run (SFT or PivotRL GRPO) from the base model, then its evaluations.

An arm of the comparison (``base``, ``sft``, ``pivotrl``, ``no_filter``,
``strict_reward``, ``pvpo``) at one seed is a :class:`RunSpec`. :func:`execute_run`
trains it (nothing for ``base``), evaluates it on the validation and/or test
pivots, and keeps everything in its own folder ``DIR/runs/<arm>-s<seed>-<key>/``::

    train/             the trainer's output (final/ model, metrics.jsonl, plots)
    val.json, test.json  full evaluation reports (pivot_envs.trainers.evaluate)
    run.json           the spec and the summaries below (written after each phase)

The folder name carries a hash of the spec and of the shared settings, so a run
is found again (and skipped) when the demo is resumed, and a validation run
whose settings win the selection is the very run used as that arm's seed-0 row.

Every function here is top-level and its arguments are plain dataclasses, so
runs can go to worker processes (:func:`run_many`).
"""

from __future__ import annotations

import json
import math
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

from pivot_envs.types import stable_hash

ARMS = ("base", "sft", "pivotrl", "no_filter", "strict_reward", "pvpo")
"""Arm names, in the order of the report's table."""

ARM_TITLES = {
    "base": "Base",
    "sft": "SFT (same pivots, NLL)",
    "pivotrl": "PivotRL (D_adv + functional reward)",
    "no_filter": "- pivot filtering (random D_cand + functional)",
    "strict_reward": "- functional reward (random D_cand + strict)",
    "pvpo": "PVPO advantages",
}


@dataclass(frozen=True)
class RunSettings:
    """What every run of one demo shares (the base model, the data and the run length).

    Attributes:
        root: the demo folder (runs go to ``root/runs``).
        domain: the domain of the pivots.
        base_model: the base model folder.
        val_pivots: validation pivot file (carved from the training split).
        test_pivots: test pivot file (from the test split).
        max_context_tokens: prompt window of training, sampling and evaluation.
        max_new_tokens: longest sampled action.
        steps: optimiser steps of every trained arm (SFT and RL alike).
        pivots_per_step: pivots per step: the SFT batch and the RL minibatch.
        group_size: G, RL samples per pivot.
        beta: KL coefficient of the RL arms.
        eval_k: samples per test pivot for mean@k at temperature 1.
        eval_batch: pivots per ``generate`` call in evaluation.
        num_threads: torch CPU threads of one run.
        fingerprint: hash of the base model's build (runs of another base model get other folders).
    """

    root: str
    domain: str
    base_model: str
    val_pivots: str
    test_pivots: str
    max_context_tokens: int
    max_new_tokens: int
    steps: int
    pivots_per_step: int
    group_size: int
    beta: float
    eval_k: int
    eval_batch: int = 16
    num_threads: int | None = 1
    fingerprint: str = ""


@dataclass(frozen=True)
class RunSpec:
    """One arm at one seed.

    Attributes:
        arm: one of :data:`ARMS`.
        seed: training and evaluation seed.
        pivots: training pivot file (``None`` for ``base``).
        lr: peak learning rate (``None`` for ``base``).
        label: free text on what makes this run (e.g. ``lambda=0.75``), part of its key.
        evals: which evaluations to run: ``val`` (greedy, no probes) and/or ``test``
            (greedy, mean@k, probes).
        profile_rollouts: rollouts spent profiling the pivots this arm trains on (counted in its budget).
    """

    arm: str
    seed: int
    pivots: str | None = None
    lr: float | None = None
    label: str = ""
    evals: tuple[str, ...] = ("test",)
    profile_rollouts: int = 0

    def key(self, settings: RunSettings) -> str:
        """Folder name of this run: arm, seed and a hash of everything its numbers depend on."""
        shared = {k: v for k, v in asdict(settings).items() if k not in ("root", "num_threads", "eval_batch")}
        digest = stable_hash(self.arm, self.seed, self.pivots, self.lr, self.label, shared)[:10]
        return f"{self.arm}-s{self.seed}-{digest}"


def run_dir(spec: RunSpec, settings: RunSettings) -> Path:
    return Path(settings.root) / "runs" / spec.key(settings)


def read_run(spec: RunSpec, settings: RunSettings) -> dict[str, Any]:
    """The saved ``run.json`` of a run (``{}`` when it has not started)."""
    path = run_dir(spec, settings) / "run.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def execute_run(spec: RunSpec, settings: RunSettings) -> dict[str, Any]:
    """Train (unless done) and evaluate (what is not done yet) one run; returns its ``run.json`` content."""
    quiet_transformers()
    folder = run_dir(spec, settings)
    folder.mkdir(parents=True, exist_ok=True)
    state = read_run(spec, settings)
    state.update({"arm": spec.arm, "seed": spec.seed, "label": spec.label, "lr": spec.lr, "folder": str(folder),
                  "pivots": spec.pivots})
    model = settings.base_model
    if spec.arm != "base":
        final = folder / "train" / "final"
        if "train" not in state or not final.exists():
            _say(f"[{folder.name}] training {spec.arm} ({settings.steps} steps, lr {spec.lr:g}) ...")
            state["train"] = _train(spec, settings, folder / "train")
            _save(folder, state)
            t = state["train"]
            _say(f"[{folder.name}] trained in {t['seconds']:.0f} s")
        model = str(final)
    for which in spec.evals:
        if which in state:
            continue
        _say(f"[{folder.name}] evaluating on {which} ...")
        state[which] = _evaluate(model, which, spec, settings, folder)
        _save(folder, state)
        s = state[which]
        ood = "" if s.get("ood_accuracy") is None else f", OOD {s['ood_accuracy']:.3f}"
        _say(f"[{folder.name}] {which}: functional {s['functional']:.3f}, strict {s['strict']:.3f}{ood} "
             f"({s['seconds']:.0f} s)")
    state["profile_rollouts"] = spec.profile_rollouts
    state["rollout_turns"] = spec.profile_rollouts + int(state.get("train", {}).get("rollouts", 0))
    _save(folder, state)
    return state


def run_many(specs: Sequence[RunSpec], settings: RunSettings, workers: int = 1) -> list[dict[str, Any]]:
    """:func:`execute_run` for every spec, ``workers`` at a time in worker processes (1: in this process)."""
    specs = list(specs)
    if workers <= 1 or len(specs) <= 1:
        return [execute_run(s, settings) for s in specs]
    import multiprocessing

    with ProcessPoolExecutor(max_workers=min(workers, len(specs)),
                             mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(execute_run, s, settings) for s in specs]
        return [f.result() for f in futures]


# --------------------------------------------------------------------------- training


def _train(spec: RunSpec, settings: RunSettings, out: Path) -> dict[str, Any]:
    if spec.pivots is None or spec.lr is None:
        raise ValueError(f"arm {spec.arm!r} needs a pivot file and a learning rate")
    if spec.arm == "sft":
        return _train_sft(spec, settings, out)
    return _train_rl(spec, settings, out)


def rl_config(spec: RunSpec, settings: RunSettings, out: Path) -> dict[str, Any]:
    """The :class:`~pivot_envs.trainers.config.PivotRLConfig` of an RL arm (as a dict)."""
    cfg: dict[str, Any] = dict(
        model=settings.base_model, output_dir=str(out), overwrite_output_dir=True, domain=settings.domain,
        pivots=spec.pivots, seed=spec.seed, steps=settings.steps, pivots_per_step=settings.pivots_per_step,
        group_size=settings.group_size, temperature=1.0, max_new_tokens=settings.max_new_tokens,
        max_prompt_tokens=settings.max_context_tokens, lr=spec.lr, lr_schedule="constant", warmup_steps=0,
        beta=settings.beta, zero_variance="skip", save_every=0, log_every=10 ** 6, plots=True, device="cpu",
        num_threads=settings.num_threads,
    )
    if spec.arm == "strict_reward":
        cfg["verifier"] = "strict"
    if spec.arm == "pvpo":
        cfg.update(advantage="pvpo", zero_variance="keep", pvpo_drop_solved=True, pvpo_inject_expert=True)
    return cfg


def _train_rl(spec: RunSpec, settings: RunSettings, out: Path) -> dict[str, Any]:
    from pivot_envs.trainers.metrics import read_metrics
    from pivot_envs.trainers.pivotrl import train_pivotrl

    every = max(1, settings.steps // 5)

    def on_step(row: dict[str, Any]) -> None:
        if row["step"] % every == 0:
            reward = row.get("reward_mean")
            zv = row.get("zero_var_frac")
            _say(f"[{out.parent.name}] step {row['step']}/{settings.steps}: reward "
                 f"{'-' if reward is None else f'{reward:.3f}'}, zero-variance groups "
                 f"{'-' if zv is None else f'{zv:.2f}'}, {row.get('step_s', 0):.1f} s/step")

    result = train_pivotrl(rl_config(spec, settings, out), on_step=on_step)
    return rl_summary(read_metrics(result.metrics_path), settings.group_size, result.seconds)


def rl_summary(rows: Sequence[dict[str, Any]], group_size: int, seconds: float) -> dict[str, Any]:
    """Totals of an RL run from its metrics rows: rollouts, tokens, zero-variance fraction, reward trend."""
    groups = sum(int(r.get("groups") or 0) + int(r.get("resampled_groups") or 0) for r in rows)
    completion_tokens = sum((r.get("groups") or 0) * group_size * (r.get("completion_len_mean") or 0.0) for r in rows)
    zero_var = [r["zero_var_frac"] for r in rows if r.get("zero_var_frac") is not None]
    rewards = [r["reward_mean"] for r in rows if r.get("reward_mean") is not None]
    strict = [r["strict_reward_mean"] for r in rows if r.get("strict_reward_mean") is not None]
    tenth = max(1, len(rewards) // 10)
    return {
        "kind": "rl",
        "steps": len(rows),
        "updates": sum(1 for r in rows if r.get("updated")),
        "rollouts": groups * group_size,
        "completion_tokens": int(round(completion_tokens)),
        "used_samples": sum(int(r.get("used_samples") or 0) for r in rows),
        "zero_var_frac": _mean(zero_var),
        "reward_first": _mean(rewards[:tenth]),
        "reward_last": _mean(rewards[-tenth:]),
        "strict_reward_mean": _mean(strict),
        "injected": sum(int(r.get("injected") or 0) for r in rows),
        "seconds": round(seconds, 2),
    }


def _train_sft(spec: RunSpec, settings: RunSettings, out: Path) -> dict[str, Any]:
    from pivot_envs.trainers.sft import SFTConfig, train_sft

    cfg = SFTConfig(model=settings.base_model, output_dir=str(out), overwrite_output_dir=True, domain=settings.domain,
                    pivots=spec.pivots, seed=spec.seed, steps=settings.steps, batch_size=settings.pivots_per_step,
                    lr=spec.lr, lr_schedule="constant", max_prompt_tokens=settings.max_context_tokens,
                    save_every=0, log_every=10 ** 6, plots=True, device="cpu", num_threads=settings.num_threads)
    result = train_sft(cfg)
    return {"kind": "sft", "steps": result.steps, "updates": result.steps, "rollouts": 0, "tokens": result.tokens,
            "loss_tokens": result.loss_tokens, "loss_first": _mean(result.losses[: max(1, len(result.losses) // 10)]),
            "loss_last": _mean(result.losses[-max(1, len(result.losses) // 10):]), "seconds": result.seconds}


# --------------------------------------------------------------------------- evaluation


def _evaluate(model: str, which: str, spec: RunSpec, settings: RunSettings, folder: Path) -> dict[str, Any]:
    from pivot_envs.trainers.evaluate import evaluate

    test = which == "test"
    report = evaluate(model, settings.test_pivots if test else settings.val_pivots, k=settings.eval_k if test else 0,
                      probes=test, seed=spec.seed, max_new_tokens=settings.max_new_tokens,
                      max_prompt_tokens=settings.max_context_tokens, batch_size=settings.eval_batch,
                      num_threads=settings.num_threads, device="cpu")
    (folder / f"{which}.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return eval_summary(report)


def eval_summary(report: dict[str, Any]) -> dict[str, Any]:
    """The figures the demo reports from one :func:`~pivot_envs.trainers.evaluate.evaluate` report."""
    overall = report["overall"]
    sampled = overall.get("sampled") or {}
    probes = report.get("probes") or {}
    return {
        "pivots": report["pivots"],
        "functional": overall["greedy"]["functional"],
        "strict": overall["greedy"]["strict"],
        "mean_at_k_functional": sampled.get("functional"),
        "mean_at_k_strict": sampled.get("strict"),
        "pass_at_k": sampled.get("pass_at_k"),
        "errors": overall["greedy"]["errors"],
        "ood_accuracy": probes.get("accuracy"),
        "ood_by_kind": probes.get("by_kind"),
        "seconds": report["seconds"],
    }


# --------------------------------------------------------------------------- helpers


def quiet_transformers() -> None:
    """Silence transformers' weight-loading bars and long-sequence warnings (the demo prints its own progress)."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def _mean(values: Sequence[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


def _save(folder: Path, state: dict[str, Any]) -> None:
    tmp = folder / "run.json.tmp"
    tmp.write_text(json.dumps(state, indent=1) + "\n", encoding="utf-8")
    tmp.replace(folder / "run.json")


def _say(message: str) -> None:
    """Progress line on stderr (worker processes write to the same terminal)."""
    print(f"{time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)

