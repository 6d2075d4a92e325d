"""Mixing matrices: how much of each neighbour's model a gossip peer averages in.

A mixing matrix W (n x n) must be symmetric, non-negative and doubly stochastic, with
w_ij > 0 only where i and j share an edge (or i == j). Gossip averaging x <- W x then
preserves the network mean and contracts the disagreement by |lambda_2(W)| per step, so the
*spectral gap* rho = 1 - |lambda_2| measures how fast a graph mixes (CHOCO-SGD's rates scale
with it), and beta = ||I - W||_2 enters CHOCO's consensus step size.

Three sources, chosen by the topology's `mixing:` section:

- Metropolis-Hastings (default): w_ij = 1 / (max(deg_i, deg_j) + 1) on each edge and
  w_ii = 1 - sum_j w_ij. It needs only the two endpoints' degrees, so each peer can compute
  its row locally (decentralizepy's and CHOCO's choice).
- Max-degree: w_ij = 1 / (max_deg + 1) on every edge; one weight for the whole graph.
- A file (CSV or .npy) holding a matrix tuned elsewhere, checked like the others.

Each source is a `thinwire.registry.MIXINGS` factory `(section, graph) -> W`, registered
here for the sections `thinwire.config` declares; `mixing_matrix` validates whatever a
factory returns, so a plugin's rule (`MIXINGS.register(kind, section=..., factory=...)`)
is checked like these.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

import networkx as nx
import numpy as np

from thinwire.config import MatrixFileWeights, MaxDegreeWeights, MetropolisHastingsWeights, Mixing
from thinwire.registry import MIXINGS

__all__ = [
    "MixingError",
    "Spectrum",
    "load_mixing_matrix",
    "max_degree_weights",
    "metropolis_hastings",
    "mixing_matrix",
    "spectrum",
    "validate_mixing",
]

TOLERANCE = 1e-8
"""Absolute tolerance of the symmetry, row-sum and zero-pattern checks."""


class MixingError(ValueError):
    """A mixing matrix that gossip cannot use; the message names the offending entry."""


class Spectrum(NamedTuple):
    """How fast a mixing matrix averages."""

    gap: float  # rho = 1 - |lambda_2|, in [0, 1]; 0 means some disagreement never decays
    lambda2: float  # |lambda_2|: the largest eigenvalue magnitude after the leading 1
    beta: float  # ||I - W||_2 = max_i |1 - lambda_i|, in [0, 2]


def metropolis_hastings(graph: nx.Graph) -> np.ndarray:
    """W with w_ij = 1 / (max(deg_i, deg_j) + 1) on edges and the row's rest on the diagonal."""
    n = graph.number_of_nodes()
    weights = np.zeros((n, n))
    for i, j in graph.edges:
        weights[i, j] = weights[j, i] = 1.0 / (max(graph.degree[i], graph.degree[j]) + 1)
    np.fill_diagonal(weights, 1.0 - weights.sum(axis=1))
    return weights


def max_degree_weights(graph: nx.Graph) -> np.ndarray:
    """W with w_ij = 1 / (max_deg + 1) on every edge and the row's rest on the diagonal."""
    n = graph.number_of_nodes()
    weight = 1.0 / (max((d for _, d in graph.degree), default=0) + 1)
    weights = np.zeros((n, n))
    for i, j in graph.edges:
        weights[i, j] = weights[j, i] = weight
    np.fill_diagonal(weights, 1.0 - weights.sum(axis=1))
    return weights


def load_mixing_matrix(path: str | Path, graph: nx.Graph) -> np.ndarray:
    """Reads W from a `.npy` file (never unpickled) or a CSV file, and validates it.

    Raises:
        MixingError: naming the file and what is wrong with the matrix.
    """
    source = Path(path)
    try:
        if source.suffix == ".npy":
            weights = np.load(source, allow_pickle=False)
        else:
            weights = np.loadtxt(source, delimiter=",", dtype=np.float64, ndmin=2)
    except (OSError, ValueError) as exc:
        raise MixingError(f"{source}: cannot read a mixing matrix: {exc}") from None
    try:
        return validate_mixing(np.asarray(weights, dtype=np.float64), graph)
    except MixingError as exc:
        raise MixingError(f"{source}: {exc}") from None


