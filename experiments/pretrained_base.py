"""The demo's base stage for a pretrained model (``--model smollm2 | gguf:FILE | hf:DIR``).

1. the model is imported into the run's folder (``DIR/model``: :func:`~pivot_envs.experiments.model_source.
   pretrained_folder`);
2. its warm-up (:mod:`pivot_envs.experiments.warmup`): the shipped adapter when its key matches the run (the key
   covers the model's weights, the recipe, the domains, the seed, the prompt settings and the validation tasks the
   band was checked on), else built here in ``DIR/warmup`` (resumable);
3. the base the arms start from: the model with the adapter merged, ``DIR/base_model`` (kept while its key
   matches).

``pivot-envs demo --model smollm2 --build-base DIR`` runs only 1-2 (:func:`build_warmup`): how the shipped adapter
``experiments/base_models/smollm2-terminal`` was made.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

from pivot_envs.agents.prompt_format import write_prompt_format
from pivot_envs.experiments.evaluation import Sampling, play_tasks
from pivot_envs.experiments.model_source import ModelSource, pretrained_folder, source_fingerprint
from pivot_envs.experiments.task_keys import request_key
from pivot_envs.experiments.warmup import (WarmupRecipe, WarmupReport, merge_adapter, packed_sequences,
                                           read_warmup, read_warmup_requests, run_check, target_tokens, train_warmup,
                                           warmup_trajectories, write_warmup)
from pivot_envs.formats import read_trajectories
from pivot_envs.jsonl import write_jsonl
from pivot_envs.types import stable_hash

Logger = Callable[[str], None]

SHIPPED_WARMUP = str(Path(__file__).resolve().parent / "base_models" / "smollm2-terminal")
"""The warm-up adapter of SmolLM2-135M-Instruct shipped with the package (made by :data:`BUILD_WARMUP_COMMAND`)."""

BUILD_WARMUP_COMMAND = "pivot-envs demo --model smollm2 --build-base experiments/base_models/smollm2-terminal"
"""The deterministic command that made :data:`SHIPPED_WARMUP`, run from the source root."""


@dataclass(frozen=True)
class WarmupPlan:
    """What a pretrained base depends on (everything but the engine that plays the band checks).

    Attributes:
        source: the pretrained model.
        recipe: the warm-up (``None``: the model as it is, no warm-up).
        domain: the arms' domain; ``ood_domain``: the OOD domain (its trajectories join the warm-up).
        seed: the demo's seed.
        tools: where tool specs go in the prompts; ``window``: the prompt window.
        extraction: the extraction version (what a pivot is).
        val_tasks: the validation task file whose first ``recipe.check_tasks`` tasks the band is checked on.
        max_turns: turns before an episode is cut; ``max_new_tokens``: longest action.
    """

    source: ModelSource
    recipe: WarmupRecipe | None
    domain: str
    ood_domain: str | None
    seed: int
    tools: str
    window: int
    extraction: str
    val_tasks: str | None
    max_turns: int
    max_new_tokens: int


def warmup_pool(plan: WarmupPlan, folder: Path, say: Logger) -> dict[str, list[Any]]:
    """The warm-up's trajectories by domain (generated once, kept in ``folder/warmup_<domain>.jsonl``)."""
    recipe = plan.recipe
    if recipe is None:
        return {}
    out: dict[str, list[Any]] = {}
    sizes = {plan.domain: recipe.trajectories, plan.ood_domain: recipe.ood_trajectories}
    for domain, key in pool_keys(plan).items():
        n = sizes[domain]
        path = folder / f"warmup_{domain}.jsonl"
        tag = path.with_suffix(".key")
        if path.exists() and tag.exists() and tag.read_text().strip() == key:
            out[domain] = read_trajectories(path)
            continue
        t0 = time.perf_counter()
        out[domain] = warmup_trajectories(domain, n, plan.seed)
        folder.mkdir(parents=True, exist_ok=True)
        write_jsonl(path, [t.to_dict() for t in out[domain]])
        tag.write_text(key + "\n")
        say(f"  generated {len(out[domain])} {domain} trajectories for the warm-up ({time.perf_counter() - t0:.0f} s)")
    return out


