"""SIDCo: a top-k threshold fitted from a sparsity-inducing distribution, without sorting.

Abdelmoniem, Elzanaty, Alouini and Canini (MLSys'21, arXiv 2101.10761; algorithms.md §7.11)
model gradient magnitudes with a sparsity-inducing distribution (exponential, generalized
Pareto or gamma), fit it from a few moments and read the threshold for the target density
off its tail in closed form. A single fit misjudges the far tail, so the estimate is
multi-stage (peaks over threshold): stage m fits the exceedances |y_i| - T_{m-1} of the
coordinates that survived stage m - 1 and moves the threshold up for the density factor
delta_m, with delta = prod_m delta_m. The number of stages adapts to the density achieved.

What follows the paper and what is this project's reading of it:
- the three families and their moment fits (exponential: scale = mean; generalized Pareto
  and gamma: method of moments) are the paper's; every stage here uses the chosen family;
- the split delta_m = delta^(1/M) (equal factors) and the adaptation rule (one more stage
  whenever the achieved density misses the target by more than `tolerance`) are
  reconstructions of the paper's description, not its code, which is not public. Stages
  are only ever added: a rule that also removed them when the error was small oscillated
  between two stage counts on Gaussian inputs (one far off, the other on target).
"""

from __future__ import annotations

import logging
import math
from typing import Literal, NamedTuple

import torch

from thinwire.codecs.base import CodecInfo, Selector
from thinwire.codecs.forms import kept_supports
from thinwire.codecs.selection import at_least, check_density, count_for
from thinwire.wire.payload import DenseSupport, SparseSupport, Support

__all__ = ["Family", "SIDCoState", "sidco"]

logger = logging.getLogger(__name__)

Family = Literal["exponential", "gpareto", "gamma"]

_FAMILIES = ("exponential", "gpareto", "gamma")


class SIDCoState(NamedTuple):
    """State of `sidco`."""

    stages: int  # fitting stages used on the next call, Python int in [1, max_stages]


def tail_threshold(family: Family, mean: float, var: float, delta: float) -> float:
    """The t with P(Z > t) = delta for the `family` member matching Z's mean and variance.

    exponential: scale b = mean, t = b ln(1/delta). Generalized Pareto (method of moments):
    shape xi = (1 - mean^2/var)/2, scale s = mean (1 + mean^2/var)/2,
    t = s (delta^-xi - 1)/xi (the exponential limit as xi -> 0). Gamma (method of moments):
    shape a = mean^2/var, scale b = var/mean, t = b Q^-1(a, delta) with Q the regularized
    upper incomplete gamma function. A degenerate fit (var <= 0) falls back to the
    exponential.

    Raises:
        ValueError: unless mean > 0 and delta is in (0, 1].
    """
    if not mean > 0.0:
        raise ValueError(f"a tail fit needs a positive mean, got {mean}")
    check_density(delta, "delta")
    if family == "exponential" or not var > 0.0:
        return mean * math.log(1.0 / delta)
    ratio = mean * mean / var
    if family == "gpareto":
        xi = 0.5 * (1.0 - ratio)
        scale = 0.5 * mean * (1.0 + ratio)
        if abs(xi) < 1e-9:
            return scale * math.log(1.0 / delta)
        return scale * (delta**-xi - 1.0) / xi
    # scipy.special costs 0.2 s to import: a ClientApp process that does not fit a gamma
    # tail (every message starts a fresh one) should not pay it.
    from scipy.special import gammainccinv

    return float(gammainccinv(ratio, delta)) * var / mean


def _moments(z: torch.Tensor) -> tuple[float, float]:
    # Mean and (population) variance of a small vector, in float64.
    z64 = z.double()
    mean = float(z64.mean())
    return mean, float(z64.var(correction=0)) if z.numel() > 1 else 0.0


