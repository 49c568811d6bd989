"""The advantage policy and the PivotRL loss against numbers computed by hand."""

import math

import pytest

torch = pytest.importorskip("torch")

from pivot_envs.trainers.advantage import (  # noqa: E402
    AdvantageInputs,
    AdvantagePolicy,
    ValueTable,
    group_advantages,
    turn_mean,
    zero_variance,
)
from pivot_envs.trainers.loss import k3_kl, pivotrl_loss  # noqa: E402
from pivot_envs.verifiers.hack_monitor import HackCounts, metric_names  # noqa: E402


def test_grpo_advantage_by_hand():
    # r = [1, 0, 0, 1]: mean 0.5, population std 0.5 -> A = (r - 0.5) / (0.5 + 1e-4)
    adv = group_advantages([1, 0, 0, 1], mode="grpo", eps_std=1e-4)
    expected = 0.5 / 0.5001
    assert adv.tolist() == pytest.approx([expected, -expected, -expected, expected], rel=1e-6)


def test_dr_grpo_and_pvpo_by_hand():
    assert group_advantages([1, 0, 0, 0], mode="dr_grpo").tolist() == pytest.approx([0.75, -0.25, -0.25, -0.25])
    assert group_advantages([1, 0], mode="pvpo", baseline=0.25).tolist() == pytest.approx([0.75, -0.25])
    with pytest.raises(ValueError, match="baseline"):
        group_advantages([1, 0], mode="pvpo")


def test_invalid_samples_are_excluded_and_get_zero():
    # valid rewards [1, 0] -> mean 0.5, std 0.5; the errored sample (reward 1 recorded) is ignored
    adv = group_advantages([1, 0, 1], valid=[True, True, False], mode="grpo", eps_std=0.0)
    assert adv.tolist() == pytest.approx([1.0, -1.0, 0.0])
    assert group_advantages([1, 1], valid=[False, False]).tolist() == [0.0, 0.0]


def test_zero_variance_groups():
    assert zero_variance([1, 1, 1]) and zero_variance([0, 0]) and not zero_variance([0, 1])
    assert zero_variance([1, 0], valid=[True, False])
    assert group_advantages([1, 1, 1]).abs().sum() == 0


def test_one_zero_variance_rule_with_turn_credit_as_its_input():
    """Pivots (no turn credit): a group is flat when its scored rewards are equal. Episodes with turn credit: a group
    whose tasks all failed still trains when its turn rewards differ. ``keep`` trains on flat groups too."""
    pivots = AdvantagePolicy(zero_variance="skip")
    assert pivots.flat([1, 1]) and not pivots.trains([1, 1]) and pivots.trains([1, 0])
    assert pivots.flat([1, 0], [True, False]) and pivots.flat([0, 0], turn_rewards=[1.0, 0.0])  # turns: not its input
    episodes = AdvantagePolicy(zero_variance="skip", turn_credit=0.5)
    assert not episodes.flat([0, 0], turn_rewards=[1.0, 0.0]) and episodes.trains([0, 0], turn_rewards=[1.0, 0.0])
    assert episodes.flat([0, 0], turn_rewards=[1.0, 1.0]) and episodes.flat([0, 0])
    assert AdvantagePolicy(zero_variance="keep").trains([1, 1]) and AdvantagePolicy(zero_variance="resample").flat([1, 1])


def test_the_policy_computes_the_group_advantages_and_shapes_turns_by_hand():
    assert AdvantagePolicy(mode="dr_grpo").advantages([1, 0, 0, 0]) == pytest.approx([0.75, -0.25, -0.25, -0.25])
    pvpo = AdvantagePolicy(mode="pvpo")
    assert pvpo.uses_baseline and not AdvantagePolicy().uses_baseline
    assert pvpo.advantages([1, 0, 1], [True, True, False], baseline=0.25) == pytest.approx([0.75, -0.25, 0.0])
    assert all(isinstance(a, float) for a in AdvantagePolicy().advantages([1, 0]))
    # w = 0.5, rbar = 0.75: a turn with r_t = 0 gets A - 0.375; a turn without a turn reward (or no rbar) keeps A
    credit = AdvantagePolicy(turn_credit=0.5)
    assert credit.turn_advantage(1.0, 0.0, 0.75) == pytest.approx(0.625)
    assert credit.turn_advantage(1.0, None, 0.75) == 1.0 and credit.turn_advantage(1.0, 1.0, None) == 1.0
    assert turn_mean([1.0, 1.0, 1.0, 0.0]) == pytest.approx(0.75) and turn_mean([]) is None


