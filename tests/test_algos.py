"""Hand-computed checks of every formula in fspo_lite.algos."""

import math

import pytest
import torch

from fspo_lite import algos


def test_group_advantages_scaled_by_sample_std():
    # group [1, 0]: mean 0.5, sample std sqrt(0.5) = 0.70711 -> +-0.70711
    # group [0, 0]: all equal -> 0
    adv = algos.group_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), group_size=2)
    assert adv.tolist() == pytest.approx([0.70711, -0.70711, 0.0, 0.0], abs=1e-4)


def test_group_advantages_group_of_four():
    # [1, 0, 0, 1]: mean 0.5, sample std sqrt(1/3) = 0.57735 -> +-0.86603
    adv = algos.group_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0]), group_size=4)
    assert adv.tolist() == pytest.approx([0.86603, -0.86603, -0.86603, 0.86603], abs=1e-4)


def test_group_advantages_without_std_scaling_is_centring():
    adv = algos.group_advantages(torch.tensor([3.0, 1.0, -2.0, 2.0, 2.0, 2.0]), group_size=3, scale_by_std=False)
    assert adv.tolist() == pytest.approx([2.3333, 0.3333, -2.6667, 0, 0, 0], abs=1e-4)


def test_group_advantages_eps_in_denominator():
    # std of [1, 1+2e-6] is ~1.41e-6, so eps=1e-6 matters: 1e-6 / (1.41421e-6 + 1e-6)
    adv = algos.group_advantages(torch.tensor([1.0, 1.0 + 2e-6], dtype=torch.float64), 2)
    assert adv[1].item() == pytest.approx(1e-6 / (math.sqrt(2) * 1e-6 + 1e-6), rel=1e-2)


def test_group_of_one_has_zero_advantage():
    assert algos.group_advantages(torch.tensor([5.0, -1.0]), group_size=1).tolist() == [0.0, 0.0]


def test_group_advantages_rejects_ragged_groups():
    with pytest.raises(ValueError, match="multiple of group_size"):
        algos.group_advantages(torch.tensor([1.0, 2.0, 3.0]), group_size=2)


def test_zero_std_group_fraction():
    assert algos.zero_std_group_fraction(torch.tensor([1.0, 1.0, 0.0, 1.0, 2.0, 2.0]), 2) == pytest.approx(2 / 3)


def test_fspo_flip_2x6():
    advantages = torch.tensor([[1.0, 1, 1, 1, 1, 0], [-2.0, -2, -2, -2, -2, -2]])
    mask = torch.tensor([[1.0, -1, 0, 1, -1, 0], [1.0, 1, -1, 0, -1, 1]])
    expected = torch.tensor([[1.0, -1, 1, 1, -1, 0], [2.0, 2, -2, -2, -2, 2]])
    assert torch.equal(algos.fspo_flip(advantages, mask), expected)


def test_fspo_flip_shape_mismatch():
    with pytest.raises(ValueError, match="shapes differ"):
        algos.fspo_flip(torch.zeros(2, 3), torch.zeros(2, 4))


def test_token_advantages_broadcast_and_flip():
    rewards = torch.tensor([1.0, 0.0])
    completion_mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    sentence_mask = torch.tensor([[1.0, -1, 0, 0], [1.0, -1, 0, 0]])
    advantages, flipped = algos.token_advantages(rewards, completion_mask, 2, True, sentence_mask)
    a = 0.70711
    assert advantages.tolist() == [pytest.approx(v, abs=1e-4) for v in ([a, -a, a, 0], [a, -a, -a, -a])]
    assert flipped.tolist() == [[False, True, False, False], [True, False, False, False]]


def test_strict_unchecked_by_hand():
    # row 0: no checked sentence, positive advantage -> 0; row 1: no checked sentence, negative -> unchanged;
    # row 2: one checked sentence -> unchanged (the flip has acted on it already)
    advantages = torch.tensor([[0.7, 0.7, 0.0], [-0.7, -0.7, -0.7], [0.5, 0.5, 0.5]])
    mask = torch.tensor([[0.0, 0, 0], [0.0, 0, 0], [1.0, 0, 0]])
    expected = torch.tensor([[0.0, 0, 0], [-0.7, -0.7, -0.7], [0.5, 0.5, 0.5]])
    assert torch.equal(algos.strict_unchecked(advantages, mask), expected)
    with pytest.raises(ValueError, match="shapes differ"):
        algos.strict_unchecked(torch.zeros(2, 3), torch.zeros(2, 4))


def test_token_advantages_strict():
    # rewards 1, 0 in a group of two: A = +-1/sqrt(2). Response 0 (right, nothing checkable) loses its positive
    # advantage under strict FSPO only; response 1 (wrong) is flipped on its supported sentence as in plain FSPO.
    rewards = torch.tensor([1.0, 0.0])
    completion_mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    sentence_mask = torch.tensor([[0.0, 0, 0, 0], [1.0, -1, 0, 0]])
    a = 0.70711
    plain, _ = algos.token_advantages(rewards, completion_mask, 2, True, sentence_mask)
    strict, flipped = algos.token_advantages(rewards, completion_mask, 2, True, sentence_mask, strict=True)
    assert plain.tolist()[0] == [pytest.approx(v, abs=1e-4) for v in (a, a, a, 0)]
    assert strict.tolist()[0] == [0.0, 0.0, 0.0, 0.0]
    assert strict.tolist()[1] == [pytest.approx(v, abs=1e-4) for v in (a, -a, -a, -a)]
    assert flipped.tolist() == [[False] * 4, [True, False, False, False]]
    with pytest.raises(ValueError, match="needs a sentence mask"):
        algos.token_advantages(rewards, completion_mask, 2, True, None, strict=True)


