"""Mixing matrices: the weights, their validation, and their spectra."""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest

from thinwire.config import (
    CompleteTopology,
    ExponentialTopology,
    MatrixFileWeights,
    MaxDegreeWeights,
    MetropolisHastingsWeights,
    RingTopology,
    SmallWorldTopology,
    StarTopology,
    TorusTopology,
)
from thinwire.topologies.graph import (
    MixingError,
    build_graph,
    max_degree_weights,
    metropolis_hastings,
    mixing_matrix,
    spectrum,
    validate_mixing,
)

GRAPHS = {
    "ring": build_graph(RingTopology(), 7, seed=0),
    "torus": build_graph(TorusTopology(), 12, seed=0),
    "star": build_graph(StarTopology(), 6, seed=0),
    "complete": build_graph(CompleteTopology(), 5, seed=0),
    "exponential": build_graph(ExponentialTopology(), 10, seed=0),
    "small_world": build_graph(SmallWorldTopology(k=4, p=0.3), 15, seed=2),
}


@pytest.mark.parametrize("kind", GRAPHS)
@pytest.mark.parametrize("weights", [metropolis_hastings, max_degree_weights])
def test_builtin_weights_are_symmetric_doubly_stochastic_on_the_edges(kind, weights):
    graph = GRAPHS[kind]
    matrix = weights(graph)
    assert np.allclose(matrix, matrix.T)
    assert np.allclose(matrix.sum(axis=0), 1) and np.allclose(matrix.sum(axis=1), 1)
    assert (matrix >= 0).all()
    off_edges = ~(nx.to_numpy_array(graph, nodelist=range(len(graph))) > 0)
    np.fill_diagonal(off_edges, False)
    assert (matrix[off_edges] == 0).all()
    assert validate_mixing(matrix, graph) is matrix


def test_metropolis_hastings_weighs_by_the_larger_degree():
    matrix = metropolis_hastings(GRAPHS["star"])  # hub 0 has degree 5, leaves degree 1
    assert matrix[0, 3] == pytest.approx(1 / 6)
    assert matrix[3, 3] == pytest.approx(5 / 6)
    assert matrix[0, 0] == pytest.approx(1 / 6)


def test_max_degree_uses_one_weight_everywhere():
    matrix = max_degree_weights(GRAPHS["star"])
    assert matrix[0, 1] == matrix[0, 5] == pytest.approx(1 / 6)
    assert matrix[2, 2] == pytest.approx(5 / 6)


@pytest.mark.parametrize("n", [3, 4, 5, 8, 9, 16, 33])
def test_ring_spectral_gap_matches_the_closed_form(n):
    matrix = mixing_matrix(MetropolisHastingsWeights(), build_graph(RingTopology(), n, seed=0))
    assert matrix[0, 1] == pytest.approx(1 / 3)
    expected = 1 - (1 + 2 * math.cos(2 * math.pi / n)) / 3
    assert spectrum(matrix).gap == pytest.approx(expected, abs=1e-12)


def test_spectrum_of_the_complete_graph_and_of_a_disconnected_matrix():
    complete = spectrum(metropolis_hastings(GRAPHS["complete"]))
    assert complete.gap == pytest.approx(1.0) and complete.lambda2 == pytest.approx(0, abs=1e-12)
    assert complete.beta == pytest.approx(1.0)
    two_pairs = np.kron(np.eye(2), np.full((2, 2), 0.5))
    assert spectrum(two_pairs).gap == pytest.approx(0.0, abs=1e-12)


def test_beta_is_the_norm_of_i_minus_w():
    matrix = metropolis_hastings(GRAPHS["torus"])
    assert spectrum(matrix).beta == pytest.approx(np.linalg.norm(np.eye(12) - matrix, 2))


def test_mixing_matrix_dispatches_on_the_config():
    graph = GRAPHS["ring"]
    assert np.array_equal(mixing_matrix(MaxDegreeWeights(), graph), max_degree_weights(graph))


# --------------------------------------------------------------------------- custom files

SQUARE = build_graph(RingTopology(), 4, seed=0)  # 0-1-2-3-0


def square_matrix() -> np.ndarray:
    return np.array(
        [
            [0.5, 0.25, 0.0, 0.25],
            [0.25, 0.5, 0.25, 0.0],
            [0.0, 0.25, 0.5, 0.25],
            [0.25, 0.0, 0.25, 0.5],
        ]
    )


def test_custom_matrix_from_csv_and_npy(tmp_path):
    csv = tmp_path / "w.csv"
    np.savetxt(csv, square_matrix(), delimiter=",")
    npy = tmp_path / "w.npy"
    np.save(npy, square_matrix())
    for path in (csv, npy):
        assert np.allclose(mixing_matrix(MatrixFileWeights(path=path), SQUARE), square_matrix())


def test_npy_with_pickled_objects_is_never_unpickled(tmp_path):
    path = tmp_path / "w.npy"
    np.save(path, np.array([{"evil": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(MixingError, match="cannot read a mixing matrix"):
        mixing_matrix(MatrixFileWeights(path=path), SQUARE)


def edit(i: int, j: int, value: float, *, mirror: bool = True) -> np.ndarray:
    matrix = square_matrix()
    matrix[i, j] = value
    if mirror:
        matrix[j, i] = value
    return matrix


@pytest.mark.parametrize(
    ("matrix", "message"),
    [
        (np.eye(3), "expected a 4 x 4 matrix for 4 nodes, got shape \\(3, 3\\)"),
        (edit(1, 2, np.nan), "entry \\(1, 2\\) is nan, not a finite number"),
        (
            edit(0, 1, 0.3, mirror=False),
            "not symmetric: entry \\(0, 1\\) = 0.3 but \\(1, 0\\) = 0.25",
        ),
        (
            np.array([[1.25, -0.25, 0, 0], [-0.25, 1.25, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1.0]]),
            "entry \\(0, 1\\) = -0.25 is negative",
        ),
        (edit(2, 2, 0.6, mirror=False), "row 2 sums to 1.1, not 1"),
        (
            np.array(
                [[0.5, 0.25, 0.25, 0], [0.25, 0.75, 0, 0], [0.25, 0, 0.5, 0.25], [0, 0, 0.25, 0.75]]
            ),
            "entry \\(0, 2\\) = 0.25 but nodes 0 and 2 share no edge",
        ),
    ],
    ids=["shape", "nan", "asymmetric", "negative", "row-sum", "off-edge"],
)
def test_invalid_custom_matrices_name_the_offending_entry(tmp_path, matrix, message):
    path = tmp_path / "w.csv"
    np.savetxt(path, matrix, delimiter=",")
    with pytest.raises(MixingError, match=message) as info:
        mixing_matrix(MatrixFileWeights(path=path), SQUARE)
    assert str(path) in str(info.value)


def test_unreadable_matrix_file(tmp_path):
    with pytest.raises(MixingError, match="cannot read a mixing matrix"):
        mixing_matrix(MatrixFileWeights(path=tmp_path / "absent.csv"), SQUARE)


def test_every_declared_mixing_kind_has_a_factory():
    from thinwire.registry import MIXINGS

    assert MIXINGS.kinds() == ("file", "max_degree", "metropolis_hastings")
    for kind in MIXINGS.kinds():
        assert callable(MIXINGS.factory(kind)), kind