def test_a_mode_a_trainer_cannot_feed_is_refused_with_the_field_and_the_choices():
    pivots, episodes = AdvantageInputs(baselines=True, resample=True), AdvantageInputs()
    for mode in ("grpo", "dr_grpo", "pvpo"):
        for rule in ("skip", "resample", "keep"):
            assert AdvantagePolicy(mode=mode, zero_variance=rule).refusal(pivots) is None
    field, accepted = AdvantagePolicy(mode="pvpo").refusal(episodes)
    assert field == "advantage" and accepted.startswith("one of grpo, dr_grpo (") and "V(s)" in accepted
    assert AdvantagePolicy(zero_variance="resample").refusal(episodes)[0] == "zero_variance"
    assert AdvantagePolicy(mode="ppo").refusal(pivots) == ("advantage", "one of grpo, dr_grpo, pvpo")
    assert AdvantagePolicy(turn_credit=-0.5).refusal(episodes) == ("turn_credit", "a number >= 0 (0: plain E2E)")
    assert AdvantagePolicy(turn_credit=float("nan")).refusal(episodes)[0] == "turn_credit"


def test_pvpo_value_table_refreshes_from_its_window():
    values = ValueTable({"a": 0.25, "b": 0.5})
    values.observe("a", [1.0, 0.0])
    values.observe("a", [1.0, 1.0])
    assert values["a"] == 0.25 and values.refresh() == 1
    assert values.values == {"a": 0.75, "b": 0.5} and values.window == {}
    values.observe("b", [1.0])
    again = ValueTable()
    again.load_state_dict(values.state_dict())
    assert again.refresh() == 1 and again.solved() == ["b"]


def test_k3_kl_by_hand_and_nonnegative():
    logp, ref = torch.tensor([math.log(0.5)]), torch.tensor([math.log(0.25)])
    # delta = log(0.25/0.5) = -log 2: exp(delta) - delta - 1 = 0.5 + log 2 - 1
    assert k3_kl(logp, ref).item() == pytest.approx(0.5 + math.log(2) - 1)
    assert (k3_kl(torch.randn(100), torch.randn(100)) >= 0).all()


def test_loss_by_hand_with_clipping_and_kl():
    # two samples, two tokens each; sample 2's second token is padding
    logp = torch.log(torch.tensor([[0.6, 0.5], [0.2, 0.9]]))
    old = torch.log(torch.tensor([[0.4, 0.5], [0.4, 0.9]]))
    ref = torch.log(torch.tensor([[0.5, 0.5], [0.2, 0.9]]))
    adv = torch.tensor([1.0, -1.0])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    out = pivotrl_loss(logp, old, ref, adv, mask, eps_low=0.2, eps_high=0.2, beta=0.1)
    # ratios: [1.5, 1.0], [0.5, -]; surrogates: min(1.5, 1.2)=1.2, 1.0 ; min(-0.5, -0.8) = -0.8
    kl11 = 0.5 / 0.6 - math.log(0.5 / 0.6) - 1
    s1 = ((1.2 - 0.1 * kl11) + (1.0 - 0.0)) / 2
    s2 = -0.8 - 0.0
    assert out.loss.item() == pytest.approx(-(s1 + s2) / 2, rel=1e-5)
    assert out.clip_fraction == pytest.approx(2 / 3)  # token (1,1) and (2,1) take the clipped branch
    assert out.kl == pytest.approx(kl11 / 3, rel=1e-5)
    token = pivotrl_loss(logp, old, ref, adv, mask, beta=0.1, agg="token")
    assert token.loss.item() == pytest.approx(-((1.2 - 0.1 * kl11) + 1.0 - 0.8) / 3, rel=1e-5)


def test_loss_gradient_pushes_toward_positive_advantage():
    logits = torch.zeros(1, 1, 3, requires_grad=True)
    logp_all = torch.log_softmax(logits, -1)
    token = torch.tensor([[1]])
    logp = logp_all.gather(-1, token.unsqueeze(-1)).squeeze(-1)
    out = pivotrl_loss(logp, logp.detach(), None, torch.tensor([1.0]), torch.ones(1, 1))
    out.loss.backward()
    assert logits.grad[0, 0, 1] < 0  # descending the loss raises the sampled token's logit
    with pytest.raises(ValueError, match="reference"):
        pivotrl_loss(logp, logp.detach(), None, torch.tensor([1.0]), torch.ones(1, 1), beta=0.1)


# ---------------------------------------------------------------------- engine/trainer importance weights


