"""``pivot-envs model``: build tiny reference policies offline (CPU); import GGUF checkpoints."""

from __future__ import annotations

from pathlib import Path

import typer

from pivot_envs.cli.common import console, err_console, fail, user_errors
from pivot_envs.models.gguf_import import check_gguf_file, check_output_folder, gguf_missing, import_gguf
from pivot_envs.models.reference import build_reference_model, read_report

model_app = typer.Typer(help="Build small local models.", no_args_is_help=True)


@model_app.command("tiny")
def tiny_command(
    domain: str = typer.Option(..., "--domain", "-d", help="Domain with bundled data: tool_use, terminal, swe or search."),
    output: Path = typer.Option(..., "-o", "--output", help="Model folder to write (save_pretrained layout)."),
    steps: int = typer.Option(400, "--steps", min=0, help="SFT steps on the expert actions (more = more competent)."),
    lm_steps: int = typer.Option(600, "--lm-steps", min=0, help="Language-model warm-up steps on whole training conversations."),
    seed: int = typer.Option(0, "--seed", help="Seed of the tokenizer corpus order, initial weights and batches."),
    max_context_tokens: int = typer.Option(512, "--max-context-tokens", min=32, help="Training window; contexts are cut from the left."),
    threads: int = typer.Option(1, "--threads", min=1, help="torch CPU threads while training."),
) -> None:
    """Build a tiny Llama-style reference policy for DOMAIN, SFT-warmed on its training pivots.

    The folder loads with `--agent hf:DIR` and with `transformers serve` / vLLM.
    """
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        fail(f"building a model needs the train extra: pip install 'pivot-envs[train]' ({exc})")

    if output.exists() and any(output.iterdir()):
        fail(f"{output} exists and is not empty; choose a new folder or remove it")
    with user_errors(), err_console.status(f"building a tiny {domain} reference model ({lm_steps} + {steps} steps)"):
        model_dir = build_reference_model(domain, output, steps=steps, lm_steps=lm_steps, seed=seed,
                                          max_context_tokens=max_context_tokens, num_threads=threads)
    r = read_report(model_dir)
    console.print(
        f"wrote {model_dir}: {r.parameters:,} parameters, vocabulary {r.vocab_size}, {r.train_pivots} training pivots, "
        f"{r.lm_steps} + {r.steps} steps, final loss {r.final_loss:.3f}, {r.seconds:.1f}s\n"
        f"use it with --agent hf:{model_dir}"
    )


@model_app.command("import")
def import_command(
    source: Path = typer.Argument(..., help="A GGUF file (llama.cpp format), e.g. SmolLM2-135M-Instruct.Q4_1.gguf."),
    output: Path = typer.Option(..., "-o", "--output", help="Model folder to write (save_pretrained layout; absent or empty)."),
    dtype: str = typer.Option("float32", "--dtype", help="Weights dtype of the folder: float32, bfloat16 or float16."),
) -> None:
    """Dequantize a GGUF model into a plain transformers folder (weights, config, tokenizer with its chat template).

    The folder loads with `--agent hf:DIR`, `pivot-envs eval` and `transformers serve`. Needs the gguf package
    (the gguf extra of pivot-envs).
    """
    with user_errors():  # the user's mistakes first, before any heavy import
        check_gguf_file(source)
        check_output_folder(output)
    missing = gguf_missing()
    if missing:
        fail(missing)
    with user_errors(), err_console.status(f"dequantizing {source.name}"):
        r = import_gguf(source, output, dtype=dtype)
    console.print(
        f"wrote {r.output}: {r.parameters:,} parameters ({r.parameters / 1e6:.1f}M), {r.model_type}, {r.dtype}, "
        f"vocabulary {r.vocab_size}, chat template {'kept' if r.chat_template else 'absent'}, {r.seconds:.1f}s\n"
        f"use it with --agent hf:{r.output}",
        highlight=False, soft_wrap=True,
    )


def register(app: typer.Typer) -> None:
    app.add_typer(model_app, name="model")
