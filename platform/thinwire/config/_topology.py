"""The `topology` section: the graph peers gossip on, and its mixing weights."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, model_validator

from thinwire.config._base import (
    Density,
    PositiveInt,
    Probability,
    Section,
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
