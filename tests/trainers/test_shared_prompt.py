"""Each distinct prompt forwarded once (trainers/shared_prompt.py): the same log-probs and gradients as the
packed layout, on real tiny Llama and GPT-2 models, with padding on both sides, groups of several sizes, a
row alone and an empty completion; and a PivotRL update that takes that path changes the weights as the
packed one does."""

from __future__ import annotations

import pytest
import torch

from pivot_envs.trainers.logprobs import completion_logprobs
from pivot_envs.trainers.shared_prompt import distinct_prompts
from pivot_envs.trainers.token_batch import pack


def _llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    return LlamaForCausalLM(LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128))


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(vocab_size=50, n_embd=32, n_layer=2, n_head=4, n_positions=128))


def _rows() -> tuple[list[list[int]], list[list[int]]]:
    g = torch.Generator().manual_seed(0)

    def toks(n: int) -> list[int]:
        return torch.randint(1, 50, (n,), generator=g).tolist()

    a, b, c = toks(11), toks(6), toks(9)
    prompts = [a, a, a, b, b, c, a]  # groups of 4 (one row apart from the others), 2 and 1
    completions = [toks(5), toks(2), toks(7), toks(1), toks(4), toks(3), []]
    return prompts, completions


@pytest.mark.parametrize("make", [_llama, _gpt2], ids=["llama", "gpt2"])
def test_log_probs_and_gradients_equal_the_packed_layouts(make) -> None:
    torch.manual_seed(0)
    model = make().float().eval()  # no dropout: both layouts see the same function (gradients still flow)
    prompts, completions = _rows()
    batch = pack(prompts, completions, pad_id=0)
    groups = distinct_prompts(batch)
    assert groups.count == 3 and groups.index.tolist()[:3] == [groups.index[0].item()] * 3
    results = []
    for shared in (False, True):
        model.zero_grad(set_to_none=True)
        logp, entropy = completion_logprobs(model, batch, with_entropy=True, shared_prompt=shared)
        weights = torch.linspace(0.5, 2.0, logp.numel()).reshape(logp.shape)  # every token's gradient counts
        (logp * batch.completion_mask * weights).sum().backward()
        grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
        results.append((logp.detach() * batch.completion_mask, entropy * batch.completion_mask, grads))
    (lp0, en0, g0), (lp1, en1, g1) = results
    assert lp0.abs().sum() > 0
    torch.testing.assert_close(lp1, lp0, atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(en1, en0, atol=2e-5, rtol=1e-5)
    assert g0.keys() == g1.keys() and len(g0) > 5
    for name in g0:
        torch.testing.assert_close(g1[name], g0[name], atol=5e-5, rtol=1e-4, msg=name)


def test_completions_one_token_wide_and_no_shared_prompt() -> None:
    torch.manual_seed(1)
    model = _llama().float().eval()
    prompts = [[3, 4, 5], [3, 4, 5], [7, 8]]
    completions = [[9], [10], [11]]
    batch = pack(prompts, completions, pad_id=0)
    with torch.no_grad():
        lp0, _ = completion_logprobs(model, batch)
        lp1, _ = completion_logprobs(model, batch, shared_prompt=True)
    torch.testing.assert_close(lp1, lp0, atol=2e-5, rtol=1e-5)
    alone = pack([[3, 4], [5, 6, 7]], [[1, 2], [3]], pad_id=0)  # no prompt repeats: the packed path
    assert distinct_prompts(alone).count == 2
    with torch.no_grad():
        torch.testing.assert_close(completion_logprobs(model, alone, shared_prompt=True)[0],
                                   completion_logprobs(model, alone)[0])


def test_same_tokens_other_padding_are_other_prompts() -> None:
    batch = pack([[0, 5], [5]], [[1], [1]], pad_id=0)  # a real pad-id token vs padding
    assert distinct_prompts(batch).count == 2


@pytest.mark.filterwarnings("ignore:Seems like `optimizer.step\\(\\)` has been overridden")
@pytest.mark.parametrize("lora_r", [0, 4], ids=["full", "lora"])
def test_a_pivotrl_update_takes_the_packed_gradients(tmp_path, lora_r) -> None:
    """PolicyUpdate.update over GRPO groups (4 samples of each of 2 prompts, advantages of both signs, a KL term
    to the reference), once with the shared prompt (the default) and once packed: the same gradients reach the
    optimiser, the same loss and KL are logged (Adam's step itself is left out: it turns float rounding of a
    near-zero gradient into a full step)."""
    from pivot_envs.models.tiny import build_tiny_model
    from pivot_envs.trainers.config import PivotRLConfig
    from pivot_envs.trainers.distributed import DistInfo
    from pivot_envs.trainers.policy_update import PolicyUpdate, Row

    texts = ["ls -la /tmp", "grep -rn error logs", "cat notes.txt", "find . -name '*.py'"] * 5
    model = build_tiny_model(tmp_path / "model", texts, vocab_size=300, hidden_size=32, n_layers=2, n_heads=2, seed=0)
    prompts = [list(range(5, 17)), list(range(20, 27))]
    rows = [Row(prompt=prompts[i // 4], completion=list(range(30 + i, 33 + i + i % 3)), advantage=(-1.0) ** i * (1 + i / 8),
                sampler_logprobs=None) for i in range(8)]
    seen = []
    for shared in (True, False):
        torch.manual_seed(0)
        cfg = PivotRLConfig(model=str(model), device="cpu", lr=1e-2, lora_r=lora_r, lora_alpha=8, lora_dropout=0.0,
                            beta=0.05, shared_prompt=shared)
        policy = PolicyUpdate(cfg, DistInfo(), torch.device("cpu"))
        policy.policy.eval()  # no dropout in the tiny model's layers: the same function both ways
        grads: dict[str, torch.Tensor] = {}
        params = {n: p for n, p in policy.module.named_parameters() if p.requires_grad}
        policy.optimizer.step = lambda: grads.update({n: p.grad.detach().clone() for n, p in params.items()})
        result = policy.update(rows)
        assert result.updated and grads and any(g.abs().sum() > 0 for g in grads.values())
        seen.append((grads, result.sums.loss_sum, result.sums.kl_sum, result.grad_norm))
    (g1, *s1), (g0, *s0) = seen
    assert s1 == pytest.approx(s0, rel=1e-4, abs=1e-7)
    for name in g0:
        torch.testing.assert_close(g1[name], g0[name], atol=1e-6, rtol=1e-4, msg=name)


@pytest.mark.slow
def test_the_shared_prompt_gradient_repeats_bit_for_bit_at_two_threads(terminal_base) -> None:
    """The backward of the row selection adds a prompt's rows in a fixed order (``index_select``). Plain indexing, as
    transformers' ``batch_select_indices`` does, adds them with atomic float adds at 2 CPU threads, in an order that
    depends on thread timing: on the shipped terminal base with 7 prompts x 9 rows it gave 2 different gradients in
    40 repeats once (1 in 60 another time), and PivotRL reruns parted after a few steps
    (``benchmarks/vllm/vllm_rerun_spread.py``). A guard: 100 repeats, one gradient."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(terminal_base)).float().eval()
    g = torch.Generator().manual_seed(1)
    vocab = model.config.vocab_size
    distinct = [torch.randint(1, vocab, (64,), generator=g).tolist() for _ in range(7)]
    prompts = [distinct[i // 9] for i in range(63)]  # a prompt's rows across both threads' halves of the batch
    completions = [torch.randint(1, vocab, (8,), generator=g).tolist() for _ in range(63)]
    batch = pack(prompts, completions, pad_id=0)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        seen = set()
        for _ in range(100):
            model.zero_grad(set_to_none=True)
            logp, _ = completion_logprobs(model, batch, shared_prompt=True)
            (logp * batch.completion_mask).sum().backward()
            seen.add(b"".join(p.grad.numpy().tobytes() for p in model.parameters() if p.grad is not None))
    finally:
        torch.set_num_threads(threads)
    assert len(seen) == 1
