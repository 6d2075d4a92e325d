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
from thinwire.registry import GRAPHS, MIXINGS, Kinded


@MIXINGS.declare
class MetropolisHastingsWeights(Section):
    """w_ij = 1 / (max(deg_i, deg_j) + 1) on each edge; each row's rest on the diagonal."""

    kind: Literal["metropolis_hastings"] = "metropolis_hastings"


@MIXINGS.declare
class MaxDegreeWeights(Section):
    """w_ij = 1 / (max_deg + 1) on every edge: one uniform weight for the whole graph."""

    kind: Literal["max_degree"] = "max_degree"


@MIXINGS.declare
class MatrixFileWeights(Section):
    """A fixed mixing matrix read from a CSV or .npy file, validated against the graph."""

    kind: Literal["file"] = "file"
    path: Path


Mixing = Annotated[Kinded, MIXINGS]
"""Any registered mixing rule (`thinwire.topologies.graph.mixing` registers the factories)."""

_FIXED_MATRIX = "a mixing matrix file needs a fixed graph, not one redrawn every round"

Attempts = Annotated[int, Field(ge=1, le=10_000)]
"""How many seeded draws a random graph may take to come out connected."""


class GraphSection(Section):
    """Base of every topology: the graph kind's own fields plus its mixing weights."""

    mixing: Mixing = MetropolisHastingsWeights()

    def draws_each_round(self) -> bool:
        """Whether this graph is redrawn every round (each round's may be disconnected)."""
        return False


@GRAPHS.declare
class StarTopology(GraphSection):
    """A hub and its leaves: a server and its clients, or peer 0 linked to every other peer."""

    kind: Literal["star"] = "star"


@GRAPHS.declare
class RingTopology(GraphSection):
    """Node i linked to i - 1 and i + 1 (mod n); needs n >= 3."""

    kind: Literal["ring"] = "ring"


@GRAPHS.declare
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


@GRAPHS.declare
class CompleteTopology(GraphSection):
    """Every pair of nodes linked."""

    kind: Literal["complete"] = "complete"


@GRAPHS.declare
class ChainTopology(GraphSection):
    """A path: node i linked to i + 1."""

    kind: Literal["chain"] = "chain"


@GRAPHS.declare
class RegularTopology(GraphSection):
    """A uniformly random d-regular graph, fixed or redrawn every round."""

    kind: Literal["regular"] = "regular"
    degree: PositiveInt
    time_varying: bool = False
    """Draw a new graph each round (seeded by the run seed and the round)."""
    attempts: Attempts = 100
    """Draws allowed for a connected graph (a fixed graph must be connected)."""

    def draws_each_round(self) -> bool:
        """Redrawn every round when `time_varying` is set."""
        return self.time_varying

    @model_validator(mode="after")
    def _fixed_matrix(self) -> RegularTopology:
        if self.time_varying and isinstance(self.mixing, MatrixFileWeights):
            raise ValueError(_FIXED_MATRIX)
        return self


@GRAPHS.declare
class MatchingTopology(GraphSection):
    """A new uniformly random matching every round (one node rests when n is odd)."""

    kind: Literal["matching"] = "matching"

    def draws_each_round(self) -> bool:
        """A matching is drawn anew every round."""
        return True

    @model_validator(mode="after")
    def _fixed_matrix(self) -> MatchingTopology:
        if isinstance(self.mixing, MatrixFileWeights):
            raise ValueError(_FIXED_MATRIX)
        return self


@GRAPHS.declare
class ErdosRenyiTopology(GraphSection):
    """G(n, p), redrawn with derived seeds until connected."""

    kind: Literal["erdos_renyi"] = "erdos_renyi"
    p: Density
    attempts: Attempts = 100


@GRAPHS.declare
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


@GRAPHS.declare
class ExponentialTopology(GraphSection):
    """Node i linked to i +- 2^j (mod n) for every 2^j < n."""

    kind: Literal["exponential"] = "exponential"


@GRAPHS.declare
class EdgeListTopology(GraphSection):
    """Edges read from a text file: one `u v` pair per line, nodes numbered 0..n-1."""

    kind: Literal["edges"] = "edges"
    path: Path


Topology = Annotated[Kinded, GRAPHS]
"""Any registered graph (`thinwire.topologies.graph.graphs` registers the builders); a
graph's section subclasses `GraphSection`, so it carries the `mixing` weights."""
