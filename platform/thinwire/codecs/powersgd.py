"""PowerSGD as a sender-side tensor codec: rank-r factors that travel, for the star and gossip.

Vogels, Karimireddy & Jaggi, "PowerSGD: Practical Low-Rank Gradient Compression for
Distributed Optimization" (NeurIPS'19), with the maths of `thinwire.codecs.lowrank`. Each
tensor is viewed as a matrix M (n x m, `matrix_view`: a conv kernel (out, in, kh, kw) is
(out, in * kh * kw)), and one call is one step of warm-started subspace iteration:

1. P = M Q_prev                (Q_prev: this sender's Q of its previous call, or a seeded one);
2. P_hat = orthogonalize(P)    (modified Gram-Schmidt, or Householder QR);
3. Q = M^T P_hat;
4. send P_hat and Q (`FactorSupport`, (n + m) r fp32 values); keep Q for the next call.

The receiver needs no state: it multiplies out P_hat Q^T (a projection of M onto the span
of P_hat, so ||M - P_hat Q^T|| <= ||M||). A star server averages these reconstructions,
which is the *mean of per-client approximations*; PowerSGD's allreduce form (the DDP hook,
`thinwire.ddp.powersgd`) sums P across workers before orthogonalizing and so approximates
the *mean of the matrices* in one shared subspace. Without an allreduce between clients
the per-sender form is the faithful one: each client's factors stand on their own, and a
client that is not sampled, or whose update is dropped, disturbs no one else's decode.

Why this is one codec and not a selector: a rank-r factorization is neither a subset of
coordinates nor a way of writing values, so it replaces `select` and `quantize` (the
config's `codec.lowrank`, which refuses a select, quantize or transform beside it).

Error feedback is the existing wrapper (`codec.error_feedback: true`,
`with_error_feedback`): it adds the residual e to M before step 1 and keeps
e = M + e - P_hat Q^T, which is exactly PowerSGD's local error feedback, so the codec
itself keeps only Q (STYLE: cross-cutting behaviour is a wrapper, not a flag).

A tensor whose factors would not be at least `min_compression_rate` times smaller than it
(vectors, biases, small or thin matrices; `worth_compressing`, as PyTorch's
`powerSGD_hook` decides) is sent dense in fp32, exactly. Whether a tensor is compressed
depends on its shape only, so sender and receiver agree on it, and `forms` tells the
receiver which payload to expect: rank-r factors (r = min(rank, n, m)) or dense fp32.

`warm_start: false` draws a fresh seeded Q every call (seeded by the codec's seed and the
call's step, so runs repeat); it is mostly a baseline, the paper's ablation shows warm
start matters at low rank.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, NamedTuple

import torch

from thinwire.codecs.base import NO_ARGS, Codec, CodecInfo, EncodeArgs
from thinwire.codecs.forms import DENSE, Forms, factors_form, raw_form
from thinwire.codecs.lowrank import (
    initial_q,
    matrix_view,
    orthogonalize,
    p_step,
    q_step,
    reconstruct,
    worth_compressing,
)
from thinwire.seeding import step_seed
from thinwire.wire import WireError
from thinwire.wire.payload import (
    DenseSupport,
    FactorSupport,
    Payload,
    RawValues,
    factors,
)

__all__ = ["PowerSGDState", "powersgd"]

_FP32 = raw_form(torch.float32)

# ||M - P_hat P_hat^T M||^2 = ||M||^2 - ||P_hat^T M||^2 <= ||M||^2: a projection never
# expands, but no delta > 0 holds for every M and warm-started Q (M Q may miss M's top
# singular directions), so the stated contraction is delta = 0.
_PROJECTION = CodecInfo(unbiased=False, delta=lambda n: 0.0)


def _qr(p: torch.Tensor) -> torch.Tensor:
    return torch.linalg.qr(p, mode="reduced").Q


_ORTHOGONALIZERS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "gram_schmidt": orthogonalize,
    "qr": _qr,
}


class PowerSGDState(NamedTuple):
    """State of one tensor's `powersgd` codec."""

    q: torch.Tensor  # (m, r) float32 on the tensor's device: the next call's Q; (0, 0) if dense
    step: int  # calls so far (seeds a fresh Q without warm start)


