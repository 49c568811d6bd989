"""The SFT baseline, evaluation and the OOD probes, with real tiny models built offline.

One session-wide setup (``tiny_setup``, shared with ``test_train_cli.py``): eight
first-turn pivots of the bundled search domain, an untrained tiny reference-style
model (tokenizer and chat template of :mod:`pivot_envs.models.reference`), and that
model after 60 SFT steps on the eight pivots.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from pivot_envs.envs_data.probes import (  # noqa: E402
    CLOSED_KINDS,
    EVAL_MIX,
    MAX_OPERAND,
    PROBE_KINDS,
    normalize_answer,
    probe_eval_set,
    probe_examples,
    probe_split,
    probe_texts,
    score_probe,
)
from pivot_envs.types import Pivot, stable_hash  # noqa: E402

SFT_STEPS = 120
MAX_NEW = 96


@dataclass(frozen=True)
class TinySetup:
    """Paths of the session's toy data and models."""

    root: Path
    pivots_path: Path
    base: Path
    sft_dir: Path

    @property
    def final(self) -> Path:
        return self.sft_dir / "final"

    def pivots(self) -> list[Pivot]:
        from pivot_envs.formats import read_pivots

        return read_pivots(self.pivots_path)


def toy_pivots() -> list[Pivot]:
    """Eight first-turn pivots of the bundled search domain (short prompts, one tool call each)."""
    from pivot_envs.envs_data import load_pivots

    return [p for p in load_pivots("search", "train") if len(p.context) <= 2][:8]


@lru_cache(maxsize=4)
def tiny_setup(root: str) -> TinySetup:
    """Build (once per session and root) the toy pivot file, the base model and its SFT run."""
    from pivot_envs.formats import write_pivots
    from pivot_envs.models.reference import build_reference_model
    from pivot_envs.trainers.sft import SFTConfig, train_sft

    base_root = Path(root)
    pivots_path = base_root / "toy.jsonl"
    base_root.mkdir(parents=True, exist_ok=True)
    pivots = toy_pivots()
    write_pivots(pivots, pivots_path)
    base = build_reference_model("search", base_root / "base", steps=0, lm_steps=0, pivots=pivots, vocab_size=512,
                                 max_context_tokens=256, probe_texts=probe_texts(200))
    sft_dir = base_root / "sft"
    train_sft(SFTConfig(model=str(base), output_dir=str(sft_dir), pivots=str(pivots_path), steps=SFT_STEPS,
                        batch_size=8, lr=1e-2, lr_schedule="constant"))
    return TinySetup(base_root, pivots_path, base, sft_dir)


@pytest.fixture(scope="session")
def tiny(tmp_path_factory) -> TinySetup:
    return tiny_setup(str(tmp_path_factory.getbasetemp() / "tiny-sft-eval"))


@lru_cache(maxsize=8)
def _eval(model: str, pivots: str, **kwargs) -> dict:
    from pivot_envs.trainers.evaluate import evaluate

    return evaluate(model, pivots, **kwargs)


# --------------------------------------------------------------------------- SFT


def test_sft_lowers_the_loss_and_raises_accuracy_on_its_pivots(tiny):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pivot_envs.trainers.sft import expert_nll

    result = json.loads((tiny.sft_dir / "train_result.json").read_text())
    assert result["steps"] == SFT_STEPS and result["train_pivots"] == 8
    assert result["losses"][-1] < 0.2 * result["losses"][0]
    pivots = tiny.pivots()
    nll = {}
    for name, folder in (("base", tiny.base), ("sft", tiny.final)):
        model = AutoModelForCausalLM.from_pretrained(folder)
        nll[name] = expert_nll(model, AutoTokenizer.from_pretrained(folder), pivots)
    assert nll["sft"] < 0.2 * nll["base"], nll

    before = _eval(str(tiny.base), str(tiny.pivots_path), k=0, probes=False, max_new_tokens=MAX_NEW)
    after = _eval(str(tiny.final), str(tiny.pivots_path), k=0, probes=False, max_new_tokens=MAX_NEW)
    assert before["domains"]["search"]["greedy"]["functional"] == 0.0
    assert after["domains"]["search"]["greedy"]["functional"] >= 0.75
    assert after["overall"]["greedy"]["strict"] >= 0.5
    assert after["overall"]["sampled"] is None and after["probes"] is None


