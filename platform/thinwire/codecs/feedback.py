"""Error feedback wrappers: what a codec drops is carried into the next call.

Both wrappers take a `Codec` and return a `Codec` with the same payloads and decoder; only
the sender's state grows (STYLE rule 3: feedback is a wrapper, never a flag on a stage).
The receiver decodes exactly as it would without feedback. Each forwards the call's
`EncodeArgs` to the codec it wraps (a shared mask reaches the selector inside).
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, NamedTuple

import torch

from thinwire.codecs.base import NO_ARGS, Codec, EncodeArgs
from thinwire.codecs.support import seeded_indices
from thinwire.wire.payload import DenseSupport, Payload, SeededSupport, SparseSupport

__all__ = ["DGCState", "ErrorFeedbackState", "with_dgc", "with_error_feedback"]


class ErrorFeedbackState(NamedTuple):
    """State of `with_error_feedback`."""

    inner: Any  # the wrapped codec's state
    residual: torch.Tensor  # float32, the template's shape and device: e, not yet sent


def with_error_feedback(codec: Codec) -> Codec:
    """Error feedback (residual memory): compress x plus what earlier calls did not send.

    Stich, Cordonnier & Jaggi (NeurIPS'18, algorithms.md §7.12), in the gradient-domain
    form of grace's `ResidualMemory`:

    1. a = x + e;
    2. payload = C(a);
    3. e <- a - decode(payload).

    With it, biased contractive compressors (top-k, sign) converge at SGD's rate. For a
    sparsifier with fp32 values, decode(payload) + e_new == x + e_old holds exactly in
    floating point (each coordinate is either sent as is or kept whole); with quantized
    values it holds up to one rounding of the subtraction.

    State: the wrapped codec's state and the residual e (float32, shaped like x). The
    sender decodes its own payload once per call to know what the receiver will see.

    Args:
        codec: any codec; its payloads and decoder are unchanged.

    Returns:
        The wrapped `Codec` (same `info`, which describes C applied to a).

    Example:
        >>> import torch
        >>> from thinwire.codecs import chain, top_k, with_error_feedback
        >>> codec = with_error_feedback(chain(top_k(0.5)))
        >>> x = torch.tensor([4.0, 3.0, -2.0, 1.0])
        >>> state = codec.init(x)
        >>> _, state = codec.encode(x, state)
        >>> state.residual
        tensor([ 0.,  0., -2.,  1.])
        >>> payload, state = codec.encode(x, state)
        >>> codec.decode(payload, x.shape)
        tensor([ 4.,  0., -4.,  0.])
    """

    def init(template: torch.Tensor) -> ErrorFeedbackState:
        residual = torch.zeros(template.shape, dtype=torch.float32, device=template.device)
        return ErrorFeedbackState(codec.init(template), residual)

    def encode(
        x: torch.Tensor, state: ErrorFeedbackState, args: EncodeArgs = NO_ARGS
    ) -> tuple[Payload, ErrorFeedbackState]:
        accumulated = x.float() + state.residual
        payload, inner = codec.encode(accumulated, state.inner, args)
        sent = codec.decode(payload, tuple(accumulated.shape))
        # a is this call's own: unless the payload holds some of it, e takes a's memory.
        residual = accumulated - sent if _holds(payload, accumulated) else accumulated.sub_(sent)
        return payload, ErrorFeedbackState(inner, residual)

    return codec._replace(init=init, encode=encode, name=f"ef({codec.name})")


def _holds(payload: Payload, tensor: torch.Tensor) -> bool:
    """Whether `payload` may share `tensor`'s memory (a dense payload can be a view of it).

    Looks through the support and values (dataclasses, tuples, tensors); any other object,
    a plugin's own type, counts as sharing it.
    """
    storage = tensor.untyped_storage().data_ptr()
    parts: list[Any] = [payload.support, payload.values]
    while parts:
        part = parts.pop()
        if isinstance(part, torch.Tensor):
            if part.untyped_storage().data_ptr() == storage:
                return True
        elif isinstance(part, tuple | list):
            parts.extend(part)
        elif dataclasses.is_dataclass(part):
            parts.extend(getattr(part, f.name) for f in dataclasses.fields(part))
        elif not isinstance(part, int | float | str | bool | enum.Enum | None):
            return True
    return False


class DGCState(NamedTuple):
    """State of `with_dgc`."""

    inner: Any  # the wrapped codec's state
    momentum: torch.Tensor  # float32, the template's shape and device: u
    velocity: torch.Tensor  # float32, the template's shape and device: v, not yet sent


def _sent(payload: Payload, device: torch.device) -> torch.Tensor | None:
    # Flat coordinates the payload carries; None for all of them.
    support = payload.support
    if isinstance(support, DenseSupport):
        return None
    if isinstance(support, SparseSupport):
        return support.indices
    if isinstance(support, SeededSupport):
        return seeded_indices(support, payload.numel, device)
    raise TypeError(f"unknown support {type(support).__name__}")


def with_dgc(codec: Codec, momentum: float = 0.9, nesterov: bool = False) -> Codec:
    """Deep Gradient Compression's momentum correction and momentum-factor masking.

    Lin et al. (ICLR'18, algorithms.md §7.7), as in the official `dgc/memory.py`. The
    sender runs momentum SGD's accumulation locally and sends a compressed velocity, so a
    delayed coordinate arrives with the momentum it would have had:

    1. u <- m u + g;  v <- v + u            (Nesterov: u <- m (u + g);  v <- v + u + g);
    2. payload = C(v);
    3. for the coordinates I the payload carries: u[I] <- 0, v[I] <- 0.

    Step 3 stops stale momentum from pushing coordinates that were just applied. The
    receiver applies the decoded velocity with plain SGD (no server momentum). As in DGC,
    sent coordinates leave nothing behind: the quantization error of sent values is not
    fed back (wrap `with_error_feedback` instead when a quantizer's error matters).
    DGC's gradient clipping and warm-up schedule are the trainer's business, not the
    codec's.

    State: the wrapped codec's state, the momentum u and the velocity v (float32, shaped
    like g). Knobs: `momentum` m (0.9 in the paper), `nesterov`.

    Args:
        codec: a codec whose payloads index the tensor's own coordinates (no transform).
        momentum: m in [0, 1).
        nesterov: use the Nesterov form of step 1.

    Returns:
        The wrapped `Codec`.

    Raises:
        ValueError: for momentum outside [0, 1) or a codec with a transform stage.

    Example:
        >>> import torch
        >>> from thinwire.codecs import chain, top_k, with_dgc
        >>> codec = with_dgc(chain(top_k(0.5)), momentum=0.5)
        >>> g = torch.tensor([4.0, 1.0, -2.0, 0.5])
        >>> state = codec.init(g)
        >>> _, state = codec.encode(g, state)
        >>> state.momentum, state.velocity
        (tensor([0.0000, 1.0000, 0.0000, 0.5000]), tensor([0.0000, 1.0000, 0.0000, 0.5000]))
    """
    if not 0.0 <= momentum < 1.0:
        raise ValueError(f"DGC momentum must be in [0, 1), got {momentum}")
    if codec.transform is not None:
        raise ValueError(
            f"with_dgc masks momentum at the coordinates a payload carries, so its codec must "
            f"select the tensor's own coordinates; {codec.name!r} has a transform stage "
            f"({codec.transform.name}). Use with_error_feedback for transformed codecs."
        )

    def init(template: torch.Tensor) -> DGCState:
        zeros = torch.zeros(template.shape, dtype=torch.float32, device=template.device)
        return DGCState(codec.init(template), zeros, zeros.clone())

    def encode(
        g: torch.Tensor, state: DGCState, args: EncodeArgs = NO_ARGS
    ) -> tuple[Payload, DGCState]:
        g = g.float()
        if nesterov:
            u = momentum * (state.momentum + g)
            v = state.velocity + u + g
        else:
            u = momentum * state.momentum + g
            v = state.velocity + u
        payload, inner = codec.encode(v, state.inner, args)
        if payload.numel != v.numel():
            raise ValueError(
                f"with_dgc: the payload indexes {payload.numel} coordinates, the tensor has "
                f"{v.numel()}; the codec must select the tensor's own coordinates"
            )
        sent = _sent(payload, v.device)
        if sent is None:
            u, v = torch.zeros_like(u), torch.zeros_like(v)
        else:
            # Out of place: a payload may hold views of v.
            u = u.reshape(-1).index_fill(0, sent, 0.0).view(u.shape)
            v = v.reshape(-1).index_fill(0, sent, 0.0).view(v.shape)
        return payload, DGCState(inner, u, v)

    return codec._replace(init=init, encode=encode, name=f"dgc({codec.name})")