def sidco(
    density: float,
    *,
    family: Family = "exponential",
    stages: int = 2,
    max_stages: int = 6,
    tolerance: float = 0.2,
) -> Selector:
    """SIDCo: keep |y_i| >= T, T fitted in `stages` peaks-over-threshold steps (MLSys'21).

    With target delta = density and M stages, per call:

    1. fit `family` to the magnitudes |y| from their first two moments (norms: no sort, no
       temporary) and set T_1 = its tail quantile at delta^(1/M);
    2. for m = 2..M: fit `family` to the exceedances |y_i| - T_{m-1} of the survivors
       |y_i| >= T_{m-1} and set T_m = T_{m-1} + their tail quantile at delta^(1/M);
    3. keep every |y_i| >= T_M; then adapt M for the next call: M + 1 (up to `max_stages`)
       when |kept / k - 1| > tolerance.

    The kept count is random around k = ceil(density * n); the benchmark
    (`benchmarks/codecs.py`) reports the density each family achieves. The exponential fits
    Laplace-like gradients; on lighter (Gaussian) tails one stage over-estimates T, which the
    extra stages correct. An all-zero input keeps nothing.

    State: the number of stages (`SIDCoState`). Every call synchronises with the host once
    per stage (each fit reads its moments).

    Args:
        density: target fraction of coordinates kept, in (0, 1].
        family: "exponential", "gpareto" (generalized Pareto) or "gamma".
        stages: the number of stages of the first call, in [1, max_stages].
        max_stages: the most stages adaptation may reach, >= 1.
        tolerance: relative density error tolerated before adding a stage, > 0.

    Returns:
        A `Selector` emitting `SparseSupport`, or `DenseSupport` when every coordinate passes.

    Example:
        >>> import torch
        >>> from thinwire.codecs import chain, sidco
        >>> codec = chain(sidco(0.01, family="gpareto"))
        >>> x = torch.randn(100_000, generator=torch.Generator().manual_seed(0))
        >>> payload, state = codec.encode(x, codec.init(x))
        >>> 800 < payload.count < 1250  # about k = 1000, found without sorting
        True
    """
    check_density(density)
    if family not in _FAMILIES:
        raise ValueError(f"sidco family must be one of {', '.join(_FAMILIES)}; got {family!r}")
    if max_stages < 1 or not 1 <= stages <= max_stages:
        raise ValueError(f"sidco needs 1 <= stages <= max_stages, got {stages}, {max_stages}")
    if not (tolerance > 0.0 and math.isfinite(tolerance)):
        raise ValueError(f"sidco tolerance must be a finite number > 0, got {tolerance}")

    def init(n: int, device: torch.device) -> SIDCoState:
        del n, device
        return SIDCoState(stages)

    def candidates(y: torch.Tensor, m: int) -> torch.Tensor:
        # Coordinates surviving every stage of an m-stage fit (sorted, on y's device).
        n = y.numel()
        step = density ** (1.0 / m)
        # float32 norms (cascade-summed, ~1e-7 relative): a float64 pass costs 25x more on CPU.
        mean = float(torch.linalg.vector_norm(y, 1)) / n
        if not mean > 0.0:
            return torch.zeros(0, dtype=torch.long, device=y.device)
        square = float(torch.linalg.vector_norm(y, 2)) ** 2 / n
        total = tail_threshold(family, mean, max(square - mean * mean, 0.0), step)
        kept = at_least(y, total)
        for _ in range(m - 1):
            excess = y[kept].abs() - total
            if excess.numel() < 2:
                break
            mean, var = _moments(excess)
            if not mean > 0.0:
                break
            raise_by = tail_threshold(family, mean, var, step)
            kept = kept[excess >= raise_by]
            total += raise_by
        return kept

    def select(y: torch.Tensor, state: SIDCoState) -> tuple[Support, torch.Tensor, SIDCoState]:
        n = y.numel()
        indices = candidates(y, state.stages)
        error = abs(indices.numel() / count_for(density, n) - 1.0)
        m = min(max_stages, state.stages + 1) if error > tolerance else state.stages
        logger.debug(
            "sidco: %d stages keep %d of %d (error %.3f)", state.stages, len(indices), n, error
        )
        if indices.numel() == n:
            return DenseSupport(), y.clone(), SIDCoState(m)
        return SparseSupport(indices), y[indices], SIDCoState(m)

    def supports(n: int) -> frozenset[str]:
        return kept_supports(0, n, n)

    return Selector(
        init,
        select,
        CodecInfo(unbiased=False),
        name=f"sidco({density:g},{family})",
        supports=supports,
    )
