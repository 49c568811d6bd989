"""A gain measured through a third-party harness (issue 37, item 7): the recipe a user follows to train their agent.

Used by ``benchmarks/harness/harness.py --parts gain``. The harness is the OpenAI Agents SDK (``openai-agents``, unpatched):
``examples/harness_openai_agents.py``'s ``main`` (an ``Agent`` whose model is ``OpenAIChatCompletionsModel`` on the
rollout's ``base_url`` and whose tools come from the SDK's MCP client on the rollout's ``mcp_url``), run in this
process as the trainer's callable harness (``train_episode_rl(config, harness=fn)``): the same SDK code as the
subprocess form the tests run, without a Python start-up per rollout (1.6 s of CPU each on 2 cores). Domain:
terminal; model: the demo's shipped tiny terminal base (1.2M parameters).

1. **Expert transcripts in the harness's format**: every bundled terminal training task played through the SDK with
   the ``replay`` policy (the expert's own actions); each captured call is a pivot: the messages and tools exactly
   as the SDK sent them, the expert's action as the endpoint answered it.
2. **SFT warm start**: the project's SFT loop on those pivots from the base, a budget fixed a priori from the quick
   demo's SFT arm (10 steps of 32 pivots, the first 2 of warm-up, lr 3e-4).
3. **E2E RL through the same harness** from the warm start, the full demo's E2E budget fixed a priori (12 steps of
   8 tasks x 4 rollouts, the first 2 of warm-up, lr 3e-4, at most 8 turns): every rollout played by the SDK, the
   captured tokens trained.
4. **Held-out task success through the harness**: the demo's 201 held-out terminal tasks (the bundled test split
   and 150 generated ones no trained model saw), each played ``K`` times through the SDK at T=1 by the base, the
   warm start and the RL model; pass@1 per task, paired bootstrap of RL against the warm start (and the warm
   start against the base) over tasks: the difference, its 95 % interval and p.
5. **What the SDK does to the prompts**: each model once more on the bundled test tasks, its calls split into
   retokenized ones (the SDK's history did not extend the previous prompt and completion) and window cuts (the
   tiny model's 256-token window dropped the prompt's middle).

Every stage keeps its output under the work folder and is reused when present (delete it to start over).
"""

from __future__ import annotations

import asyncio
import gc
import importlib.util
import json
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from pivot_envs.agents.spec import build_agent
from pivot_envs.envs_data import generator
from pivot_envs.episodes import EpisodeEnv, resolve_tasks
from pivot_envs.experiments.stats import drop_missing, paired_bootstrap, pass_at_1
from pivot_envs.experiments.task_keys import fresh_tasks, request_key
from pivot_envs.formats import write_trajectories
from pivot_envs.harness.command import HarnessSpec
from pivot_envs.harness.source import local_harness_source
from pivot_envs.types import Pivot

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "experiments" / "base_models" / "terminal"
TEST_SEED = 200_000
"""The demo's held-out seed (``experiments/demo.py``): the same 150 generated tasks as its 201."""
SETTINGS = {"k": 2, "extra_test_tasks": 150, "max_turns": 8, "max_new_tokens": 96, "concurrency": 16,
            "sft": {"steps": 10, "warmup_steps": 2, "batch_size": 32, "lr": 3e-4},
            "rl": {"steps": 12, "warmup_steps": 2, "tasks_per_step": 8, "group_size": 4, "lr": 3e-4, "beta": 0.0}}


