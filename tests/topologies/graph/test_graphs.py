"""Graph builders: shape, connectivity, determinism, and clear refusals."""

from __future__ import annotations

import networkx as nx
import pytest

from thinwire.config import (
    ChainTopology,
    CompleteTopology,
    EdgeListTopology,
    ErdosRenyiTopology,
    ExponentialTopology,
    MatchingTopology,
    RegularTopology,
    RingTopology,
    SmallWorldTopology,
    StarTopology,
    TorusTopology,
)
from thinwire.registry import GRAPHS
from thinwire.seeding import graph_draw_seed
from thinwire.topologies.graph import (
    GraphError,
    build_graph,
    is_time_varying,
    read_edge_list,
    torus_shape,
)


def degrees(graph: nx.Graph) -> list[int]:
    return [graph.degree[i] for i in range(graph.number_of_nodes())]


def edges(graph: nx.Graph) -> set[frozenset[int]]:
    return {frozenset(e) for e in graph.edges}


def test_every_declared_topology_kind_has_a_builder():
    assert set(GRAPHS.kinds()) == {
        "star", "ring", "torus", "complete", "chain", "regular", "matching",
        "erdos_renyi", "small_world", "exponential", "edges",
    }  # fmt: skip
    for kind in GRAPHS.kinds():
        assert callable(GRAPHS.factory(kind)), kind


def test_ring_links_each_node_to_its_two_neighbours():
    graph = build_graph(RingTopology(), 6, seed=0)
    assert sorted(graph.nodes) == list(range(6))
    assert degrees(graph) == [2] * 6
    assert graph.has_edge(5, 0) and graph.has_edge(0, 1)
    assert graph.graph["kind"] == "ring"


def test_ring_needs_three_nodes():
    with pytest.raises(GraphError, match="ring graph needs at least 3 nodes, got 2"):
        build_graph(RingTopology(), 2, seed=0)


def test_every_kind_needs_two_nodes():
    with pytest.raises(GraphError, match="at least 2 nodes, got 1"):
        build_graph(CompleteTopology(), 1, seed=0)


def test_torus_is_four_regular_with_wraparound():
    graph = build_graph(TorusTopology(rows=3, cols=4), 12, seed=0)
    assert degrees(graph) == [4] * 12
    assert graph.has_edge(0, 3)  # row wrap
    assert graph.has_edge(0, 8)  # column wrap
    assert graph.graph["shape"] == (3, 4)


def test_torus_picks_the_most_square_factorization():
    assert torus_shape(TorusTopology(), 16) == (4, 4)
    assert torus_shape(TorusTopology(), 18) == (3, 6)
    assert torus_shape(TorusTopology(), 36) == (6, 6)


@pytest.mark.parametrize("nodes", [7, 8, 10])
def test_torus_without_factors_of_three_or_more_is_refused(nodes):
    with pytest.raises(GraphError, match=f"no torus of {nodes} nodes"):
        build_graph(TorusTopology(), nodes, seed=0)


def test_torus_shape_must_match_the_node_count():
    with pytest.raises(GraphError, match="torus 3 x 3 has 9 nodes, but the run has 12"):
        build_graph(TorusTopology(rows=3, cols=3), 12, seed=0)


def test_complete_star_and_chain_have_their_textbook_degrees():
    assert degrees(build_graph(CompleteTopology(), 5, seed=0)) == [4] * 5
    assert degrees(build_graph(StarTopology(), 5, seed=0)) == [4, 1, 1, 1, 1]
    assert degrees(build_graph(ChainTopology(), 5, seed=0)) == [1, 2, 2, 2, 1]


def test_exponential_graph_links_powers_of_two():
    graph = build_graph(ExponentialTopology(), 16, seed=0)
    for i in range(16):
        expected = {(i + s * 2**j) % 16 for j in range(4) for s in (1, -1)}
        assert set(graph.neighbors(i)) == expected
    assert degrees(graph) == [7] * 16


def test_regular_graph_has_the_requested_degree_and_is_connected():
    graph = build_graph(RegularTopology(degree=3), 20, seed=4)
    assert degrees(graph) == [3] * 20
    assert nx.is_connected(graph)


@pytest.mark.parametrize(
    ("degree", "nodes", "message"),
    [(3, 7, "degree \\* nodes must be even"), (5, 5, "needs more than 5 nodes")],
)
def test_impossible_regular_graphs_are_refused(degree, nodes, message):
    with pytest.raises(GraphError, match=message):
        build_graph(RegularTopology(degree=degree), nodes, seed=0)


def test_erdos_renyi_is_redrawn_until_connected():
    # G(16, 0.2) is often disconnected: some seeds' first draws are, yet every built
    # graph is connected.
    first_draws = [nx.gnp_random_graph(16, 0.2, seed=graph_draw_seed(s, 0)) for s in range(10)]
    assert not all(nx.is_connected(g) for g in first_draws)
    graphs = [build_graph(ErdosRenyiTopology(p=0.2), 16, seed=s) for s in range(10)]
    assert all(nx.is_connected(g) for g in graphs)


