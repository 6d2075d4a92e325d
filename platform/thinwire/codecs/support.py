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

from thinwire.seeding import mix
from thinwire.wire import WireError
from thinwire.wire.payload import (
    DenseSupport,
    FactorSupport,
    SeededSupport,
    SeedScheme,
    SparseSupport,
    Support,
)

__all__ = ["block_start", "permutation", "scatter", "seeded_indices"]

MAX_SEEDED_DOMAIN = 1 << 40
"""Largest domain a seeded support may index (keeps every Feistel product below 2**63)."""
_ROUNDS = 6


def _round_keys(seed: int, width: int) -> list[tuple[int, int, int]]:
    mask = (1 << width) - 1
    keys = []
    for r in range(_ROUNDS):
        a, b, c = (mix(seed, r, j) for j in range(3))
        keys.append(((a & mask) | 1, b & mask, (c & mask) | 1))
    return keys


def _feistel(
    x: torch.Tensor, bits: int, keys: list[tuple[int, int, int]], width: int
) -> torch.Tensor:
    # Unbalanced Feistel network on `bits`-bit words. A word is (high, low) with `hi_bits`
    # and `lo_bits` bits; a round maps it to (low, high ^ F(low)), so the two part widths
    # swap every round and each round is a bijection whatever they are. F hashes its input
    # with multiply / xorshift / multiply in `width` bits (products stay below 2**42) and
    # keeps the top `hi_bits` bits of the result, which depend on every input bit.
    hi_bits, lo_bits = bits // 2, bits - bits // 2
    mask = (1 << width) - 1
    shift = width // 2 + 1
    for mul, add, mul2 in keys:
        high, low = x >> lo_bits, x & ((1 << lo_bits) - 1)
        f = (low * mul + add) & mask
        f = f ^ (f >> shift)
        f = ((f * mul2) & mask) >> (width - hi_bits)
        x = (low << hi_bits) | (high ^ f)
        hi_bits, lo_bits = lo_bits, hi_bits
    return x


def permutation(seed: int, n: int, positions: torch.Tensor) -> torch.Tensor:
    """Images of `positions` (int64 values in [0, n)) under the seeded permutation of [0, n).

    An unbalanced Feistel network over [0, 2**b) with b = ceil(log2 n), cycle-walking back
    into [0, n): the domain is less than twice n, so a position needs under two network
    passes on average (a balanced network needs an even b and can waste up to 4x).
    Deterministic across devices for a given (seed, n): int64 arithmetic only. Each
    cycle-walking round synchronises with the device once (to size the positions still
    outside); about log4(k) rounds for k positions.

    Raises:
        ValueError: if n is not in [1, MAX_SEEDED_DOMAIN].
    """
    if not 1 <= n <= MAX_SEEDED_DOMAIN:
        raise ValueError(f"seeded permutation domain must be in [1, 2**40], got {n}")
    bits = (n - 1).bit_length()
    if bits == 0:
        return torch.zeros_like(positions)
    width = max(1, (bits + 1) // 2)
    keys = _round_keys(seed, width)
    out = _feistel(positions, bits, keys, width)
    outside = (out >= n).nonzero().squeeze(1)
    while outside.numel() > 0:
        walked = _feistel(out[outside], bits, keys, width)
        out[outside] = walked
        outside = outside[walked >= n]
    return out


def block_start(seed: int, n: int) -> int:
    """First coordinate of a seeded random block of a domain of n: mix(seed) % n."""
    return mix(seed) % n


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
        indices = (steps + block_start(support.seed, n)) % n
    else:
        raise ValueError(f"unknown seed scheme {support.scheme!r}")
    return torch.sort(indices).values


def scatter(support: Support, values: torch.Tensor, n: int) -> torch.Tensor:
    """The dense (n,) vector holding `values` at the support's coordinates and 0 elsewhere.

    Raises:
        WireError: for rank-r factors, which name no coordinates (a low-rank codec decodes
            them; a receiver's form check refuses them before a selector's codec sees them).
    """
    if isinstance(support, FactorSupport):
        raise WireError("rank-r factors are not coordinates; only a low-rank codec decodes them")
    if isinstance(support, DenseSupport):
        if values.numel() != n:
            raise ValueError(f"dense support needs {n} values, got {values.numel()}")
        return values
    out = torch.zeros(n, dtype=values.dtype, device=values.device)
    if isinstance(support, SeededSupport) and support.scheme == SeedScheme.RANDOM_BLOCK:
        # A block is at most two slices: no index tensor needed.
        k = support.count
        if not 0 <= k <= n or values.numel() != k:
            raise ValueError(f"random block of {k} coordinates of {n} with {values.numel()} values")
        start = block_start(support.seed, n) if k else 0
        wrapped = max(0, start + k - n)
        out[:wrapped] = values[:wrapped]
        out[start : start + k - wrapped] = values[wrapped:]
        return out
    if isinstance(support, SparseSupport):
        indices = support.indices
    else:
        indices = seeded_indices(support, n, values.device)
    out[indices] = values
    return out
