"""ACP-SGD over a DDP bucket: PowerSGD's factors in alternation, one allreduce per step.

Zhang et al., "Evaluation and Optimization of Gradient Compression for Distributed Deep
Learning" (ICDCS'23, arXiv 2306.08881), in its native all-reduce form. PowerSGD computes
and allreduces both factors every step (`thinwire.ddp.powersgd`); ACP-SGD computes one,
alternately, and reuses the other from the step before:

- step 1, 3, 5, ... (a *P step*): Q_hat = orthogonalize(Q_prev); P = M Q_hat; allreduce P;
  the bucket gets mean(P) Q_hat^T, and mean(P) is kept for the next step;
- step 2, 4, 6, ... (a *Q step*): P_hat = orthogonalize(P_prev); Q = M^T P_hat; allreduce Q;
  the bucket gets P_hat mean(Q)^T, and mean(Q) is kept.

Either way the result is the projection of the workers' mean onto a shared rank-r subspace
(Q_hat's row space or P_hat's column space), and only one factor travels: (n r) or (m r)
floats a step against PowerSGD's (n + m) r. M is the gradient plus the error feedback e,
and e <- M - (this worker's own factor) (the reused one)^T, the local form thinwire's
PowerSGD uses too. The reused factor is the allreduced one, identical on every rank, so
each rank orthogonalizes the same matrix; the first Q is seeded, identical everywhere.

Approximation: the alternation, the orthogonalization of the reused factor and the error
feedback follow the method's description (the paper's Algorithm and its public code were
not at hand to compare line by line); the tests hold this module to that definition.

Tensors not worth compressing (`worth_compressing`: vectors, small and thin matrices) are
allreduced uncompressed, as in PowerSGD. State is per parameter position (`ACPState`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch

from thinwire.codecs.lowrank import (
    initial_q,
    matrix_view,
    orthogonalize,
    p_step,
    q_step,
    reconstruct,
)
from thinwire.ddp.collectives import Group, Traffic, allreduce_, world_size
from thinwire.ddp.powersgd import (
    allreduce_uncompressed,
    check_settings,
    compressed_positions,
    split_flat,
)
from thinwire.seeding import tensor_seed

__all__ = ["ACPSGD", "ACPState", "acpsgd_allreduce"]


@dataclass(frozen=True)
class ACPSGD:
    """ACP-SGD as a DDP exchange (see the module docstring).

    Args:
        rank: r, the rank of the approximation (>= 1).
        min_compression_rate: a matrix is compressed only when n m >= rate (n + m) r.
        error_feedback: add each step's approximation error to the next step's matrix
            (the method relies on it: a single factor a step is a coarse approximation).
        start_iter: steps of plain allreduce before compression starts.
        seed: seeds the initial Q, identical on every rank.
    """

    rank: int = 1
    min_compression_rate: float = 2.0
    error_feedback: bool = True
    start_iter: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        check_settings("ACPSGD", self.rank, self.min_compression_rate, self.start_iter)


class ACPState(NamedTuple):
    """State of one parameter under ACP-SGD."""

    p: torch.Tensor  # (n, r) float32: the last allreduced mean P (zeros before the first)
    q: torch.Tensor  # (m, r) float32: the last allreduced mean Q (seeded at the start)
    residual: torch.Tensor  # (n, m) float32: e, not yet sent
    calls: int  # compressed steps so far: even -> the next is a P step, odd -> a Q step


def init_acp(shape: tuple[int, ...], rank: int, *, seed: int, device: torch.device) -> ACPState:
    """The state before the first step: zero P, seeded Q, zero residual."""
    n, m = matrix_view(shape)
    r = min(rank, n, m)
    return ACPState(
        torch.zeros(n, r, device=device),
        initial_q(m, r, seed=seed, device=device),
        torch.zeros(n, m, device=device),
        0,
    )


def acpsgd_allreduce(
    grads: Sequence[torch.Tensor],
    keys: Sequence[int],
    states: dict[int, ACPState],
    config: ACPSGD,
    step: int,
    group: Group,
    traffic: Traffic,
) -> tuple[list[torch.Tensor], dict[int, ACPState]]:
    """The mean over ranks of each gradient (compressed where worthwhile), and new states.

    Args:
        grads: this rank's gradients of one bucket, in bucket order.
        keys: each gradient's parameter position in the model (its state's key).
        states: per-parameter states from earlier steps (missing ones are initialized).
        config: the ACP-SGD settings.
        step: the hook's step counter (compression starts at `config.start_iter`).
        group: the process group.
        traffic: where the bytes are counted.
    """
    ranks = world_size(group)
    compressed = compressed_positions(
        grads,
        step,
        rank=config.rank,
        min_compression_rate=config.min_compression_rate,
        start_iter=config.start_iter,
    )
    out = allreduce_uncompressed(grads, set(compressed), group, traffic)
    if not compressed:
        return out, states
    states = dict(states)
    matrices, reused, sent = [], [], []
    for i in compressed:
        g, key = grads[i], keys[i]
        state = states.get(key) or init_acp(
            tuple(g.shape), config.rank, seed=tensor_seed(config.seed, key), device=g.device
        )
        states[key] = state
        matrix = g.reshape(matrix_view(tuple(g.shape))).float()
        if config.error_feedback:
            matrix = matrix + state.residual
        if state.calls % 2 == 0:  # P step: P = M Q_hat
            fixed = orthogonalize(state.q)
            local = p_step(matrix, fixed)
        else:  # Q step: Q = M^T P_hat
            fixed = orthogonalize(state.p)
            local = q_step(matrix, fixed)
        matrices.append(matrix)
        reused.append(fixed)
        sent.append(local)
    flat = torch.cat([s.reshape(-1) for s in sent])
    allreduce_(flat, group, traffic)
    flat /= ranks
    means = split_flat(flat, [s.shape for s in sent])
    for j, i in enumerate(compressed):
        key, state = keys[i], states[keys[i]]
        p_step_now = state.calls % 2 == 0
        if p_step_now:
            approx = reconstruct(means[j], reused[j])
            p, q = means[j].clone(), reused[j]
        else:
            approx = reconstruct(reused[j], means[j])
            p, q = reused[j], means[j].clone()
        out[i] = approx.view(grads[i].shape)
        kept = state.residual
        if config.error_feedback:  # this rank's own factor against the shared one
            mine = (
                reconstruct(sent[j], reused[j]) if p_step_now else reconstruct(reused[j], sent[j])
            )
            kept = matrices[j] - mine
        states[key] = ACPState(p, q, kept, state.calls + 1)
    return out, states
