"""The `gossip` section: what decentralized peers exchange (D-PSGD, CHOCO, SPARQ, JWINS)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from thinwire.config._base import (
    Density,
    NonNegativeFloat,
    PositiveInt,
    Section,
    WaveletName,
)


class ExactGossip(Section):
    """Decentralized SGD (D-PSGD): each round a node averages its neighbours' full models."""

    kind: Literal["dpsgd"] = "dpsgd"


GossipGamma = Annotated[float, Field(gt=0.0, le=1.0)]
"""CHOCO's consensus step size gamma, in (0, 1]."""

EstimateStart = Literal["initial", "zero"]
"""Where public estimates start: the common initial model, or zero as in the CHOCO paper."""


class ChocoGossip(Section):
    """CHOCO-SGD: compressed corrections to public model estimates, damped consensus.

    The corrections are compressed by the experiment's `codec` section (any codec without
    error feedback: x - x_hat already is CHOCO's memory of what was not sent).
    """

    kind: Literal["choco"] = "choco"
    gamma: GossipGamma
    estimates: EstimateStart = "initial"
    """'initial': every node derives the common initial model from the seed, so estimates
    start there and the first messages carry only what training changed; 'zero': the
    paper's x_hat = 0 (the first messages then carry the compressed model itself)."""


class ConstantThreshold(Section):
    """SPARQ trigger threshold c_t = c."""

    kind: Literal["constant"] = "constant"
    c: NonNegativeFloat


class StepThreshold(Section):
    """c_t = c + increment * floor((t - 1) / every): raised in steps (SPARQ's CIFAR schedule)."""

    kind: Literal["step"] = "step"
    c: NonNegativeFloat
    increment: NonNegativeFloat
    every: PositiveInt
    """Rounds between two raises."""


class PolynomialThreshold(Section):
    """c_t = c * t^power (SPARQ's convex analysis: power = 1 - epsilon, epsilon in (0, 1))."""

    kind: Literal["polynomial"] = "polynomial"
    c: NonNegativeFloat
    power: NonNegativeFloat = 0.5


Threshold = Annotated[
    ConstantThreshold | StepThreshold | PolynomialThreshold, Field(discriminator="kind")
]


class SparqGossip(Section):
    """SPARQ-SGD: CHOCO that synchronizes every `sync_every` rounds, and only on a trigger.

    At a synchronization round a node fires only if ||x - x_hat||^2 > c_t * lr_t^2; a fired
    correction is compressed by the `codec` section, whose default for SPARQ is the sign of
    the top 1% with its scale (SignTop_k).
    """

    kind: Literal["sparq"] = "sparq"
    gamma: GossipGamma
    threshold: Threshold
    sync_every: PositiveInt = 1
    """Rounds between synchronization indices; the paper's H is sync_every * local_steps."""
    estimates: EstimateStart = "initial"


JWINS_ALPHAS = (0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 1.0)
"""The paper's cut-off set (decentralizepy `config_*_jwins.ini`)."""


class JwinsGossip(Section):
    """JWINS: share the wavelet coefficients that changed most, with a random cut-off."""

    kind: Literal["jwins"] = "jwins"
    wavelet: WaveletName = "sym2"
    level: Annotated[int, Field(ge=1, le=12)] = 4
    alphas: Annotated[list[Density], Field(min_length=1)] = list(JWINS_ALPHAS)
    """Fractions of coefficients a node may share; one is drawn uniformly per node and round."""
    metadata_cap: Density = 0.5
    """A drawn fraction at or above this sends every coefficient (no indices)."""


Gossip = Annotated[
    ExactGossip | ChocoGossip | SparqGossip | JwinsGossip, Field(discriminator="kind")
]

SPARQ_CODEC = {"select": {"kind": "topk", "density": 0.01}, "quantize": {"kind": "sign"}}
"""SPARQ's default compression of fired corrections: SignTop_k with k = 1% per tensor."""
