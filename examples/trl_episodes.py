"""Whole tasks with TRL's GRPOTrainer: TRL runs the tool loop, a pivot-envs world executes each tool call, and the
reward is task success, on one process or many (DDP, FSDP2, DeepSpeed ZeRO-3 through accelerate).

The dataset is :func:`pivot_envs.integrations.trl.episode_dataset` (each task's start and ``task_id``), the
environments :func:`~pivot_envs.integrations.trl.episode_environment_factory` (the world's tools as methods;
TRL builds one instance per rollout on each process) and the reward
:func:`~pivot_envs.integrations.trl.make_episode_reward_func`. The chat template must render tools and tool
calls and TRL must parse them back (Qwen2.5's, Llama 3.1's, ...: ``trl.chat_template_utils``).

One process on this CPU, with a tiny model built locally (nothing downloaded)::

    python examples/trl_episodes.py --tiny --cpu --output-dir out/trl_episodes

Two processes on CPU (gloo)::

    torchrun --nproc_per_node 2 examples/trl_episodes.py --tiny --cpu --output-dir out/trl_episodes

GPUs (``examples/accelerate/``: ``ddp.yaml``, ``fsdp2.yaml``, ``zero3.yaml``; set ``num_processes``)::

    accelerate launch --config_file examples/accelerate/ddp.yaml examples/trl_episodes.py \\
        --model Qwen/Qwen2.5-7B-Instruct --domain search --output-dir out/trl_episodes
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

TINY_TASKS = ("search-0-3", "search-0-10")
"""Two short search tasks (one search, then the answer): the tiny model's default."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", help="model folder or hub id (or --tiny)")
    ap.add_argument("--tiny", action="store_true", help="build a tiny untrained model with Qwen2.5's tool template")
    ap.add_argument("--tasks", default=None, help="task source (EpisodeEnv's); default: the domain's bundled split")
    ap.add_argument("--domain", default="search")
    ap.add_argument("--split", default="train")
    ap.add_argument("--task-ids", default=",".join(TINY_TASKS), help="comma-separated task ids to keep ('' keeps all)")
    ap.add_argument("--output-dir", required=True)
    ap.add_argument("--num-generations", type=int, default=2, help="G: rollouts per task (a group)")
    ap.add_argument("--per-device-batch", type=int, default=2, help="rollouts per process per step")
    ap.add_argument("--max-steps", type=int, default=2)
    ap.add_argument("--max-completion-length", type=int, default=384)
    ap.add_argument("--max-tool-calling-iterations", type=int, default=2)
    ap.add_argument("--learning-rate", type=float, default=1e-5)
    ap.add_argument("--cpu", action="store_true", help="run on the CPU (use_cpu)")
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--vllm-server", default=None, help="generate on a `trl vllm-serve` server at this URL")
    ap.add_argument("--keep-calls", type=int, default=0, help="keep the reward's latest N calls (0: none)")
    ap.add_argument("--seed", type=int, default=0)
    return ap.parse_args(argv)


def load_tasks(args: argparse.Namespace) -> list[Any]:
    from pivot_envs.episodes import resolve_tasks

    tasks = resolve_tasks(args.tasks, domain=args.domain, split=args.split)
    wanted = [t for t in args.task_ids.split(",") if t]
    if wanted:
        by_id = {t.id: t for t in tasks}
        missing = [t for t in wanted if t not in by_id]
        if missing:
            raise SystemExit(f"no task {missing[0]!r} in {args.tasks or args.domain + ':' + args.split}")
        tasks = [by_id[t] for t in wanted]
    return tasks


def tiny_model(folder: Path, tasks: list[Any]) -> Path:
    """A tiny Llama-style model whose tokenizer carries Qwen2.5's tool-calling chat template (from TRL)."""
    from transformers import AutoTokenizer
    from trl.chat_template_utils import qwen2_5_chat_template

    from pivot_envs.models.tiny import build_tiny_model

    texts = [m.get("content") or "" for t in tasks for m in t.messages]
    texts += [json.dumps(c["function"]) for t in tasks for m in t.messages for c in m.get("tool_calls") or []]
    texts += [json.dumps(s) for s in tasks[0].tools] + [qwen2_5_chat_template]
    build_tiny_model(folder, texts, vocab_size=1024, hidden_size=32, n_layers=1, n_heads=2, max_positions=4096, seed=0)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.chat_template = qwen2_5_chat_template
    tokenizer.save_pretrained(folder)
    return folder


def build_trainer(args: argparse.Namespace) -> tuple[Any, Any]:
    """``(GRPOTrainer, reward)`` for ``args``; every process calls it (TRL shards the batch itself)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from pivot_envs.integrations.trl import (
        check_launch,
        episode_dataset,
        episode_environment_factory,
        make_episode_reward_func,
    )

    tasks = load_tasks(args)
    model_path = args.model
    if args.tiny:  # each process builds the same deterministic model into its own folder (no shared disk needed)
        model_path = str(tiny_model(Path(args.output_dir) / f"tiny-model-rank{os.environ.get('RANK', '0')}", tasks))
    if not model_path:
        raise SystemExit("give --model PATH_OR_HUB_ID or --tiny")
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    reward = make_episode_reward_func(keep_calls=args.keep_calls)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.bfloat16 if args.bf16 else torch.float32)
    vllm = {"use_vllm": True, "vllm_mode": "server", "vllm_server_base_url": args.vllm_server} if args.vllm_server \
        else {"use_vllm": False}
    grpo = GRPOConfig(
        output_dir=args.output_dir, use_cpu=args.cpu, bf16=args.bf16, fp16=False, gradient_checkpointing=False,
        per_device_train_batch_size=args.per_device_batch, num_generations=args.num_generations,
        max_steps=args.max_steps, max_completion_length=args.max_completion_length,
        max_tool_calling_iterations=args.max_tool_calling_iterations, learning_rate=args.learning_rate, beta=0.0,
        temperature=1.0, top_k=0, lr_scheduler_type="constant", logging_steps=1, save_strategy="no",
        report_to="none", disable_tqdm=True, dataloader_num_workers=0, seed=args.seed, **vllm,
    )
    trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=grpo, processing_class=tokenizer,
                          train_dataset=episode_dataset(tasks, domain=args.domain),
                          environment_factory=episode_environment_factory(tasks, domain=args.domain))
    check_launch(trainer)  # no silent fallback: every process launched trains in one run, FSDP/ZeRO-3 as asked
    return trainer, reward


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    trainer, reward = build_trainer(args)
    trainer.train()
    from pivot_envs.integrations.trl import check_scored

    check_scored(reward)  # a run whose every reward was an error fails (exit 1), never ends as a success
    if trainer.accelerator.is_main_process:
        for row in trainer.state.log_history:
            if "rewards/episode_success/mean" in row:
                print({k: row.get(k) for k in ("step", "rewards/episode_success/mean", "tools/call_frequency",
                                               "episode/tool_calls")})
    trainer.save_model(str(Path(args.output_dir) / "final"))


if __name__ == "__main__":
    main()
