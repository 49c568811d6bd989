"""The demo's arms: one training run (SFT or PivotRL GRPO) from the base model, then its evaluations.

An arm of the comparison (``base``, ``sft``, ``pivotrl``, ``no_filter``,
``strict_reward``, ``pvpo``) at one seed is a :class:`RunSpec`. :func:`execute_run`
trains it (nothing for ``base``), evaluates it on the validation and/or test
pivots and plays the held-out tasks, and keeps everything in its own folder ``DIR/runs/<arm>-s<seed>-<key>/``::

    train/             the trainer's output (final/ model, metrics.jsonl, plots)
    val.json, test.json  full evaluation reports (pivot_envs.trainers.evaluate)
    tasks.json, tasks_sampled.json  the held-out tasks played greedily and at T=1
    *_items.json       per-item outcomes (the report's paired tests)
    parts/<part>.json  each part's summary, written when the part ends (a resumed demo skips it); its
                       ``seconds`` is the part's wall time over every call that worked on it (an interrupted
                       training resumes from its checkpoint, an interrupted play starts again: both cost
                       time), ``last_call_seconds`` the part's own timing of the call that finished it
    parts/seconds.json those per-part wall times (:class:`~pivot_envs.experiments.stage_clock.StageClock`)
    run.json           the spec and every part's summary, assembled

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
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from pivot_envs.experiments.arm_table import ARM
from pivot_envs.experiments.engines import EngineSettings, eval_agents, rl_fields
from pivot_envs.experiments.evaluation import Sampling, pivot_report, play_tasks
from pivot_envs.experiments.few_shot_probes import few_shot_probe_set
from pivot_envs.experiments.stage_clock import StageClock, sigterm_as_exit
from pivot_envs.experiments.stats import pass_at_1
from pivot_envs.trainers.evaluate import evaluate_episodes
from pivot_envs.trainers.metrics import read_metrics
from pivot_envs.trainers.sft import SFTConfig, train_sft
from pivot_envs.types import stable_hash
from pivot_envs.verifiers.defaults import default_verifier_spec
from pivot_envs.verifiers.versions import verifier_fingerprint

@dataclass(frozen=True)
class ArmSettings:
    """How every arm of one demo is trained and evaluated: the knobs :class:`~pivot_envs.experiments.demo.DemoConfig`
    sets and every run holds (:class:`RunSettings`), declared once. The defaults are the demo's; two differ from the
    trainers' (``beta``, ``warmup_steps``): the demo's arms are an experiment with chosen settings, the trainers'
    defaults turn a feature off until a config asks for it.

    Attributes:
        steps: optimiser steps of every trained arm (SFT and RL alike).
        pivots_per_step: pivots per step: the SFT batch and the RL minibatch.
        group_size: G, RL samples per pivot.
        beta: KL coefficient of the RL arms (the trainers' default is 0: no reference model).
        warmup_steps: linear learning-rate warm-up of every trained arm (the trainers' default is 0: none).
        max_new_tokens: longest sampled action.
        max_turns: assistant turns before an episode is cut (evaluation and E2E training alike).
        zero_variance: what the RL arms do with a group whose rewards are all equal (``skip``; ``resample``: sample
            the pivot again, up to ``max_resample`` times: a signal in every step).
        max_resample: extra sampling rounds of such a group with ``resample``.
        rl_lora_r: LoRA rank of the RL arms (alpha = 2 x rank, every linear layer, merged into each saved model;
            ``0``: full fine-tuning). SFT stays full fine-tuning.
        micro_batch_rows: rows per forward/backward pass of the trainers (``0``: a whole step).
        save_every: training checkpoints every this-many steps; a training part that finds one resumes from it
            (``0``: none).
        eval_k: samples per test pivot for mean@k at temperature 1.
        eval_batch: pivots (or live episodes) per engine call in evaluation.
        episode_k: episodes per held-out task at temperature 1 (pass@1 = mean over them), beside greedy.
        curve_every: evaluate task success at every ``curve_every`` steps of the RL arms (the curve of
            task success against rollout turns); ``0``: only at the end.
        curve_tasks: how many held-out tasks the curve points play (the first N; ``None``: all).
        val_episode_k: T=1 episodes per validation task.
        ood_episode_k: T=1 episodes per OOD task (beside one greedy).
        probe_set: the OOD probes: ``builtin`` (the tiny model's 200, learned by its base) or ``few_shot`` (8 families
            of few-shot questions a pretrained chat model partly answers:
            :mod:`~pivot_envs.experiments.few_shot_probes`).
        probes_per_kind: few-shot probe items per family.
        divergence_pivots: test pivots at which each arm's KL to the base and entropy are measured on its own
            samples (the ``divergence`` part: :mod:`~pivot_envs.experiments.divergence`); ``0``: not measured.
        divergence_k: samples per pivot of that measure.
    """

    steps: int = 40
    pivots_per_step: int = 8
    group_size: int = 8
    beta: float = 0.05
    warmup_steps: int = 3
    max_new_tokens: int = 96
    max_turns: int = 8
    zero_variance: str = "skip"
    max_resample: int = 2
    rl_lora_r: int = 0
    micro_batch_rows: int = 0
    save_every: int = 0
    eval_k: int = 4
    eval_batch: int = 16
    episode_k: int = 2
    curve_every: int = 0
    curve_tasks: int | None = 40
    val_episode_k: int = 1
    ood_episode_k: int = 1
    probe_set: str = "builtin"
    probes_per_kind: int = 30
    divergence_pivots: int = 0
    divergence_k: int = 4


@dataclass(frozen=True)
class RunSettings:
    """What every run of one demo shares: the base model, the data and how the arms are trained and evaluated.

    Attributes:
        root: the demo folder (runs go to ``root/runs``).
        domain: the domain of the pivots.
        base_model: the base model folder.
        val_pivots: validation pivot file (carved from the training split).
        test_pivots: test pivot file (from the test split).
        max_context_tokens: prompt window of training, sampling and evaluation.
        per_arm: how every arm is trained and evaluated (:class:`ArmSettings`).
        num_threads: torch CPU threads of one run.
        fingerprint: hash of the base model's build (runs of another base model get other folders).
        test_tasks: held-out tasks (a trajectory file or ``bundled:DOMAIN:SPLIT``) played to the end in
            the ``test`` evaluation: task success; ``None``: none.
        curve_seed: only runs of this seed get a curve (``None``: every seed; the report averages them).
        engine: who samples (profiling aside: evaluation and PivotRL's groups) and how prompts are built
            (:class:`~pivot_envs.experiments.engines.EngineSettings`).
        val_tasks: validation tasks (a trajectory file) played ``per_arm.val_episode_k`` times at T=1 in the
            ``val_tasks`` evaluation: the selection's metric; ``None``: none.
        ood_domain: the OOD domain; ``ood_tasks`` its held-out tasks (played in the ``test`` evaluation, greedily
            and ``per_arm.ood_episode_k`` times at T=1).
        fresh_process: every part runs in a process of its own (a vLLM engine per part, gone with it).
        device: the trainers' and the ``hf`` engine's device (``cpu``; ``auto``: CUDA when there is one).
    """

    root: str
    domain: str
    base_model: str
    val_pivots: str
    test_pivots: str
    max_context_tokens: int
    per_arm: ArmSettings
    num_threads: int | None = 1
    fingerprint: str = ""
    test_tasks: str | None = None
    curve_seed: int | None = None
    engine: EngineSettings = EngineSettings()
    val_tasks: str | None = None
    ood_domain: str | None = None
    ood_tasks: str | None = None
    fresh_process: bool = False
    device: str = "cpu"

    def sampling(self) -> Sampling:
        """The evaluations' shared sampling settings."""
        return Sampling(engine=self.engine, max_new_tokens=self.per_arm.max_new_tokens,
                        max_prompt_tokens=self.max_context_tokens, batch_size=self.per_arm.eval_batch,
                        num_threads=self.num_threads, device=self.device)

    def flat(self) -> dict[str, Any]:
        """Every setting in one flat mapping (``per_arm``'s beside the others): what a run's key hashes, as it did
        before the arms' settings were nested."""
        shared = {k: v for k, v in asdict(self).items() if k != "per_arm"}
        return {**shared, **asdict(self.per_arm)}


RUN_LOCAL_FIELDS = ("root", "num_threads", "eval_batch", "fresh_process", "save_every", "divergence_pivots",
                    "divergence_k")
"""Settings that change where or how fast a run goes, or add a measure of its own part, never its numbers."""

TRAINING_FIELDS = ("steps", "pivots_per_step", "group_size", "beta", "warmup_steps", "micro_batch_rows",
                   "curve_every", "curve_tasks", "curve_seed", "zero_variance", "max_resample")

ADDED_LATER = {"zero_variance": "skip", "max_resample": 2}
"""Settings added after runs were saved: hashed into a run's key only when not at their default, so the runs saved
before keep their folders."""
"""Settings only a trained arm's numbers depend on."""


@dataclass(frozen=True)
class RunSpec:
    """One arm at one seed.

    Attributes:
        arm: the name of an arm of :data:`~pivot_envs.experiments.arm_table.ARMS`.
        seed: training and evaluation seed.
        pivots: training pivot file (``None`` for ``base``).
        lr: peak learning rate (``None`` for ``base``).
        label: free text on what makes this run (e.g. ``lambda=0.75``), part of its key.
        evals: which evaluations to run: ``val`` (greedy, no probes) and/or ``test``
            (greedy, mean@k, probes).
        profile_rollouts: rollouts spent profiling the pivots this arm trains on (counted in its budget).
        tasks: training tasks of the episode arms (``e2e``, ``arpo``): a trajectory file.
        init: the model the training starts from (``None``: the base; ``sft_pivotrl``: the SFT run's final model).
        steps: optimiser steps of this run (``None``: the settings' ``steps``; ``sft_long`` trains longer).
    """

    arm: str
    seed: int
    pivots: str | None = None
    lr: float | None = None
    label: str = ""
    evals: tuple[str, ...] = ("test",)
    profile_rollouts: int = 0
    tasks: str | None = None
    init: str | None = None
    steps: int | None = None

    def run_steps(self, settings: RunSettings) -> int:
        """Optimiser steps of this run: its own ``steps``, else the settings' (every arm but ``sft_long``)."""
        return self.steps or settings.per_arm.steps

    def key(self, settings: RunSettings, *, legacy: bool = False) -> str:
        """Folder name of this run: arm, seed and a hash of everything its numbers depend on, the domain verifier's
        config and code versions included (:func:`domain_verifier_fingerprint`: a verifier change gets new folders).
        The base is not trained, so the training budget is not part of its key (a budget change reuses its
        evaluations); ``legacy``: the key before that, which hashed the budget of the base too (folders of older
        runs)."""
        ignored = RUN_LOCAL_FIELDS + (() if legacy or ARM[self.arm].trained else TRAINING_FIELDS)
        shared = {k: v for k, v in settings.flat().items() if k not in ignored}
        if legacy or self.arm in ("base", "sft") or not shared.get("rl_lora_r"):
            shared.pop("rl_lora_r", None)  # added later: hashed only where it changes the run
        for name, default in ADDED_LATER.items():
            if shared.get(name, default) == default:
                shared.pop(name, None)
        extra = (self.tasks,) if self.tasks is not None else ()
        extra += tuple(f"{k}={v}" for k, v in (("init", self.init), ("steps", self.steps)) if v is not None)
        if self.arm == "sft" and shared.get("warmup_steps") and not legacy:
            extra += ("sft-warmup",)  # SFT warms up like the RL arms since issue 36: never reuse an SFT run without
        extra += (f"verifiers={domain_verifier_fingerprint(settings.domain)}",)
        digest = stable_hash(self.arm, self.seed, self.pivots, self.lr, self.label, shared, *extra)[:10]
        return f"{self.arm}-s{self.seed}-{digest}"


def domain_verifier_fingerprint(domain: str) -> str:
    """The fingerprint (config and versions) of ``domain``'s default verifier and of the strict baseline, which score
    every arm's rewards and evaluations (:func:`pivot_envs.verifiers.versions.verifier_fingerprint`)."""
    return stable_hash(verifier_fingerprint(default_verifier_spec(domain)), verifier_fingerprint("strict"))


def wants_curve(spec: RunSpec, settings: RunSettings) -> bool:
    """Whether this run measures task success along training (the arm, the settings and the seed allow it)."""
    return bool(ARM[spec.arm].curve and settings.per_arm.curve_every and settings.test_tasks and "test" in spec.evals
                and (settings.curve_seed is None or spec.seed == settings.curve_seed))


def _curve_checkpoints(spec: RunSpec, settings: RunSettings) -> int:
    """``save_every`` of a run's training: every ``curve_every`` steps when the run may get a curve (whatever
    its evals: a selection run's training is reused by the arm of the same settings)."""
    may = ARM[spec.arm].curve and (settings.curve_seed is None or spec.seed == settings.curve_seed)
    return settings.per_arm.curve_every if may else 0


def run_dir(spec: RunSpec, settings: RunSettings) -> Path:
    """``ROOT/runs/KEY``; a base run an older demo saved under its legacy key is found there (the base only: a
    trained arm's legacy key may name another run, e.g. full fine-tuning where this one is LoRA)."""
    runs = Path(settings.root) / "runs"
    folder = runs / spec.key(settings)
    if ARM[spec.arm].trained or folder.exists():
        return folder
    legacy = runs / spec.key(settings, legacy=True)
    return legacy if legacy.exists() else folder


def read_run(spec: RunSpec, settings: RunSettings) -> dict[str, Any]:
    """The saved ``run.json`` of a run (``{}`` when it has not started)."""
    path = run_dir(spec, settings) / "run.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


TASK_PARTS = ("tasks", "tasks_sampled", "ood_tasks", "ood_tasks_sampled")
"""The parts of a ``test`` evaluation that play held-out tasks: the domain's greedily and ``episode_k`` times at
T=1, and the OOD domain's likewise."""

PLAYS = {
    "tasks": ("task", False), "tasks_sampled": ("task", True), "ood_tasks": ("ood_task", False),
    "ood_tasks_sampled": ("ood_task", True), "val_tasks": ("val_task", True),
}
"""Every part that plays tasks: the prefix of its per-item outcomes and whether it samples at T=1."""

PART_ORDER = ("train", "tasks_sampled", "ood_tasks_sampled", "val_tasks", "tasks", "ood_tasks", "test", "val",
              "divergence", "curve")
"""Which ready part a free worker takes first: training unblocks a run's evaluations, and playing the
held-out tasks is the longest evaluation."""


def run_parts(spec: RunSpec, settings: RunSettings) -> list[str]:
    """The parts of one run, each a job of its own: ``train`` (not for ``base``), then, each only after
    ``train``, the evaluations (``val`` is the validation pivots; ``val_tasks`` the validation tasks at T=1;
    ``test`` is the pivots and the probes; with ``settings.test_tasks`` the held-out tasks are the parts
    ``tasks`` and ``tasks_sampled``, with ``settings.ood_tasks`` the OOD ones ``ood_tasks`` and
    ``ood_tasks_sampled``) and the ``curve``."""
    parts = ["train"] if ARM[spec.arm].trained else []
    for which in spec.evals:
        if which == "val_tasks":
            if settings.val_tasks:
                parts.append(which)
            continue
        parts.append(which)
        if which == "test" and settings.test_tasks:
            parts += ["tasks"] + (["tasks_sampled"] if settings.per_arm.episode_k > 0 else [])
        if which == "test" and settings.ood_tasks:
            parts += ["ood_tasks", "ood_tasks_sampled"]
        if which == "test" and settings.per_arm.divergence_pivots:
            parts.append("divergence")
    if wants_curve(spec, settings):
        parts.append("curve")
    return parts


def part_done(spec: RunSpec, settings: RunSettings, part: str) -> bool:
    """Whether a part's result is saved (``parts/<part>.json``; training also needs its final model)."""
    folder = run_dir(spec, settings)
    if part == "train" and not (folder / "train" / "final").exists():
        return False
    return (folder / "parts" / f"{part}.json").exists()


def execute_part(spec: RunSpec, settings: RunSettings, part: str) -> dict[str, Any]:
    """Run one part of a run (see :func:`run_parts`) and save its result to ``parts/<part>.json``, its
    ``seconds`` summed over every call that worked on the part (``parts/seconds.json``)."""
    quiet_transformers()
    folder = run_dir(spec, settings)
    folder.mkdir(parents=True, exist_ok=True)
    clock = StageClock(folder / "parts" / "seconds.json")
    with sigterm_as_exit():
        result = clock.run(part, lambda: _run_part(spec, settings, part, folder))
    if "seconds" in result:
        result["last_call_seconds"] = result["seconds"]
    result["seconds"] = clock.seconds[part]
    _write_json(folder / "parts" / f"{part}.json", result)
    return result


def _run_part(spec: RunSpec, settings: RunSettings, part: str, folder: Path) -> dict[str, Any]:
    model = str(folder / "train" / "final") if ARM[spec.arm].trained else settings.base_model
    if part == "train":
        _say(f"[{folder.name}] training {spec.arm} ({spec.run_steps(settings)} steps, lr {spec.lr:g}"
             + (f", from {spec.init}" if spec.init else "") + ") ...")
        result = _train(spec, settings, folder / "train")
        _say(f"[{folder.name}] trained in {result['seconds']:.0f} s")
    elif part in ("val", "test"):
        _say(f"[{folder.name}] evaluating on {part} ...")
        result = _evaluate(model, part, spec, settings, folder)
        ood = "" if result.get("ood_accuracy") is None else f", OOD {result['ood_accuracy']:.3f}"
        _say(f"[{folder.name}] {part}: functional {result['functional']:.3f}, strict {result['strict']:.3f}{ood} "
             f"({result['seconds']:.0f} s)")
    elif part in PLAYS:
        _say(f"[{folder.name}] playing the {_play_name(part)} ({'T=1' if PLAYS[part][1] else 'greedy'}) ...")
        result = _evaluate_tasks(model, part, spec, settings, folder)
        _say(f"[{folder.name}] {part}: task success {result['success']:.3f} over {result['episodes']} episodes "
             f"({result['seconds']:.0f} s)")
    elif part == "curve":
        _say(f"[{folder.name}] task success along training ...")
        result = {"points": task_curve(spec, settings, folder)}
    elif part == "divergence":
        from pivot_envs.experiments.divergence import divergence  # imports torch (the train extra) at its top

        _say(f"[{folder.name}] KL to the base and entropy at {settings.per_arm.divergence_pivots} test pivots ...")
        result = divergence(model, settings.base_model, settings.test_pivots, settings.sampling(), seed=spec.seed,
                            k=settings.per_arm.divergence_k, limit=settings.per_arm.divergence_pivots)
        _say(f"[{folder.name}] divergence: KL {result['kl_per_token']:.4f} nats/token, entropy "
             f"{result['entropy_per_token']:.3f} ({result['seconds']:.0f} s)")
    else:
        raise ValueError(f"unknown part {part!r} of run {folder.name}")
    return result


def parts_seconds(folder: Path) -> float:
    """Seconds the parts of the run in ``folder`` took, each over every call that worked on it, unfinished parts
    included (what the run cost, whichever demo calls ran it). A part saved before parts kept their clock
    (``parts/seconds.json``) counts its own timing of the call that finished it."""
    parts = Path(folder) / "parts"
    clock = StageClock(parts / "seconds.json").seconds
    saved = {f.stem: float(json.loads(f.read_text(encoding="utf-8")).get("seconds") or 0.0)
             for f in parts.glob("*.json") if f.name != "seconds.json"}
    return round(sum({**saved, **clock}.values()), 2)


def execute_run(spec: RunSpec, settings: RunSettings) -> dict[str, Any]:
    """Run every part of a run not done yet, in this process; returns its ``run.json`` content."""
    for part in run_parts(spec, settings):
        if not part_done(spec, settings, part):
            execute_part(spec, settings, part)
    return assemble_run(spec, settings)


def assemble_run(spec: RunSpec, settings: RunSettings) -> dict[str, Any]:
    """``run.json`` from the saved parts: ``train``, one summary per evaluation (``test`` with the held-out
    task figures of its task parts), the ``curve`` and the rollout turns."""
    folder = run_dir(spec, settings)
    parts = {p: json.loads((folder / "parts" / f"{p}.json").read_text(encoding="utf-8"))
             for p in run_parts(spec, settings)}
    state: dict[str, Any] = {"arm": spec.arm, "seed": spec.seed, "label": spec.label, "lr": spec.lr,
                             "folder": str(folder), "pivots": spec.pivots}
    if "train" in parts:
        state["train"] = parts["train"]
    for which in spec.evals:
        if which in parts:
            state[which] = dict(parts[which])
    if "test" in state:
        state["test"].update(_task_figures(parts.get("tasks"), parts.get("tasks_sampled")))
        if "divergence" in parts:
            state["test"]["divergence"] = {k: v for k, v in parts["divergence"].items() if k != "last_call_seconds"}
        if "ood_tasks" in parts:
            state["test"].update(_ood_figures(parts.get("ood_tasks"), parts.get("ood_tasks_sampled")))
        state["test"]["seconds"] = round(sum(parts[p]["seconds"] for p in ("test", *TASK_PARTS, "divergence")
                                             if p in parts), 2)
    if "curve" in parts:
        state["curve"] = parts["curve"]["points"]
    state["profile_rollouts"] = spec.profile_rollouts
    state["rollout_turns"] = spec.profile_rollouts + int(state.get("train", {}).get("rollouts", 0))
    _write_json(folder / "run.json", state)
    return state


def _task_figures(greedy: dict[str, Any] | None, sampled: dict[str, Any] | None) -> dict[str, Any]:
    """The task-success fields of a ``test`` summary from its task parts."""
    greedy, sampled = greedy or {}, sampled or {}
    return {"task_success": sampled.get("success"), "task_success_greedy": greedy.get("success"),
            "tasks": greedy.get("episodes"), "task_errors": (greedy.get("errors") or 0) + (sampled.get("errors") or 0),
            "turns_mean": greedy.get("turns_mean"), "turns_mean_sampled": sampled.get("turns_mean"),
            "truncated_greedy": _share(greedy.get("truncated"), greedy.get("episodes")),
            "truncated_sampled": _share(sampled.get("truncated"), sampled.get("episodes"))}


def _ood_figures(greedy: dict[str, Any] | None, sampled: dict[str, Any] | None) -> dict[str, Any]:
    """The OOD task-success fields of a ``test`` summary from its OOD task parts."""
    greedy, sampled = greedy or {}, sampled or {}
    return {"ood_task_success": sampled.get("success"), "ood_task_success_greedy": greedy.get("success"),
            "ood_tasks": greedy.get("episodes"), "ood_turns_mean": greedy.get("turns_mean"),
            "ood_task_errors": (greedy.get("errors") or 0) + (sampled.get("errors") or 0)}


def _play_name(part: str) -> str:
    return {"task": "held-out tasks", "ood_task": "OOD tasks", "val_task": "validation tasks"}[PLAYS[part][0]]


def _share(part: int | None, whole: int | None) -> float | None:
    return part / whole if part is not None and whole else None


def run_many(specs: Sequence[RunSpec], settings: RunSettings, workers: int = 1) -> list[dict[str, Any]]:
    """:func:`execute_run` for every spec, ``workers`` parts at a time in worker processes (1: in this
    process). Each run's parts are separate jobs (:func:`run_parts`), so one long run does not keep a worker
    busy while the other waits: a free worker takes the ready part that comes first in :data:`PART_ORDER`."""
    specs = list(specs)
    if (workers <= 1 and not settings.fresh_process) or not specs:
        return [execute_run(s, settings) for s in specs]
    pending = {i: [p for p in run_parts(s, settings) if not part_done(s, settings, p)] for i, s in enumerate(specs)}
    import multiprocessing

    fresh = {"max_tasks_per_child": 1} if settings.fresh_process else {}
    if settings.fresh_process:
        import os

        passive_openmp(os.environ)
    with ProcessPoolExecutor(max_workers=max(1, workers), mp_context=multiprocessing.get_context("spawn"),
                             **fresh) as pool:
        running: dict[Any, tuple[int, str]] = {}
        while any(pending.values()) or running:
            ready = [(PART_ORDER.index(p), i, p) for i, parts in pending.items() for p in parts
                     if p == "train" or "train" not in parts]
            ready = [r for r in ready if (r[1], r[2]) not in running.values()]
            for _, i, part in sorted(ready)[: max(0, workers - len(running))]:
                running[pool.submit(execute_part, specs[i], settings, part)] = (i, part)
            finished, _ = wait(list(running), return_when=FIRST_COMPLETED)
            for future in finished:
                i, part = running.pop(future)
                future.result()  # a failed part stops the demo with its error
                pending[i].remove(part)
    return [assemble_run(s, settings) for s in specs]


# --------------------------------------------------------------------------- training


def _train(spec: RunSpec, settings: RunSettings, out: Path) -> dict[str, Any]:
    if spec.lr is None or (spec.pivots is None and spec.tasks is None):
        raise ValueError(f"arm {spec.arm!r} needs training data (pivots or tasks) and a learning rate")
    return {"sft": _train_sft, "episodes": _train_episodes, "pivotrl": _train_rl}[ARM[spec.arm].trainer](
        spec, settings, out)


def trainer_fields(spec: RunSpec, settings: RunSettings, out: Path, rows_per_step: int) -> dict[str, Any]:
    """What every trainer of the demo shares beyond its own settings: checkpoints (the curve's, or
    ``settings.per_arm.save_every`` ones that an interrupted training resumes from), micro-batches, device and prompts."""
    curve = _curve_checkpoints(spec, settings)
    resume = bool(settings.per_arm.save_every) and _has_checkpoint(out)
    fields: dict[str, Any] = {"save_every": curve or settings.per_arm.save_every,
                              "save_total_limit": None if curve or not settings.per_arm.save_every else 1,
                              "overwrite_output_dir": not resume, "device": settings.device,
                              "num_threads": settings.num_threads}
    if resume:
        fields["resume_from"] = "latest"
    if settings.per_arm.micro_batch_rows:
        fields["grad_accum_steps"] = max(1, math.ceil(rows_per_step / settings.per_arm.micro_batch_rows))
    return fields


def _has_checkpoint(out: Path) -> bool:
    return out.exists() and any(p.name.startswith("checkpoint-") for p in out.iterdir())


def rl_config(spec: RunSpec, settings: RunSettings, out: Path) -> dict[str, Any]:
    """The :class:`~pivot_envs.trainers.config.PivotRLConfig` of an RL arm (as a dict)."""
    per_arm = settings.per_arm
    cfg: dict[str, Any] = dict(
        model=spec.init or settings.base_model, output_dir=str(out), domain=settings.domain,
        pivots=spec.pivots, seed=spec.seed, steps=spec.run_steps(settings),
        pivots_per_step=per_arm.pivots_per_step,
        group_size=per_arm.group_size, temperature=1.0, max_new_tokens=per_arm.max_new_tokens,
        max_prompt_tokens=settings.max_context_tokens, lr=spec.lr, lr_schedule="constant", warmup_steps=per_arm.warmup_steps,
        beta=per_arm.beta, zero_variance=per_arm.zero_variance, max_resample=per_arm.max_resample,
        log_every=10 ** 6, plots=True,
        **trainer_fields(spec, settings, out, per_arm.pivots_per_step * per_arm.group_size),
        **lora_fields(settings),
    )
    if settings.engine.kind != "hf" or settings.engine.tools != "auto":
        cfg.update(rl_fields(settings.engine))
        if settings.engine.kind == "vllm":
            cfg["sampling_batch_size"] = per_arm.eval_batch
    cfg.update(ARM[spec.arm].options)
    return cfg


def lora_fields(settings: RunSettings) -> dict[str, Any]:
    """The trainer's LoRA fields of an RL arm (none for full fine-tuning)."""
    r = settings.per_arm.rl_lora_r
    return {"lora_r": r, "lora_alpha": 2 * r, "lora_target_modules": "all-linear"} if r else {}


def _train_rl(spec: RunSpec, settings: RunSettings, out: Path) -> dict[str, Any]:
    from pivot_envs.trainers.pivotrl import train_pivotrl  # imports torch (the train extra) at its top

    def describe(row: dict[str, Any]) -> str:
        reward, zv = row.get("reward_mean"), row.get("zero_var_frac")
        return (f"reward {'-' if reward is None else f'{reward:.3f}'}, zero-variance groups "
                f"{'-' if zv is None else f'{zv:.2f}'}")

    progress = _progress(out, spec.run_steps(settings), describe)
    result = train_pivotrl(rl_config(spec, settings, out), on_step=progress)
    return rl_summary(read_metrics(result.metrics_path), settings.per_arm.group_size, result.seconds,
                      pass_steps=steps_per_pass(spec.pivots, settings.per_arm.pivots_per_step))


def steps_per_pass(pivots: str | None, pivots_per_step: int) -> int | None:
    """Steps of one pass over a training pivot file (``None`` without one)."""
    if not pivots or not Path(pivots).exists():
        return None
    with open(pivots, encoding="utf-8") as f:
        n = sum(1 for line in f if line.strip())
    return max(1, math.ceil(n / max(1, pivots_per_step))) if n else None


def episode_config(spec: RunSpec, settings: RunSettings, out: Path) -> dict[str, Any]:
    """The :class:`~pivot_envs.trainers.episode_rl.EpisodeRLConfig` of an episode arm (as a dict).

    A step takes ``pivots_per_step // 4`` tasks (at least 1): a task is ~4-6 turns, so a step costs about
    as many rollout turns as a PivotRL step over ``pivots_per_step`` pivots."""
    per_arm = settings.per_arm
    tasks_per_step = max(1, per_arm.pivots_per_step // 4)
    cfg: dict[str, Any] = dict(
        model=settings.base_model, output_dir=str(out), domain=settings.domain,
        tasks=spec.tasks, seed=spec.seed, steps=per_arm.steps, tasks_per_step=tasks_per_step,
        group_size=per_arm.group_size, temperature=1.0, max_new_tokens=per_arm.max_new_tokens,
        max_prompt_tokens=settings.max_context_tokens, lr=spec.lr, lr_schedule="constant",
        warmup_steps=per_arm.warmup_steps, beta=per_arm.beta, loss_agg="token", zero_variance="skip",
        max_turns=per_arm.max_turns, rollout="group",
        arpo_initial=max(1, per_arm.group_size // 2), log_every=10 ** 6, plots=True,
        episode_workers=1, turn_credit=0.0,
        **trainer_fields(spec, settings, out, tasks_per_step * per_arm.group_size * per_arm.max_turns),
        **lora_fields(settings),
    )
    if settings.engine.kind != "hf" or settings.engine.tools != "auto":
        cfg.update(rl_fields(settings.engine))
    cfg.update(ARM[spec.arm].options)
    return cfg


def _train_episodes(spec: RunSpec, settings: RunSettings, out: Path) -> dict[str, Any]:
    from pivot_envs.trainers.episode_rl import train_episode_rl  # imports torch (the train extra) at its top

    def describe(row: dict[str, Any]) -> str:
        reward = row.get("success_mean")
        return (f"task success {'-' if reward is None else f'{reward:.3f}'}, {row.get('rollout_turns')} rollout "
                f"turns, {row.get('branches', 0)} branches")

    progress = _progress(out, spec.run_steps(settings), describe)
    result = train_episode_rl(episode_config(spec, settings, out), on_step=progress)
    rows = read_metrics(result.metrics_path)
    summary = rl_summary(rows, settings.per_arm.group_size, result.seconds)
    summary.update(kind="episodes", rollouts=sum(int(r.get("rollout_turns") or 0) for r in rows),
                   tool_calls=sum(int(r.get("tool_calls") or 0) for r in rows),
                   branches=sum(int(r.get("branches") or 0) for r in rows),
                   replayed_steps=sum(int(r.get("replayed_steps") or 0) for r in rows),
                   episodes=sum(int(r.get("episodes") or 0) for r in rows))
    return summary


def rl_summary(rows: Sequence[dict[str, Any]], group_size: int, seconds: float,
               pass_steps: int | None = None) -> dict[str, Any]:
    """Totals of an RL run from its metrics rows: rollouts, tokens, zero-variance fraction, reward trend.

    The trend is per pass over the training pivots (``pass_steps`` steps each: every pivot seen once), not per
    step: one step's reward depends on which pivots it drew. ``reward_first`` / ``reward_last`` are the first and
    last passes' means (a tenth of the steps each without ``pass_steps``); ``reward_by_pass`` lists them all."""
    groups = sum(int(r.get("groups") or 0) + int(r.get("resampled_groups") or 0) for r in rows)
    completion_tokens = sum((r.get("groups") or 0) * group_size * (r.get("completion_len_mean") or 0.0) for r in rows)
    zero_var = [r["zero_var_frac"] for r in rows if r.get("zero_var_frac") is not None]
    rewards = [r["reward_mean"] for r in rows if r.get("reward_mean") is not None]
    strict = [r["strict_reward_mean"] for r in rows if r.get("strict_reward_mean") is not None]
    tenth = max(1, len(rewards) // 10)
    span = pass_steps or tenth
    by_pass = [_mean([r["reward_mean"] for r in rows[i:i + span] if r.get("reward_mean") is not None])
               for i in range(0, len(rows), span)]
    by_pass = [m for m in by_pass if m is not None]
    return {
        "kind": "rl",
        "steps": len(rows),
        "updates": sum(1 for r in rows if r.get("updated")),
        "rollouts": sum(int(r.get("rollout_turns") or 0) for r in rows) or groups * group_size,
        "cumulative_rollout_turns": [int(r.get("cumulative_rollout_turns") or 0) for r in rows],
        "completion_tokens": int(round(completion_tokens)),
        "used_samples": sum(int(r.get("used_samples") or 0) for r in rows),
        "zero_var_frac": _mean(zero_var),
        "reward_first": by_pass[0] if by_pass else None,
        "reward_last": by_pass[-1] if by_pass else None,
        "reward_by_pass": [round(m, 4) for m in by_pass],
        "pass_steps": span,
        "strict_reward_mean": _mean(strict),
        "injected": sum(int(r.get("injected") or 0) for r in rows),
        "seconds": round(seconds, 2),
    }


def _train_sft(spec: RunSpec, settings: RunSettings, out: Path) -> dict[str, Any]:
    fields = trainer_fields(spec, settings, out, settings.per_arm.pivots_per_step)
    fields["save_every"] = settings.per_arm.save_every  # SFT has no curve
    if settings.engine.tools != "auto":
        fields["prompt_tools"] = settings.engine.tools
    cfg = SFTConfig(model=spec.init or settings.base_model, output_dir=str(out), domain=settings.domain,
                    pivots=spec.pivots, seed=spec.seed, steps=spec.run_steps(settings),
                    batch_size=settings.per_arm.pivots_per_step,
                    lr=spec.lr, lr_schedule="constant", warmup_steps=settings.per_arm.warmup_steps,
                    max_prompt_tokens=settings.max_context_tokens, log_every=10 ** 6, plots=True, **fields)
    progress = _progress(out, spec.run_steps(settings), lambda r: f"loss {r.get('loss', float('nan')):.4f}")
    result = train_sft(cfg, on_step=progress)
    return {"kind": "sft", "steps": result.steps, "updates": result.steps, "rollouts": 0, "tokens": result.tokens,
            "loss_tokens": result.loss_tokens, "loss_first": _mean(result.losses[: max(1, len(result.losses) // 10)]),
            "loss_last": _mean(result.losses[-max(1, len(result.losses) // 10):]), "seconds": result.seconds}


# --------------------------------------------------------------------------- evaluation


def _evaluate(model: str, which: str, spec: RunSpec, settings: RunSettings, folder: Path) -> dict[str, Any]:
    """``val``: greedy per-turn accuracy on the validation pivots. ``test``: greedy and mean@k per-turn accuracy
    on the test pivots and the OOD probes (the held-out tasks are the parts of :func:`_evaluate_tasks`).
    Per-item outcomes go to ``{which}_items.json`` for the paired comparisons of the report."""
    test = which == "test"
    probes: bool | list[Any] = test
    if test and settings.per_arm.probe_set == "few_shot":
        probes = few_shot_probe_set(settings.per_arm.probes_per_kind)
    report = pivot_report(model, settings.test_pivots if test else settings.val_pivots, settings.sampling(),
                          seed=spec.seed, k=settings.per_arm.eval_k if test else 0, probes=probes)
    items = item_outcomes(report)
    for key in ("per_pivot", "episode_rows", "episodes_sampled_rows"):
        report.pop(key, None)
    (folder / f"{which}.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    (folder / f"{which}_items.json").write_text(json.dumps(items) + "\n", encoding="utf-8")
    return eval_summary(report)


def play_plan(part: str, settings: RunSettings) -> dict[str, Any]:
    """What a task part plays: ``domain``, ``tasks`` (file), ``temperature`` and ``repeats``."""
    prefix, sampled = PLAYS[part]
    if prefix == "val_task":
        return {"domain": settings.domain, "tasks": settings.val_tasks, "temperature": 1.0,
                "repeats": settings.per_arm.val_episode_k}
    ood = prefix == "ood_task"
    if ood and not (settings.ood_domain and settings.ood_tasks):
        raise ValueError(f"part {part}: the run has no OOD domain and tasks")
    repeats = (settings.per_arm.ood_episode_k if ood else settings.per_arm.episode_k) if sampled else 1
    return {"domain": settings.ood_domain if ood else settings.domain,
            "tasks": settings.ood_tasks if ood else settings.test_tasks,
            "temperature": 1.0 if sampled else 0.0, "repeats": repeats}


def _evaluate_tasks(model: str, part: str, spec: RunSpec, settings: RunSettings, folder: Path) -> dict[str, Any]:
    """Task success on the tasks a part plays (:data:`PLAYS`, :func:`play_plan`), each played to the end: greedily,
    or ``repeats`` times at temperature 1 (pass@1 = the mean over them). The report goes to ``<part>.json``, the
    per-task outcomes to ``<part>_items.json`` (``task_*``, ``ood_task_*`` or ``val_task_*``); returns the
    overall figures."""
    plan = play_plan(part, settings)
    prefix, sampled = PLAYS[part]
    key = "episodes_sampled" if sampled else "episodes"
    report = play_tasks(model, plan["domain"], plan["tasks"], settings.sampling(), seed=spec.seed,
                        temperature=plan["temperature"], repeats=plan["repeats"], max_turns=settings.per_arm.max_turns)
    items = {k.replace("task_", f"{prefix}_", 1): v for k, v in item_outcomes(report).items() if k.startswith("task_")}
    report.pop(f"{key}_rows" if sampled else "episode_rows", None)
    (folder / f"{part}.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    (folder / f"{part}_items.json").write_text(json.dumps(items) + "\n", encoding="utf-8")
    return {**report["overall"][key], "seconds": report["seconds"]}


def item_outcomes(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per-item outcomes of an evaluation with ``details``: ``pivot_greedy`` {pivot id: 1/0/None},
    ``pivot_sampled`` {pivot id: mean@k}, ``task_greedy`` {task id: 1/0/None}, ``task_sampled``
    {task id: pass@1 = mean success over the temperature-1 episodes}, ``probe`` {probe id: 1/0} (OOD,
    greedy exact match)."""
    out: dict[str, dict[str, Any]] = {"pivot_greedy": {}, "pivot_sampled": {}, "task_greedy": {}, "task_sampled": {},
                                      "probe": {}}
    for row in (report.get("probes") or {}).get("rows") or []:
        out["probe"][str(row["id"])] = float(bool(row["correct"]))
    for row in report.get("per_pivot") or []:
        g = row.get("greedy_functional")
        out["pivot_greedy"][row["id"]] = None if g is None else float(g)
        if row.get("sampled_functional") is not None:
            out["pivot_sampled"][row["id"]] = pass_at_1([row["sampled_functional"]])[0]
    for row in report.get("episode_rows") or []:
        ok = row.get("success") if row.get("error") is None else None
        out["task_greedy"][row["task_id"]] = None if ok is None else float(bool(ok))
    samples: dict[str, list[float | None]] = {}
    for row in report.get("episodes_sampled_rows") or []:
        ok = row.get("success") if row.get("error") is None else None
        samples.setdefault(row["task_id"], []).append(None if ok is None else float(bool(ok)))
    for task_id, values in samples.items():
        out["task_sampled"][task_id] = pass_at_1([values])[0]
    return out


def read_items(run: dict[str, Any], which: str = "test") -> dict[str, dict[str, Any]] | None:
    """The per-item outcomes saved by a run's evaluation (``None`` when absent)."""
    folder = Path(run["folder"])
    path = folder / f"{which}_items.json"
    if not path.exists():
        return None
    items = json.loads(path.read_text(encoding="utf-8"))
    for part in TASK_PARTS if which == "test" else ():  # the held-out tasks were played as parts of their own
        part_path = folder / f"{part}_items.json"
        if part_path.exists():
            for kind, outcomes in json.loads(part_path.read_text(encoding="utf-8")).items():
                if outcomes:
                    items[kind] = outcomes
    return items


def eval_summary(report: dict[str, Any]) -> dict[str, Any]:
    """The figures the demo reports from one :func:`~pivot_envs.trainers.evaluate.evaluate` report."""
    overall = report["overall"]
    sampled = overall.get("sampled") or {}
    probes = report.get("probes") or {}
    greedy_eps = overall.get("episodes") or {}
    sampled_eps = overall.get("episodes_sampled") or {}
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
        "task_success": sampled_eps.get("success"),
        "task_success_greedy": greedy_eps.get("success"),
        "tasks": greedy_eps.get("episodes"),
        "task_errors": (greedy_eps.get("errors") or 0) + (sampled_eps.get("errors") or 0),
        "turns_mean": greedy_eps.get("turns_mean"),
        "seconds": report["seconds"],
    }


# --------------------------------------------------------------------------- the curve


def task_curve(spec: RunSpec, settings: RunSettings, folder: Path) -> list[dict[str, Any]]:
    """Task success of every checkpoint of a trained run against the rollout turns spent to reach it
    (profiling included): the points of the paper's Figure 1. Played on the first ``curve_tasks``
    held-out tasks, greedy and at temperature 1 (``episode_k`` episodes per task)."""
    from pivot_envs.trainers.checkpoint import list_checkpoints  # imports torch (the train extra) at its top

    train = folder / "train"
    rows = {int(r["step"]): r for r in read_metrics(train / "metrics.jsonl")}
    points = []
    for ckpt in list_checkpoints(train):
        step = int(ckpt.name.split("-")[-1])
        turns = spec.profile_rollouts + int(rows.get(step, {}).get("cumulative_rollout_turns") or 0)
        entry: dict[str, Any] = {"step": step, "rollout_turns": turns}
        with eval_agents(str(ckpt / "model"), settings.engine, seed=spec.seed, max_new_tokens=settings.per_arm.max_new_tokens,
                         max_prompt_tokens=settings.max_context_tokens, batch_size=settings.per_arm.eval_batch,
                         num_threads=settings.num_threads, device=settings.device) as agent:
            for key, temperature, repeats in (("task_success_greedy", 0.0, 1),
                                              ("task_success", 1.0, settings.per_arm.episode_k)):
                if repeats < 1:
                    continue
                rep = evaluate_episodes({"domains": {}, "overall": {}, "settings": {}}, agent(temperature),
                                        {settings.domain: settings.test_tasks}, max_turns=settings.per_arm.max_turns,
                                        limit=settings.per_arm.curve_tasks, seed=spec.seed, batch_size=settings.per_arm.eval_batch,
                                        repeats=repeats)
                entry[key] = rep["overall"]["episodes"]["success"]
        points.append(entry)
    return points


# --------------------------------------------------------------------------- helpers


def _progress(out: Path, steps: int, describe: Callable[[dict[str, Any]], str]) -> Callable[[dict[str, Any]], None]:
    """An ``on_step`` that prints ``describe(row)`` at every fifth of the run's ``steps``."""
    every = max(1, steps // 5)

    def on_step(row: dict[str, Any]) -> None:
        if row["step"] % every == 0:
            _say(f"[{out.parent.name}] step {row['step']}/{steps}: {describe(row)}, {row.get('step_s', 0):.1f} s/step")

    return on_step


def passive_openmp(environ: Any) -> None:
    """Let OpenMP threads sleep instead of spinning while they wait (``OMP_WAIT_POLICY=PASSIVE``, unless the
    environment already says), for the processes started after this: beside a busy neighbour, threads that spin
    while waiting for each other made a SmolLM2 training step 5-10x slower here."""
    environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def quiet_transformers() -> None:
    """Silence transformers' weight-loading bars and long-sequence warnings (the demo prints its own progress)."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def _mean(values: Sequence[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


def _write_json(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` to ``path`` atomically (a resumed demo never reads half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    tmp.replace(path)


def _say(message: str) -> None:
    """Progress line on stderr (worker processes write to the same terminal)."""
    print(f"{time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)

