"""Ok-Topk's threshold reuse: exact top-k every `period` calls, a reused threshold in between.

Li & Hoefler (PPoPP'22, "Near-Optimal Sparse Allreduce for Distributed Deep Learning";
algorithms.md §7.11) observe that the top-k threshold of an error-feedback accumulator drifts
slowly, so sorting on every step is wasted work: their code (`Shigangli/Ok-Topk`,
`add2residual`) computes the exact k-th largest magnitude every 32 iterations and, in
between, keeps whatever passes the stored threshold, multiplying it by 1.03 (up to 5 times)
while it selects more than 4k/3 coordinates.

This module reproduces that local-threshold rule as a `Selector`. Ok-Topk's sparse allreduce
(balanced regions, global threshold) is a collective of its own and is not part of a codec
stage. One extension, said here and in the factory: the reference code only nudges the
threshold *up*; this selector also nudges it *down* (divides by `nudge`) while it selects
fewer than k / tolerance coordinates, so a shrinking accumulator cannot silence a tensor
until the next exact step. With `nudge_down=False` the selector is the reference rule.
"""

from __future__ import annotations

import logging
import math
from typing import NamedTuple

import torch

from thinwire.codecs.base import CodecInfo, Selector
from thinwire.codecs.forms import kept_supports
from thinwire.codecs.selection import at_least, check_density, count_for, sampled_top_k_indices
from thinwire.wire.payload import DenseSupport, SparseSupport, Support

__all__ = ["OkTopKState", "ok_top_k"]

logger = logging.getLogger(__name__)


class OkTopKState(NamedTuple):
    """State of `ok_top_k`."""

    threshold: float  # the magnitude threshold in use, Python float; unused while step == 0
    step: int  # calls so far, Python int; an exact top-k runs when step % period == 0


def ok_top_k(
    density: float,
    *,
    period: int = 32,
    tolerance: float = 4.0 / 3.0,
    nudge: float = 1.03,
    max_nudges: int = 5,
    nudge_down: bool = True,
) -> Selector:
    """Top-k with Ok-Topk's threshold reuse (Li & Hoefler, PPoPP'22).

    With k = ceil(density * n), on call t:

    1. if t % period == 0 (or the stored tau is 0): select the exact top-k (`top_k`'s set
       and tie rule) and store tau = the smallest kept magnitude;
    2. otherwise: count c = #{i : |y_i| >= tau}; while c > tolerance * k, tau <- nudge * tau
       (and, with `nudge_down`, while c < k / tolerance, tau <- tau / nudge), at most
       `max_nudges` times; keep every |y_i| >= tau and store tau for the next call.

    The count therefore varies between calls (it can be zero after `max_nudges` nudges on
    an input far below tau): the selector is an absolute compressor in between exact steps,
    and `info.delta` is None. The paper's defaults are period 32, tolerance 4/3, nudge 1.03
    and 5 nudges. A shorter period tracks a fast-moving accumulator more closely at the
    cost of more exact selections.

    State: the threshold and a call count (`OkTopKState`; Python scalars, so reading the
    threshold after an exact step is one host synchronisation).

    Args:
        density: target fraction of coordinates kept, in (0, 1].
        period: calls between exact top-k selections, >= 1 (1 = always exact).
        tolerance: allowed over-selection factor before the threshold is raised, > 1.
        nudge: factor the threshold moves by per nudge, > 1.
        max_nudges: nudges per call, >= 0.
        nudge_down: also lower the threshold on under-selection (not in the reference code).

    Returns:
        A `Selector` emitting `SparseSupport`, or `DenseSupport` when every coordinate passes.

    Example:
        >>> import torch
        >>> from thinwire.codecs import chain, ok_top_k
        >>> codec = chain(ok_top_k(0.1, period=4))
        >>> x = torch.randn(1000, generator=torch.Generator().manual_seed(0))
        >>> state = codec.init(x)
        >>> exact, state = codec.encode(x, state)  # call 0: exact top-k, threshold stored
        >>> reused, state = codec.encode(1.01 * x, state)  # call 1: the threshold reused
        >>> exact.count, reused.count
        (100, 102)
    """
    check_density(density)
    if period < 1:
        raise ValueError(f"ok_top_k period must be >= 1, got {period}")
    if not (tolerance > 1.0 and math.isfinite(tolerance)):
        raise ValueError(f"ok_top_k tolerance must be a finite number > 1, got {tolerance}")
    if not (nudge > 1.0 and math.isfinite(nudge)):
        raise ValueError(f"ok_top_k nudge must be a finite number > 1, got {nudge}")
    if max_nudges < 0:
        raise ValueError(f"ok_top_k max_nudges must be >= 0, got {max_nudges}")

    def init(n: int, device: torch.device) -> OkTopKState:
        del n, device
        return OkTopKState(0.0, 0)

    def reuse(y: torch.Tensor, k: int, threshold: float) -> tuple[torch.Tensor, float]:
        # The coordinates passing the stored threshold, nudged toward a count within
        # [k / tolerance, tolerance * k]; one pass over y when no nudge is needed.
        indices = at_least(y, threshold)
        for _ in range(max_nudges):
            count = indices.numel()
            if count > tolerance * k:
                threshold *= nudge
            elif nudge_down and count < k / tolerance:
                threshold /= nudge
            else:
                break
            indices = at_least(y, threshold)
        return indices, threshold

    def select(y: torch.Tensor, state: OkTopKState) -> tuple[Support, torch.Tensor, OkTopKState]:
        n = y.numel()
        k = count_for(density, n)
        # A zero threshold (an all-zero input at the last exact step) would keep everything:
        # select exactly again instead.
        if state.step % period == 0 or state.threshold <= 0.0:
            indices = sampled_top_k_indices(y, k, 0.01)
            threshold = float(y[indices].abs().min())
        else:
            indices, threshold = reuse(y, k, state.threshold)
            logger.debug(
                "ok_top_k: threshold %.4g keeps %d of target %d", threshold, len(indices), k
            )
        next_state = OkTopKState(threshold, state.step + 1)
        if indices.numel() == n:
            return DenseSupport(), y.clone(), next_state
        return SparseSupport(indices), y[indices], next_state

    def supports(n: int) -> frozenset[str]:
        return kept_supports(0, n, n)

    return Selector(
        init,
        select,
        CodecInfo(unbiased=False),
        name=f"ok_top_k({density:g},{period})",
        supports=supports,
    )
