"""FedProx's Synthetic(alpha, beta) data, generated per client.

From Li et al., "Federated Optimization in Heterogeneous Networks" (MLSys 2020, Sec. 5.1).
For client k (following the authors' `generate_niid.py`, where alpha and beta are standard
deviations):

1. u_k ~ N(0, alpha^2) and B_k ~ N(0, beta^2);
2. W_k ~ N(u_k, 1) of shape (classes, dim), b_k ~ N(u_k, 1) of shape (classes,);
3. v_k ~ N(B_k, 1) of shape (dim,);
4. x ~ N(v_k, Sigma) with Sigma diagonal, Sigma_jj = j^-1.2 (j = 1..dim);
5. y = argmax(W_k x + b_k).

alpha controls how much the clients' *models* differ, beta how much their *inputs* differ;
Synthetic(0, 0) still differs across clients through the unit-variance draws, as in the
paper.

Client sizes: client k holds n_k = max(10, round(samples_per_client * exp(0.5 z_k))),
z_k ~ N(0, 1), a lognormal spread with median `samples_per_client`. FedProx draws
lognormal(4, 2) + 50, whose heavy tail gives most clients about a hundred examples and a few
thousands; the narrower spread keeps an imbalance (sizes vary by a factor e between the 16th
and 84th percentiles) at a size a 2-core machine trains in seconds. Each client's examples
are then split into its own train and test parts (`test_fraction`, at least one of each).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from thinwire.config import SyntheticData

__all__ = ["SIZE_SIGMA", "SyntheticSplit", "generate_synthetic"]

SIZE_SIGMA = 0.5
"""Spread (log-space standard deviation) of the client sizes."""
MIN_CLIENT_SIZE = 10


class SyntheticSplit(NamedTuple):
    """Pooled train and test sets and each client's indices into them."""

    x_train: torch.Tensor  # (N_train, dim) float32
    y_train: torch.Tensor  # (N_train,) int64
    x_test: torch.Tensor  # (N_test, dim) float32
    y_test: torch.Tensor  # (N_test,) int64
    train: tuple[torch.Tensor, ...]  # per client, int64 indices into x_train
    test: tuple[torch.Tensor, ...]  # per client, int64 indices into x_test


def generate_synthetic(
    config: SyntheticData, clients: int, *, test_fraction: float, seed: int
) -> SyntheticSplit:
    """Generates Synthetic(alpha, beta) for `clients` clients, deterministically from `seed`."""
    g = torch.Generator().manual_seed(seed)
    f64 = torch.float64
    sizes = [
        max(MIN_CLIENT_SIZE, round(config.samples_per_client * math.exp(SIZE_SIGMA * z)))
        for z in torch.randn(clients, generator=g, dtype=f64).tolist()
    ]
    u = torch.randn(clients, generator=g, dtype=f64) * config.alpha
    b_shift = torch.randn(clients, generator=g, dtype=f64) * config.beta
    scale = torch.arange(1, config.dim + 1, dtype=f64).pow(-1.2).sqrt()
    parts: list[tuple[torch.Tensor, ...]] = []
    for k, n in enumerate(sizes):
        weights = u[k] + torch.randn(config.classes, config.dim, generator=g, dtype=f64)
        bias = u[k] + torch.randn(config.classes, generator=g, dtype=f64)
        v = b_shift[k] + torch.randn(config.dim, generator=g, dtype=f64)
        x = v + scale * torch.randn(n, config.dim, generator=g, dtype=f64)
        y = (x @ weights.T + bias).argmax(dim=1)
        order = torch.randperm(n, generator=g)
        n_test = min(n - 1, max(1, round(test_fraction * n)))
        test, train = order[:n_test], order[n_test:]
        parts.append((x[train].float(), y[train], x[test].float(), y[test]))
    return SyntheticSplit(
        x_train=torch.cat([p[0] for p in parts]),
        y_train=torch.cat([p[1] for p in parts]),
        x_test=torch.cat([p[2] for p in parts]),
        y_test=torch.cat([p[3] for p in parts]),
        train=_ranges([len(p[1]) for p in parts]),
        test=_ranges([len(p[3]) for p in parts]),
    )


def _ranges(lengths: list[int]) -> tuple[torch.Tensor, ...]:
    starts = [0, *torch.tensor(lengths).cumsum(0).tolist()]
    return tuple(torch.arange(a, b) for a, b in zip(starts[:-1], starts[1:], strict=True))
