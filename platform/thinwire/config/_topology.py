"""The `topology` section (graphs and mixing weights) and the `gossip` section."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, model_validator

from thinwire.config._base import (
    Density,
    NonNegativeFloat,
    PositiveInt,
    Probability,
    Section,
    WaveletName,
)


class MetropolisHastingsWeights(Section):
    """w_ij = 1 / (max(deg_i, deg_j) + 1) on each edge; each row's rest on the diagonal."""

    kind: Literal["metropolis_hastings"] = "metropolis_hastings"


class MaxDegreeWeights(Section):
    """w_ij = 1 / (max_deg + 1) on every edge: one uniform weight for the whole graph."""

    kind: Literal["max_degree"] = "max_degree"


class MatrixFileWeights(Section):
    """A fixed mixing matrix read from a CSV or .npy file, validated against the graph."""

    kind: Literal["file"] = "file"
    path: Path


Mixing = Annotated[
    MetropolisHastingsWeights | MaxDegreeWeights | MatrixFileWeights,
    Field(discriminator="kind"),
]

_FIXED_MATRIX = "a mixing matrix file needs a fixed graph, not one redrawn every round"

Attempts = Annotated[int, Field(ge=1, le=10_000)]
"""How many seeded draws a random graph may take to come out connected."""


class GraphSection(Section):
    """Base of every topology: the graph kind's own fields plus its mixing weights."""

    mixing: Mixing = MetropolisHastingsWeights()


class StarTopology(GraphSection):
    """A hub and its leaves: a server and its clients, or peer 0 linked to every other peer."""

    kind: Literal["star"] = "star"


class RingTopology(GraphSection):
    """Node i linked to i - 1 and i + 1 (mod n); needs n >= 3."""

    kind: Literal["ring"] = "ring"


class TorusTopology(GraphSection):
    """A rows x cols grid with wrap-around, 4-regular; omit both for the most square shape."""

    kind: Literal["torus"] = "torus"
    rows: Annotated[int, Field(ge=3)] | None = None
    cols: Annotated[int, Field(ge=3)] | None = None

    @model_validator(mode="after")
    def _both_or_neither(self) -> TorusTopology:
        if (self.rows is None) != (self.cols is None):
            raise ValueError("set both torus rows and cols, or neither")
        return self


class CompleteTopology(GraphSection):
    """Every pair of nodes linked."""

    kind: Literal["complete"] = "complete"


class ChainTopology(GraphSection):
    """A path: node i linked to i + 1."""

    kind: Literal["chain"] = "chain"


class RegularTopology(GraphSection):
    """A uniformly random d-regular graph, fixed or redrawn every round."""

    kind: Literal["regular"] = "regular"
    degree: PositiveInt
    time_varying: bool = False
    """Draw a new graph each round (seeded by the run seed and the round)."""
    attempts: Attempts = 100
    """Draws allowed for a connected graph (a fixed graph must be connected)."""

    @model_validator(mode="after")
    def _fixed_matrix(self) -> RegularTopology:
        if self.time_varying and isinstance(self.mixing, MatrixFileWeights):
            raise ValueError(_FIXED_MATRIX)
        return self


class MatchingTopology(GraphSection):
    """A new uniformly random matching every round (one node rests when n is odd)."""

    kind: Literal["matching"] = "matching"

    @model_validator(mode="after")
    def _fixed_matrix(self) -> MatchingTopology:
        if isinstance(self.mixing, MatrixFileWeights):
            raise ValueError(_FIXED_MATRIX)
        return self


class ErdosRenyiTopology(GraphSection):
    """G(n, p), redrawn with derived seeds until connected."""

    kind: Literal["erdos_renyi"] = "erdos_renyi"
    p: Density
    attempts: Attempts = 100


class SmallWorldTopology(GraphSection):
    """Watts-Strogatz: a ring lattice of k nearest neighbours, each edge rewired w.p. p."""

    kind: Literal["small_world"] = "small_world"
    k: Annotated[int, Field(ge=2)] = 4
    p: Probability = 0.1
    attempts: Attempts = 100

    @model_validator(mode="after")
    def _even_k(self) -> SmallWorldTopology:
        if self.k % 2:
            raise ValueError(f"small_world k must be even (k/2 neighbours per side), got {self.k}")
        return self


class ExponentialTopology(GraphSection):
    """Node i linked to i +- 2^j (mod n) for every 2^j < n."""

    kind: Literal["exponential"] = "exponential"


class EdgeListTopology(GraphSection):
    """Edges read from a text file: one `u v` pair per line, nodes numbered 0..n-1."""

    kind: Literal["edges"] = "edges"
    path: Path


Topology = Annotated[
    StarTopology
    | RingTopology
    | TorusTopology
    | CompleteTopology
    | ChainTopology
    | RegularTopology
    | MatchingTopology
    | ErdosRenyiTopology
    | SmallWorldTopology
    | ExponentialTopology
    | EdgeListTopology,
    Field(discriminator="kind"),
]


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
