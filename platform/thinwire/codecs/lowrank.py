"""Low-rank gradient compression maths (PowerSGD): pure functions over explicit state.

Vogels, Karimireddy & Jaggi, "PowerSGD: Practical Low-Rank Gradient Compression for
Distributed Optimization" (NeurIPS'19). A gradient tensor is viewed as a matrix M (n x m,
`matrix_view`) and approximated by P Q^T with P (n x r), Q (m x r), after one step of
subspace (power) iteration warm-started from the previous Q:

1. M <- M + e                          (error feedback: add what earlier steps missed);
2. P = M Q                             (`p_step`);
3. P <- sum over workers of P          (an allreduce: P is linear in M, Q is shared);
4. P_hat = orthogonalize(P)            (`orthogonalize`: orthonormal columns);
5. Q = M^T P_hat                       (`q_step`);
6. e <- M - P_hat Q^T                  (`residual`: this worker's own approximation error);
7. Q <- mean over workers of Q         (an allreduce);
8. M_hat = P_hat Q^T                   (`reconstruct`), and Q is kept for the next step.

Every worker ends with the same M_hat = P_hat P_hat^T mean(M), because P_hat and the mean
Q are identical everywhere. The functions here do the local algebra only; whoever owns
the collective (the DDP hook in `thinwire.ddp`, a later PowerSGD or ACP-SGD codec) runs
steps 3 and 7. Step 6 is the paper's local form (each worker's error against its own
Q); PyTorch's `powerSGD_hook` subtracts the averaged approximation instead.

A tensor is worth compressing only when (n + m) r is well below n m
(`worth_compressing`, PyTorch's `min_compression_rate`); vectors (biases, norms) always go
uncompressed.

State (`LowRankState`): the warm-start Q and the residual e, per tensor, threaded through
by the caller.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from thinwire.seeding import mix

__all__ = [
    "LowRankState",
    "initial_q",
    "init_lowrank",
    "matrix_view",
    "orthogonalize",
    "p_step",
    "q_step",
    "reconstruct",
    "residual",
    "worth_compressing",
]


class LowRankState(NamedTuple):
    """State of one tensor compressed to rank r."""

    q: torch.Tensor  # (m, r) float32 on the tensor's device: the warm-start Q
    residual: torch.Tensor  # (n, m) float32 on the tensor's device: e, not yet sent


def matrix_view(shape: tuple[int, ...]) -> tuple[int, int]:
    """The (n, m) matrix a tensor of `shape` is compressed as: (shape[0], prod(rest))."""
    if len(shape) < 2:
        return (math.prod(shape), 1)
    return (shape[0], math.prod(shape[1:]))


def worth_compressing(shape: tuple[int, ...], rank: int, min_compression_rate: float) -> bool:
    """Whether rank-`rank` factors are at least `min_compression_rate` times smaller.

    Vectors are never compressed (a rank-r factor pair of an n x 1 matrix is larger than it).
    """
    if len(shape) < 2:
        return False
    n, m = matrix_view(shape)
    return (n + m) * rank * min_compression_rate <= n * m


def initial_q(m: int, rank: int, *, seed: int, device: torch.device) -> torch.Tensor:
    """A seeded standard-normal (m, r) Q, identical on every worker that passes `seed`.

    Drawn on the CPU from a private generator (the global RNG is untouched; CPU draws are
    the same on every machine) and moved to `device`.
    """
    generator = torch.Generator(device="cpu").manual_seed(mix(seed) & (2**63 - 1))
    return torch.randn(m, rank, generator=generator).to(device)


def init_lowrank(
    shape: tuple[int, ...], rank: int, *, seed: int, device: torch.device
) -> LowRankState:
    """The state of a tensor of `shape` before its first step: seeded Q, zero residual."""
    n, m = matrix_view(shape)
    r = min(rank, n, m)
    return LowRankState(
        initial_q(m, r, seed=seed, device=device),
        torch.zeros(n, m, dtype=torch.float32, device=device),
    )


def p_step(matrix: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """P = M Q: (n, m) @ (m, r) -> (n, r)."""
    return matrix @ q


def orthogonalize(p: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Orthonormal columns spanning P's, by modified Gram-Schmidt.

    Deterministic, so every worker that orthogonalizes the same summed P gets the same
    P_hat. A column that is (numerically) zero after projection stays (close to) zero
    instead of dividing by zero: `eps` is added to each norm, as in PyTorch's hook.
    """
    out = p.clone()
    for j in range(out.shape[1]):
        column = out[:, j]
        column /= column.norm() + eps
        if j + 1 < out.shape[1]:
            rest = out[:, j + 1 :]
            rest -= column[:, None] * (column @ rest)[None, :]
    return out


def q_step(matrix: torch.Tensor, p_hat: torch.Tensor) -> torch.Tensor:
    """Q = M^T P_hat: (m, n) @ (n, r) -> (m, r)."""
    return matrix.T @ p_hat


def reconstruct(p_hat: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """M_hat = P_hat Q^T: (n, r) @ (r, m) -> (n, m)."""
    return p_hat @ q.T


def residual(matrix: torch.Tensor, p_hat: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """The residual M - P_hat Q^T: what this worker's rank-r approximation leaves out."""
    return matrix - reconstruct(p_hat, q)
