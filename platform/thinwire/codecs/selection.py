"""Magnitude selection kernels: exact top-k, its sampled-threshold twin, hard thresholds.

These are the tensor-level algorithms behind the selectors in `thinwire.codecs.sparsify`;
they take a flat vector and return sorted int64 coordinates on the vector's device.

Tie rule (every top-k here): among coordinates of equal magnitude the lower index wins.
The k-th largest magnitude t* is found first; every coordinate with |y_i| > t* is kept, and
the remaining places go to the coordinates with |y_i| == t* in increasing index order. The
result is therefore a function of the values alone, identical on every device and for the
exact and sampled paths.

Inputs must be finite: NaN compares false with every threshold, so a NaN coordinate is
never selected by the threshold passes but may be by `torch.topk`.

Host synchronisation: a selected set's size is data-dependent, so each call synchronises
with the device once per `nonzero` (one for exact top-k and thresholds, one or two for
sampled top-k). Thresholds themselves stay on the device as 0-d tensors.
"""

from __future__ import annotations

import math

import torch

__all__ = [
    "at_least",
    "check_density",
    "count_for",
    "exact_top_k",
    "sampled_top_k_indices",
]

_CPU_CHUNK = 1 << 20
"""Elements per pass on CPU: large temporaries cost a page fault per 4 KiB on first touch,
which on CPU takes longer than the arithmetic; 4 MiB chunks stay in cache and are reused."""

_SAMPLE_SIGMAS = 4.0
"""Safety margin of the sampled threshold, in standard deviations of the candidate count:
the estimate undershoots (forcing the exact fallback) with probability ~3e-5 on i.i.d. data."""

_MIN_EXPECTED_HITS = 32
"""The sample is enlarged until about this many sampled points are expected above the
threshold, so the order statistic it uses is not hopelessly noisy at tiny densities."""


def check_density(value: float, name: str = "density") -> None:
    """Raises `ValueError` naming `name` unless value is in (0, 1]."""
    if not 0.0 < value <= 1.0:
        raise ValueError(f"{name} must be in (0, 1], got {value}")


def count_for(density: float, n: int) -> int:
    """The number of coordinates k = ceil(density * n) kept, at least 1 and at most n.

    The product is rounded to 6 decimals first so that binary noise (0.07 * 100 =
    7.000000000000001) does not add a coordinate.
    """
    check_density(density)
    return min(n, max(1, math.ceil(round(density * n, 6))))


def at_least(y: torch.Tensor, threshold: torch.Tensor | float) -> torch.Tensor:
    """Sorted coordinates i with |y_i| >= threshold (int64, on y's device).

    On CPU the pass runs over cache-sized chunks (no full-size temporaries); on other
    devices it is one fused pass.
    """
    if y.device.type != "cpu" or y.numel() <= _CPU_CHUNK:
        return (y.abs() >= threshold).nonzero().squeeze(1)
    parts = []
    for start in range(0, y.numel(), _CPU_CHUNK):
        chunk = y[start : start + _CPU_CHUNK]
        parts.append((chunk.abs() >= threshold).nonzero().squeeze(1).add_(start))
    return torch.cat(parts)


def _kth_largest(values: torch.Tensor, k: int) -> torch.Tensor:
    # 0-d tensor holding the k-th largest entry. A partial top-k from the nearer end does
    # the least work: the few largest for a sample's threshold, the few smallest for the
    # k-th of ~1.1k candidates.
    size = values.numel()
    if k <= size - k + 1:
        return torch.topk(values, k, sorted=False).values.min()
    return torch.topk(values, size - k + 1, largest=False, sorted=False).values.max()


def _resolve(candidates: torch.Tensor, magnitudes: torch.Tensor, k: int) -> torch.Tensor:
    # `candidates` (sorted) contains every coordinate whose magnitude is >= the k-th
    # largest; keep those above it and the lowest-indexed ones equal to it.
    kth = _kth_largest(magnitudes, k)
    above = magnitudes > kth
    tied = magnitudes == kth
    places = k - above.sum()
    keep = above | (tied & (tied.cumsum(0) <= places))
    return candidates[keep]


def exact_top_k(y: torch.Tensor, k: int) -> torch.Tensor:
    """The k coordinates of largest |y_i| (ties: lower index), sorted, via `torch.topk`.

    Args:
        y: flat vector.
        k: how many to keep, in [1, y.numel()].

    Returns:
        int64 (k,) strictly increasing coordinates, on y's device.
    """
    n = y.numel()
    if not 1 <= k <= n:
        raise ValueError(f"top-k needs 1 <= k <= n, got k={k}, n={n}")
    if k == n:
        return torch.arange(n, device=y.device)
    kth = torch.topk(y.abs(), k, sorted=False).values.min()
    candidates = at_least(y, kth)
    return _resolve(candidates, y[candidates].abs(), k)


def sampled_top_k_indices(y: torch.Tensor, k: int, sample: float) -> torch.Tensor:
    """Exactly `exact_top_k(y, k)`, found through a sampled threshold estimate (DGC-style).

    1. Take a strided sample of m = max(sample * n, 32 * n / k) magnitudes.
    2. Pick the sample's r-th largest value t, with r set so that the expected number of
       coordinates >= t is k plus four standard deviations of its sampling noise.
    3. One pass collects the candidates |y_i| >= t. If there are at least k, the true k-th
       largest magnitude is >= t, so every winner and every tie with it is a candidate, and
       an exact selection among the candidates (same tie rule) is the exact answer.
    4. If the estimate undershot (fewer than k candidates, e.g. on inputs whose structure
       defeats a strided sample), fall back to `exact_top_k`.

    Args:
        y: flat vector.
        k: how many to keep, in [1, y.numel()].
        sample: fraction of coordinates sampled for the estimate, in (0, 1].

    Returns:
        int64 (k,) strictly increasing coordinates, on y's device.
    """
    n = y.numel()
    if not 1 <= k <= n:
        raise ValueError(f"top-k needs 1 <= k <= n, got k={k}, n={n}")
    if not 0.0 < sample <= 1.0:
        raise ValueError(f"sample must be in (0, 1], got {sample}")
    m = max(math.ceil(sample * n), math.ceil(_MIN_EXPECTED_HITS * n / k))
    if k == n or 2 * m >= n:
        return exact_top_k(y, k)
    stride = n // m
    sampled = y[::stride].abs()
    m = sampled.numel()
    expected = m * k / n
    rank = min(m, math.ceil(expected + _SAMPLE_SIGMAS * math.sqrt(expected)) + 1)
    threshold = _kth_largest(sampled, rank)
    candidates = at_least(y, threshold)
    if candidates.numel() < k:
        return exact_top_k(y, k)
    return _resolve(candidates, y[candidates].abs(), k)