def test_sft_writes_metrics_plot_config_and_a_loadable_model(tiny):
    from transformers import AutoModelForCausalLM

    from pivot_envs.trainers.sft import SFTConfig

    rows = [json.loads(line) for line in (tiny.sft_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, SFT_STEPS + 1))
    for r in rows:
        assert {"step", "loss", "lr", "grad_norm", "tokens", "loss_tokens", "tokens_per_s", "step_s", "wall_s"} <= set(r)
        assert r["tokens"] > r["loss_tokens"] > 0 and r["lr"] == pytest.approx(1e-2) and r["grad_norm"] > 0
    assert (tiny.sft_dir / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    saved = json.loads((tiny.sft_dir / "sft_config.json").read_text())
    config = SFTConfig.from_dict(saved)
    assert config.to_dict() == saved and config.steps == SFT_STEPS
    assert AutoModelForCausalLM.from_pretrained(tiny.final).config.model_type == "llama"
    assert not list(tiny.sft_dir.glob("checkpoint-*"))  # save_every=0: only final/


def _run(tiny, out: Path, **overrides):
    from pivot_envs.trainers.sft import SFTConfig, train_sft

    settings = dict(model=str(tiny.base), pivots=str(tiny.pivots_path), output_dir=str(out), steps=4, batch_size=4,
                    lr=1e-2, save_every=2, save_total_limit=1, plots=False)
    settings.update(overrides)
    return train_sft(SFTConfig(**settings))


def _weights(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def test_an_interrupted_run_resumes_to_the_same_weights_and_metrics(tiny, tmp_path):
    import torch

    from pivot_envs.trainers.sft import SFTConfig, train_sft

    whole = _run(tiny, tmp_path / "whole")

    class Interrupt(Exception):
        pass

    def stop_at_3(row):
        if row["step"] == 3:
            raise Interrupt

    settings = dict(model=str(tiny.base), pivots=str(tiny.pivots_path), output_dir=str(tmp_path / "cut"), steps=4,
                    batch_size=4, lr=1e-2, save_every=2, save_total_limit=1, plots=False)
    with pytest.raises(Interrupt):
        train_sft(SFTConfig(**settings), on_step=stop_at_3)
    assert [p.name for p in (tmp_path / "cut").glob("checkpoint-*")] == ["checkpoint-000002"]
    with pytest.raises(ValueError, match="already holds a run"):
        train_sft(SFTConfig(**settings))
    with pytest.raises(ValueError, match=r"other settings \(lr: checkpoint 0.01 vs now 0.02\)"):
        train_sft(SFTConfig(**{**settings, "lr": 2e-2, "resume_from": "latest"}))
    resumed = train_sft(SFTConfig(**settings, resume_from="latest"))
    assert resumed.resumed_from == 2 and resumed.steps == 4
    assert resumed.losses == whole.losses  # rows 1-2 kept from the first attempt, 3-4 redone: identical
    a, b = _weights(Path(whole.final_model_dir)), _weights(Path(resumed.final_model_dir))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    # save_total_limit=1 keeps only the newest checkpoint
    assert [p.name for p in (tmp_path / "cut").glob("checkpoint-*")] == ["checkpoint-000004"]
    again = train_sft(SFTConfig(**{**settings, "steps": 1, "overwrite_output_dir": True, "save_every": 0}))
    assert again.steps == 1 and not list((tmp_path / "cut").glob("checkpoint-*"))


def test_gradient_accumulation_changes_memory_not_the_update(tiny, tmp_path):
    import torch

    one = _run(tiny, tmp_path / "one", steps=1, save_every=0)
    two = _run(tiny, tmp_path / "two", steps=1, save_every=0, grad_accum_steps=2)
    assert one.losses[0] == pytest.approx(two.losses[0], rel=1e-5)
    a, b = _weights(Path(one.final_model_dir)), _weights(Path(two.final_model_dir))
    assert all(torch.allclose(a[k], b[k], atol=1e-5) for k in a)  # lr 1e-2: the same update up to float noise


def test_sft_config_errors_name_the_field(tmp_path):
    from pivot_envs.trainers.sft import SFTConfig, train_sft

    with pytest.raises(ValueError, match=r"SFTConfig.steps = 0 is invalid: it must be >= 1"):
        SFTConfig(steps=0)
    with pytest.raises(ValueError, match=r"lr_schedule = 'linear' is invalid: it must be one of cosine, constant"):
        SFTConfig(lr_schedule="linear")
    with pytest.raises(ValueError, match=r"grad_accum_steps = 4 is invalid"):
        SFTConfig(batch_size=2, grad_accum_steps=4)
    with pytest.raises(ValueError, match=r"unknown key 'learning_rate' for SFTConfig; valid keys: adam_eps, batch_size"):
        SFTConfig.from_dict({"learning_rate": 1})
    with pytest.raises(FileNotFoundError, match="no complete checkpoint-NNNNNN"):
        train_sft(SFTConfig(model="x", output_dir=str(tmp_path), resume_from="latest"))
    with pytest.raises(FileNotFoundError, match="no such pivot file"):
        train_sft(SFTConfig(model="x", output_dir=str(tmp_path / "new"), pivots=str(tmp_path / "missing.jsonl")))


# --------------------------------------------------------------------------- evaluation


def test_eval_numbers_equal_a_direct_computation(tiny):
    from pivot_envs.agents.hf import HFAgent
    from pivot_envs.env import PivotEnv
    from pivot_envs.models.tiny import generate

    probes = probe_eval_set()[:12]
    report = _eval(str(tiny.final), str(tiny.pivots_path), k=2, temperature=1.0, seed=3, probes=tuple(probes),
                   max_new_tokens=MAX_NEW, batch_size=4, details=True)
    pivots = tiny.pivots()
    env = PivotEnv(pivots, domain="search")

    def rewards(texts, pivot):
        env.reset(options={"pivot_id": pivot.id})
        return [(r, info["strict_reward"], info["passed"]) for r, info in env.step_many(texts)]

    window = report["settings"]["max_prompt_tokens"]
    assert window == 256  # the training window: model_max_length 512 minus 256
    greedy = HFAgent(str(tiny.final), temperature=0.0, max_new_tokens=MAX_NEW, batch_size=4, logprobs="none",
                     max_prompt_tokens=window)
    texts = [g[0].text for start in (0, 4) for g in greedy.sample(pivots[start : start + 4], 1, seed=3)]
    assert [row["greedy_text"] for row in report["per_pivot"]] == texts
    scored = [rewards([t], p)[0] for t, p in zip(texts, pivots)]
    block = report["domains"]["search"]["greedy"]
    assert block["functional"] == pytest.approx(sum(f for f, _, _ in scored) / 8)
    assert block["strict"] == pytest.approx(sum(s for _, s, _ in scored) / 8)
    assert block["scored"] == 8 and block["errors"] == 0 and report["pivots"] == 8

    sampler = HFAgent(greedy.model, greedy.tokenizer, temperature=1.0, max_new_tokens=MAX_NEW, batch_size=4,
                      logprobs="none", max_prompt_tokens=window)
    groups = [g for start in (0, 4) for g in sampler.sample(pivots[start : start + 4], 2, seed=3)]
    sampled = [rewards([c.text for c in g], p) for g, p in zip(groups, pivots)]
    block = report["overall"]["sampled"]
    assert block["functional"] == pytest.approx(sum(f for g in sampled for f, _, _ in g) / 16)
    assert block["strict"] == pytest.approx(sum(s for g in sampled for _, s, _ in g) / 16)
    assert block["pass_at_k"] == pytest.approx(sum(any(p for _, _, p in g) for g in sampled) / 8)
    assert block["samples"] == 2 and block["scored"] == 16
    assert [row["sampled_functional"] for row in report["per_pivot"]] == [[f for f, _, _ in g] for g in sampled]

    answers = [generate(tiny.final, item.messages(), max_new_tokens=16) for item in probes]
    hits = [score_probe(a, item.answer) for a, item in zip(answers, probes)]
    assert report["probes"]["n"] == 12
    assert report["probes"]["accuracy"] == pytest.approx(sum(hits) / 12)
    assert [r["correct"] for r in report["probes"]["rows"]] == hits
    assert set(report["probes"]["by_kind"]) <= set(PROBE_KINDS)


def test_eval_with_an_explicit_verifier_and_bundled_pivots(tiny):
    from pivot_envs.trainers.evaluate import evaluate

    report = evaluate(str(tiny.final), str(tiny.pivots_path), k=0, verifier="strict", probes=False,
                      max_new_tokens=MAX_NEW, batch_size=8)
    block = report["overall"]["greedy"]
    assert block["functional"] == block["strict"] and report["verifier"]["name"] == "strict"
    with pytest.raises(ValueError, match="k must be >= 0"):
        evaluate(str(tiny.final), str(tiny.pivots_path), k=-1)
    with pytest.raises(ValueError, match="tokenizer= together with a loaded model"):
        evaluate(object(), str(tiny.pivots_path))


# --------------------------------------------------------------------------- probes


def _solve(question: str) -> str:
    """The answer computed from the question text alone."""
    if m := re.fullmatch(r"What is (\d+) ([+-]) (\d+)\?", question):
        a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
        return str(a + b if op == "+" else a - b)
    m = re.fullmatch(r"In the list (.+), what is (\w)\?", question)
    assert m, question
    table = dict(pair.split("=") for pair in m.group(1).split(", "))
    return table[m.group(2)]


def test_probes_are_deterministic_correct_and_chat_shaped():
    a = probe_examples(60, seed=1)
    assert a == probe_examples(60, seed=1)
    assert a[:20] == probe_examples(20, seed=1)  # a longer draw starts with the shorter one
    assert a != probe_examples(60, seed=2)
    assert [p.kind for p in a[:6]] == list(PROBE_KINDS) * 2
    for item in a + probe_eval_set():
        assert item.answer == _solve(item.question)
        assert item.messages() == [{"role": "user", "content": item.question}]
        assert item.example() == (item.messages(), item.answer)
        assert item.id == stable_hash("probe", item.kind, item.question)
        if item.kind in CLOSED_KINDS:
            assert all(0 <= int(n) <= MAX_OPERAND for n in re.findall(r"\d+", item.question))
            assert int(item.answer) >= 0
    pivot = a[0].to_pivot()
    assert pivot.context == a[0].messages() and pivot.expert == {"role": "assistant", "content": a[0].answer}
    assert {p.kind for p in probe_examples(6, kinds=["lookup"])} == {"lookup"}


def test_the_probe_eval_set_is_fixed_and_its_lookups_are_never_trained_on():
    items = probe_eval_set()
    assert len(items) == 200 and len({i.question for i in items}) == 200
    assert {k: sum(i.kind == k for i in items) for k in PROBE_KINDS} == dict(EVAL_MIX)
    # pinned: changing the eval set changes every published OOD number
    assert stable_hash([(i.question, i.answer) for i in items]) == EVAL_FINGERPRINT
    lookups = {i.question for i in items if i.kind == "lookup"}
    assert all(probe_split("lookup", q) == "eval" for q in lookups)
    for seed in range(3):
        trained = {i.question for i in probe_examples(3000, seed, "train")}
        assert not lookups & trained
    assert probe_split("add", "What is 1 + 2?") is None  # closed tables belong to both splits


EVAL_FINGERPRINT = "04512663c414f50f"


@pytest.mark.parametrize(
    ("prediction", "answer", "hit"),
    [("12", "12", True), (" 12.\n", "12", True), ("The answer is 12", "12", True), ("Answer: 12", "12", True),
     ("`7`", "7", True), ("+7", "7", True), ("7.0", "7", True), ("07", "7", True), ("'9'", "9", True),
     ("13", "12", False), ("12 apples", "12", False), ("", "0", False), ("1 2", "12", False)],
)
def test_exact_match_with_light_normalisation(prediction, answer, hit):
    assert score_probe(prediction, answer) is hit
    assert normalize_answer(answer) == answer


def test_probe_arguments_are_checked():
    with pytest.raises(ValueError, match="unknown probe kind 'mul'"):
        probe_examples(3, kinds=["mul"])
    with pytest.raises(ValueError, match="split must be one of"):
        probe_examples(3, split="test")
    with pytest.raises(ValueError, match="no more distinct eval questions after 55 items"):
        probe_examples(56, split="eval", kinds=["sub"])
    assert len(probe_examples(56, split="eval", kinds=["sub"], unique=False)) == 56
    assert probe_examples(0) == []
