"""What each change of a demo's PivotRL arm bought, measured on validation (issue 36, item 3).

The real preset (:func:`~pivot_envs.experiments.demo.real_config`) runs four changes to PivotRL at once: the
paper's low-reward-mean D_adv with commands de-duplicated, G = 8 with flat groups sampled again, 16 pivots a step,
and LoRA. This trains one PivotRL run per change *undone* (everything else as in the demo) plus runs at other
learning rates, then plays the base, the demo's own PivotRL run and every variant on the demo's validation tasks
(never a held-out task) at T=1, ``repeats`` episodes a task, and compares each with the preset by a paired bootstrap
over the tasks::

    from pivot_envs.experiments.ablation import run_ablation

    table = run_ablation("runs/real36", ["preset", "g4_skip", "lr_1e-4"], repeats=4)

Every run is a demo run (``DIR/runs/KEY``: resumable, its training shared with any demo run of the same settings);
the validation plays are saved under ``DIR/ablation/`` (one file a model, resumed by its key). The demo's stages
before the arms (data, base, profile, filter) are read back, never redone when they are saved.

The ablation needs the demo's stages, not its arms: :func:`start_demo` makes a folder the demo of a config without
playing its arms (hours of held-out evaluation on the real preset), and the ablation then runs those stages itself
and trains the preset as the demo would (the same run key: a later ``pivot-envs demo --out DIR`` reuses it)::

    start_demo("runs/ablation36", real_config(model="smollm2"))
    table = run_ablation("runs/ablation36", ["full_ft"], repeats=4)
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from pivot_envs.experiments import demo
from pivot_envs.experiments.arms import (RunSettings, RunSpec, execute_part, item_outcomes, part_done, passive_openmp,
                                        run_dir)
from pivot_envs.experiments.engines import resolve_engine
from pivot_envs.experiments.evaluation import play_tasks
from pivot_envs.experiments.stats import paired_bootstrap
from pivot_envs.formats import read_pivots
from pivot_envs.jsonl import write_jsonl
from pivot_envs.types import stable_hash

Logger = Callable[[str], None]


@dataclass(frozen=True)
class Variant:
    """One PivotRL run of the ablation: the demo's PivotRL arm with ``settings`` changed (fields of
    :class:`~pivot_envs.experiments.arms.ArmSettings`), another learning rate (``lr``; ``None``: the demo's) or
    another D_adv (``lam``, ``dedup``; ``None``: the demo's)."""

    name: str
    text: str
    settings: dict[str, Any] = field(default_factory=dict)
    lr: float | None = None
    lam: float | None = None
    dedup: bool | None = None


VARIANTS = (
    Variant("preset", "the demo's PivotRL arm as it is"),
    Variant("no_low_mean", "D_adv of every mixed pivot (lambda 1), commands not de-duplicated (issue 27's set)",
            lam=1.0, dedup=False),
    Variant("g4_skip", "G = 4 and flat groups skipped, not sampled again (issue 27's groups)",
            settings={"group_size": 4, "zero_variance": "skip"}),
    Variant("per_step8", "8 pivots a step instead of 16 (issue 27's steps)", settings={"pivots_per_step": 8}),
    Variant("full_ft", "full fine-tuning instead of LoRA, at 1e-5 (issue 27's full fine-tuning rate)",
            settings={"rl_lora_r": 0}, lr=1e-5),
    Variant("lr_1e-4", "LoRA at half the learning rate (1e-4)", lr=1e-4),
    Variant("lr_4e-4", "LoRA at twice the learning rate (4e-4)", lr=4e-4),
)
"""The preset, one variant per change of item 3 undone, and two other learning rates."""

BY_NAME = {v.name: v for v in VARIANTS}


def variant_run(variant: Variant, cfg: Any, settings: RunSettings, sets: dict[str, Any], profiled: str,
                say: Logger = print) -> tuple[RunSpec, RunSettings]:
    """The demo run of ``variant``: its spec (training only) and settings."""
    lam = cfg.lambda_diff if variant.lam is None else variant.lam
    dedup = cfg.dedup_actions if variant.dedup is None else variant.dedup
    if variant.lam is None and variant.dedup is None:
        pivots = sets["adv"][f"{lam:g}"]
        label = f"lambda={lam:g}"  # the demo's own label: the preset is the demo's pivotrl run
    else:
        pivots = adv_file(profiled, lam, dedup, cfg, Path(settings.root) / "data", say)
        label = f"lambda={lam:g}" + ("" if dedup else " no-dedup")
    spec = RunSpec("pivotrl", cfg.seed, pivots, variant.lr or cfg.rl_lr, label, evals=(),
                   profile_rollouts=sets["profile"]["stats"]["rollouts"])
    return spec, dataclasses.replace(settings, per_arm=dataclasses.replace(settings.per_arm, **variant.settings))


def adv_file(profiled: str, lam: float, dedup: bool, cfg: Any, folder: Path, say: Logger = print) -> str:
    """D_adv of the profiled candidates at ``lam``, de-duplicated or not, topped up like the demo's own
    (:func:`~pivot_envs.experiments.demo.adv_set`); written to ``folder``."""
    kept, _, _ = demo.adv_set(read_pivots(profiled), lam, dedup, cfg.min_train_pivots, cfg.seed, say)
    if not kept:
        raise ValueError(f"D_adv(lambda={lam:g}, dedup={dedup}) of {profiled} is empty: nothing to train on")
    path = folder / f"adv_lambda{lam:g}{'' if dedup else '_nodedup'}.jsonl"
    write_jsonl(path, [p.to_dict() for p in kept])
    return str(path)


def train_only(spec: RunSpec, settings: RunSettings) -> dict[str, Any]:
    """The ``train`` part of a demo run (trained here when it is not saved, in a fresh process when the engine wants
    one); its evaluations and ``run.json`` are left to the demo."""
    if not part_done(spec, settings, "train"):
        _in_process(settings, execute_part, spec, settings, "train")
    return json.loads((run_dir(spec, settings) / "parts" / "train.json").read_text(encoding="utf-8"))


def _in_process(settings: RunSettings, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``: in a fresh spawned process when the run settings ask for one (a vLLM engine per job, gone
    with it), else here."""
    if not settings.fresh_process:
        return fn(*args)
    passive_openmp(os.environ)
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(fn, *args).result()


def play_key(model: str, settings: RunSettings, seed: int, repeats: int) -> str:
    """What a validation play's outcomes depend on (a saved play with another key is played again): the model's
    files as they are now (a run trained again is played again), the tasks and the sampling."""
    files = sorted((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in Path(model).iterdir() if f.is_file())
    return stable_hash("ablation-val", str(Path(model).resolve()), files, settings.val_tasks, settings.domain, seed,
                       repeats, settings.per_arm.max_turns, settings.per_arm.max_new_tokens, settings.max_context_tokens,
                       dataclasses.asdict(settings.engine))[:12]


def play_validation(model: str, settings: RunSettings, seed: int, repeats: int, path: str) -> dict[str, Any]:
    """Play the validation tasks with ``model`` at T=1, ``repeats`` times each; save and return
    ``{"key", "model", "tasks": {task id: pass@1}, "success", "episodes", "seconds"}``."""
    report = play_tasks(model, settings.domain, settings.val_tasks, settings.sampling(), seed=seed, temperature=1.0,
                        repeats=repeats, max_turns=settings.per_arm.max_turns)
    tasks = item_outcomes(report)["task_sampled"]
    result = {"key": play_key(model, settings, seed, repeats), "model": model, "tasks": tasks,
              "success": report["overall"]["episodes_sampled"]["success"],
              "episodes": report["overall"]["episodes_sampled"]["episodes"], "seconds": report["seconds"]}
    Path(path).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return result


def saved_play(path: Path, key: str) -> dict[str, Any] | None:
    """A saved validation play with this key (``None``: not played yet, or played with other settings)."""
    if not path.exists():
        return None
    saved = json.loads(path.read_text(encoding="utf-8"))
    return saved if saved.get("key") == key else None


def play_all(models: dict[str, str], settings: RunSettings, seed: int, repeats: int, folder: Path,
             say: Logger) -> dict[str, dict[str, Any]]:
    """Every model's validation play (saved ones read back), each in a fresh process when the engine wants one."""
    folder.mkdir(parents=True, exist_ok=True)
    out: dict[str, dict[str, Any]] = {}
    todo = []
    for name, model in models.items():
        path = folder / f"val_{name}.json"
        saved = saved_play(path, play_key(model, settings, seed, repeats))
        if saved is not None:
            out[name] = saved
        else:
            todo.append((name, model, str(path)))
    for name, model, path in todo:
        say(f"  playing the validation tasks with {name} ({repeats} episodes a task at T=1) ...")
        out[name] = _in_process(settings, play_validation, model, settings, seed, repeats, path)
        say(f"  {name}: validation task success {out[name]['success']:.3f} over {out[name]['episodes']} episodes "
            f"({out[name]['seconds']:.0f} s)")
    return out


def compare_plays(plays: dict[str, dict[str, Any]], reference: str, n_boot: int = 10000) -> dict[str, dict[str, Any]]:
    """Each play against ``reference`` (paired bootstrap over the tasks both scored): ``{name: {"diff", "ci_low",
    "ci_high", "p_value", "n"}}``."""
    ref = plays[reference]["tasks"]
    out = {}
    for name, play in plays.items():
        if name == reference:
            continue
        keys = sorted(k for k in set(play["tasks"]) & set(ref) if play["tasks"][k] is not None and ref[k] is not None)
        if not keys:
            raise ValueError(f"the validation plays of {name} and {reference} share no scored task")
        test = paired_bootstrap([play["tasks"][k] for k in keys], [ref[k] for k in keys], n_boot=n_boot, seed=0)
        out[name] = {k: test[k] for k in ("diff", "ci_low", "ci_high", "p_value", "n")}
    return out


def start_demo(out_dir: str | Path, cfg: Any) -> Path:
    """Make ``out_dir`` the demo of ``cfg`` (a :class:`~pivot_envs.experiments.demo.DemoConfig`; its engine resolved
    as ``pivot-envs demo`` does) by writing its ``demo_config.json``: :func:`load_demo` then runs the stages before
    the arms, and the arms are left to ``pivot-envs demo``. A folder with this demo already is kept as it is; one
    with another demo is an error (its runs would be compared with the wrong preset). Returns the config file."""
    path = Path(out_dir) / "demo_config.json"
    wanted = json.loads(json.dumps(dataclasses.replace(cfg, engine=resolve_engine(cfg.engine)).to_dict()))
    if path.exists():
        if json.loads(path.read_text(encoding="utf-8")) != wanted:
            raise ValueError(f"{path}: another demo's config is here; pass an empty --demo folder to start this "
                             f"one, or leave --model out to use the demo that is there")
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(wanted, indent=1) + "\n", encoding="utf-8")
    return path


def load_demo(out_dir: str | Path, say: Logger) -> tuple[Any, RunSettings, dict[str, Any]]:
    """The demo of ``out_dir`` (its ``demo_config.json``), its run settings and pivot sets; the stages before the
    arms are read back (run where they are missing)."""
    out = Path(out_dir)
    config_file = out / "demo_config.json"
    if not config_file.exists():
        raise FileNotFoundError(f"{config_file}: no demo here; run `pivot-envs demo --out {out}` first")
    cfg = demo.pin_threads(demo.DemoConfig(**json.loads(config_file.read_text(encoding="utf-8"))), out)
    data = demo.stage_data(cfg, out, say)
    base = demo.stage_base(cfg, out, data, say)
    profiled = demo.stage_profile(cfg, out, base, data, say)
    sets = demo.stage_filter(cfg, out, profiled, say)
    settings = demo.run_settings(cfg, out, data, base)
    if not settings.val_tasks:
        raise ValueError(f"{config_file}: the demo has no validation tasks (val_tasks = 0): nothing to compare on")
    return cfg, settings, sets


def run_ablation(out_dir: str | Path, names: Sequence[str], repeats: int, say: Logger = print,
                 n_boot: int = 10000) -> dict[str, Any]:
    """Train the variants ``names`` (:data:`VARIANTS`), play them, the base and the preset on validation, and
    compare; returns (and saves as ``DIR/ablation/ablation.json``) the table."""
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise ValueError(f"unknown variant {unknown[0]!r}; variants: {', '.join(BY_NAME)}")
    if repeats < 1:
        raise ValueError(f"repeats {repeats}: play each validation task at least once")
    names = ["preset"] + [n for n in names if n != "preset"]
    cfg, settings, sets = load_demo(out_dir, say)
    profiled = sets["profile"]["file"]
    models = {"base": settings.base_model}
    rows: dict[str, dict[str, Any]] = {}
    for name in names:
        spec, run_settings = variant_run(BY_NAME[name], cfg, settings, sets, profiled, say)
        say(f"== {name}: {BY_NAME[name].text}")
        train = train_only(spec, run_settings)
        folder = run_dir(spec, run_settings)
        models[name] = str(folder / "train" / "final")
        rows[name] = {"text": BY_NAME[name].text, "run": folder.name, "lr": spec.lr,
                      "train_pivots": demo.count_lines(str(spec.pivots)), "steps": run_settings.per_arm.steps,
                      "group_size": run_settings.per_arm.group_size, "pivots_per_step": run_settings.per_arm.pivots_per_step,
                      "lora_r": run_settings.per_arm.rl_lora_r, "zero_variance": run_settings.per_arm.zero_variance,
                      "train_seconds": train.get("seconds"), "used_samples": train.get("used_samples"),
                      "rollouts": train.get("rollouts"), "reward_by_pass": train.get("reward_by_pass")}
    plays = play_all(models, settings, cfg.seed, repeats, Path(out_dir) / "ablation", say)
    vs_preset = compare_plays(plays, "preset", n_boot)
    vs_base = compare_plays(plays, "base", n_boot)
    for name in rows:
        rows[name].update(val_success=plays[name]["success"], vs_base=vs_base[name],
                          vs_preset=vs_preset.get(name))
    table = {"demo": str(out_dir), "val_tasks": settings.val_tasks, "tasks": len(plays["base"]["tasks"]),
             "repeats": repeats, "base_val_success": plays["base"]["success"], "variants": rows,
             "play_seconds": {n: p["seconds"] for n, p in plays.items()}}
    (Path(out_dir) / "ablation" / "ablation.json").write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    return table


def table_lines(table: dict[str, Any]) -> list[str]:
    """The ablation as a markdown table."""
    lines = [f"Validation task success at T=1: {table['tasks']} tasks x {table['repeats']} episodes "
             f"(base {table['base_val_success']:.3f}); paired bootstrap over tasks.", "",
             "| variant | change | D_adv | G | pivots/step | LoRA r | lr | RL samples (in the loss) | train s | "
             "val T=1 | - base | - preset |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def cell(t: dict[str, Any] | None) -> str:
        return "-" if not t else f"{t['diff']:+.3f} [{t['ci_low']:+.3f}, {t['ci_high']:+.3f}], p={t['p_value']:.2g}"

    for name, r in table["variants"].items():
        seconds = "-" if r["train_seconds"] is None else f"{r['train_seconds']:.0f}"
        lines.append(f"| {name} | {r['text']} | {r['train_pivots']} | {r['group_size']} | {r['pivots_per_step']} | "
                     f"{r['lora_r'] or 'full'} | {r['lr']:g} | {_samples(r)} | {seconds} | {r['val_success']:.3f} | "
                     f"{cell(r['vs_base'])} | {cell(r['vs_preset'])} |")
    return lines


def _samples(row: dict[str, Any]) -> str:
    """A variant's RL samples and, in brackets, those that entered the loss (groups of mixed rewards); ``-`` when
    not recorded."""
    if row.get("rollouts") is None:
        return "-"
    used = row.get("used_samples")
    return f"{row['rollouts']}" + ("" if used is None else f" ({used})")
