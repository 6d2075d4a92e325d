"""The epsilon maths: Renyi-DP of the sampled Gaussian mechanism and its (epsilon, delta).

Module-level functions only (STYLE rule 11): `thinwire.privacy.ledger` records what a
client ran, these functions say what it cost. The RDP bound of the sampled Gaussian
mechanism (Mironov, Talwar & Zhang 2019) and its conversion to (epsilon, delta)-DP (Balle
et al. 2020, Thm. 21) are Opacus's own analysis functions
(`opacus.accountants.analysis.rdp`), evaluated at Opacus's default orders, so an epsilon
reported here equals what Opacus's `RDPAccountant` reports for the same history.

Random sparsification costs nothing extra: the mask is public and data-independent, and a
masked per-sample gradient clipped to C still has sensitivity C (Zhu & Blaschko 2023,
algorithms.md §5.2).

Example:
    >>> round(epsilon([(1.1, 0.01, 1000)], delta=1e-5), 2)
    1.71
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Sequence

import numpy as np

__all__ = ["ORDERS", "check_delta", "epsilon", "noise_multiplier_for", "rdp_curve"]

ORDERS: tuple[float, ...] = tuple(
    [1.0 + x / 10.0 for x in range(1, 100)] + [float(a) for a in range(12, 64)]
)
"""RDP orders alpha at which epsilon is optimized: Opacus's `RDPAccountant.DEFAULT_ALPHAS`.

Opacus is imported when epsilon is first computed, not with this module: importing it
takes seconds, and most thinwire processes never account for privacy."""

_EPSILON_TOLERANCE = 0.01
"""How far below the target the calibrated noise may land, in epsilon (Opacus's default)."""


def check_delta(delta: float) -> None:
    """Raises `ValueError` unless 0 < delta < 1."""
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta}")


def _check_mechanism(noise_multiplier: float, sample_rate: float, steps: int) -> None:
    if not noise_multiplier >= 0.0:
        raise ValueError(f"noise multiplier must be >= 0, got {noise_multiplier}")
    if not 0.0 < sample_rate <= 1.0:
        raise ValueError(f"sample rate must be in (0, 1], got {sample_rate}")
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")


def rdp_curve(noise_multiplier: float, sample_rate: float, steps: int) -> np.ndarray:
    """RDP of `steps` sampled Gaussian mechanism steps at every order in `ORDERS`.

    A step adds N(0, (sigma C)^2) to a sum of per-example contributions clipped to C, over
    a batch sampled at rate q. RDP composes additively, so the curve is `steps` times the
    one-step curve (computed once per (sigma, q) and cached: it is the expensive part).
    sigma = 0 gives an infinite curve.

    Raises:
        ValueError: sigma < 0, q outside (0, 1] or steps < 0.
    """
    _check_mechanism(noise_multiplier, sample_rate, steps)
    if noise_multiplier == 0.0:
        return np.full(len(ORDERS), math.inf if steps else 0.0)
    return _one_step(float(noise_multiplier), float(sample_rate)) * steps


@functools.lru_cache(maxsize=1024)
def _one_step(noise_multiplier: float, sample_rate: float) -> np.ndarray:
    from opacus.accountants.analysis import rdp as _rdp

    curve = _rdp.compute_rdp(
        q=sample_rate, noise_multiplier=noise_multiplier, steps=1, orders=list(ORDERS)
    )
    out = np.asarray(curve, dtype=np.float64)
    out.flags.writeable = False  # shared by every caller through the cache
    return out


def epsilon(history: Sequence[tuple[float, float, int]], delta: float) -> float:
    """The epsilon spent by a history of (sigma, q, steps) entries, at `delta`.

    RDP composes by addition over the entries; the sum is converted to (epsilon, delta)-DP
    at the best order. An empty history (or one of zero steps) has spent 0.

    Raises:
        ValueError: delta outside (0, 1) or an invalid entry.
    """
    check_delta(delta)
    total = np.zeros(len(ORDERS))
    for noise_multiplier, sample_rate, steps in history:
        total = total + rdp_curve(noise_multiplier, sample_rate, steps)
    if not total.any():
        return 0.0
    if np.isinf(total).all():
        return math.inf
    from opacus.accountants.analysis import rdp as _rdp

    with warnings.catch_warnings():
        # Opacus warns when the best order is at the end of the range; epsilon is still a
        # valid (slightly loose) bound then.
        warnings.simplefilter("ignore", UserWarning)
        eps, _ = _rdp.get_privacy_spent(orders=list(ORDERS), rdp=total, delta=delta)
    return float(eps)


@functools.lru_cache(maxsize=256)
def noise_multiplier_for(
    *, target_epsilon: float, delta: float, sample_rate: float, steps: int
) -> float:
    """The noise multiplier sigma that spends `target_epsilon` in `steps` steps at rate q.

    The smallest sigma, to Opacus's tolerance, whose `steps` sampled Gaussian steps at
    sample rate q stay within (target_epsilon, delta). This is Opacus's binary search
    (`opacus.accountants.utils.get_noise_multiplier`, RDP accountant): the result spends
    between target - 0.01 and target.

    Raises:
        ValueError: a non-positive target or steps, delta outside (0, 1), q outside (0, 1],
            or a budget no noise level below 1e6 can meet.
    """
    check_delta(delta)
    if not target_epsilon > 0.0 or steps < 1:
        raise ValueError(f"need target_epsilon > 0 and steps >= 1, got {target_epsilon}, {steps}")
    _check_mechanism(1.0, sample_rate, steps)
    from opacus.accountants.utils import get_noise_multiplier

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the search's probes hit the order range
        sigma = get_noise_multiplier(
            target_epsilon=target_epsilon,
            target_delta=delta,
            sample_rate=sample_rate,
            steps=steps,
            accountant="rdp",
            epsilon_tolerance=_EPSILON_TOLERANCE,
        )
    return float(sigma)