def test_erdos_renyi_gives_up_with_a_clear_error():
    with pytest.raises(GraphError) as info:
        build_graph(ErdosRenyiTopology(p=0.02, attempts=5), 30, seed=0)
    message = str(info.value)
    assert "no connected draw in 5 attempts" in message
    assert "components" in message and "ln(n)/n" in message


def test_small_world_is_connected_with_mean_degree_k():
    graph = build_graph(SmallWorldTopology(k=4, p=0.2), 20, seed=1)
    assert nx.is_connected(graph)
    assert graph.number_of_edges() == 20 * 4 // 2


def test_small_world_k_must_be_below_the_node_count():
    with pytest.raises(GraphError, match="k=6 needs more than 6 nodes"):
        build_graph(SmallWorldTopology(k=6), 6, seed=0)


@pytest.mark.parametrize(
    "config",
    [
        ErdosRenyiTopology(p=0.3),
        SmallWorldTopology(k=4, p=0.3),
        RegularTopology(degree=3),
    ],
    ids=lambda c: c.kind,
)
def test_random_graphs_are_reproducible_by_seed(config):
    first = build_graph(config, 20, seed=7)
    again = build_graph(config, 20, seed=7)
    other = build_graph(config, 20, seed=8)
    assert edges(first) == edges(again)
    assert edges(first) != edges(other)


def test_building_a_graph_leaves_global_rngs_alone():
    import random

    import numpy as np

    random.seed(123)
    np.random.seed(123)
    expected = (random.random(), np.random.random())
    random.seed(123)
    np.random.seed(123)
    build_graph(ErdosRenyiTopology(p=0.3), 20, seed=0)
    build_graph(MatchingTopology(), 20, seed=0, round=3)
    assert (random.random(), np.random.random()) == expected


def test_time_varying_kinds_redraw_per_round_deterministically():
    config = RegularTopology(degree=3, time_varying=True)
    assert is_time_varying(config) and is_time_varying(MatchingTopology())
    assert not is_time_varying(RegularTopology(degree=3))
    rounds = [edges(build_graph(config, 12, seed=0, round=r)) for r in range(4)]
    assert len({frozenset(r) for r in rounds}) == 4
    assert edges(build_graph(config, 12, seed=0, round=2)) == rounds[2]


@pytest.mark.parametrize("nodes", [8, 9])
def test_matching_pairs_every_node_at_most_once(nodes):
    for r in range(5):
        graph = build_graph(MatchingTopology(), nodes, seed=3, round=r)
        assert max(degrees(graph)) == 1
        assert graph.number_of_edges() == nodes // 2


def test_fixed_graphs_ignore_the_round():
    config = ErdosRenyiTopology(p=0.3)
    assert edges(build_graph(config, 12, seed=0, round=0)) == edges(
        build_graph(config, 12, seed=0, round=9)
    )


# --------------------------------------------------------------------------- edge lists


def test_edge_list_file_with_comments_commas_and_node_count(tmp_path):
    path = tmp_path / "g.edges"
    path.write_text("# a square\n4\n0 1\n1,2\n\n2 3  # last side\n3 0\n")
    graph = build_graph(EdgeListTopology(path=path), 4, seed=0)
    assert edges(graph) == {frozenset(e) for e in [(0, 1), (1, 2), (2, 3), (3, 0)]}


def test_disconnected_edge_list_names_its_components(tmp_path):
    path = tmp_path / "split.txt"
    path.write_text("0 1\n1 2\n3 4\n")
    with pytest.raises(GraphError) as info:
        build_graph(EdgeListTopology(path=path), 6, seed=0)
    message = str(info.value)
    assert "disconnected" in message
    assert "3 components: {0, 1, 2}, {3, 4}, {5}" in message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0 1\n1 x\n", "line 2: expected node ids"),
        ("0 1\n1 2 3\n", "line 2: expected two node ids"),
        ("0 1\n1 9\n", "line 2: node 9 is out of range 0..3"),
        ("0 1\n2 2\n", "line 2: self-loop on node 2"),
        ("5\n0 1\n", "line 1: the file declares 5 nodes, the run has 4"),
        ("# nothing\n", "no edges"),
    ],
)
def test_bad_edge_lists_name_file_and_line(tmp_path, text, message):
    path = tmp_path / "bad.edges"
    path.write_text(text)
    with pytest.raises(GraphError, match=message) as info:
        read_edge_list(path, 4)
    assert str(path) in str(info.value)


def test_missing_edge_list_file_is_a_graph_error(tmp_path):
    with pytest.raises(GraphError, match="cannot read the edge list"):
        read_edge_list(tmp_path / "absent.edges", 4)
