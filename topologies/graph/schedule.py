"""The graph and mixing matrix of every round, for fixed and time-varying topologies.

A gossip peer asks the schedule, each round, whom it talks to (`neighbours`) and with which
weights (`weights`); the receiving side asks the same to decide whose pushes to accept. Both
answers are pure functions of (topology, node count, seed, round), so every peer computes the
same graph without talking to anyone.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import NamedTuple

import networkx as nx
import numpy as np

from thinwire.config import GraphSection, Topology
from thinwire.topologies.graph.graphs import build_graph, is_time_varying
from thinwire.topologies.graph.mixing import mixing_matrix

__all__ = ["GraphSchedule", "RoundGraph"]


class RoundGraph(NamedTuple):
    """The communication graph of one round and its mixing matrix."""

    round: int
    graph: nx.Graph  # undirected, nodes 0..n-1
    mixing: np.ndarray  # (n, n) float64, symmetric, doubly stochastic, zero off the edges


class GraphSchedule:
    """Serves `RoundGraph`s: one fixed graph, or a new seeded draw every round.

    A fixed topology is built and validated once, in the constructor, so a bad graph or
    mixing file fails before any peer starts. A time-varying one builds round 0 there for the
    same reason, and caches the most recent `cache_rounds` rounds it was asked for (a node's
    receiver looks up the rounds inside its window many times).

    Example:
        >>> from thinwire.config import RingTopology
        >>> schedule = GraphSchedule(RingTopology(), 5, seed=0)
        >>> sorted(schedule.neighbours(0, node=0))
        [1, 4]
        >>> round(schedule.weights(0, node=0)[1], 4)
        0.3333
    """

    def __init__(self, config: Topology, nodes: int, *, seed: int, cache_rounds: int = 8) -> None:
        if cache_rounds < 1:
            raise ValueError(f"cache_rounds must be >= 1, got {cache_rounds}")
        if not isinstance(config, GraphSection):  # a plugin graph's section carries mixing too
            raise TypeError(f"a topology section subclasses GraphSection, not {config!r}")
        self.config = config
        self.nodes = nodes
        self.seed = seed
        self.time_varying = is_time_varying(config)
        self._cache_rounds = cache_rounds
        self._cache: OrderedDict[int, RoundGraph] = OrderedDict()
        self._lock = threading.Lock()
        self._fixed = None if self.time_varying else self._build(0)
        if self.time_varying:
            self.at(0)

    def _build(self, round: int) -> RoundGraph:
        graph = build_graph(self.config, self.nodes, seed=self.seed, round=round)
        return RoundGraph(round, graph, mixing_matrix(self.config.mixing, graph))

    def at(self, round: int) -> RoundGraph:
        """The graph and mixing matrix of `round` (>= 0)."""
        if round < 0:
            raise ValueError(f"round must be >= 0, got {round}")
        if self._fixed is not None:
            return self._fixed._replace(round=round)
        with self._lock:
            cached = self._cache.get(round)
            if cached is not None:
                self._cache.move_to_end(round)
                return cached
        built = self._build(round)
        with self._lock:
            self._cache[round] = built
            while len(self._cache) > self._cache_rounds:
                self._cache.popitem(last=False)
        return built

    def neighbours(self, round: int, node: int) -> frozenset[int]:
        """The nodes `node` exchanges with in `round` (never itself)."""
        self._check_node(node)
        return frozenset(self.at(round).graph.neighbors(node))

    def weights(self, round: int, node: int) -> dict[int, float]:
        """Row `node` of the round's mixing matrix: w_ij for j = node and each neighbour."""
        self._check_node(node)
        entry = self.at(round)
        row = entry.mixing[node]
        return {j: float(row[j]) for j in sorted({node, *entry.graph.neighbors(node)})}

    def _check_node(self, node: int) -> None:
        if not 0 <= node < self.nodes:
            raise ValueError(f"node {node} is not in 0..{self.nodes - 1}")
