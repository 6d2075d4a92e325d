"""Magnitude selectors: what they keep, their contraction claims, their state."""

import math

import pytest
import torch

from thinwire.codecs import adaptive_top_k, chain, rtop_k, sampled_top_k, threshold, top_k
from thinwire.wire.payload import DenseSupport, SparseSupport


def gaussian(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, generator=torch.Generator().manual_seed(seed))


def encode_once(codec, x):
    return codec.encode(x, codec.init(x))[0]


@pytest.mark.parametrize("factory", [top_k, sampled_top_k])
def test_top_k_keeps_exactly_the_k_largest_magnitudes(factory):
    x = gaussian(1000)
    codec = chain(factory(0.05))
    payload, _ = codec.encode(x, codec.init(x))
    kept = payload.support.indices
    assert kept.numel() == 50
    assert bool((kept[1:] > kept[:-1]).all())
    dropped = torch.ones(1000, dtype=torch.bool)
    dropped[kept] = False
    assert float(x[kept].abs().min()) >= float(x[dropped].abs().max())
    assert torch.equal(payload.values.data, x[kept])


@pytest.mark.parametrize("factory", [top_k, sampled_top_k])
def test_top_k_meets_its_contraction(factory):
    selector = factory(0.1)
    codec = chain(selector)
    for seed in range(5):
        x = gaussian(517, seed) * torch.linspace(0.1, 3.0, 517)
        payload, _ = codec.encode(x, codec.init(x))
        error = float((x - codec.decode(payload, x.shape)).square().sum())
        assert error <= (1 - selector.info.delta(517)) * float(x.square().sum()) + 1e-6
    assert selector.info.delta(1000) == pytest.approx(0.1)
    assert not selector.info.unbiased


def test_top_k_sends_every_coordinate_without_indices_at_full_density():
    x = gaussian(10)
    codec = chain(top_k(1.0))
    payload, _ = codec.encode(x, codec.init(x))
    assert isinstance(payload.support, DenseSupport)
    assert torch.equal(codec.decode(payload, x.shape), x)


def test_top_k_keeps_at_least_one_coordinate():
    x = torch.tensor([0.5, -3.0, 1.0])
    codec = chain(top_k(0.01))
    payload, _ = codec.encode(x, codec.init(x))
    assert payload.support.indices.tolist() == [1]


def test_selectors_reject_bad_arguments():
    with pytest.raises(ValueError, match="density"):
        top_k(0.0)
    with pytest.raises(ValueError, match="sample"):
        sampled_top_k(0.1, sample=2.0)
    with pytest.raises(ValueError, match="lam"):
        threshold(0.0)
    with pytest.raises(ValueError, match="ratio"):
        rtop_k(0.1, 0.5, seed=0)
    with pytest.raises(ValueError, match="min_density <= density <= max_density"):
        adaptive_top_k(0.5, max_density=0.1)
    with pytest.raises(ValueError, match="decay"):
        adaptive_top_k(0.01, decay=1.0)


def test_threshold_keeps_every_coordinate_at_or_above_lambda():
    x = torch.tensor([0.5, -2.0, 1.0, 0.999, -1.0])
    codec = chain(threshold(1.0))
    payload, _ = codec.encode(x, codec.init(x))
    assert payload.support.indices.tolist() == [1, 2, 4]
    error = x - codec.decode(payload, x.shape)
    assert float(error.square().sum()) <= x.numel() * 1.0**2  # absolute bound n * lam^2


def test_threshold_may_send_nothing():
    x = torch.full((5,), 0.1)
    codec = chain(threshold(1.0))
    payload, _ = codec.encode(x, codec.init(x))
    assert isinstance(payload.support, SparseSupport) and payload.count == 0
    assert torch.equal(codec.decode(payload, x.shape), torch.zeros(5))


def test_rtop_k_draws_k_of_the_top_r():
    x = gaussian(1000, seed=1)
    codec = chain(rtop_k(0.01, ratio=5.0, seed=3))
    top_r = set(encode_once(chain(top_k(0.05)), x).support.indices.tolist())
    state = codec.init(x)
    seen = set()
    for _ in range(20):
        payload, state = codec.encode(x, state)
        kept = payload.support.indices.tolist()
        assert len(kept) == 10 and set(kept) <= top_r
        seen.update(kept)
    assert len(seen) > 30  # the draws move around inside the top 50
    assert state.selector.step == 20


