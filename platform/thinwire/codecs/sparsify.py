"""Magnitude-based selectors: exact and sampled top-k, rTop-k, hard threshold, adaptive top-k.

Each factory returns a `Selector` whose payloads carry an explicit, sorted index list
(`SparseSupport`), or every coordinate (`DenseSupport`) when the rule keeps them all. The
selection kernels and their tie rule (lower index wins) live in `thinwire.codecs.selection`.
Selectors whose payloads carry only a seed are in `thinwire.codecs.seeded`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import NamedTuple

import torch

from thinwire.codecs.base import CodecInfo, EmptyState, Selector
from thinwire.codecs.forms import kept_supports
from thinwire.codecs.selection import (
    at_least,
    check_density,
    count_for,
    sampled_top_k_indices,
)
from thinwire.codecs.support import permutation
from thinwire.seeding import step_seed
from thinwire.wire.payload import DenseSupport, SparseSupport, Support

__all__ = [
    "AdaptiveTopKState",
    "RTopKState",
    "adaptive_top_k",
    "rtop_k",
    "sampled_top_k",
    "threshold",
    "top_k",
]

logger = logging.getLogger(__name__)


_DEFAULT_SAMPLE = 0.01
"""Fraction of coordinates `top_k` samples for its threshold estimate (DGC's default)."""


def _sparse(y: torch.Tensor, indices: torch.Tensor) -> tuple[Support, torch.Tensor]:
    # The payload for a sorted coordinate list; every coordinate travels without indices.
    if indices.numel() == y.numel():
        return DenseSupport(), y.clone()
    return SparseSupport(indices), y[indices]


def _k_of_n(density: float) -> Callable[[int], frozenset[str]]:
    # The supports of a selector that keeps count_for(density, n) coordinates.
    def supports(n: int) -> frozenset[str]:
        k = count_for(density, n)
        return kept_supports(k, k, n)

    return supports


def _any_count(n: int) -> frozenset[str]:
    # The supports of a selector that may keep anything from none to all n coordinates.
    return kept_supports(0, n, n)


def _top_k_info(density: float) -> CodecInfo:
    return CodecInfo(unbiased=False, delta=lambda n: count_for(density, n) / n)


def top_k(density: float) -> Selector:
    """Exact top-k: keep the k = ceil(density * n) coordinates of largest magnitude.

    The classic biased sparsifier (Stich et al. 2018; Aji & Heafield 2017), normally used
    under error feedback (`with_error_feedback`). Contractive with delta = k/n in the worst
    case, much better on real gradients. Ties go to the lower index.

    State: none. Cost: about two passes over n: the selection runs through
    `sampled_top_k_indices` (a sampled threshold narrows the candidates, an exact selection
    among them returns precisely the k winners, and a full `torch.topk` runs whenever the
    estimate undershoots), about 8x faster than `torch.topk` alone at 25M coordinates on a
    CPU and never a different set. `sampled_top_k` exposes the sample fraction.

    Args:
        density: fraction of coordinates kept, in (0, 1].

    Returns:
        A `Selector` emitting `SparseSupport` (or `DenseSupport` when k == n).

    Example:
        >>> import torch
        >>> from thinwire.codecs import chain, top_k
        >>> codec = chain(top_k(0.5))
        >>> x = torch.tensor([3.0, -1.0, 1.0, -5.0])
        >>> payload, _ = codec.encode(x, codec.init(x))
        >>> payload.support.indices
        tensor([0, 3])
    """
    check_density(density)

    def init(n: int, device: torch.device) -> EmptyState:
        del n, device
        return EmptyState()

    def select(y: torch.Tensor, state: EmptyState) -> tuple[Support, torch.Tensor, EmptyState]:
        k = count_for(density, y.numel())
        support, values = _sparse(y, sampled_top_k_indices(y, k, _DEFAULT_SAMPLE))
        return support, values, state

    return Selector(
        init, select, _top_k_info(density), name=f"top_k({density:g})", supports=_k_of_n(density)
    )


def sampled_top_k(density: float, sample: float = _DEFAULT_SAMPLE) -> Selector:
    """Top-k through a sampled threshold estimate: exactly `top_k`'s set, found faster.

    DGC (Lin et al., ICLR'18, §3 and algorithms.md §7.7) estimates the top-k threshold
    from a small sample. Here the estimate only narrows the search: the threshold is set a
    few standard deviations low, one pass collects the candidates above it, and an exact
    selection among them returns precisely the set (and tie order) of `top_k`. When the
    estimate undershoots, the exact kernel runs instead, so results never depend on luck.

    State: none. Knobs: `sample`, the fraction of coordinates in the estimate (1% is DGC's
    default; smaller is faster but widens the candidate margin at low densities).

    Args:
        density: fraction of coordinates kept, in (0, 1].
        sample: fraction of coordinates sampled, in (0, 1].

    Returns:
        A `Selector` emitting `SparseSupport` (or `DenseSupport` when k == n).

    Example:
        >>> import torch
        >>> from thinwire.codecs import chain, sampled_top_k, top_k
        >>> x = torch.randn(10_000, generator=torch.Generator().manual_seed(0))
        >>> fast, exact = chain(sampled_top_k(0.01)), chain(top_k(0.01))
        >>> a, _ = fast.encode(x, fast.init(x))
        >>> b, _ = exact.encode(x, exact.init(x))
        >>> torch.equal(a.support.indices, b.support.indices)
        True
    """
    check_density(density)
    if not 0.0 < sample <= 1.0:
        raise ValueError(f"sample must be in (0, 1], got {sample}")

    def init(n: int, device: torch.device) -> EmptyState:
        del n, device
        return EmptyState()

    def select(y: torch.Tensor, state: EmptyState) -> tuple[Support, torch.Tensor, EmptyState]:
        k = count_for(density, y.numel())
        support, values = _sparse(y, sampled_top_k_indices(y, k, sample))
        return support, values, state

    return Selector(
        init,
        select,
        _top_k_info(density),
        name=f"sampled_top_k({density:g})",
        supports=_k_of_n(density),
    )


def threshold(lam: float) -> Selector:
    """Hard threshold: keep every coordinate with |y_i| >= lam.

    Sahu et al. (NeurIPS'21, algorithms.md §7.5) show that under error feedback a fixed
    threshold beats top-k at equal total traffic. It is an *absolute* compressor,
    ||y - C(y)||^2 <= n * lam^2, with no relative contraction, so `info.delta` is None. The
    number of coordinates sent varies per call (possibly zero).

    Tuning: the paper's rule lam = 1 / (2 sqrt(k)) for a target of k coordinates per step.

    State: none.

    Args:
        lam: the threshold, > 0.

    Returns:
        A `Selector` emitting `SparseSupport` (or `DenseSupport` when every coordinate
        passes).

    Example:
        >>> import torch
        >>> from thinwire.codecs import chain, threshold
        >>> codec = chain(threshold(1.0))
        >>> x = torch.tensor([0.5, -2.0, 1.0, 0.1])
        >>> payload, _ = codec.encode(x, codec.init(x))
        >>> codec.decode(payload, x.shape)
        tensor([ 0., -2.,  1.,  0.])
    """
    if not (lam > 0 and math.isfinite(lam)):
        raise ValueError(f"threshold lam must be a finite number > 0, got {lam}")

    def init(n: int, device: torch.device) -> EmptyState:
        del n, device
        return EmptyState()

    def select(y: torch.Tensor, state: EmptyState) -> tuple[Support, torch.Tensor, EmptyState]:
        support, values = _sparse(y, at_least(y, lam))
        return support, values, state

    return Selector(
        init,
        select,
        CodecInfo(unbiased=False),
        name=f"threshold({lam:g})",
        supports=_any_count,
    )


class RTopKState(NamedTuple):
    """State of `rtop_k`."""

    seed: int  # base seed, 64-bit Python int
    step: int  # calls so far, Python int; the call's seed is step_seed(seed, step)


def rtop_k(density: float, ratio: float = 4.0, *, seed: int) -> Selector:
    """rTop-k: keep k coordinates drawn uniformly from the top r = ceil(ratio * k).

    Barnes et al. 2020 (arXiv 2005.10761, algorithms.md §7.3): randomising inside the
    top-r set spreads updates over more coordinates across steps, which beats both top-k
    and random-k under error feedback. Contraction:
    E||y - C(y)||^2 = ||y||^2 - (k/r) ||Top_r y||^2 <= (1 - k/n) ||y||^2, so delta = k/n.

    1. r = min(n, ceil(ratio * k)); R = the top-r coordinates (exact, same tie rule as
       `top_k`).
    2. Draw a uniform k-subset of R from a seeded permutation of [0, r).

    The indices travel explicitly, so the receiver needs no seed. State: (seed, step).
    Knob: `ratio` = r/k, typically 2-10 (larger explores more, keeps less energy).

    Args:
        density: fraction of coordinates kept, in (0, 1].
        ratio: r / k, >= 1.
        seed: base seed of the draws.

    Returns:
        A `Selector` emitting `SparseSupport` (or `DenseSupport` when k == n).

    Example:
        >>> import torch
        >>> from thinwire.codecs import chain, rtop_k
        >>> codec = chain(rtop_k(0.25, ratio=2.0, seed=0))
        >>> x = torch.arange(8.0)
        >>> payload, state = codec.encode(x, codec.init(x))
        >>> bool(payload.support.indices.min() >= 4)  # 2 of the top 4
        True
    """
    check_density(density)
    if not ratio >= 1.0:
        raise ValueError(f"rtop_k ratio (r / k) must be >= 1, got {ratio}")

    def init(n: int, device: torch.device) -> RTopKState:
        del n, device
        return RTopKState(seed, 0)

    def select(y: torch.Tensor, state: RTopKState) -> tuple[Support, torch.Tensor, RTopKState]:
        n = y.numel()
        k = count_for(density, n)
        r = min(n, math.ceil(ratio * k))
        top_r = sampled_top_k_indices(y, r, 0.01)
        if r > k:
            draw = permutation(
                step_seed(state.seed, state.step), r, torch.arange(k, device=y.device)
            )
            top_r = top_r[torch.sort(draw).values]
        support, values = _sparse(y, top_r)
        return support, values, RTopKState(state.seed, state.step + 1)

    return Selector(
        init,
        select,
        _top_k_info(density),
        name=f"rtop_k({density:g},{ratio:g})",
        supports=_k_of_n(density),
    )


class AdaptiveTopKState(NamedTuple):
    """State of `adaptive_top_k`."""

    average: float  # EMA of ||y||^2 over past calls, Python float; unused while steps == 0
    steps: int  # calls so far, Python int


def adaptive_top_k(
    density: float,
    *,
    min_density: float = 1e-4,
    max_density: float = 0.1,
    decay: float = 0.9,
) -> Selector:
    """Top-k whose k follows the input's energy against its running average.

    Ruan et al. (arXiv 2210.13532, algorithms.md §7.10) choose a per-step k_t to minimise
    a convergence bound under a traffic budget; spend more coordinates when the
    accumulated update is large, fewer when it is small. This is *our* practical rule in
    that spirit, not the paper's closed form:

        k_t = clip(round(k * E_t / A_{t-1}), k_min, k_max),   E_t = ||y_t||^2,
        A_t = decay * A_{t-1} + (1 - decay) * E_t,            A_0 = E_1 (so k_1 = k),

    with k, k_min, k_max = ceil(density * n), ceil(min_density * n), ceil(max_density * n).
    A zero average keeps k. Over a stationary stream the mean of k_t stays near k.
    Selection is exact (the same set as `top_k` with k_t). Delta = k_min / n.

    State: the EMA of ||y||^2 and a step count (Python scalars: reading E_t is one host
    synchronisation per call, unavoidable since k_t sizes the output).

    Args:
        density: mean fraction of coordinates kept, in [min_density, max_density].
        min_density: floor on k_t / n, in (0, 1].
        max_density: ceiling on k_t / n, in (0, 1].
        decay: EMA decay in [0, 1); larger reacts more slowly.

    Returns:
        A `Selector` emitting `SparseSupport` (or `DenseSupport` when k_t == n).

    Example:
        >>> import torch
        >>> from thinwire.codecs import chain, adaptive_top_k
        >>> codec = chain(adaptive_top_k(0.1, min_density=0.05, max_density=0.5))
        >>> x = torch.randn(100, generator=torch.Generator().manual_seed(0))
        >>> state = codec.init(x)
        >>> small, state = codec.encode(x, state)
        >>> large, state = codec.encode(3 * x, state)  # 9x the energy: more coordinates
        >>> small.count, large.count
        (10, 50)
    """
    check_density(density)
    check_density(min_density, "min_density")
    check_density(max_density, "max_density")
    if not min_density <= density <= max_density:
        raise ValueError(
            f"adaptive_top_k needs min_density <= density <= max_density, got "
            f"{min_density} <= {density} <= {max_density}"
        )
    if not 0.0 <= decay < 1.0:
        raise ValueError(f"decay must be in [0, 1), got {decay}")

    def init(n: int, device: torch.device) -> AdaptiveTopKState:
        del n, device
        return AdaptiveTopKState(0.0, 0)

    def select(
        y: torch.Tensor, state: AdaptiveTopKState
    ) -> tuple[Support, torch.Tensor, AdaptiveTopKState]:
        n = y.numel()
        energy = float(torch.linalg.vector_norm(y, dtype=torch.float64) ** 2)
        average = energy if state.steps == 0 else state.average
        k = count_for(density, n)
        if average > 0.0:
            k = round(k * energy / average)
        k = min(max(k, count_for(min_density, n)), count_for(max_density, n))
        logger.debug("adaptive_top_k: energy %.3g, average %.3g, k %d of %d", energy, average, k, n)
        support, values = _sparse(y, sampled_top_k_indices(y, k, 0.01))
        new_average = decay * average + (1.0 - decay) * energy
        return support, values, AdaptiveTopKState(new_average, state.steps + 1)

    def supports(n: int) -> frozenset[str]:
        return kept_supports(count_for(min_density, n), count_for(max_density, n), n)

    info = CodecInfo(unbiased=False, delta=lambda n: count_for(min_density, n) / n)
    return Selector(init, select, info, name=f"adaptive_top_k({density:g})", supports=supports)