def test_step_score():
    assert algos.step_score([1, -1, 1, 0]) == pytest.approx(1 / 3)
    assert algos.step_score([0, 0]) == 0.0
    assert algos.step_score([]) == 0.0


def test_k3_kl_hand_value():
    # ref/pi = 0.5: k3 = 0.5 - ln(0.5) - 1 = 0.19315
    logp, ref = torch.tensor([math.log(0.5)]), torch.tensor([math.log(0.25)])
    assert algos.kl_k3(logp, ref).item() == pytest.approx(0.5 + math.log(2) - 1, abs=1e-6)
    assert algos.kl_k3(ref, ref).item() == 0.0


def test_k3_kl_is_clamped():
    assert algos.kl_k3(torch.tensor([0.0]), torch.tensor([50.0])).item() == pytest.approx(10.0)


@pytest.mark.parametrize(
    "ratio, advantage, loss, was_clipped",
    [(1.5, 1.0, -1.2, True), (1.5, -1.0, 1.5, False), (0.5, 1.0, -0.5, False), (0.5, -1.0, 0.8, True),
     (1.1, 1.0, -1.1, False)],
)
def test_clipped_surrogate(ratio, advantage, loss, was_clipped):
    old = torch.tensor([math.log(0.4)])
    logp = old + math.log(ratio)
    value, clipped = algos.clipped_surrogate(logp, old, torch.tensor([advantage]), 0.2, 0.2)
    assert value.item() == pytest.approx(loss, abs=1e-5)
    assert bool(clipped.item()) is was_clipped


def test_logprob_gap_by_hand():
    # sampled tokens (mask 1): |-1.0 - -1.5| = 0.5, |-2.0 - -2.0| = 0, |-0.5 - -0.2| = 0.3 -> mean 0.8 / 3, max 0.5;
    # the padding column's difference of 9 is left out
    sampler = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, 0.0, 0.0]])
    trainer = torch.tensor([[-1.5, -2.0, 9.0], [-0.2, -3.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    gap = algos.logprob_gap(sampler, trainer, mask)
    assert gap["sampler_logprob_gap_mean"] == pytest.approx(0.8 / 3)
    assert gap["sampler_logprob_gap_max"] == pytest.approx(0.5)
    empty = algos.logprob_gap(sampler, trainer, torch.zeros_like(mask))
    assert all(math.isnan(value) for value in empty.values()) and set(empty) == set(gap)


def test_clip_higher_uses_separate_upper_bound():
    old = torch.tensor([0.0])
    value, _ = algos.clipped_surrogate(old + math.log(1.5), old, torch.tensor([1.0]), 0.2, 0.28)
    assert value.item() == pytest.approx(-1.28, abs=1e-5)


def test_aggregations_hand_values():
    token_loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 9.0, 9.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    assert algos.aggregate_loss(token_loss, mask, "token-mean").item() == pytest.approx(2.5)
    assert algos.aggregate_loss(token_loss, mask, "seq-mean-token-mean").item() == pytest.approx(3.0)
    assert algos.aggregate_loss(token_loss, mask, "dr_grpo", max_completion_length=4).item() == pytest.approx(1.25)


@pytest.mark.parametrize("mode", algos.LOSS_AGGREGATIONS)
def test_micro_batches_sum_to_full_batch_loss(mode):
    torch.manual_seed(0)
    token_loss = torch.randn(6, 5)
    mask = (torch.rand(6, 5) > 0.3).long()
    mask[:, 0] = 1
    full = algos.aggregate_loss(token_loss, mask, mode, max_completion_length=5)
    parts = sum(
        algos.aggregate_loss(token_loss[i : i + 2], mask[i : i + 2], mode, 5, mask.sum().item(), 6)
        for i in range(0, 6, 2)
    )
    assert parts.item() == pytest.approx(full.item(), abs=1e-6)


def test_unknown_aggregation():
    with pytest.raises(ValueError, match="token-mean"):
        algos.aggregate_loss(torch.zeros(1, 1), torch.ones(1, 1), "mean")


def test_selective_log_softmax_matches_log_softmax():
    torch.manual_seed(0)
    logits = torch.randn(5, 7, 11)
    tokens = torch.randint(0, 11, (5, 7))
    expected = torch.log_softmax(logits, -1).gather(-1, tokens[..., None]).squeeze(-1)
    assert torch.allclose(algos.selective_log_softmax(logits, tokens, chunk_size=2), expected, atol=1e-6)


def test_entropy_from_logits():
    uniform = torch.zeros(1, 2, 4)
    assert algos.entropy_from_logits(uniform)[0].tolist() == pytest.approx([math.log(4)] * 2)
    peaked = torch.tensor([[[100.0, 0.0, 0.0, 0.0]]])
    assert algos.entropy_from_logits(peaked)[0, 0].item() == pytest.approx(0.0, abs=1e-6)
    two_way = torch.tensor([[[math.log(3.0), 0.0]]])  # p = (3/4, 1/4)
    expected = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    assert algos.entropy_from_logits(two_way)[0, 0].item() == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("chunk_size", [1, 3])
def test_entropy_from_logits_matches_the_definition(chunk_size):
    torch.manual_seed(0)
    logits = torch.randn(5, 7, 11, dtype=torch.float64) * 4
    logp = torch.log_softmax(logits, -1)
    expected = -(logp.exp() * logp).sum(-1)
    assert torch.allclose(algos.entropy_from_logits(logits, chunk_size=chunk_size).double(), expected, atol=1e-5)
