"""Seeded selectors: the seed alone tells the receiver which coordinates arrived."""

import math

import pytest
import torch

from thinwire.codecs import chain, random_block, random_k, seeded_indices
from thinwire.wire.payload import SeededSupport, SeedScheme

FACTORIES = {
    "random_k": lambda density, seed: random_k(density, seed=seed),
    "random_block": lambda density, seed: random_block(density, seed=seed),
}


def gaussian(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("kind", FACTORIES)
def test_receiver_regenerates_the_coordinates_from_the_seed_alone(kind):
    x = gaussian(1000)
    sender = chain(FACTORIES[kind](0.03, 42))
    payload, _ = sender.encode(x, sender.init(x))
    support = payload.support
    assert isinstance(support, SeededSupport) and support.count == 30
    assert not hasattr(support, "indices")
    # The receiver is a different codec object: only the payload travels.
    receiver = chain(FACTORIES[kind](0.5, 0))
    decoded = receiver.decode(payload, x.shape)
    indices = seeded_indices(SeededSupport(support.seed, support.scheme, 30), 1000)
    assert indices.unique().numel() == 30
    assert torch.equal(decoded[indices], x[indices])
    assert int(decoded.count_nonzero()) == 30


@pytest.mark.parametrize("kind", FACTORIES)
def test_clients_with_the_same_seed_pick_the_same_coordinates_each_step(kind):
    a, b = gaussian(500, 1), gaussian(500, 2)
    codec = chain(FACTORIES[kind](0.1, 7))
    state_a, state_b = codec.init(a), codec.init(b)
    seeds = []
    for _ in range(3):
        pa, state_a = codec.encode(a, state_a)
        pb, state_b = codec.encode(b, state_b)
        assert pa.support == pb.support
        seeds.append(pa.support.seed)
    assert len(set(seeds)) == 3  # a fresh draw every step


@pytest.mark.parametrize("kind", FACTORIES)
def test_each_coordinate_is_kept_with_probability_k_over_n(kind):
    n, k, steps = 50, 5, 1000
    x = torch.ones(n)
    codec = chain(FACTORIES[kind](k / n, 3))
    state = codec.init(x)
    hits = torch.zeros(n)
    for _ in range(steps):
        payload, state = codec.encode(x, state)
        hits += codec.decode(payload, x.shape)
    p = k / n
    sigma = math.sqrt(steps * p * (1 - p))
    assert float((hits - steps * p).abs().max()) < 5 * sigma


@pytest.mark.parametrize("kind", [pytest.param("random_k", marks=pytest.mark.slow), "random_block"])
def test_expected_error_is_one_minus_k_over_n(kind):
    x = gaussian(40, 3)
    codec = chain(FACTORIES[kind](0.25, 9))
    state = codec.init(x)
    errors = []
    for _ in range(1000):
        payload, state = codec.encode(x, state)
        errors.append(float((x - codec.decode(payload, x.shape)).square().sum()))
    errors_t = torch.tensor(errors)
    expected = (1 - codec.info.delta(40)) * float(x.square().sum())
    assert abs(float(errors_t.mean()) - expected) < 4 * float(errors_t.std()) / math.sqrt(1000)


def test_random_block_is_one_contiguous_run():
    x = torch.arange(1.0, 101.0)
    codec = chain(random_block(0.2, seed=5))
    state = codec.init(x)
    for _ in range(20):
        payload, state = codec.encode(x, state)
        kept = codec.decode(payload, x.shape).nonzero().squeeze(1)
        gaps = (kept.roll(-1) - kept) % 100
        assert int((gaps != 1).sum()) == 1  # one jump back to the run's start
        assert torch.equal(payload.values.data, x[kept])


@pytest.mark.slow
def test_unbiased_random_k_is_unbiased_with_its_stated_variance():
    n, draws = 20, 1500
    x = gaussian(n, 4)
    codec = chain(random_k(0.25, seed=1, unbiased=True))
    assert codec.info.unbiased and codec.info.omega(n) == pytest.approx(3.0)
    state = codec.init(x)
    total = torch.zeros(n)
    errors = []
    for _ in range(draws):
        payload, state = codec.encode(x, state)
        decoded = codec.decode(payload, x.shape)
        total += decoded
        errors.append(float((decoded - x).square().sum()))
    mean = total / draws
    # Coordinate i is n/k x_i w.p. k/n, else 0: variance x_i^2 (n/k - 1).
    sd = x.abs() * math.sqrt(3.0 / draws)
    assert bool(((mean - x).abs() <= 5 * sd + 1e-6).all())
    assert sum(errors) / draws == pytest.approx(3.0 * float(x.square().sum()), rel=0.1)


def test_biased_random_k_info():
    info = random_k(0.01, seed=0).info
    assert not info.unbiased and info.delta(1000) == pytest.approx(0.01)
    assert random_block(0.01, seed=0).info.delta(1000) == pytest.approx(0.01)


def test_scheme_and_values_of_each_selector():
    x = gaussian(64)
    for factory, scheme in (
        (random_k, SeedScheme.RANDOM_K),
        (random_block, SeedScheme.RANDOM_BLOCK),
    ):
        codec = chain(factory(0.25, seed=3))
        payload, _ = codec.encode(x, codec.init(x))
        assert payload.support.scheme == scheme
        indices = seeded_indices(payload.support, 64)
        assert torch.equal(payload.values.data, x[indices])


def test_an_unbiased_block_is_unbiased_with_the_variance_it_claims():
    # Independent blocks (Mishchenko et al. 2019): E[C(x)] = x and
    # E||C(x) - x||^2 = (n/k - 1) ||x||^2, over the draws of the block's start.
    x = gaussian(1000, 3) * torch.linspace(0.1, 3.0, 1000)
    codec = chain(random_block(0.1, seed=11, unbiased=True))
    state = codec.init(x)
    draws, total, squared_error = 2000, torch.zeros(1000), 0.0
    for _ in range(draws):
        payload, state = codec.encode(x, state)
        decoded = codec.decode(payload, x.shape)
        total += decoded
        squared_error += float((decoded - x).square().sum())
    energy = float(x.square().sum())
    omega = codec.info.omega(1000)
    assert omega == pytest.approx(9.0)
    # The mean of T draws errs by sqrt(omega / T) ~ 0.067 of ||x|| in norm.
    assert float((total / draws - x).norm() / x.norm()) < 0.12
    assert squared_error / draws == pytest.approx(omega * energy, rel=0.05)


def test_each_client_sends_its_own_block_and_the_server_regenerates_every_one():
    # Clients mix their index into their codec seed (clients/client.py), so their blocks
    # are independent; the server's codec, built with another seed, decodes each from
    # the seed its payload carries.
    from thinwire.codecs import build
    from thinwire.config import CodecConfig
    from thinwire.seeding import uplink_codec_seed

    config = CodecConfig.model_validate(
        {"select": {"kind": "random_block", "density": 0.25, "unbiased": True}}
    )
    x = gaussian(4000, 4)
    server = build(config, seed=0)
    starts = set()
    for client in range(4):
        codec = build(config, seed=uplink_codec_seed(0, client))
        payload, _ = codec.encode(x, codec.init(x))
        decoded = server.decode(payload, x.shape)
        kept = decoded.nonzero().squeeze(1)
        assert kept.numel() == 1000
        assert torch.allclose(decoded[kept], 4.0 * x[kept])
        starts.add(payload.support.seed)
    assert len(starts) == 4
