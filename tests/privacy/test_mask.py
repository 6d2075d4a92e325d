"""Random sparsification's public mask: its schedule and its reproducibility from the seed."""

import pytest
import torch

from thinwire.codecs import seeded_indices
from thinwire.config import RandomSparsification
from thinwire.learning import flatten
from thinwire.privacy import drop_rate, mask_tensors, round_mask
from thinwire.wire.payload import SeedScheme


def test_gradual_cooling_grows_the_drop_rate_linearly_to_its_final_value():
    linear = RandomSparsification(final_rate=0.9)
    assert [drop_rate(linear, k, 10) for k in (1, 4, 10)] == pytest.approx([0.0, 0.3, 0.9])
    constant = RandomSparsification(final_rate=0.5, schedule="constant")
    assert [drop_rate(constant, k, 10) for k in (1, 10)] == [0.5, 0.5]
    assert drop_rate(linear, 1, 1) == 0.9  # a one-round run uses the final rate
    with pytest.raises(ValueError, match="outside"):
        drop_rate(linear, 11, 10)


def test_the_mask_is_a_seeded_support_keeping_n_minus_floor_rn():
    support = round_mask(seed=3, round=5, n=1000, rate=0.9)
    assert support.scheme == SeedScheme.RANDOM_K and support.count == 100
    assert round_mask(3, 5, 10, 0.07) is None  # floor(0.7) = 0: nothing dropped
    assert round_mask(3, 5, 100, 0.07).count == 93  # 0.07 * 100 is 7, not 7.000000000000001
    with pytest.raises(ValueError, match="drop rate"):
        round_mask(3, 5, 100, 1.0)


def test_every_client_regenerates_the_same_mask_from_the_seed():
    a = round_mask(seed=42, round=7, n=5000, rate=0.6)
    b = round_mask(seed=42, round=7, n=5000, rate=0.6)
    assert a == b
    assert torch.equal(seeded_indices(a, 5000), seeded_indices(b, 5000))
    # a new round (or another experiment seed) draws a new mask
    assert round_mask(42, 8, 5000, 0.6).seed != a.seed
    assert round_mask(43, 7, 5000, 0.6).seed != a.seed


def test_over_rounds_every_coordinate_is_kept_at_rate_one_minus_r():
    n, rounds = 400, 300
    kept = torch.zeros(n)
    for k in range(1, rounds + 1):
        kept[seeded_indices(round_mask(0, k, n, 0.75), n)] += 1
    frequency = kept / rounds
    assert frequency.mean().item() == pytest.approx(0.25)
    assert frequency.min().item() > 0.1 and frequency.max().item() < 0.4


def test_mask_tensors_lay_the_mask_out_in_flattening_order():
    like = {"a.weight": torch.zeros(3, 4), "a.bias": torch.zeros(3), "b": torch.zeros(5)}
    support = round_mask(1, 2, 20, 0.5)
    masks = mask_tensors(support, like)
    assert [m.shape for m in masks.values()] == [
        torch.Size([3, 4]),
        torch.Size([3]),
        torch.Size([5]),
    ]
    assert all(m.dtype == torch.bool for m in masks.values())
    assert flatten(masks).nonzero().squeeze(1).tolist() == seeded_indices(support, 20).tolist()
    assert mask_tensors(None, like) is None
