"""Tiny reference policies: deterministic offline builds, the saved layout, and the ``model tiny`` CLI."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

pytest.importorskip("torch")
pytest.importorskip("transformers")

from pivot_envs.cli.model_cmd import register  # noqa: E402
from pivot_envs.envs_data import load_pivots  # noqa: E402
from pivot_envs.models.reference import REFERENCE_CHAT_TEMPLATE, build_reference_model, read_report  # noqa: E402


def small_build(out, seed=0, steps=3):
    return build_reference_model("search", out, steps=steps, lm_steps=0, seed=seed, pivots=load_pivots("search", "train")[:40],
                                 max_context_tokens=128, vocab_size=600)


def test_build_is_deterministic_and_saves_a_loadable_sampling_model(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    a, b, c = small_build(tmp_path / "a"), small_build(tmp_path / "b"), small_build(tmp_path / "c", seed=1)
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()
    assert (a / "tokenizer.json").read_text() == (b / "tokenizer.json").read_text()
    assert (a / "model.safetensors").read_bytes() != (c / "model.safetensors").read_bytes()
    report = read_report(a)
    assert report.domain == "search" and report.train_pivots == 40 and report.steps == 3
    assert 50_000 < report.parameters < 1_000_000 and report.final_loss > 0
    tok = AutoTokenizer.from_pretrained(a)
    assert tok.chat_template == REFERENCE_CHAT_TEMPLATE and tok.model_max_length == 128 + 256
    gen = GenerationConfig.from_pretrained(a)
    assert gen.do_sample and gen.temperature == 1.0 and gen.eos_token_id == tok.eos_token_id
    assert AutoModelForCausalLM.from_pretrained(a).config.model_type == "llama"
    with pytest.raises(FileNotFoundError, match="not built by build_reference_model"):
        read_report(tmp_path)


def test_sft_lowers_the_loss_on_the_expert_actions(tmp_path):
    report = read_report(small_build(tmp_path / "m", steps=40))
    start = read_report(small_build(tmp_path / "m0", steps=1))
    assert report.final_loss < 0.75 * start.final_loss


def test_unknown_domain_and_bad_steps_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="unknown domain 'recipes'"):
        build_reference_model("recipes", tmp_path / "x", steps=1)
    with pytest.raises(ValueError, match="steps must be >= 0"):
        build_reference_model("search", tmp_path / "x", steps=-1)


def test_cli_model_tiny(tmp_path):
    app = typer.Typer()
    register(app)
    runner = CliRunner()
    out = tmp_path / "tiny"
    result = runner.invoke(app, ["model", "tiny", "--domain", "terminal", "-o", str(out), "--steps", "0", "--lm-steps", "0", "--seed", "2"])
    assert result.exit_code == 0, result.output
    assert "parameters" in result.output and f"hf:{out}" in result.output.replace("\n", "")
    assert json.loads((out / "reference_model.json").read_text())["domain"] == "terminal"
    again = runner.invoke(app, ["model", "tiny", "--domain", "terminal", "-o", str(out)])
    assert again.exit_code == 2 and "not empty" in again.output
    bad = runner.invoke(app, ["model", "tiny", "--domain", "recipes", "-o", str(tmp_path / "r")])
    assert bad.exit_code == 2 and "unknown domain 'recipes'" in bad.output


def test_lm_warm_up_windows_cut_whole_conversations_at_turn_ends(tmp_path):
    from transformers import AutoTokenizer

    from pivot_envs.agents.prompting import chat_messages
    from pivot_envs.models.reference import _conversation_windows

    model_dir = build_reference_model("search", tmp_path / "m", steps=0, lm_steps=2, pivots=load_pivots("search", "train")[:40],
                                      max_context_tokens=128, vocab_size=600)
    assert read_report(model_dir).lm_steps == 2
    tok = AutoTokenizer.from_pretrained(model_dir)
    train = load_pivots("search", "train")
    trajectory = train[0].meta["trajectory_id"]
    turns = [p for p in train if p.meta["trajectory_id"] == trajectory]
    last = max(turns, key=lambda p: len(p.context))
    window = 256
    windows = _conversation_windows(tok, turns, window)
    assert len(windows) > 2
    assert all(w.startswith("<|im_start|>") and len(tok(w)["input_ids"]) < window for w in windows)
    whole = tok.apply_chat_template(chat_messages([*last.context, last.expert]), tools=last.tools, tokenize=False)
    assert "".join(w + "<|im_end|>\n" for w in windows) == whole
