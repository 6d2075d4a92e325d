"""How many bits a payload needs at least: the yardstick for bytes on the wire.

A payload carries a set of coordinates and their values. Whatever the coding, the set costs
at least log2 C(n, k) bits when it is explicit (one of C(n, k) equally likely subsets), and
a seed (64 bits) when the receiver regenerates it; the values cost their float width, the
empirical entropy of QSGD's levels (of multi-scale (scale, level) pairs), or one bit per
sign, plus 32 bits per norm or scale.
`len(thinwire.wire.encode(update))` divided by this bound (over 8) says how close the wire
coding comes (the design's goal: within 10% for sparse tensors).

Example:
    >>> import torch
    >>> from thinwire.codecs import chain, top_k
    >>> from thinwire.codecs.bounds import information_bits
    >>> x = torch.randn(1000, generator=torch.Generator().manual_seed(0))
    >>> codec = chain(top_k(0.01))
    >>> payload, _ = codec.encode(x, codec.init(x))
    >>> round(information_bits(payload))  # log2 C(1000, 10) + 10 fp32 values
    398
"""

from __future__ import annotations

import math

import torch

from thinwire.wire.payload import (
    DenseSupport,
    FactorSupport,
    MultiScaleValues,
    Payload,
    QuantizedValues,
    RawValues,
    SeededSupport,
    SignValues,
    SparseSupport,
)

__all__ = ["entropy_bits", "information_bits", "log2_binomial"]

SEED_BITS = 64


def log2_binomial(n: int, k: int) -> float:
    """log2 C(n, k): the bits that name one k-subset of n coordinates."""
    if not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    return (math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)) / math.log(2)


def entropy_bits(codes: torch.Tensor) -> float:
    """Empirical entropy of a sequence of integer codes, in bits for the whole sequence."""
    if codes.numel() == 0:
        return 0.0
    _, counts = torch.unique(codes, return_counts=True)
    p = counts.double() / codes.numel()
    return float(-(p * p.log2()).sum()) * codes.numel()


def information_bits(payload: Payload) -> float:
    """The least number of bits any coding of this payload's support and values needs."""
    n, k = payload.numel, payload.count
    match payload.support:
        case SparseSupport():
            bits = log2_binomial(n, k)
        case SeededSupport():
            bits = float(SEED_BITS)
        case DenseSupport() | FactorSupport():
            bits = 0.0  # the values carry everything: P and Q, or every coordinate
    match payload.values:
        case RawValues(data=data):
            bits += k * data.element_size() * 8
        case QuantizedValues(levels=levels, norms=norms):
            bits += entropy_bits(levels) + 32 * norms.numel()
        case SignValues(scales=scales, negative_scales=negative_scales):
            sides = 1 if negative_scales is None else 2
            bits += k + 32 * sides * scales.numel()
        case MultiScaleValues(levels=levels, scale_index=index, norms=norms):
            # Joint entropy of (scale, level) pairs: the two are strongly dependent.
            pairs = index.long() * (1 << 16) + levels.long()
            bits += entropy_bits(pairs) + 32 * norms.numel()
    return bits
