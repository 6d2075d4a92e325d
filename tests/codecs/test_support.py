"""Seeded coordinates and scattering: what both ends of a seeded payload must agree on."""

import math

import pytest
import torch

from thinwire.codecs.support import (
    MAX_SEEDED_DOMAIN,
    block_start,
    permutation,
    scatter,
    seeded_indices,
)
from thinwire.seeding import mix
from thinwire.wire.payload import DenseSupport, SeededSupport, SeedScheme, SparseSupport


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 17, 100, 1023, 1024, 1025, 65_537])
def test_permutation_is_a_bijection_of_the_domain(n):
    images = permutation(seed=11, n=n, positions=torch.arange(n))
    assert torch.equal(torch.sort(images).values, torch.arange(n))


def test_permutation_depends_on_the_seed_and_is_reproducible():
    positions = torch.arange(1000)
    a = permutation(1, 10_000, positions)
    assert torch.equal(a, permutation(1, 10_000, positions))
    assert not torch.equal(a, permutation(2, 10_000, positions))


def test_permutation_images_look_uniform():
    # The first 2000 images of a permutation of 2**20 + 1 (a domain that needs cycle
    # walking): each of 16 equal bins should hold ~125; a chi-square over 15 degrees of
    # freedom beyond 50 has probability < 1e-5.
    n, k = 2**20 + 1, 2000
    counts = torch.zeros(16)
    for seed in range(8):
        images = permutation(seed, n, torch.arange(k))
        counts += torch.bincount(images * 16 // n, minlength=16)
    expected = 8 * k / 16
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 50


def test_permutation_rejects_domains_out_of_range():
    with pytest.raises(ValueError, match="domain"):
        permutation(0, 0, torch.arange(0))
    with pytest.raises(ValueError, match="domain"):
        permutation(0, MAX_SEEDED_DOMAIN + 1, torch.arange(1))


def test_largest_domain_stays_in_int64_without_overflow():
    images = permutation(3, MAX_SEEDED_DOMAIN, torch.arange(1000))
    assert bool((images >= 0).all()) and bool((images < MAX_SEEDED_DOMAIN).all())
    assert images.unique().numel() == 1000


def test_random_k_indices_are_sorted_distinct_and_in_range():
    support = SeededSupport(mix(5, 0), SeedScheme.RANDOM_K, 300)
    indices = seeded_indices(support, 1000)
    assert indices.numel() == 300
    assert bool((indices[1:] > indices[:-1]).all())
    assert int(indices[0]) >= 0 and int(indices[-1]) < 1000


def test_random_block_indices_are_one_contiguous_run_modulo_n():
    n, k = 50, 20
    for seed in range(20):
        support = SeededSupport(seed, SeedScheme.RANDOM_BLOCK, k)
        start = block_start(seed, n)
        expected = sorted((start + i) % n for i in range(k))
        assert seeded_indices(support, n).tolist() == expected


def test_seeded_indices_rejects_counts_beyond_the_domain():
    with pytest.raises(ValueError, match="coordinates of a domain"):
        seeded_indices(SeededSupport(1, SeedScheme.RANDOM_K, 11), 10)


@pytest.mark.parametrize("scheme", [SeedScheme.RANDOM_K, SeedScheme.RANDOM_BLOCK])
def test_scatter_of_a_seeded_support_places_values_at_its_indices(scheme):
    n, k = 97, 40
    for seed in range(10):  # some blocks wrap around, some do not
        support = SeededSupport(seed, scheme, k)
        values = torch.arange(1.0, k + 1.0)
        expected = torch.zeros(n)
        expected[seeded_indices(support, n)] = values
        assert torch.equal(scatter(support, values, n), expected)


def test_scatter_dense_and_sparse():
    values = torch.tensor([1.0, 2.0])
    assert torch.equal(scatter(DenseSupport(), values, 2), values)
    sparse = scatter(SparseSupport(torch.tensor([1, 3])), values, 4)
    assert sparse.tolist() == [0.0, 1.0, 0.0, 2.0]
    with pytest.raises(ValueError, match="dense support needs"):
        scatter(DenseSupport(), values, 3)
    with pytest.raises(ValueError, match="random block"):
        scatter(SeededSupport(0, SeedScheme.RANDOM_BLOCK, 3), values, 4)


def test_block_start_is_uniform_over_the_domain():
    n = 10
    counts = [0] * n
    for seed in range(5000):
        counts[block_start(mix(seed), n)] += 1
    assert max(abs(c - 500) for c in counts) < 5 * math.sqrt(500)
