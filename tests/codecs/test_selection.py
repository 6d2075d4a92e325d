"""Selection kernels: exact top-k with its tie rule, and sampled top-k returning the same set."""

import pytest
import torch

from thinwire.codecs import selection
from thinwire.codecs.selection import at_least, count_for, exact_top_k, sampled_top_k_indices


def reference_top_k(y: torch.Tensor, k: int) -> torch.Tensor:
    """The k largest magnitudes, ties to the lower index, by a plain stable sort."""
    order = sorted(range(y.numel()), key=lambda i: (-abs(float(y[i])), i))
    return torch.tensor(sorted(order[:k]), dtype=torch.int64)


def distribution(kind: str, n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if kind == "gaussian":
        return torch.randn(n, generator=g)
    if kind == "heavy_tailed":  # Cauchy: a few huge coordinates dominate
        return torch.tan(torch.pi * (torch.rand(n, generator=g) - 0.5))
    if kind == "many_ties":  # seven distinct magnitudes
        return torch.randint(-3, 4, (n,), generator=g).float()
    if kind == "sparse":  # mostly exact zeros
        return torch.randn(n, generator=g) * (torch.rand(n, generator=g) < 0.02)
    if kind == "sorted":  # defeats a strided sample: the largest values are contiguous
        return torch.linspace(0.0, 1.0, n)
    raise ValueError(kind)


KINDS = ["gaussian", "heavy_tailed", "many_ties", "sparse", "sorted"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("n", "k"), [(1, 1), (7, 3), (100, 1), (1000, 10), (1000, 999)])
def test_exact_top_k_matches_the_reference_including_ties(kind, n, k):
    y = distribution(kind, n, seed=n + k)
    assert torch.equal(exact_top_k(y, k), reference_top_k(y, k))


def test_ties_go_to_the_lower_index():
    y = torch.tensor([1.0, -2.0, 2.0, 1.0, -1.0, 2.0])
    assert exact_top_k(y, 2).tolist() == [1, 2]
    assert exact_top_k(y, 4).tolist() == [0, 1, 2, 5]
    assert sampled_top_k_indices(y, 4, 0.5).tolist() == [0, 1, 2, 5]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("density", [0.1, 0.01, 0.001])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sampled_top_k_returns_exactly_the_exact_set(kind, density, seed):
    n = 100_003
    y = distribution(kind, n, seed)
    k = count_for(density, n)
    assert torch.equal(sampled_top_k_indices(y, k, 0.01), exact_top_k(y, k))


def test_sampled_top_k_falls_back_when_the_estimate_undershoots(monkeypatch):
    # With n = 1M, k = 5000 and a 1% sample the sample is every 100th coordinate. Make
    # exactly those large: the sampled threshold then admits only ~80 candidates, fewer
    # than k, and the exact kernel must take over.
    n, k = 1_000_000, 5_000
    g = torch.Generator().manual_seed(5)
    y = torch.rand(n, generator=g) * 0.1
    y[::100] = 1.0 + torch.rand(n // 100, generator=g)
    calls = []
    original = selection.exact_top_k
    monkeypatch.setattr(selection, "exact_top_k", lambda v, k: calls.append(k) or original(v, k))
    got = sampled_top_k_indices(y, k, sample=0.01)
    assert calls == [k]
    assert torch.equal(got, original(y, k))
    assert got.numel() == k and bool((y[got] >= 1.0).all())


def test_sampled_top_k_avoids_the_exact_kernel_on_ordinary_data(monkeypatch):
    monkeypatch.setattr(selection, "exact_top_k", lambda v, k: pytest.fail("fell back"))
    y = distribution("gaussian", 500_000, seed=3)
    assert sampled_top_k_indices(y, 5_000, 0.01).numel() == 5_000


def test_at_least_is_the_sorted_threshold_set_across_cpu_chunks(monkeypatch):
    monkeypatch.setattr(selection, "_CPU_CHUNK", 1000)
    y = distribution("gaussian", 10_500, seed=4)
    expected = (y.abs() >= 1.5).nonzero().squeeze(1)
    assert torch.equal(at_least(y, 1.5), expected)
    assert torch.equal(at_least(y, torch.tensor(1.5)), expected)


@pytest.mark.parametrize(
    ("density", "n", "k"),
    [(0.07, 100, 7), (0.01, 25_000_000, 250_000), (0.001, 10, 1), (1.0, 5, 5), (0.5, 3, 2)],
)
def test_count_for_is_ceil_without_binary_noise(density, n, k):
    assert count_for(density, n) == k


@pytest.mark.parametrize("density", [0.0, -0.1, 1.5])
def test_count_for_rejects_densities_outside_the_unit_interval(density):
    with pytest.raises(ValueError, match="density must be in"):
        count_for(density, 10)


def test_kernels_reject_k_out_of_range():
    with pytest.raises(ValueError, match="1 <= k <= n"):
        exact_top_k(torch.ones(3), 4)
    with pytest.raises(ValueError, match="1 <= k <= n"):
        sampled_top_k_indices(torch.ones(3), 0, 0.01)
    with pytest.raises(ValueError, match="sample must be"):
        sampled_top_k_indices(torch.ones(3), 1, 0.0)