def test_rtop_k_error_matches_its_expectation():
    # E||x - C(x)||^2 = ||x||^2 - (k/r) ||Top_r x||^2, estimated over 400 draws.
    x = gaussian(200, seed=2)
    k, r = 10, 40
    codec = chain(rtop_k(k / 200, ratio=r / k, seed=0))
    top_r_energy = float(encode_once(chain(top_k(r / 200)), x).values.data.square().sum())
    expected = float(x.square().sum()) - k / r * top_r_energy
    state = codec.init(x)
    errors = []
    for _ in range(400):
        payload, state = codec.encode(x, state)
        errors.append(float((x - codec.decode(payload, x.shape)).square().sum()))
    errors_t = torch.tensor(errors)
    assert abs(float(errors_t.mean()) - expected) < 4 * float(errors_t.std()) / math.sqrt(400)
    delta = codec.info.delta(200)
    assert expected <= (1 - delta) * float(x.square().sum())


def test_adaptive_top_k_follows_the_energy_rule():
    # k = 10; A_0 = E_1; k_t = clip(round(k * E_t / A_{t-1}), 5, 50).
    x = gaussian(100, seed=4)
    codec = chain(adaptive_top_k(0.1, min_density=0.05, max_density=0.5, decay=0.5))
    state = codec.init(x)
    counts = []
    energy = float(x.square().sum())
    average = energy
    expected = []
    for scale in (1.0, 2.0, 0.1, 1.0):
        payload, state = codec.encode(scale * x, state)
        counts.append(payload.count)
        e = scale**2 * energy
        expected.append(min(max(round(10 * e / average), 5), 50))
        average = 0.5 * average + 0.5 * e
        assert state.selector.average == pytest.approx(average)
    assert counts == expected == [10, 40, 5, 8]
    assert state.selector.steps == 4


def test_adaptive_top_k_selects_the_top_k_t():
    x = gaussian(300, seed=5)
    codec = chain(adaptive_top_k(0.1, min_density=0.01, max_density=0.9))
    payload, _ = codec.encode(x, codec.init(x))
    reference = encode_once(chain(top_k(0.1)), x)
    assert torch.equal(payload.support.indices, reference.support.indices)
    assert codec.info.delta(300) == pytest.approx(3 / 300)


def test_adaptive_top_k_keeps_k_for_a_zero_input():
    x = torch.zeros(100)
    codec = chain(adaptive_top_k(0.1, min_density=0.05, max_density=0.5))
    state = codec.init(x)
    for _ in range(3):
        payload, state = codec.encode(x, state)
        assert payload.count == 10


@pytest.mark.parametrize(
    "make",
    [
        lambda g: torch.randn(1_000_003, generator=g),  # i.i.d.: the sampled path decides
        lambda g: torch.randint(-3, 4, (1_000_000,), generator=g).float(),  # massive ties
        lambda g: torch.arange(1_000_000.0).remainder(997),  # defeats a strided sample
        lambda g: torch.zeros(500_000),  # every coordinate ties
    ],
    ids=["gaussian", "ties", "periodic", "zeros"],
)
def test_top_k_selects_exactly_what_torch_topk_and_the_tie_rule_select(make) -> None:
    x = make(torch.Generator().manual_seed(3))
    for density in (0.001, 0.01, 0.1):
        k = math.ceil(density * x.numel())
        payload, _ = chain(top_k(density)).encode(x, chain(top_k(density)).init(x))
        got = payload.support.indices
        kth = torch.topk(x.abs(), k).values.min()
        above = torch.nonzero(x.abs() > kth).flatten()
        tied = torch.nonzero(x.abs() == kth).flatten()[: k - above.numel()]
        want = torch.sort(torch.cat([above, tied])).values  # lower index wins a tie
        assert torch.equal(got, want), density
        assert torch.equal(payload.values.data, x[want])  # values in index order
