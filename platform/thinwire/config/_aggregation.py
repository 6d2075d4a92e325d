"""The `aggregation` section: what a receiver accepts, and how the star's server combines it.

Every receiver refuses a decoded update that is not finite or whose l2 norm exceeds
`max_norm_ratio * max(||own model||, 1)`; the star's server also caps the example count a
client may claim. What passes then goes through the server's rule: optional norm clipping
of each update, then the weighted mean, a coordinate-wise trimmed mean, the median or a
majority vote of signs.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from thinwire.config._base import PositiveFloat, PositiveInt, Section
from thinwire.registry import AGGREGATION_RULES, Kinded


@AGGREGATION_RULES.declare
class MeanRule(Section):
    """The weighted mean (FedAvg): each update counts with its sender's example count."""

    kind: Literal["mean"] = "mean"


@AGGREGATION_RULES.declare
class TrimmedMeanRule(Section):
    """Coordinate-wise trimmed mean (Yin et al. 2018; Flower's FedTrimmedAvg).

    Per coordinate, the floor(beta * n) largest and smallest of the n updates' values are
    dropped and the rest averaged with equal weights.
    """

    kind: Literal["trimmed_mean"] = "trimmed_mean"
    beta: Annotated[float, Field(ge=0.0, lt=0.5)] = 0.2


@AGGREGATION_RULES.declare
class MedianRule(Section):
    """Coordinate-wise median of the updates, with equal weights (Flower's FedMedian)."""

    kind: Literal["median"] = "median"


@AGGREGATION_RULES.declare
class SignVoteRule(Section):
    """SignSGD with majority vote (Bernstein et al., ICLR'19): the sign most updates have.

    Per coordinate, +-1 (ties go to +1), with equal weights. The server's step is then
    `train.server.lr` times that vote; with a `sign` downlink codec the broadcast costs one
    bit per coordinate.
    """

    kind: Literal["sign_vote"] = "sign_vote"


AggregationRule = Annotated[Kinded, AGGREGATION_RULES]
"""Any registered aggregation rule (`thinwire.server.rules` registers the factories)."""


class AggregationConfig(Section):
    """Bounds on what a receiver accepts, and the star server's aggregation rule.

    A coordinate that a sparse update does not carry counts as zero for the robust rules:
    the sender's update does not move it, which is what a sparse update means.
    """

    rule: AggregationRule = MeanRule()
    clip_norm: PositiveFloat | None = None
    """Star server: scale each client's update down to at most this l2 norm before the rule."""
    max_norm_ratio: PositiveFloat = 100.0
    """Refuse a decoded update (or gossip message) whose l2 norm exceeds this many times
    the receiver's model norm (taken as at least 1). Unbiased high-variance codecs (random-k
    with unbiased scaling, unbucketed QSGD) inflate norms; raise it for those."""
    max_examples: PositiveInt = 1_000_000
    """Flower star: the largest `num_examples` a client may claim (the simulator checks each
    client's true count instead)."""


def aggregation_problems(
    aggregation: AggregationConfig, *, decentralized: bool, random_access: bool
) -> list[str]:
    """Settings of the section that the rest of the experiment cannot honour."""
    problems = []
    if decentralized and aggregation.rule.kind != "mean":
        problems.append(
            f"aggregation.rule {aggregation.rule.kind!r} combines the star's client updates; "
            "gossip peers mix with their graph's weights"
        )
    if decentralized and aggregation.clip_norm is not None:
        problems.append(
            "aggregation.clip_norm clips the star's client updates; remove it for gossip"
        )
    if random_access and aggregation.rule.kind != "mean":
        problems.append(
            f"aggregation.rule {aggregation.rule.kind!r} needs every selected update; a "
            "random-access uplink sums what got through (use rule kind 'mean')"
        )
    return problems