def sdk_harness(max_turns: int) -> Callable[[Any], None]:
    """The SDK example's ``main`` as a callable harness; its first run goes alone (the SDK imports parts of itself
    lazily, and threads importing at once trip over half-loaded modules)."""
    spec = importlib.util.spec_from_file_location("harness_openai_agents",
                                                  ROOT / "examples" / "harness_openai_agents.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    first, warm = threading.Lock(), threading.Event()

    async def once(task_file: str) -> None:
        await module.main(task_file, max_turns)
        gc.collect()  # the SDK's HTTP clients close on this loop, not after it is gone

    def run(rollout: Any) -> None:
        if not warm.is_set():
            with first:
                if not warm.is_set():
                    asyncio.run(once(rollout.task_file))
                    warm.set()
                    return
        asyncio.run(once(rollout.task_file))

    return run


def held_out_tasks(n_extra: int) -> list[Any]:
    """The bundled test tasks and ``n_extra`` generated ones whose task no bundled or base trajectory has."""
    bundled = resolve_tasks("bundled:terminal:test", domain="terminal")
    seen = {request_key(t) for split in ("train", "test")
            for t in resolve_tasks(f"bundled:terminal:{split}", domain="terminal")}
    seen |= set(json.loads((BASE / "base_requests.json").read_text()))
    generated = fresh_tasks(generator("terminal").generate(n_extra * 2, seed=TEST_SEED), seen, n_extra)
    return bundled + generated


def play(agent: Any, tasks: Sequence[Any], harness: Callable, group_size: int, max_turns: int,
         concurrency: int) -> tuple[list[list[Any]], Any]:
    """``group_size`` runs of each task through the harness; outcomes per task and the stats."""
    def make_env() -> EpisodeEnv:
        return EpisodeEnv(tasks=list(tasks), domain="terminal", user="scripted", max_turns=max_turns)

    source = local_harness_source(agent, make_env, HarnessSpec.build(harness, timeout_s=600), version=lambda: 0,
                                  max_turns=max_turns, score_turns=False, concurrency=concurrency)
    try:
        return source.play([{"task_id": t.id} for t in tasks], group_size)
    finally:
        source.close()


def expert_pivots(work: Path, harness: Callable) -> dict[str, Any]:
    """Stage 1: the training tasks' expert actions through the harness, each captured call a pivot."""
    path = work / "expert_pivots.jsonl"
    info = work / "expert.json"
    if info.exists():
        return json.loads(info.read_text())
    tasks = resolve_tasks("bundled:terminal:train", domain="terminal")
    start = time.perf_counter()
    groups, stats = play(build_agent("replay"), tasks, harness, 1, 30, SETTINGS["concurrency"])
    pivots = [call_pivot(o.result, c) for g in groups for o in g if o.result and o.result["success"]
              for c in o.result["calls"]]
    path.write_text("".join(json.dumps(p.to_dict(), ensure_ascii=False) + "\n" for p in pivots))
    out = {"tasks": len(tasks), "successes": sum(1 for g in groups for o in g if o.result and o.result["success"]),
           "pivots": len(pivots), "calls": stats.calls, "retokenized_calls": stats.retokenized_calls,
           "harness_failures": stats.harness_failures, "seconds": time.perf_counter() - start, "file": str(path)}
    info.write_text(json.dumps(out, indent=1))
    return out


def call_pivot(result: dict[str, Any], call: dict[str, Any]) -> Pivot:
    """One captured call as an SFT pivot: the harness's messages and tools, the expert's answer."""
    return Pivot(id=f"{result['task_id']}@{call['index']}", domain="terminal", context=call["messages"],
                 expert=call["message"], tools=call["tools"], meta={"trajectory_id": result["task_id"],
                                                                    "source": "harness/openai-agents"})


def warm_start(work: Path, pivots: str) -> dict[str, Any]:
    """Stage 2: SFT of the base on the harness-format pivots."""
    from pivot_envs.trainers.sft import SFTConfig, train_sft

    out = work / "warm"
    done = out / "train_result.json"
    if done.exists():
        return json.loads(done.read_text())
    s = SETTINGS["sft"]
    result = train_sft(SFTConfig(model=str(BASE), output_dir=str(out), overwrite_output_dir=True, domain="terminal",
                                 pivots=pivots, steps=s["steps"], warmup_steps=s["warmup_steps"],
                                 batch_size=s["batch_size"], lr=s["lr"], lr_schedule="constant",
                                 max_prompt_tokens=256, max_action_tokens=SETTINGS["max_new_tokens"], plots=False,
                                 num_threads=2, seed=0))
    return result.to_dict()


def rl(work: Path, warm_model: str, harness: Callable) -> dict[str, Any]:
    """Stage 3: E2E RL from the warm start, every rollout played through the harness."""
    from pivot_envs.trainers.episode_rl import EpisodeRLConfig, train_episode_rl

    out = work / "rl"
    done = out / "rl_result.json"
    if done.exists():
        return json.loads(done.read_text())
    s = SETTINGS["rl"]
    tasks = work / "train_tasks.jsonl"
    write_trajectories(resolve_tasks("bundled:terminal:train", domain="terminal"), tasks)
    rows: list[dict[str, Any]] = []
    cfg = EpisodeRLConfig(model=warm_model, output_dir=str(out), overwrite_output_dir=True, domain="terminal",
                          tasks=str(tasks), steps=s["steps"], warmup_steps=s["warmup_steps"],
                          tasks_per_step=s["tasks_per_step"], group_size=s["group_size"], lr=s["lr"],
                          lr_schedule="constant", beta=s["beta"], temperature=1.0,
                          max_new_tokens=SETTINGS["max_new_tokens"], max_prompt_tokens=256,
                          max_turns=SETTINGS["max_turns"], zero_variance="skip", loss_agg="token", save_every=0,
                          plots=False, seed=0, num_threads=2, harness_concurrency=SETTINGS["concurrency"])
    result = train_episode_rl(cfg, on_step=rows.append, harness=harness)
    keep = ("step", "success_mean", "updated", "rollout_turns", "retokenized_calls", "harness_failures",
            "logprob_mismatch", "capture_overhead_ms", "cut_at_turn_limit", "step_s")
    summary = {"model": str(result.final_model_dir), "seconds": result.seconds,
               "steps": [{k: r.get(k) for k in keep} for r in rows]}
    done.write_text(json.dumps(summary, indent=1))
    return summary


def evaluate(work: Path, name: str, model: str, tasks: Sequence[Any], harness: Callable) -> dict[str, Any]:
    """Stage 4: ``K`` T=1 runs per held-out task through the harness; pass@1 per task (``None``: every run errored)."""
    path = work / f"eval_{name}.json"
    if path.exists():
        return json.loads(path.read_text())
    agent = build_agent({"kind": "hf", "model": model, "temperature": 1.0,
                         "max_new_tokens": SETTINGS["max_new_tokens"], "batch_size": 64})
    start = time.perf_counter()
    groups, stats = play(agent, tasks, harness, SETTINGS["k"], SETTINGS["max_turns"], SETTINGS["concurrency"])
    samples = [[None if o.result is None or o.result["success"] is None else float(o.result["success"]) for o in g]
               for g in groups]
    out = {"model": model, "pass_at_1": pass_at_1(samples), "task_ids": [t.id for t in tasks],
           "runs": stats.runs, "calls": stats.calls, "retokenized_calls": stats.retokenized_calls,
           "harness_failures": stats.harness_failures, "cut_at_turn_limit": stats.cut_at_turn_limit,
           "errors": sum(1 for g in groups for o in g if o.result is None or o.status != "finished"),
           "seconds": time.perf_counter() - start}
    path.write_text(json.dumps(out, indent=1))
    return out


def prompt_changes(work: Path, models: dict[str, str], harness: Callable) -> dict[str, Any]:
    """Stage 5: per model, one T=1 run per bundled test task; calls retokenized and calls the window cut."""
    path = work / "prompt_changes.json"
    if path.exists():
        return json.loads(path.read_text())
    tasks = resolve_tasks("bundled:terminal:test", domain="terminal")
    out = {}
    for name, model in models.items():
        agent = build_agent({"kind": "hf", "model": model, "temperature": 1.0,
                             "max_new_tokens": SETTINGS["max_new_tokens"], "batch_size": 64})
        _, stats = play(agent, tasks, harness, 1, SETTINGS["max_turns"], SETTINGS["concurrency"])
        out[name] = {"calls": stats.calls, "retokenized_calls": stats.retokenized_calls,
                     "window_cut_calls": stats.window_cut_calls}
    path.write_text(json.dumps(out, indent=1))
    return out


def compare(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Paired bootstrap over tasks of ``a`` against ``b`` (tasks an arm could not score are dropped)."""
    x, y, dropped = drop_missing(a["pass_at_1"], b["pass_at_1"])
    return {**paired_bootstrap(x, y, n_boot=10000), "tasks": len(x), "dropped": dropped}


def run(work: Path) -> dict[str, Any]:
    """The four stages (see the module docstring)."""
    work.mkdir(parents=True, exist_ok=True)
    harness = sdk_harness(30)
    stages: dict[str, Any] = {"settings": SETTINGS}
    stages["expert"] = expert_pivots(work, harness)
    stages["warm"] = warm_start(work, stages["expert"]["file"])
    stages["rl"] = rl(work, stages["warm"]["final_model_dir"], harness)
    tasks = held_out_tasks(SETTINGS["extra_test_tasks"])
    models = {"base": str(BASE), "warm": stages["warm"]["final_model_dir"], "rl": stages["rl"]["model"]}
    stages["eval"] = {name: evaluate(work, name, model, tasks, harness) for name, model in models.items()}
    stages["rl_vs_warm"] = compare(stages["eval"]["rl"], stages["eval"]["warm"])
    stages["warm_vs_base"] = compare(stages["eval"]["warm"], stages["eval"]["base"])
    stages["prompt_changes"] = prompt_changes(work, models, harness)
    stages["stage_seconds"] = {"expert": stages["expert"]["seconds"], "sft": stages["warm"]["seconds"],
                               "rl": stages["rl"]["seconds"],
                               **{f"eval_{k}": v["seconds"] for k, v in stages["eval"].items()}}
    return stages


def table(report: dict[str, Any]) -> list[str]:
    """Markdown: task success per model through the harness, and the paired differences."""
    ev = report["eval"]
    changes = report.get("prompt_changes") or {}
    lines = ["| model (through openai-agents, T=1) | held-out task success | runs (errors, harness failures) | "
             "calls: retokenized / cut by the window |", "|---|---|---|---|"]
    for name, label in (("base", "base (the shipped tiny terminal base)"), ("warm", "warm start (harness-format SFT)"),
                        ("rl", "E2E RL through the harness")):
        e, c = ev[name], changes.get(name)
        scored = [v for v in e["pass_at_1"] if v is not None]
        split = f"{c['retokenized_calls']} / {c['window_cut_calls']} of {c['calls']}" if c else "-"
        lines.append(f"| {label} | {sum(scored) / len(scored):.3f} | {e['runs']} ({e['errors']}, "
                     f"{e['harness_failures']}) | {split} |")
    lines += ["", "| comparison | difference | 95 % interval | p | tasks |", "|---|---|---|---|---|"]
    for key, label in (("rl_vs_warm", "E2E RL - warm start"), ("warm_vs_base", "warm start - base")):
        c = report[key]
        lines.append(f"| {label} | {c['diff']:+.3f} | [{c['ci_low']:+.3f}, {c['ci_high']:+.3f}] | "
                     f"{c['p_value']:.3g} | {c['tasks']} |")
    rl_rows = report["rl"]["steps"]
    lines.append(f"\nSFT pivots: {report['expert']['pivots']} from {report['expert']['successes']}/"
                 f"{report['expert']['tasks']} expert episodes through the SDK; E2E RL {len(rl_rows)} steps, training "
                 f"task success {rl_rows[0]['success_mean']:.3f} -> {rl_rows[-1]['success_mean']:.3f}, "
                 f"{sum(r['rollout_turns'] or 0 for r in rl_rows)} rollout turns, {report['rl']['seconds']:.0f} s")
    seconds = report.get("stage_seconds") or {}
    if seconds:
        lines.append("Stage seconds (2 cores, beside other jobs): " + ", ".join(f"{k} {v:.0f}" for k, v in seconds.items())
                     + f"; {sum(seconds.values()) / 60:.1f} min in all")
    return lines