def powersgd(
    rank: int,
    *,
    min_compression_rate: float = 2.0,
    warm_start: bool = True,
    orthogonalization: Literal["gram_schmidt", "qr"] = "gram_schmidt",
    seed: int,
) -> Codec:
    """A rank-`rank` PowerSGD codec for one tensor (see the module docstring).

    Args:
        rank: r >= 1; a matrix of n x m travels as r' = min(r, n, m) factor columns.
        min_compression_rate: compress only when n m >= rate (n + m) r (>= 1).
        warm_start: start each call from the previous call's Q (else a fresh seeded Q).
        orthogonalization: `gram_schmidt` (`lowrank.orthogonalize`, as PyTorch's hook) or
            `qr` (`torch.linalg.qr`'s reduced Q; more stable for nearly dependent columns).
        seed: seeds the initial Q (and every Q without warm start).

    Returns:
        The `Codec`; wrap it in `with_error_feedback` for PowerSGD's error feedback.

    Raises:
        ValueError: for rank < 1 or min_compression_rate < 1.

    Example:
        >>> import torch
        >>> from thinwire.codecs.powersgd import powersgd
        >>> codec = powersgd(1, seed=0)
        >>> m = torch.outer(torch.arange(1.0, 9.0), torch.ones(6))  # rank 1
        >>> payload, state = codec.encode(m, codec.init(m))
        >>> payload.support, payload.count
        (FactorSupport(rank=1), 14)
        >>> bool(torch.allclose(codec.decode(payload, m.shape), m))
        True
    """
    if rank < 1:
        raise ValueError(f"powersgd rank must be >= 1, got {rank}")
    if min_compression_rate < 1.0:
        raise ValueError(f"powersgd min_compression_rate must be >= 1, got {min_compression_rate}")

    orthogonal = _ORTHOGONALIZERS.get(orthogonalization)
    if orthogonal is None:
        raise ValueError(
            f"powersgd orthogonalization must be gram_schmidt or qr, got {orthogonalization!r}"
        )

    def compressed(shape: tuple[int, ...]) -> bool:
        return worth_compressing(shape, rank, min_compression_rate)

    def effective_rank(shape: tuple[int, ...]) -> int:
        return min(rank, *matrix_view(shape))

    def wire_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
        return matrix_view(shape) if compressed(shape) else shape

    def init(template: torch.Tensor) -> PowerSGDState:
        shape = tuple(template.shape)
        if not compressed(shape):
            return PowerSGDState(torch.zeros(0, 0, device=template.device), 0)
        m = matrix_view(shape)[1]
        return PowerSGDState(
            initial_q(m, effective_rank(shape), seed=seed, device=template.device), 0
        )

    def encode(
        x: torch.Tensor, state: PowerSGDState, args: EncodeArgs = NO_ARGS
    ) -> tuple[Payload, PowerSGDState]:
        del args
        shape = tuple(x.shape)
        if not compressed(shape):
            return Payload(shape, DenseSupport(), RawValues(x.reshape(-1).float())), state
        matrix = x.reshape(matrix_view(shape)).float()
        q = state.q
        if not warm_start and state.step > 0:
            q = initial_q(q.shape[0], q.shape[1], seed=step_seed(seed, state.step), device=x.device)
        p_hat = orthogonal(p_step(matrix, q))
        new_q = q_step(matrix, p_hat)
        values = torch.cat([p_hat.reshape(-1), new_q.reshape(-1)])
        payload = Payload(matrix_view(shape), FactorSupport(p_hat.shape[1]), RawValues(values))
        return payload, PowerSGDState(new_q, state.step + 1)

    def decode(payload: Payload, shape: tuple[int, ...]) -> torch.Tensor:
        if isinstance(payload.support, FactorSupport):
            try:
                p_hat, q = factors(payload)
            except ValueError as error:
                raise WireError(f"powersgd: {error}") from None
            return reconstruct(p_hat.float(), q.float()).reshape(shape)
        if not isinstance(payload.support, DenseSupport) or not isinstance(
            payload.values, RawValues
        ):
            raise WireError("powersgd decodes rank-r factors or dense fp32 values")
        return payload.values.data.float().reshape(shape)

    def forms(shape: tuple[int, ...]) -> Forms:
        if compressed(shape):
            return Forms(frozenset({factors_form(effective_rank(shape))}), frozenset({_FP32}))
        return Forms(frozenset({DENSE}), frozenset({_FP32}))

    name = f"powersgd(rank={rank}{'' if warm_start else ', cold'})"
    return Codec(init, encode, decode, wire_shape, _PROJECTION, name=name, forms=forms)
