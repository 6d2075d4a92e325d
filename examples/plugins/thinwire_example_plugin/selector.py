"""Age-weighted top-k: the k coordinates of largest |y_i| * (1 + age_i) ** power.

Plain top-k can leave a coordinate unsent for ever if its magnitude stays just below the
k-th largest; error feedback makes its residual grow, but slowly. Weighting each magnitude
by its age (the calls since the coordinate was last sent) bounds that wait: the priority of
an unsent coordinate grows every call until it wins a place. This is age-of-information
scheduling applied per coordinate; `power = 0` is top-k (up to ties).

State: the age of every coordinate. The payload is an ordinary sparse support, so any
receiver decodes it without knowing the method.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal, NamedTuple

import torch
from pydantic import Field

from thinwire.codecs import CodecInfo, Selector
from thinwire.config import Density, Section
from thinwire.wire import DenseSupport, SparseSupport

__all__ = ["AgedTopK", "AgedTopKState", "aged_top_k"]


class AgedTopK(Section):
    """Top-k by magnitude times (1 + age) ** power: no coordinate waits for ever."""

    kind: Literal["aged_topk"] = "aged_topk"
    density: Density
    """Fraction of coordinates sent: k = ceil(density * n)."""
    power: Annotated[float, Field(ge=0.0, le=4.0)] = 1.0
    """How fast an unsent coordinate's priority grows with its age (0: plain top-k)."""


class AgedTopKState(NamedTuple):
    """State of `aged_top_k`."""

    age: torch.Tensor  # (n,) float32 on the input's device: calls since each was last sent


def aged_top_k(density: float, *, power: float = 1.0) -> Selector:
    """The selector: k = ceil(density * n) coordinates of largest |y_i| * (1 + age_i) ** power.

    Args:
        density: fraction of coordinates kept, in (0, 1].
        power: exponent of the age weight, >= 0.

    Returns:
        A `Selector` emitting a sparse support (dense when k == n).
    """
    if not 0.0 < density <= 1.0:
        raise ValueError(f"aged_top_k density must be in (0, 1], got {density}")
    if power < 0.0:
        raise ValueError(f"aged_top_k power must be >= 0, got {power}")

    def init(n: int, device: torch.device) -> AgedTopKState:
        return AgedTopKState(torch.zeros(n, dtype=torch.float32, device=device))

    def select(
        y: torch.Tensor, state: AgedTopKState
    ) -> tuple[SparseSupport | DenseSupport, torch.Tensor, AgedTopKState]:
        n = y.numel()
        k = min(n, max(1, math.ceil(round(density * n, 6))))
        score = y.abs() * (1.0 + state.age) ** power
        indices = torch.sort(torch.topk(score, k, sorted=False).indices).values
        age = state.age + 1.0
        age[indices] = 0.0
        if k == n:
            return DenseSupport(), y.clone(), AgedTopKState(age)
        return SparseSupport(indices), y[indices], AgedTopKState(age)

    # Not a contraction in general (an old small coordinate may displace a large one).
    info = CodecInfo(unbiased=False)
    return Selector(init, select, info, name=f"aged_top_k({density:g},{power:g})")
