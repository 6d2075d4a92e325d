"""Random sparsification's public mask: which coordinates DP-SGD may touch in a round.

Zhu & Blaschko, "Improving Differentially Private SGD via Randomly Sparsified Gradients"
(TMLR 2023, arXiv 2112.00845; algorithms.md §5.2). Each round, a uniformly random subset of
the flattened model's coordinates is dropped; DP-SGD zeroes them in every per-sample
gradient and in the noise, so the round's update lives on the kept coordinates.

The mask is public randomness: for round k it is the first n - floor(r_k n) images of a
seeded permutation of [0, n) (`thinwire.codecs.support.seeded_indices`), seeded by
dp_mask_seed(experiment seed, k). Every client of a round uses the same mask, and the uplink
can send only the kept values with the seed in place of indices (the `shared_mask`
selector). The method refreshes its mask once per epoch; in federated training we refresh
it once per round, the unit at which updates travel.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Mapping
from typing import assert_never

import torch

from thinwire.codecs.support import seeded_indices
from thinwire.config import RandomSparsification
from thinwire.seeding import dp_mask_seed
from thinwire.wire.payload import SeededSupport, SeedScheme

__all__ = ["drop_rate", "mask_tensors", "round_mask"]


def drop_rate(config: RandomSparsification, round: int, rounds: int) -> float:
    """r_k, the fraction of coordinates dropped in round k = `round` of `rounds`.

    - linear (the method's gradual cooling, one refresh per round): r_final (k - 1) / (T - 1),
      from 0 in the first round to r_final in the last (r_final throughout when T = 1);
    - constant: r_final.

    Raises:
        ValueError: `round` outside [1, rounds].
    """
    if not 1 <= round <= rounds:
        raise ValueError(f"round {round} is outside [1, {rounds}]")
    if config.schedule == "constant" or rounds == 1:
        return config.final_rate
    if config.schedule == "linear":
        return config.final_rate * (round - 1) / (rounds - 1)
    assert_never(config.schedule)


def round_mask(seed: int, round: int, n: int, rate: float) -> SeededSupport | None:
    """The shared mask of `round` over n coordinates when a fraction `rate` is dropped.

    floor(rate * n) coordinates are dropped (rounded to 6 decimals first, so binary noise
    does not drop one more); the kept ones are a `SeededSupport` of count
    n - floor(rate * n) seeded by dp_mask_seed(seed, round). None when nothing is
    dropped (every coordinate kept).

    Args:
        seed: the experiment seed (the same on every client).
        round: the 1-based round.
        n: the number of coordinates (the flattened model's size).
        rate: the drop rate r_k in [0, 1).

    Raises:
        ValueError: n < 1 or rate outside [0, 1).
    """
    if n < 1 or not 0.0 <= rate < 1.0:
        raise ValueError(f"need n >= 1 and a drop rate in [0, 1), got {n}, {rate}")
    dropped = math.floor(builtins.round(rate * n, 6))  # `round` is the round number here
    if dropped == 0:
        return None
    return SeededSupport(dp_mask_seed(seed, round), SeedScheme.RANDOM_K, n - dropped)


def mask_tensors(
    support: SeededSupport | None, like: Mapping[str, torch.Tensor]
) -> dict[str, torch.Tensor] | None:
    """The mask as boolean tensors shaped like `like`, laid out in its flattening order.

    The mask indexes the concatenation of `like`'s tensors in order (the flattened model of
    `thinwire.learning.flatten`); each returned tensor is True where its coordinate is
    kept. None stays None (no mask).

    Raises:
        ValueError: the support's count exceeds the total size of `like`.
    """
    if support is None:
        return None
    sizes = [t.numel() for t in like.values()]
    device = next(iter(like.values())).device
    flat = torch.zeros(sum(sizes), dtype=torch.bool, device=device)
    flat[seeded_indices(support, sum(sizes), device)] = True
    pieces = torch.split(flat, sizes)
    return {
        name: piece.view(t.shape) for (name, t), piece in zip(like.items(), pieces, strict=True)
    }
