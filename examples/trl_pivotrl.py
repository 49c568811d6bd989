"""PivotRL on pivots with TRL's GRPOTrainer, on one process or many (DDP, FSDP2, DeepSpeed ZeRO-3 through accelerate).

The dataset is :func:`pivot_envs.integrations.trl.to_dataset` with the tokenizer: each prompt is the text
``pivot-envs profile`` sampled from (same chat template, the pivot's own tools through ``tools=``, the
model folder's recorded prompt format). The reward is each pivot's verifier
(:func:`~pivot_envs.integrations.trl.make_reward_func`), which also logs PivotRL's strict reward, miss rate
and hack monitor through TRL's metrics.

One process on this CPU, with a tiny model built locally (nothing downloaded)::

    python examples/trl_pivotrl.py --tiny --cpu --output-dir out/trl_pivotrl

Two processes on CPU (gloo)::

    torchrun --nproc_per_node 2 examples/trl_pivotrl.py --tiny --cpu --output-dir out/trl_pivotrl

GPUs (``examples/accelerate/``: ``ddp.yaml``, ``fsdp2.yaml``, ``zero3.yaml``; set ``num_processes``)::

    accelerate launch --config_file examples/accelerate/ddp.yaml examples/trl_pivotrl.py \\
        --model Qwen/Qwen2.5-7B-Instruct --pivots runs/profile/d_adv.jsonl --output-dir out/trl_pivotrl

Generation on a ``trl vllm-serve`` server: ``--vllm-server http://HOST:8000`` (see docs/integrations.md).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

TINY_PIVOTS = "bundled:search:train"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", help="model folder or hub id (or --tiny)")
    ap.add_argument("--tiny", action="store_true", help="build a tiny untrained model with Qwen2.5's tool template")
    ap.add_argument("--pivots", default=TINY_PIVOTS, help="pivot source: a JSONL file (profile --filter) or bundled:D:S")
    ap.add_argument("--limit", type=int, default=None, help="keep the first N pivots")
    ap.add_argument("--output-dir", required=True)
    ap.add_argument("--num-generations", type=int, default=4, help="G: samples per pivot (a group)")
    ap.add_argument("--per-device-batch", type=int, default=4, help="completions per process per step")
    ap.add_argument("--max-steps", type=int, default=2)
    ap.add_argument("--max-completion-length", type=int, default=128)
    ap.add_argument("--learning-rate", type=float, default=1e-5)
    ap.add_argument("--beta", type=float, default=0.0, help="KL coefficient (> 0 keeps a reference model)")
    ap.add_argument("--max-prompt-tokens", type=int, default=None, help="the window profile used (default: recorded)")
    ap.add_argument("--cpu", action="store_true", help="run on the CPU (use_cpu)")
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--gradient-checkpointing", action="store_true")
    ap.add_argument("--vllm-server", default=None, help="generate on a `trl vllm-serve` server at this URL")
    ap.add_argument("--keep-calls", type=int, default=0, help="keep the reward's latest N calls (0: none)")
    ap.add_argument("--seed", type=int, default=0)
    return ap.parse_args(argv)


def tiny_model(folder: Path, pivots: list[Any]) -> Path:
    """A tiny Llama-style model whose tokenizer carries Qwen2.5's tool-aware chat template (from TRL)."""
    from transformers import AutoTokenizer
    from trl.chat_template_utils import qwen2_5_chat_template

    from pivot_envs.actions import message_text
    from pivot_envs.models.tiny import build_tiny_model

    texts = [str(m.get("content") or "") for p in pivots for m in p.context] + [message_text(p.expert) for p in pivots]
    texts += [str(t) for p in pivots for t in p.tools] + [qwen2_5_chat_template]
    build_tiny_model(folder, texts, vocab_size=400, hidden_size=32, n_layers=1, n_heads=2, max_positions=4096, seed=0)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.chat_template = qwen2_5_chat_template
    tokenizer.save_pretrained(folder)
    return folder


def build_trainer(args: argparse.Namespace) -> tuple[Any, Any]:
    """``(GRPOTrainer, reward)`` for ``args``; every process calls it (TRL shards the batch itself)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from pivot_envs.integrations._common import prompt_config
    from pivot_envs.integrations.trl import check_launch, make_reward_func, to_dataset
    from pivot_envs.sources import resolve_pivots

    pivots = resolve_pivots(args.pivots)[: args.limit]
    if not pivots:
        raise SystemExit(f"no pivots in {args.pivots!r}")
    model_path = args.model
    if args.tiny:  # each process builds the same deterministic model into its own folder (no shared disk needed)
        model_path = str(tiny_model(Path(args.output_dir) / f"tiny-model-rank{os.environ.get('RANK', '0')}", pivots))
    if not model_path:
        raise SystemExit("give --model PATH_OR_HUB_ID or --tiny")
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    config = prompt_config(model_path, max_prompt_tokens=args.max_prompt_tokens)
    dataset = to_dataset(pivots, tokenizer=tokenizer, prompt=config)
    reward = make_reward_func(keep_calls=args.keep_calls)
    dtype = torch.bfloat16 if args.bf16 else torch.float32
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype)
    vllm = {"use_vllm": True, "vllm_mode": "server", "vllm_server_base_url": args.vllm_server} if args.vllm_server \
        else {"use_vllm": False}
    grpo = GRPOConfig(
        output_dir=args.output_dir, use_cpu=args.cpu, bf16=args.bf16, fp16=False,
        gradient_checkpointing=args.gradient_checkpointing, per_device_train_batch_size=args.per_device_batch,
        num_generations=args.num_generations, max_steps=args.max_steps,
        max_completion_length=args.max_completion_length, learning_rate=args.learning_rate, beta=args.beta,
        temperature=1.0, top_k=0, lr_scheduler_type="constant", logging_steps=1, save_strategy="no",
        report_to="none", disable_tqdm=True, dataloader_num_workers=0, seed=args.seed, **vllm,
    )
    trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=grpo, train_dataset=dataset,
                          processing_class=tokenizer)
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
            if "rewards/pivot_verifier/mean" in row:
                print({k: row.get(k) for k in ("step", "rewards/pivot_verifier/mean", "pivot/strict_reward",
                                               "pivot/miss_rate", "hack/more_calls")})
    trainer.save_model(str(Path(args.output_dir) / "final"))


if __name__ == "__main__":
    main()
