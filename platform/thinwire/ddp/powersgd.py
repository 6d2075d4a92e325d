"""PowerSGD over a DDP bucket: the low-rank maths of `thinwire.codecs.lowrank`, two allreduces.

Vogels, Karimireddy & Jaggi (NeurIPS'19), in the shape of PyTorch's `powerSGD_hook`:

1. split the bucket's gradients into matrices worth compressing at rank r
   (`worth_compressing` with `min_compression_rate`) and the rest (vectors, small or thin
   matrices);
2. allreduce the rest, uncompressed, in one flat tensor;
3. for each compressed matrix M (plus its residual), P = M Q with Q warm-started from the
   previous step; allreduce all P at once, orthogonalize each;
4. Q = M^T P_hat and the local residual M - P_hat Q^T; allreduce all Q at once;
5. write P_hat Q^T / world (the mean's rank-r approximation) into the bucket.

State is kept per parameter (`LowRankState`: the warm-start Q and the residual), keyed by
the parameter's position in the model, so DDP's bucket rebuild after the first iteration
does not disturb it. Bytes: the uncompressed rest, all P and all Q, as float32.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from thinwire.codecs.lowrank import (
    LowRankState,
    init_lowrank,
    initial_q,
    matrix_view,
    orthogonalize,
    p_step,
    q_step,
    reconstruct,
    residual,
    worth_compressing,
)
from thinwire.ddp.collectives import Group, Traffic, allreduce_, world_size
from thinwire.seeding import tensor_seed, tensor_step_seed

__all__ = [
    "PowerSGD",
    "allreduce_uncompressed",
    "check_settings",
    "compressed_positions",
    "powersgd_allreduce",
    "split_flat",
]


@dataclass(frozen=True)
class PowerSGD:
    """PowerSGD as a DDP exchange (see the module docstring).

    Tuning, as in PyTorch's `PowerSGDState`: start with `rank` 1-4 (higher is closer to
    plain SGD and costs linearly more); keep `warm_start` and `error_feedback` on (without
    them rank-1 PowerSGD loses accuracy); raise `min_compression_rate` to leave more small
    matrices uncompressed when their factors barely save bytes.

    Args:
        rank: r, the rank of the approximation (>= 1).
        min_compression_rate: a matrix is compressed only when n m >= rate (n + m) r.
        warm_start: start each step's power iteration from the previous Q (else a fresh
            seeded Q every step).
        error_feedback: add each step's approximation error to the next step's matrix.
        start_iter: steps of plain allreduce before compression starts (PyTorch's
            `start_powerSGD_iter`; its reason, the bucket rebuild, does not apply here).
        seed: seeds the initial Q, identical on every rank.
    """

    rank: int = 1
    min_compression_rate: float = 2.0
    warm_start: bool = True
    error_feedback: bool = True
    start_iter: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        check_settings("PowerSGD", self.rank, self.min_compression_rate, self.start_iter)


def check_settings(name: str, rank: int, min_compression_rate: float, start_iter: int) -> None:
    """Refuses a low-rank hook's settings that cannot work (`name` says whose they are)."""
    if rank < 1:
        raise ValueError(f"{name} rank must be >= 1, got {rank}")
    if min_compression_rate < 1.0:
        raise ValueError(f"{name} min_compression_rate must be >= 1, got {min_compression_rate}")
    if start_iter < 0:
        raise ValueError(f"{name} start_iter must be >= 0, got {start_iter}")


def compressed_positions(
    grads: Sequence[torch.Tensor],
    step: int,
    *,
    rank: int,
    min_compression_rate: float,
    start_iter: int,
) -> list[int]:
    """Positions of the gradients a low-rank hook compresses at `step`.

    None before `start_iter`; never a vector, nor a matrix whose rank-`rank` factors are not
    `min_compression_rate` times smaller (`worth_compressing`).
    """
    if step < start_iter:
        return []
    return [
        i
        for i, g in enumerate(grads)
        if worth_compressing(tuple(g.shape), rank, min_compression_rate)
    ]


def powersgd_allreduce(
    grads: Sequence[torch.Tensor],
    keys: Sequence[int],
    states: dict[int, LowRankState],
    config: PowerSGD,
    step: int,
    group: Group,
    traffic: Traffic,
) -> tuple[list[torch.Tensor], dict[int, LowRankState]]:
    """The mean over ranks of each gradient (compressed where worthwhile), and new states.

    Args:
        grads: this rank's gradients of one bucket, in bucket order.
        keys: each gradient's parameter position in the model (its state's key).
        states: per-parameter states from earlier steps (missing ones are initialized).
        config: the PowerSGD settings.
        step: the hook's step counter (seeds fresh Qs without warm start).
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
    matrices, qs = [], []
    for i in compressed:
        g, key = grads[i], keys[i]
        state = states.get(key) or init_lowrank(
            tuple(g.shape), config.rank, seed=tensor_seed(config.seed, key), device=g.device
        )
        matrix = g.reshape(matrix_view(tuple(g.shape))).float()
        if config.error_feedback:
            matrix = matrix + state.residual
        q = state.q
        if not config.warm_start:
            q = initial_q(
                q.shape[0],
                q.shape[1],
                seed=tensor_step_seed(config.seed, key, step),
                device=g.device,
            )
        matrices.append(matrix)
        qs.append(q)
        states[key] = state
    ps = [p_step(m, q) for m, q in zip(matrices, qs, strict=True)]
    p_flat = torch.cat([p.reshape(-1) for p in ps])
    allreduce_(p_flat, group, traffic)
    p_hats = [orthogonalize(p) for p in split_flat(p_flat, [p.shape for p in ps])]
    new_qs = [q_step(m, p_hat) for m, p_hat in zip(matrices, p_hats, strict=True)]
    errors = (
        [residual(m, p, q) for m, p, q in zip(matrices, p_hats, new_qs, strict=True)]
        if config.error_feedback
        else [states[keys[i]].residual for i in compressed]
    )
    q_flat = torch.cat([q.reshape(-1) for q in new_qs])
    allreduce_(q_flat, group, traffic)
    q_flat /= ranks
    mean_qs = split_flat(q_flat, [q.shape for q in new_qs])
    for j, i in enumerate(compressed):
        key = keys[i]
        out[i] = reconstruct(p_hats[j], mean_qs[j]).view(grads[i].shape)
        states[key] = LowRankState(mean_qs[j].clone(), errors[j])
    return out, states


def allreduce_uncompressed(
    grads: Sequence[torch.Tensor], compressed: set[int], group: Group, traffic: Traffic
) -> list[torch.Tensor]:
    """The mean over ranks of every gradient not in `compressed`, in one flat allreduce.

    Returns a list over `grads` holding those means; at a compressed position it holds an
    empty tensor, which the caller replaces with that gradient's decompressed mean.
    """
    out: list[torch.Tensor] = [torch.empty(0)] * len(grads)
    plain = [i for i in range(len(grads)) if i not in compressed]
    if plain:
        flat = torch.cat([grads[i].reshape(-1).float() for i in plain])
        allreduce_(flat, group, traffic)
        flat /= world_size(group)
        for i, mean in zip(plain, split_flat(flat, [grads[i].shape for i in plain]), strict=True):
            out[i] = mean
    return out


def split_flat(flat: torch.Tensor, shapes: Sequence[torch.Size]) -> list[torch.Tensor]:
    """`flat` cut into consecutive views of `shapes`."""
    parts, offset = [], 0
    for shape in shapes:
        size = shape.numel()
        parts.append(flat[offset : offset + size].view(shape))
        offset += size
    return parts