def validate_mixing(weights: np.ndarray, graph: nx.Graph, *, atol: float = TOLERANCE) -> np.ndarray:
    """Returns `weights` if it is a valid mixing matrix for `graph`.

    Checks, in order: shape n x n, finite, symmetric, non-negative, rows summing to 1
    (columns follow by symmetry), and zero wherever i != j share no edge.

    Raises:
        MixingError: naming the first offending row or entry.
    """
    n = graph.number_of_nodes()
    if weights.shape != (n, n):
        raise MixingError(f"expected a {n} x {n} matrix for {n} nodes, got shape {weights.shape}")
    bad = np.argwhere(~np.isfinite(weights))
    if len(bad):
        i, j = bad[0]
        raise MixingError(f"entry ({i}, {j}) is {weights[i, j]}, not a finite number")
    asymmetry = np.abs(weights - weights.T)
    if asymmetry.max() > atol:
        i, j = np.unravel_index(np.argmax(asymmetry), asymmetry.shape)
        raise MixingError(
            f"not symmetric: entry ({i}, {j}) = {weights[i, j]:.6g} but ({j}, {i}) = "
            f"{weights[j, i]:.6g}"
        )
    bad = np.argwhere(weights < -atol)
    if len(bad):
        i, j = bad[0]
        raise MixingError(f"entry ({i}, {j}) = {weights[i, j]:.6g} is negative")
    sums = weights.sum(axis=1)
    rows = np.flatnonzero(np.abs(sums - 1.0) > atol * max(n, 1))
    if len(rows):
        i = rows[0]
        raise MixingError(f"row {i} sums to {sums[i]:.9g}, not 1 (not doubly stochastic)")
    for i, j in np.argwhere(np.abs(weights) > atol):
        if i != j and not graph.has_edge(int(i), int(j)):
            raise MixingError(
                f"entry ({i}, {j}) = {weights[i, j]:.6g} but nodes {i} and {j} share no edge"
            )
    return weights


def mixing_matrix(config: Mixing, graph: nx.Graph) -> np.ndarray:
    """The mixing matrix that the topology's `mixing:` section asks for, validated.

    Raises:
        MixingError: the matrix is not a valid mixing matrix of `graph`.
        ValueError: for a mixing kind without a registered factory.
    """
    weights: np.ndarray = MIXINGS.factory(config.kind)(config, graph)
    return validate_mixing(weights, graph)


def _from_file(config: MatrixFileWeights, graph: nx.Graph) -> np.ndarray:
    return load_mixing_matrix(config.path, graph)


def _rule(rule: Any) -> Any:
    return lambda config, graph: rule(graph)


MIXINGS.register(
    "metropolis_hastings", section=MetropolisHastingsWeights, factory=_rule(metropolis_hastings)
)
MIXINGS.register("max_degree", section=MaxDegreeWeights, factory=_rule(max_degree_weights))
MIXINGS.register("file", section=MatrixFileWeights, factory=_from_file)


def spectrum(weights: np.ndarray) -> Spectrum:
    """Spectral gap 1 - |lambda_2|, |lambda_2| and beta = ||I - W||_2 of a symmetric W."""
    eigenvalues = np.linalg.eigvalsh(weights)
    magnitudes = np.sort(np.abs(eigenvalues))
    lambda2 = float(magnitudes[-2]) if len(magnitudes) > 1 else 0.0
    beta = float(np.max(np.abs(1.0 - eigenvalues)))
    return Spectrum(gap=max(0.0, 1.0 - lambda2), lambda2=lambda2, beta=beta)
