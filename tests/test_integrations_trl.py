"""TRL adapter: a real trl.GRPOTrainer trains a few steps on a tiny offline model with to_dataset +
make_reward_func, and the rewards it logs are the verifier's; a verifier error is None."""

from __future__ import annotations

import json
import math

import pytest

pytest.importorskip("torch")
pytest.importorskip("datasets")
trl = pytest.importorskip("trl")

from pivot_envs.actions import message_text  # noqa: E402
from pivot_envs.integrations.trl import make_reward_func, to_dataset  # noqa: E402
from pivot_envs.sources import resolve_pivots  # noqa: E402
from pivot_envs.types import Pivot  # noqa: E402


def _pivots() -> list[Pivot]:
    """Four short first-turn pivots of the bundled search domain."""
    return [p for p in resolve_pivots("bundled:search:train") if len(p.context) <= 2][:4]


def test_to_dataset_columns_round_trip():
    pivots = _pivots()
    ds = to_dataset(pivots)
    assert set(ds.column_names) == {"prompt", "tools", "pivot_id", "domain", "pivot"}
    row = ds[0]
    assert all(set(m) == {"role", "content"} for m in row["prompt"])
    assert "<tools>" in row["prompt"][0]["content"]  # GRPOTrainer has no per-row tools: they ride in the prompt
    assert json.loads(row["tools"]) == pivots[0].tools
    assert Pivot.from_dict(json.loads(row["pivot"])).to_dict() == pivots[0].to_dict()


def test_reward_is_the_verifiers_and_an_error_is_none(monkeypatch):
    from pivot_envs.verifiers.batch import VerifierResolver

    pivots = _pivots()
    ds = to_dataset(pivots)
    reward = make_reward_func()
    completions = [[{"role": "assistant", "content": message_text(p.expert)}] for p in pivots] + ["no idea"]
    rows = [ds[i] for i in range(len(pivots))] + [ds[0]]
    out = reward(prompts=[r["prompt"] for r in rows], completions=completions,
                 **{k: [r[k] for r in rows] for k in ("pivot", "pivot_id", "tools", "domain")})
    assert out == [1.0] * len(pivots) + [0.0]

    verifier = VerifierResolver().for_pivot(pivots[0])

    def boom(self, actions, pivots):
        raise RuntimeError("judge offline")

    monkeypatch.setattr(type(verifier), "verify_many", boom)
    out = reward(prompts=[rows[0]["prompt"]], completions=["x"], pivot=[rows[0]["pivot"]])
    assert out == [None] and "judge offline" in reward.calls[-1]["errors"][0]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from pivot_envs.models.tiny import build_tiny_model

    pivots = _pivots()
    ds = to_dataset(pivots)
    texts = [m["content"] for row in ds for m in row["prompt"]] + [message_text(p.expert) for p in pivots]
    texts.append("<|im_start|>user\n<|im_start|>assistant\n<|im_end|>")
    model = build_tiny_model(tmp_path_factory.mktemp("trl") / "model", texts, vocab_size=400, hidden_size=32,
                             n_layers=1, n_heads=2, max_positions=4096, seed=0)
    return model


def test_grpo_trainer_trains_with_the_verifier_reward(tiny_model, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    from pivot_envs.integrations._common import score

    pivots = _pivots()
    dataset = to_dataset(pivots)
    reward = make_reward_func()
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    steps, group = 3, 4
    config = GRPOConfig(
        output_dir=str(tmp_path / "out"), use_cpu=True, bf16=False, fp16=False, use_vllm=False,
        gradient_checkpointing=False, dataloader_num_workers=0, report_to="none", disable_tqdm=True,
        per_device_train_batch_size=group, generation_batch_size=group, gradient_accumulation_steps=1,
        num_generations=group, max_steps=steps, max_completion_length=24, temperature=1.0, top_k=0,
        learning_rate=1e-2, lr_scheduler_type="constant", beta=0.0, logging_steps=1, save_strategy="no", seed=0,
    )
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=config, train_dataset=dataset,
                              processing_class=tokenizer)
        trainer.remove_callback(PrinterCallback)
        trainer.train()
    finally:
        torch.set_num_threads(previous)

    assert len(reward.calls) == steps
    logged = [row for row in trainer.state.log_history if "rewards/pivot_verifier/mean" in row]
    assert len(logged) == steps
    for call, row in zip(reward.calls, logged):
        # TRL's completions were conversational; the same completions re-scored by verify_batch
        assert all(isinstance(c, list) and c[0]["role"] == "assistant" for c in call["completions"])
        by_id = {p.id: p for p in pivots}
        again = score([c[0]["content"] for c in call["completions"]], [by_id[i] for i in call["pivot_ids"]])
        assert call["rewards"] == [None if r.error else float(r.reward) for r in again]
        scored = [r for r in call["rewards"] if r is not None]
        assert math.isclose(row["rewards/pivot_verifier/mean"], sum(scored) / len(scored), abs_tol=1e-6)
    changed = any(not torch.equal(before[k], v) for k, v in trainer.model.state_dict().items())
    assert changed or all(r == call["rewards"][0] for call in reward.calls for r in call["rewards"])