def test_importance_weights_by_hand():
    from pivot_envs.trainers.token_batch import pack
    from pivot_envs.trainers.rollout_correction import engine_logprobs, importance_weights, mismatch_sums

    batch = pack([[1, 2], [3]], [[4, 5, 6], [7, 8]], pad_id=0)
    old = torch.tensor([[-1.0, -2.0, -0.5], [-1.0, -1.0, 0.0]])
    engine = engine_logprobs([[-1.5, -2.0, -0.5 - math.log(4.0)], None], batch)  # row 2: no engine log-probs
    assert engine.present.tolist() == [[1, 1, 1], [0, 0, 0]]
    diff, count = mismatch_sums(old, engine)
    assert count == 3 and diff == pytest.approx(0.5 + 0.0 + math.log(4.0))
    w = importance_weights(old, engine, "token_truncate", 0.0, 3.0)
    assert w[0].tolist() == pytest.approx([math.exp(0.5), 1.0, 3.0]) and w[1].tolist() == [1.0, 1.0, 1.0]
    w = importance_weights(old, engine, "token_mask", 0.0, 3.0)
    assert w[0].tolist() == pytest.approx([math.exp(0.5), 1.0, 0.0])
    w = importance_weights(old, engine, "sequence_truncate", 0.0, 10.0)
    assert w.shape == (2, 1) and w[0, 0] == pytest.approx(math.exp(0.5) * 4.0) and w[1, 0] == 1.0
    w = importance_weights(old, engine, "sequence_mask", 0.0, 3.0)
    assert w[:, 0].tolist() == [0.0, 1.0]
    with pytest.raises(RuntimeError, match="3 log-probs for a completion of 2 tokens"):
        engine_logprobs([None, [-1.0, -1.0, -1.0]], batch)


def test_the_loss_weighs_each_token_by_its_importance_weight():
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    adv, mask = torch.tensor([1.0]), torch.ones(1, 2)
    plain = pivotrl_loss(logp, logp.detach(), None, adv, mask, agg="token")
    weighted = pivotrl_loss(logp, logp.detach(), None, adv, mask, agg="token", is_weight=torch.tensor([[2.0, 0.0]]))
    assert float(plain.loss) == pytest.approx(-1.0) and float(weighted.loss) == pytest.approx(-1.0)
    (grad,) = torch.autograd.grad(weighted.loss, logp)
    assert grad[0].tolist() == pytest.approx([-1.0, 0.0])  # d/dlogp of -(2 * ratio_1 + 0 * ratio_2) / 2


def test_normalised_entropy_by_hand():
    from pivot_envs.trainers.logprobs import normalised_entropy

    # a uniform distribution over V tokens has entropy log V: 1; a certain one 0; the mean of the two 0.5
    assert normalised_entropy([math.log(50)], 50) == pytest.approx(1.0)
    assert normalised_entropy([0.0, math.log(50)], 50) == pytest.approx(0.5)
    assert normalised_entropy([], 50) == 0.0


ROW_KEYS = {"step", "reward_mean", "reward_std", "strict_reward_mean", "miss_rate", "zero_var_frac", "masked", "groups",
            "unscored_groups", "resampled_groups", "injected", "skipped_groups", "used_groups", "used_samples",
            "completion_len_mean", "loss", "kl", "clip_fraction", "ratio_mean", "entropy", "grad_norm", "lr", "updated",
            *metric_names()}


def test_the_metrics_row_of_typed_step_stats_by_hand():
    from pivot_envs.trainers.distributed import DistInfo
    from pivot_envs.trainers.step_stats import StepStats, UpdateResult, UpdateSums, metrics_row

    # two groups of 2 scored samples, rewards [1, 0] and [1, 1]: mean 0.75, std sqrt(0.75 - 0.5625) = 0.433
    st = StepStats(groups=2, samples=4, scored_groups=2, zero_var_groups=1, reward_sum=3, reward_sq_sum=3, reward_n=4,
                   completion_len_sum=20, used_groups=1, used_rows=2, skipped_groups=1)
    update = UpdateResult(sums=UpdateSums(loss_sum=0.5, kl_sum=0.2, loss_tokens=10, clip_sum=1.0, ratio_sum=10.0),
                          grad_norm=2.0, updated=True, beta_on=True)
    st.add_update(update)
    row = metrics_row(7, st.reduced(DistInfo()), update, lr=1e-3)
    assert set(row) == ROW_KEYS  # the file format: keys may be added, never renamed
    assert row["reward_mean"] == 0.75 and row["reward_std"] == pytest.approx(math.sqrt(0.1875))
    assert (row["zero_var_frac"], row["completion_len_mean"], row["used_samples"]) == (0.5, 5.0, 2)
    assert (row["loss"], row["kl"], row["clip_fraction"], row["ratio_mean"]) == pytest.approx((0.5, 0.02, 0.1, 1.0))
    assert row["strict_reward_mean"] is None and row["entropy"] is None  # nothing counted: undefined, not 0
    # no update ran (no group had a signal): the loss columns are undefined, not zero
    idle = metrics_row(8, StepStats(groups=1), UpdateResult(), lr=1e-3)
    assert idle["loss"] is None and idle["kl"] is None and idle["updated"] is False and idle["reward_mean"] is None
    # the hack monitor's counts go through the reduction as counts and come out as shares (none: undefined)
    st.hack = HackCounts(accepted=4, more_calls=1, accepted_by={**HackCounts().accepted_by, "exact": 3, "judge": 1})
    hacked = metrics_row(9, st.reduced(DistInfo()), update, lr=1e-3)
    assert (hacked["hack/accepted"], hacked["hack/more_calls"], hacked["accepted_by/exact"]) == (4, 0.25, 0.75)
    assert idle["hack/accepted"] == 0 and idle["hack/more_calls"] is None