def pool_keys(plan: WarmupPlan) -> dict[str, str]:
    """The key of each generated trajectory pool of the warm-up, by domain (what the pool depends on)."""
    recipe = plan.recipe
    if recipe is None:
        return {}
    return {domain: stable_hash("warmup-pool", domain, n, plan.seed)
            for domain, n in ((plan.domain, recipe.trajectories), (plan.ood_domain, recipe.ood_trajectories))
            if domain and n > 0}


def warmup_requests(plan: WarmupPlan, folder: Path, say: Logger, shipped: str | None = None) -> set[str]:
    """The task keys of every warm-up trajectory: no held-out or validation task is ever one of them. Read from the
    ``shipped`` adapter's folder when its pools have the plan's keys (generating the terminal pool takes minutes),
    else from the generated pools."""
    if plan.recipe is None:
        return set()
    if shipped:
        listed = read_warmup_requests(shipped, pool_keys(plan))
        if listed is not None:
            return listed
    return {request_key(t) for trajs in warmup_pool(plan, folder, say).values() for t in trajs}


def check_keys(plan: WarmupPlan) -> list[str]:
    """The task keys of the validation tasks the band is checked on (part of the warm-up's key)."""
    if plan.recipe is None or not plan.val_tasks:
        return []
    return [request_key(t) for t in read_trajectories(plan.val_tasks)[: plan.recipe.check_tasks]]


def warmup_key(plan: WarmupPlan) -> str:
    """What the warm-up's adapter depends on: the model's weights, the recipe, the data and prompts, the check tasks."""
    return stable_hash("warmup-1", source_fingerprint(plan.source), asdict(plan.recipe) if plan.recipe else None,
                       plan.domain, plan.ood_domain, plan.seed, plan.tools, plan.window, plan.extraction,
                       plan.max_turns, plan.max_new_tokens, check_keys(plan))


def check_success(model: str, domain: str, tasks: str, sampling: Sampling, seed: int, max_turns: int,
                  limit: int) -> dict[str, Any]:
    """Task success at T=1 (one episode per task) on the first ``limit`` tasks: the band check."""
    report = play_tasks(model, domain, tasks, sampling, seed=seed, temperature=1.0, repeats=1, max_turns=max_turns,
                        limit=limit)
    return {**report["overall"]["episodes_sampled"], "seconds": report["seconds"]}


def build_warmup(plan: WarmupPlan, sampling: Sampling, out: Path, pool_folder: Path, command: str,
                 say: Logger) -> WarmupReport:
    """Train the warm-up adapter into ``out`` (resumes an interrupted one; see :func:`~pivot_envs.experiments.
    warmup.train_warmup`), with its report and the task keys of its trajectories beside it."""
    from transformers import AutoTokenizer

    recipe = plan.recipe
    if recipe is None or not plan.val_tasks:
        raise ValueError("a warm-up needs a recipe and validation tasks to check its band on")
    began = time.perf_counter()
    model_dir = pretrained_folder(plan.source, out.parent / f".{out.name}-model", say)
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    pool = warmup_pool(plan, pool_folder, say)
    sequences, by_domain = [], {}
    for domain, trajs in pool.items():
        seqs = packed_sequences(tokenizer, trajs, domain, tools=plan.tools, max_tokens=plan.window)
        by_domain[domain] = seqs
        sequences += seqs
    report = WarmupReport(key=warmup_key(plan), command=command, recipe=asdict(recipe),
                          sequences={d: len(s) for d, s in by_domain.items()},
                          trajectories={d: len(t) for d, t in pool.items()},
                          tokens={"pool": sum(len(ids) for ids, _ in sequences), "pool_targets": target_tokens(sequences)})
    say(f"  warm-up on {len(sequences)} sequences {report.sequences} ({report.tokens['pool']:,} tokens, "
        f"{report.tokens['pool_targets']:,} of them targets); LoRA r={recipe.lora_r}, lr {recipe.lr:g}, "
        f"{recipe.batch} sequences a step, a band check every {recipe.check_every} steps on "
        f"{recipe.check_tasks} validation tasks")
    out.mkdir(parents=True, exist_ok=True)

    def check(merged: Path) -> dict[str, Any]:
        return run_check(check_success, str(merged), plan.domain, plan.val_tasks, sampling, plan.seed,
                         plan.max_turns, recipe.check_tasks)

    report = train_warmup(model_dir, sequences, recipe, out, check, seed=plan.seed, report=report, say=say)
    report.seconds = time.perf_counter() - began
    write_warmup(out, report, [request_key(t) for trajs in pool.values() for t in trajs], pool_keys(plan))
    shutil.rmtree(out.parent / f".{out.name}-model", ignore_errors=True)
    say(f"  warm-up kept step {report.chosen_step}: validation task success {report.chosen_success:.3f} at T=1 "
        f"({'inside' if report.in_band else 'OUTSIDE'} the band {recipe.band_low:g}-{recipe.band_high:g}); "
        f"{report.train_seconds:.0f} s of training, {report.seconds:.0f} s in all")
    return report


