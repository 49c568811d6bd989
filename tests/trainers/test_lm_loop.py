"""The shared supervised LM loop (trainers/lm_loop.py) on a real tiny Llama built in memory."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from pivot_envs.trainers.lm_loop import Part, collate, token_nll, token_weights, train_steps  # noqa: E402

PAD = 0
ROWS = [([5, 6, 7], [8, 9]), ([10, 11], [12, 13, 14, 15]), ([16, 17, 18, 19, 20], [21]), ([22], [23, 24, 25])]


def tiny_model(seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64, pad_token_id=PAD)
    return LlamaForCausalLM(config)


def run(batches, steps=2, seed=0, **kwargs):
    model = tiny_model(seed)
    optim = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.LambdaLR(optim, lambda i: 1.0 / (i + 1))
    rows = []
    train_steps(model, optim, sched, lambda step: batches, steps=steps, pad_id=PAD, on_step=rows.append, **kwargs)
    return model, rows


def test_weights_are_one_on_targets_prompt_weight_on_the_prompt_and_zero_on_padding():
    ids, mask, labels = collate([([5, 6, 7], [8, 9]), ([], [1, 2, 3])], PAD)
    assert ids.tolist() == [[5, 6, 7, 8, 9], [1, 2, 3, PAD, PAD]]
    assert labels.tolist() == [[-100, -100, -100, 8, 9], [1, 2, 3, -100, -100]]
    # one weight per predicted token (positions 1..): the first token of a sequence is never predicted
    assert token_weights(mask, labels, 0.5).tolist() == [[0.5, 0.5, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0]]
    assert token_weights(mask, labels).tolist() == [[0.0, 0.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0]]


def test_micro_batches_give_the_update_of_one_batch_and_rows_report_the_step():
    whole, rows = run([[Part(ROWS)]])
    split, split_rows = run([[Part(ROWS[:1])], [Part(ROWS[1:3])], [Part(ROWS[3:])]])
    for a, b in zip(whole.parameters(), split.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert [r["step"] for r in rows] == [1, 2] and [r["lr"] for r in rows] == pytest.approx([1e-2, 5e-3])
    assert split_rows[0]["loss"] == pytest.approx(rows[0]["loss"], rel=1e-5)
    # every target token has a prompt token before it, so all 10 count; tokens: every non-padding token
    assert rows[0]["loss_tokens"] == 10 and rows[0]["tokens"] == sum(len(p) + len(t) for p, t in ROWS)
    assert rows[0]["terms"]["loss"]["loss"] == rows[0]["loss"] and rows[1]["loss"] < rows[0]["loss"]


def test_terms_are_normalised_separately_and_summed():
    domain, probe = ROWS[:2], ROWS[2:]
    model = tiny_model()

    def mean_nll(rows, prompt_weight):
        ids, mask, labels = collate(rows, PAD)
        w = token_weights(mask, labels, prompt_weight)
        with torch.no_grad():
            return float((token_nll(model, ids, mask) * w).sum() / w.sum())

    expected = {"domain": mean_nll(domain, 0.3), "probe": mean_nll(probe, 0.0)}
    _, rows = run([[Part(domain, "domain", 0.3), Part(probe, "probe")]], steps=1)
    terms = rows[0]["terms"]
    assert {k: v["loss"] for k, v in terms.items()} == pytest.approx(expected, rel=1e-5)
    assert rows[0]["loss"] == pytest.approx(sum(expected.values()), rel=1e-5)
    assert terms["domain"]["target_loss"] != pytest.approx(terms["domain"]["loss"])  # the prompt counts in "loss"
    assert terms["probe"]["target_loss"] == pytest.approx(terms["probe"]["loss"])


def test_deterministic_resumable_from_a_step_and_clipping_off_with_zero():
    a, rows_a = run([[Part(ROWS)]], steps=3)
    b, _ = run([[Part(ROWS)]], steps=3)
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))
    _, later = run([[Part(ROWS)]], steps=3, start_step=2)
    assert [r["step"] for r in later] == [3]
    _, clipped = run([[Part(ROWS)]], steps=1, max_grad_norm=1e-3)
    _, unclipped = run([[Part(ROWS)]], steps=1, max_grad_norm=0)
    assert clipped[0]["grad_norm"] == unclipped[0]["grad_norm"] > 1e-3  # the norm before clipping is reported
