"""Seeded selectors: random-k and random block, whose payloads carry a seed, not indices.

The sender draws its coordinates from a per-call seed and sends only that seed
(`SeededSupport`, 8 bytes); the receiver regenerates the same coordinates with
`thinwire.codecs.support.seeded_indices`, on any device. Workers that share the base seed
pick the same coordinates every round, which makes the payloads all-reduce compatible
(algorithms.md §7.2, §7.4).

Per-call seeds come from `step_seed(seed, step)` with (seed, step) in the selector's
state: no global random generator is read or advanced.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from thinwire.codecs.base import CodecInfo, Selector
from thinwire.codecs.forms import constant, seeded_form
from thinwire.codecs.selection import check_density, count_for
from thinwire.codecs.support import block_start, seeded_indices
from thinwire.seeding import step_seed
from thinwire.wire.payload import SeededSupport, SeedScheme, Support

_RANDOM_K = constant(seeded_form(SeedScheme.RANDOM_K))
_RANDOM_BLOCK = constant(seeded_form(SeedScheme.RANDOM_BLOCK))

__all__ = ["RandomBlockState", "RandomKState", "random_block", "random_k"]


class RandomKState(NamedTuple):
    """State of `random_k`."""

    seed: int  # base seed, 64-bit Python int
    step: int  # calls so far, Python int; the call's seed is step_seed(seed, step)


def random_k(density: float, *, seed: int, unbiased: bool = False) -> Selector:
    """Random-k: keep k = ceil(density * n) coordinates drawn uniformly without replacement.

    Stich et al. 2018 (algorithms.md §7.2). The coordinates are the first k images of a
    seeded permutation of [0, n), so they are distinct and every coordinate is kept with
    probability k/n. Plain form: biased, delta = k/n (in expectation). With
    `unbiased=True` the kept values are scaled by n/k, so E[C(y)] = y with
    omega = n/k - 1; this variance is large at small densities, so prefer the plain form
    under error feedback and the unbiased one without it.

    State: (seed, step). Workers built with the same `seed` choose identical coordinates
    in the same step.

    Args:
        density: fraction of coordinates kept, in (0, 1].
        seed: base seed of the draws (any int; reduced to 64 bits).
        unbiased: scale the kept values by n/k.

    Returns:
        A `Selector` emitting `SeededSupport(scheme=RANDOM_K)`.

    Example:
        >>> import torch
        >>> from thinwire.codecs import chain, random_k
        >>> codec = chain(random_k(0.25, seed=7))
        >>> x = torch.arange(8.0)
        >>> payload, state = codec.encode(x, codec.init(x))
        >>> payload.support.count, codec.decode(payload, x.shape).count_nonzero().item()
        (2, 2)
    """
    check_density(density)

    def init(n: int, device: torch.device) -> RandomKState:
        del n, device
        return RandomKState(seed, 0)

    def select(y: torch.Tensor, state: RandomKState) -> tuple[Support, torch.Tensor, RandomKState]:
        n = y.numel()
        k = count_for(density, n)
        support = SeededSupport(step_seed(state.seed, state.step), SeedScheme.RANDOM_K, k)
        values = y[seeded_indices(support, n, y.device)]
        if unbiased:
            values = values * (n / k)
        return support, values, RandomKState(state.seed, state.step + 1)

    if unbiased:
        info = CodecInfo(unbiased=True, omega=lambda n: n / count_for(density, n) - 1.0)
    else:
        info = CodecInfo(unbiased=False, delta=lambda n: count_for(density, n) / n)
    name = f"random_k({density:g}{',unbiased' if unbiased else ''})"
    return Selector(init, select, info, name=name, supports=_RANDOM_K)


class RandomBlockState(NamedTuple):
    """State of `random_block`."""

    seed: int  # base seed, 64-bit Python int
    step: int  # calls so far, Python int; the call's seed is step_seed(seed, step)


def random_block(density: float, *, seed: int, unbiased: bool = False) -> Selector:
    """Random block: keep k contiguous coordinates from a seeded start, wrapping at n.

    Foroutan Eghlidi & Jaggi 2020 (arXiv 2009.09271, algorithms.md §7.4). A block costs
    no index traffic and reads memory contiguously; workers with the same seed send the
    same block, so the payloads all-reduce densely. The start is uniform over [0, n), so
    E||y - C(y)||^2 = (1 - k/n) ||y||^2: delta = k/n in expectation. Use with error
    feedback (a fixed block position per step would starve the rest otherwise).

    Independent blocks (Mishchenko, Hanzely, Richtárik 2019, "99% of Distributed
    Optimization is a Waste of Time"): each of N workers sends its own random blocks, the
    kept values scaled by n/k, so every worker's message is an unbiased estimate of its
    gradient and the server's average is unbiased without error feedback; with
    k/n = 1/N the iteration complexity is essentially that of sending everything. That is
    `unbiased=True` with a different `seed` per worker (thinwire's clients and gossip nodes
    mix their index into their codec seed, so theirs differ). The paper samples tau of m
    fixed blocks; here a worker's block is one contiguous run at a uniform offset, which
    keeps each coordinate with the same probability k/n, independently across workers, so
    the estimator's mean and per-coordinate variance match (omega = n/k - 1); only which
    coordinates travel together differs.

    State: (seed, step): the call's block comes from step_seed(seed, step), and the
    payload carries that seed, so a receiver regenerates the block without knowing the
    worker's base seed.

    Args:
        density: fraction of coordinates kept, in (0, 1].
        seed: base seed of the draws (any int; reduced to 64 bits).
        unbiased: scale the kept values by n/k.

    Returns:
        A `Selector` emitting `SeededSupport(scheme=RANDOM_BLOCK)`.

    Example:
        >>> import torch
        >>> from thinwire.codecs import chain, random_block
        >>> codec = chain(random_block(0.5, seed=1))
        >>> x = torch.arange(1.0, 7.0)
        >>> payload, _ = codec.encode(x, codec.init(x))
        >>> payload.support.scheme.name, payload.count
        ('RANDOM_BLOCK', 3)
    """
    check_density(density)

    def init(n: int, device: torch.device) -> RandomBlockState:
        del n, device
        return RandomBlockState(seed, 0)

    def select(
        y: torch.Tensor, state: RandomBlockState
    ) -> tuple[Support, torch.Tensor, RandomBlockState]:
        n = y.numel()
        k = count_for(density, n)
        call_seed = step_seed(state.seed, state.step)
        start = block_start(call_seed, n)
        wrapped = max(0, start + k - n)
        # Values in increasing coordinate order: the wrapped head, then the block's start.
        values = torch.cat([y[:wrapped], y[start : start + k - wrapped]])
        if unbiased:
            values = values * (n / k)
        support = SeededSupport(call_seed, SeedScheme.RANDOM_BLOCK, k)
        return support, values, RandomBlockState(state.seed, state.step + 1)

    if unbiased:
        info = CodecInfo(unbiased=True, omega=lambda n: n / count_for(density, n) - 1.0)
    else:
        info = CodecInfo(unbiased=False, delta=lambda n: count_for(density, n) / n)
    name = f"random_block({density:g}{',unbiased' if unbiased else ''})"
    return Selector(init, select, info, name=name, supports=_RANDOM_BLOCK)
