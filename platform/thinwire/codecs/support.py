"""Coordinates on both ends: seeded index generation and scattering values back.

Seeded supports (random-k, random block, DP random sparsification masks) send only a seed;
sender and receiver must derive the very same indices from it, possibly one on a GPU and the
other on a CPU. `torch.Generator` streams differ between devices, so indices come from a
keyed Feistel permutation of [0, n) computed with plain int64 arithmetic: identical on every
device, O(k) work for k indices (no O(n) `randperm`), and a true permutation, so random-k
indices are distinct without rejection.
"""

from __future__ import annotations

import torch

from thinwire.wire.payload import DenseSupport, SeededSupport, SeedScheme, SparseSupport, Support

__all__ = ["derive_seed", "permutation", "scatter", "seeded_indices"]

_MASK64 = (1 << 64) - 1
MAX_SEEDED_DOMAIN = 1 << 40
"""Largest domain a seeded support may index (keeps every Feistel product below 2**63)."""
_ROUNDS = 6


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def derive_seed(seed: int, *parts: int) -> int:
    """A 64-bit seed mixed from `seed` and integers such as a round or tensor index.

    Used to advance seeds held in codec state (`derive_seed(seed, step)`), so a run is
    reproducible from its state alone and no global RNG is touched.
    """
    x = _splitmix64(seed & _MASK64)
    for part in parts:
        x = _splitmix64(x ^ (part & _MASK64))
    return x


def _round_keys(seed: int, half_bits: int) -> list[tuple[int, int, int]]:
    mask = (1 << half_bits) - 1
    keys = []
    for r in range(_ROUNDS):
        a, b, c = (derive_seed(seed, r, j) for j in range(3))
        keys.append(((a & mask) | 1, b & mask, (c & mask) | 1))
    return keys


def permutation(seed: int, n: int, positions: torch.Tensor) -> torch.Tensor:
    """Images of `positions` (int64 values in [0, n)) under the seeded permutation of [0, n).

    A balanced Feistel network over the smallest even-bit power of two >= n, with
    cycle-walking back into [0, n). Deterministic across devices for a given (seed, n).

    Raises:
        ValueError: if n is not in [1, MAX_SEEDED_DOMAIN].
    """
    if not 1 <= n <= MAX_SEEDED_DOMAIN:
        raise ValueError(f"seeded permutation domain must be in [1, 2**40], got {n}")
    half = max(1, ((n - 1).bit_length() + 1) // 2)
    mask = (1 << half) - 1
    keys = _round_keys(seed, half)

    def feistel(x: torch.Tensor) -> torch.Tensor:
        left, right = x >> half, x & mask
        for mul, add, mul2 in keys:
            f = (right * mul + add) & mask
            f = f ^ (f >> (half // 2 + 1))
            f = (f * mul2) & mask
            left, right = right, left ^ f
        return (left << half) | right

    out = feistel(positions)
    outside = out >= n
    while bool(outside.any()):
        out[outside] = feistel(out[outside])
        outside = out >= n
    return out


def seeded_indices(
    support: SeededSupport, n: int, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """The sorted coordinates a seeded support stands for (int64, on `device`)."""
    k = support.count
    if not 0 <= k <= n:
        raise ValueError(f"seeded support carries {k} coordinates of a domain of {n}")
    steps = torch.arange(k, dtype=torch.int64, device=device)
    if support.scheme == SeedScheme.RANDOM_K:
        indices = permutation(support.seed, n, steps)
    elif support.scheme == SeedScheme.RANDOM_BLOCK:
        start = derive_seed(support.seed) % n
        indices = (steps + start) % n
    else:
        raise ValueError(f"unknown seed scheme {support.scheme!r}")
    return torch.sort(indices).values


def scatter(support: Support, values: torch.Tensor, n: int) -> torch.Tensor:
    """The dense (n,) vector holding `values` at the support's coordinates and 0 elsewhere."""
    if isinstance(support, DenseSupport):
        if values.numel() != n:
            raise ValueError(f"dense support needs {n} values, got {values.numel()}")
        return values
    if isinstance(support, SparseSupport):
        indices = support.indices
    else:
        indices = seeded_indices(support, n, values.device)
    out = torch.zeros(n, dtype=values.dtype, device=values.device)
    out[indices] = values
    return out
