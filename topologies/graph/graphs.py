"""Communication graphs: which gossip peers talk to each other.

`build_graph` turns a `topology:` section of the experiment file into a `networkx.Graph` on
nodes 0..n-1. Every random kind draws from generators seeded by (run seed, round, attempt),
never from a global RNG, so the same file always gives the same graph. A fixed graph must be
connected (gossip cannot reach consensus across components); random kinds are redrawn with
derived seeds until one is, up to the section's `attempts`, and anything else fails with an
error that names the components.

Time-varying kinds (`matching`, and `regular` with `time_varying: true`) give a new graph
every round; each round's graph may be disconnected, as long as the graphs connect over
time. `GraphSchedule` (in `thinwire.topologies.graph.schedule`) serves them round by round.

The builders are `thinwire.registry.GRAPHS` factories, registered here for the topology
sections `thinwire.config` declares. A plugin adds a graph with `GRAPHS.register(kind,
section=..., factory=...)`: its section subclasses `thinwire.config.GraphSection` (which
carries `mixing` and says, by `draws_each_round`, whether it is redrawn every round), and
`factory(section, nodes, seed, round)` returns a graph on nodes 0..n-1.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Iterable
from pathlib import Path

import networkx as nx
import numpy as np

from thinwire.config import (
    ChainTopology,
    CompleteTopology,
    EdgeListTopology,
    ErdosRenyiTopology,
    ExponentialTopology,
    GraphSection,
    MatchingTopology,
    RegularTopology,
    RingTopology,
    SmallWorldTopology,
    StarTopology,
    Topology,
    TorusTopology,
)
from thinwire.registry import GRAPHS
from thinwire.seeding import graph_draw_seed, graph_round_seed

__all__ = [
    "GraphError",
    "build_graph",
    "describe_components",
    "is_time_varying",
    "read_edge_list",
    "require_connected",
    "torus_shape",
]

logger = logging.getLogger(__name__)


class GraphError(ValueError):
    """A graph that cannot be built or used: too few nodes, disconnected, a bad edge file."""


def is_time_varying(config: Topology) -> bool:
    """Whether `config` draws a new graph every round (its section says so)."""
    return isinstance(config, GraphSection) and config.draws_each_round()


def describe_components(graph: nx.Graph, limit: int = 5) -> str:
    """The connected components of `graph` as text, largest first, long lists shortened."""
    parts = sorted(nx.connected_components(graph), key=lambda c: (-len(c), min(c)))
    shown = [_node_set(c) for c in parts[:limit]]
    if len(parts) > limit:
        shown.append(f"... {len(parts) - limit} more")
    return f"{len(parts)} components: " + ", ".join(shown)


def _node_set(nodes: Iterable[int], limit: int = 8) -> str:
    ordered = sorted(nodes)
    text = ", ".join(map(str, ordered[:limit]))
    return "{" + (text + f", ... ({len(ordered)} nodes)" if len(ordered) > limit else text) + "}"


def require_connected(graph: nx.Graph, what: str) -> nx.Graph:
    """Returns `graph`, or raises `GraphError` naming its components when it is disconnected."""
    if graph.number_of_nodes() and not nx.is_connected(graph):
        raise GraphError(f"{what} is disconnected: {describe_components(graph)}")
    return graph


def _from_edges(nodes: int, edges: Iterable[tuple[int, int]]) -> nx.Graph:
    graph = nx.Graph()
    graph.add_nodes_from(range(nodes))
    graph.add_edges_from((int(u), int(v)) for u, v in edges)
    return graph


def _need(nodes: int, minimum: int, kind: str, why: str = "") -> None:
    if nodes < minimum:
        raise GraphError(f"a {kind} graph needs at least {minimum} nodes{why}, got {nodes}")


# --------------------------------------------------------------------------- fixed graphs


def _ring(config: RingTopology, nodes: int, seed: int, round: int) -> nx.Graph:
    _need(nodes, 3, "ring")
    return _from_edges(nodes, ((i, (i + 1) % nodes) for i in range(nodes)))


def _complete(config: CompleteTopology, nodes: int, seed: int, round: int) -> nx.Graph:
    return _from_edges(nodes, ((i, j) for i in range(nodes) for j in range(i + 1, nodes)))


def _star(config: StarTopology, nodes: int, seed: int, round: int) -> nx.Graph:
    return _from_edges(nodes, ((0, i) for i in range(1, nodes)))


def _chain(config: ChainTopology, nodes: int, seed: int, round: int) -> nx.Graph:
    return _from_edges(nodes, ((i, i + 1) for i in range(nodes - 1)))


def torus_shape(config: TorusTopology, nodes: int) -> tuple[int, int]:
    """(rows, cols) of a torus on `nodes` nodes: as configured, or the most square factors.

    Raises:
        GraphError: when rows * cols != nodes, or no factorization has both sides >= 3.
    """
    if config.rows is not None and config.cols is not None:
        if config.rows * config.cols != nodes:
            raise GraphError(
                f"torus {config.rows} x {config.cols} has {config.rows * config.cols} nodes, "
                f"but the run has {nodes}"
            )
        return config.rows, config.cols
    for rows in range(math.isqrt(nodes), 2, -1):
        if nodes % rows == 0:
            return rows, nodes // rows
    raise GraphError(
        f"no torus of {nodes} nodes with both sides >= 3; use a node count such as 9, 12 or "
        "16, or another kind"
    )


def _torus(config: TorusTopology, nodes: int, seed: int, round: int) -> nx.Graph:
    rows, cols = torus_shape(config, nodes)
    edges = []
    for r in range(rows):
        for c in range(cols):
            i = r * cols + c
            edges += [(i, r * cols + (c + 1) % cols), (i, ((r + 1) % rows) * cols + c)]
    graph = _from_edges(nodes, edges)
    graph.graph["shape"] = (rows, cols)
    return graph


def _exponential(config: ExponentialTopology, nodes: int, seed: int, round: int) -> nx.Graph:
    hops = [2**j for j in range(max(nodes - 1, 1).bit_length())]
    return _from_edges(
        nodes, ((i, (i + h) % nodes) for i in range(nodes) for h in hops if h < nodes)
    )


def read_edge_list(path: str | Path, nodes: int) -> nx.Graph:
    """Reads an undirected graph from a text file of `u v` lines (commas also separate).

    Blank lines and `#` comments are skipped. A first line holding a single number declares
    the node count (decentralizepy's `.edges` format) and must equal `nodes`.

    Raises:
        GraphError: naming the file and line of anything that is not a valid edge.
    """
    source = Path(path)
    try:
        lines = source.read_text().splitlines()
    except OSError as exc:
        raise GraphError(f"{source}: cannot read the edge list: {exc.strerror or exc}") from None
    edges: list[tuple[int, int]] = []
    first = True
    for number, line in enumerate(lines, start=1):
        fields = [f for f in re.split(r"[\s,]+", line.split("#", 1)[0].strip()) if f]
        if not fields:
            continue
        where = f"{source}, line {number}"
        if not all(re.fullmatch(r"\d+", f) for f in fields):
            raise GraphError(f"{where}: expected node ids (integers), got {line.strip()!r}")
        ids = [int(f) for f in fields]
        if first and len(ids) == 1:
            if ids[0] != nodes:
                raise GraphError(f"{where}: the file declares {ids[0]} nodes, the run has {nodes}")
            first = False
            continue
        first = False
        if len(ids) != 2:
            raise GraphError(f"{where}: expected two node ids, got {line.strip()!r}")
        u, v = ids
        if max(u, v) >= nodes:
            raise GraphError(f"{where}: node {max(u, v)} is out of range 0..{nodes - 1}")
        if u == v:
            raise GraphError(f"{where}: self-loop on node {u}")
        edges.append((u, v))
    if not edges:
        raise GraphError(f"{source}: no edges")
    return _from_edges(nodes, edges)


def _edge_file(config: EdgeListTopology, nodes: int, seed: int, round: int) -> nx.Graph:
    return read_edge_list(config.path, nodes)


# --------------------------------------------------------------------------- random graphs


def _redraw_until_connected(
    draw: Callable[[int], nx.Graph], seed: int, attempts: int, what: str, hint: str
) -> nx.Graph:
    graph = nx.Graph()
    for attempt in range(attempts):
        graph = draw(graph_draw_seed(seed, attempt))
        if nx.is_connected(graph):
            if attempt:
                logger.debug("%s: connected on draw %d", what, attempt + 1)
            return graph
    raise GraphError(
        f"{what}: no connected draw in {attempts} attempts (last: {describe_components(graph)})"
        f"; {hint}"
    )


def _regular_draw(degree: int, nodes: int) -> Callable[[int], nx.Graph]:
    if degree >= nodes:
        raise GraphError(f"a {degree}-regular graph needs more than {degree} nodes, got {nodes}")
    if degree * nodes % 2:
        raise GraphError(f"no {degree}-regular graph on {nodes} nodes: degree * nodes must be even")
    return lambda s: _from_edges(nodes, nx.random_regular_graph(degree, nodes, seed=s).edges)


def _regular(config: RegularTopology, nodes: int, seed: int, round: int) -> nx.Graph:
    draw = _regular_draw(config.degree, nodes)
    if config.time_varying:
        return draw(graph_round_seed(seed, round))
    hint = "use degree >= 3 (a 2-regular graph is a union of cycles)"
    return _redraw_until_connected(draw, seed, config.attempts, f"regular(d={config.degree})", hint)


def _matching(config: MatchingTopology, nodes: int, seed: int, round: int) -> nx.Graph:
    order = np.random.default_rng(graph_round_seed(seed, round)).permutation(nodes)
    return _from_edges(nodes, zip(order[0:-1:2], order[1::2], strict=True))


def _erdos_renyi(config: ErdosRenyiTopology, nodes: int, seed: int, round: int) -> nx.Graph:
    def draw(s: int) -> nx.Graph:
        return _from_edges(nodes, nx.gnp_random_graph(nodes, config.p, seed=s).edges)

    threshold = math.log(nodes) / nodes
    hint = f"G(n, p) is connected w.h.p. only for p well above ln(n)/n = {threshold:.3f}"
    return _redraw_until_connected(draw, seed, config.attempts, f"erdos_renyi(p={config.p})", hint)


def _small_world(config: SmallWorldTopology, nodes: int, seed: int, round: int) -> nx.Graph:
    if config.k >= nodes:
        raise GraphError(f"small_world k={config.k} needs more than {config.k} nodes, got {nodes}")

    def draw(s: int) -> nx.Graph:
        return _from_edges(nodes, nx.watts_strogatz_graph(nodes, config.k, config.p, seed=s).edges)

    what = f"small_world(k={config.k}, p={config.p})"
    return _redraw_until_connected(draw, seed, config.attempts, what, "lower p or raise k")


# --------------------------------------------------------------------------- registry

GRAPHS.register("star", section=StarTopology, factory=_star)
GRAPHS.register("ring", section=RingTopology, factory=_ring)
GRAPHS.register("torus", section=TorusTopology, factory=_torus)
GRAPHS.register("complete", section=CompleteTopology, factory=_complete)
GRAPHS.register("chain", section=ChainTopology, factory=_chain)
GRAPHS.register("regular", section=RegularTopology, factory=_regular)
GRAPHS.register("matching", section=MatchingTopology, factory=_matching)
GRAPHS.register("erdos_renyi", section=ErdosRenyiTopology, factory=_erdos_renyi)
GRAPHS.register("small_world", section=SmallWorldTopology, factory=_small_world)
GRAPHS.register("exponential", section=ExponentialTopology, factory=_exponential)
GRAPHS.register("edges", section=EdgeListTopology, factory=_edge_file)


def build_graph(config: Topology, nodes: int, *, seed: int, round: int = 0) -> nx.Graph:
    """Builds the communication graph of one round.

    Args:
        config: the experiment's `topology:` section.
        nodes: number of peers n; the graph's nodes are 0..n-1.
        seed: the run seed; random kinds derive every draw from it.
        round: the round, for time-varying kinds; fixed kinds give the same graph for all.

    Returns:
        An undirected simple graph on 0..n-1. `graph.graph["kind"]` names the kind.

    Raises:
        GraphError: if the kind cannot be built on `nodes` nodes, or a fixed graph is
            disconnected (the message names the components).
        ValueError: for a kind without a registered builder.
    """
    if nodes < 2:
        raise GraphError(f"a gossip graph needs at least 2 nodes, got {nodes}")
    if round < 0:
        raise ValueError(f"round must be >= 0, got {round}")
    graph: nx.Graph = GRAPHS.factory(config.kind)(config, nodes, seed, round)
    graph.graph["kind"] = config.kind
    if not is_time_varying(config):
        require_connected(graph, f"the {config.kind} graph on {nodes} nodes")
    return graph