def pretrained_base(plan: WarmupPlan, sampling: Sampling, out: Path, prebuilt: str | None,
                    say: Logger) -> dict[str, Any]:
    """The base the arms start from (see the module docstring): ``{"dir", "key", "report", "command", "prebuilt",
    "kind": "pretrained"}``."""
    model_dir = pretrained_folder(plan.source, out / "model", say)
    info = _model_info(model_dir, plan.source)
    if plan.recipe is None:
        key = stable_hash("pretrained", source_fingerprint(plan.source))
        say(f"  {info['name']} as it is ({info['parameters']:,} parameters; no warm-up)")
        return {"dir": str(model_dir), "key": key, "report": info, "command": "", "prebuilt": False,
                "kind": "pretrained", "warmup": None}
    key = warmup_key(plan)
    adapter, built_here = None, False
    if prebuilt:
        shipped = read_warmup(prebuilt)
        if shipped is not None and shipped.key == key:
            adapter = Path(prebuilt)
            say(f"  the shipped warm-up {prebuilt} (made by `{shipped.command}`)")
        else:
            say(f"  the shipped warm-up {prebuilt} was made with other settings: warming up here")
    if adapter is None:
        adapter = out / "warmup"
        done = read_warmup(adapter)
        if done is None or done.key != key:
            build_warmup(plan, sampling, adapter, out / "data", "pivot-envs demo (its base stage)", say)
        built_here = True
    report = read_warmup(adapter)
    merged = out / "base_model"
    marker = merged / "demo_stage.json"
    if not (marker.exists() and json.loads(marker.read_text(encoding="utf-8")).get("key") == key):
        merge_adapter(model_dir, adapter, merged)
        marker.write_text(json.dumps({"key": key, "adapter": str(adapter)}) + "\n", encoding="utf-8")
    write_prompt_format(merged, tools=plan.tools, max_prompt_tokens=plan.window)  # how it learned to read prompts
    return {"dir": str(merged), "key": key, "report": info, "command": report.command, "prebuilt": not built_here,
            "kind": "pretrained", "warmup": {**asdict(report), "adapter": str(adapter)}}


def _model_info(model_dir: Path, source: ModelSource) -> dict[str, Any]:
    """The report's ``model``: name, parameters, where it came from."""
    from safetensors import safe_open

    total = 0
    for f in sorted(model_dir.glob("*.safetensors")):
        with safe_open(str(f), "pt") as fh:
            for k in fh.keys():
                shape = fh.get_slice(k).get_shape()
                n = 1
                for d in shape:
                    n *= d
                total += n
    return {"name": source.name, "spec": source.spec, "parameters": total, "source": source.gguf or source.folder,
            "fingerprint": source_fingerprint(source)}
