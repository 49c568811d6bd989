"""A model folder carries the prompt format it was trained in, and agents and trainers use it unless told otherwise.

Measured on the shipped SmolLM2 warm-up (trained with the tool specs left out of its prompts): 0.37 task success on
60 validation tasks at T=1 in its own format, 0.13 with the specs put back in, and no error either way."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pivot_envs.agents.prompt_format import PROMPT_FORMAT_FILE, read_prompt_format, write_prompt_format

pytest.importorskip("torch")
pytest.importorskip("transformers")


def _recorded(terminal_base: Path, tmp_path: Path, tools: str = "none", window: int = 64) -> Path:
    folder = tmp_path / "recorded"
    shutil.copytree(terminal_base, folder)
    write_prompt_format(folder, tools=tools, max_prompt_tokens=window)
    return folder


def _first_turn_pivots(n: int):
    from pivot_envs.envs_data import load_pivots

    return [p for p in load_pivots("search", "train") if len(p.context) <= 2 and p.tools][:n]


def _prompt(agent, pivot) -> list[int]:
    from pivot_envs.agents.prompting import encode_prompt

    return encode_prompt(agent.tokenizer, pivot, agent.prompt_config)


def _rendered(agent, pivot, tools: str, window: int) -> list[int]:
    from pivot_envs.agents.prompting import PromptConfig, encode_prompt

    return encode_prompt(agent.tokenizer, pivot, PromptConfig(tools=tools, max_prompt_tokens=window))


def test_an_agent_on_a_folder_uses_the_recorded_format_and_an_explicit_setting_wins(terminal_base, tmp_path):
    from pivot_envs.agents import build_agent
    from pivot_envs.agents.hf import HFAgent

    pivot = _first_turn_pivots(1)[0]
    plain = HFAgent(str(terminal_base), device="cpu", temperature=0.0, max_new_tokens=8)
    assert plain.prompt_config.tools == "auto"
    assert _rendered(plain, pivot, "auto", 64) != _rendered(plain, pivot, "none", 64)  # the two formats differ here

    folder = _recorded(terminal_base, tmp_path)
    agent = HFAgent(str(folder), device="cpu", temperature=0.0, max_new_tokens=8)
    assert agent.prompt_config.tools == "none" and agent.prompt_config.max_prompt_tokens == 64
    assert _prompt(agent, pivot) == _rendered(agent, pivot, "none", 64)
    again = build_agent(agent.config())  # the resolved format travels in the agent's config
    assert again.prompt_config.tools == "none" and again.prompt_config.max_prompt_tokens == 64

    told = HFAgent(str(folder), device="cpu", temperature=0.0, max_new_tokens=8, tools="system", max_prompt_tokens=200)
    assert told.prompt_config.tools == "system" and told.prompt_config.max_prompt_tokens == 200
    assert _prompt(told, pivot) == _rendered(told, pivot, "system", 200)


def test_evaluate_reads_the_recorded_format_and_says_so_in_its_settings(terminal_base, tmp_path):
    from pivot_envs.trainers.evaluate import evaluate

    folder = _recorded(terminal_base, tmp_path)
    pivots = _first_turn_pivots(2)
    report = evaluate(str(folder), pivots, k=0, probes=False, max_new_tokens=8, device="cpu")
    assert (report["settings"]["tools"], report["settings"]["max_prompt_tokens"]) == ("none", 64)
    told = evaluate(str(folder), pivots, k=0, probes=False, max_new_tokens=8, device="cpu", tools="system")
    assert told["settings"]["tools"] == "system"


def test_a_bad_prompt_format_file_names_itself_and_the_fix(tmp_path):
    path = tmp_path / PROMPT_FORMAT_FILE
    assert read_prompt_format(tmp_path) == {} and read_prompt_format("some/hub-id") == {}
    path.write_text('{"tools": "none",\n "max_prompt_tokens": }\n')
    with pytest.raises(ValueError, match=rf"{PROMPT_FORMAT_FILE}: line 2: not JSON .*delete the file"):
        read_prompt_format(tmp_path)
    path.write_text('{"tools": "everywhere"}')
    with pytest.raises(ValueError, match=r"tools must be one of auto, template, system, none, got 'everywhere'"):
        read_prompt_format(tmp_path)
    path.write_text('{"tools": "none", "window": 3}')
    with pytest.raises(ValueError, match="keys tools and max_prompt_tokens only"):
        read_prompt_format(tmp_path)
    with pytest.raises(ValueError, match="max_prompt_tokens must be an integer >= 1"):
        write_prompt_format(tmp_path, tools="none", max_prompt_tokens=0)


def test_trainers_train_in_the_recorded_format_and_record_it_beside_every_model_they_save(terminal_base, tmp_path):
    from pivot_envs.formats import write_pivots
    from pivot_envs.trainers.config import PivotRLConfig
    from pivot_envs.trainers.pivotrl import train_pivotrl
    from pivot_envs.trainers.sft import SFTConfig, train_sft

    folder = _recorded(terminal_base, tmp_path)
    pivots = tmp_path / "pivots.jsonl"
    assert write_pivots(_first_turn_pivots(4), pivots) == 4
    assert PivotRLConfig(model=str(terminal_base), pivots=str(pivots)).prompt_tools == "auto"

    sft = SFTConfig(model=str(folder), output_dir=str(tmp_path / "sft"), pivots=str(pivots), steps=1, batch_size=2,
                    lr=1e-3, save_every=1, device="cpu")
    assert (sft.prompt_tools, sft.max_prompt_tokens) == ("none", 64)
    rl = PivotRLConfig(model=str(folder), output_dir=str(tmp_path / "rl"), pivots=str(pivots), domain="search",
                       steps=1, pivots_per_step=2, group_size=2, max_new_tokens=8, lr=1e-3, save_every=1,
                       plots=False, device="cpu")
    assert (rl.prompt_tools, rl.max_prompt_tokens) == ("none", 64)

    recorded = {"tools": "none", "max_prompt_tokens": 64}
    saved = [Path(train_sft(sft).final_model_dir), Path(train_pivotrl(rl).final_model_dir)]
    saved += [*(tmp_path / "sft").glob("checkpoint-*/model"), *(tmp_path / "rl").glob("checkpoint-*/model")]
    assert len(saved) == 4
    for model in saved:
        assert read_prompt_format(model) == recorded, model


def test_play_on_the_cli_samples_a_recorded_model_in_its_format(terminal_base, tmp_path):
    from pivot_envs.cli import app

    folder = _recorded(terminal_base, tmp_path, window=96)
    out = tmp_path / "episodes.jsonl"
    result = CliRunner().invoke(app, ["play", "-e", "pivot/Search-Episode-v0", "-a", f"hf:{folder}", "--limit", "1",
                                      "--max-turns", "1", "-o", str(out)])
    assert result.exit_code == 0, result.output
    row = json.loads(out.read_text().splitlines()[0])
    assert row["run"]["agent"]["tools"] == "none" and row["run"]["agent"]["max_prompt_tokens"] == 96
