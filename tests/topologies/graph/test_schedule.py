"""GraphSchedule: the same answers for every peer, every round."""

from __future__ import annotations

import numpy as np
import pytest

from thinwire.config import (
    EdgeListTopology,
    MatchingTopology,
    MatrixFileWeights,
    RegularTopology,
    RingTopology,
)
from thinwire.topologies.graph import GraphError, GraphSchedule, MixingError


def test_fixed_schedule_serves_one_graph_for_every_round():
    schedule = GraphSchedule(RingTopology(), 5, seed=0)
    assert not schedule.time_varying
    assert schedule.at(0).graph is schedule.at(10).graph
    assert schedule.at(10).round == 10
    assert schedule.neighbours(3, node=0) == frozenset({1, 4})
    weights = schedule.weights(3, node=0)
    assert list(weights) == [0, 1, 4]
    assert sum(weights.values()) == pytest.approx(1.0)


def test_time_varying_schedule_is_a_function_of_seed_and_round():
    config = RegularTopology(degree=2, time_varying=True)
    a = GraphSchedule(config, 10, seed=1, cache_rounds=2)
    b = GraphSchedule(config, 10, seed=1)
    for r in [5, 0, 7, 5, 1]:  # beyond the cache of 2: rebuilt, still equal
        assert set(a.at(r).graph.edges) == set(b.at(r).graph.edges)
        assert np.array_equal(a.at(r).mixing, b.at(r).mixing)
    assert set(a.at(0).graph.edges) != set(a.at(1).graph.edges)


def test_neighbours_are_symmetric_in_every_round():
    schedule = GraphSchedule(MatchingTopology(), 6, seed=0)
    for r in range(5):
        for i in range(6):
            for j in schedule.neighbours(r, node=i):
                assert i in schedule.neighbours(r, node=j)


def test_bad_topologies_fail_when_the_schedule_is_built(tmp_path):
    path = tmp_path / "two.edges"
    path.write_text("0 1\n2 3\n")
    with pytest.raises(GraphError, match="disconnected"):
        GraphSchedule(EdgeListTopology(path=path), 4, seed=0)
    matrix = tmp_path / "w.csv"
    np.savetxt(matrix, np.eye(5), delimiter=",")
    with pytest.raises(MixingError, match="expected a 4 x 4 matrix"):
        GraphSchedule(RingTopology(mixing=MatrixFileWeights(path=matrix)), 4, seed=0)
    with pytest.raises(GraphError, match="must be even"):
        GraphSchedule(RegularTopology(degree=3, time_varying=True), 5, seed=0)


def test_bad_arguments_are_refused():
    schedule = GraphSchedule(RingTopology(), 4, seed=0)
    with pytest.raises(ValueError, match="node 4 is not in 0..3"):
        schedule.neighbours(0, node=4)
    with pytest.raises(ValueError, match="round must be >= 0"):
        schedule.at(-1)
    with pytest.raises(ValueError, match="cache_rounds"):
        GraphSchedule(RingTopology(), 4, seed=0, cache_rounds=0)
