"""`Update` to bytes and back: the one place a message crosses the process boundary.

`encode` is deterministic (same update, same bytes) and moves only each payload's own
tensors to the host. `decode` treats its input as hostile: every size, count, index and
code is checked against the receiver's spec and `Limits` before it is used to allocate or
index anything, and every failure is a `WireError` that names the tensor and the problem.

Memory follows the bytes actually received, never a count the message claims: each array
is allocated only after the stream that fills it has been checked to hold exactly that many
entries. The one exception is inherent to the entropy-coded QSGD form, whose few bytes stand
for a dense array of levels; its length is bounded by the receiver's own spec (at most the
tensor's size), as for a dense tensor.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
from google.protobuf.message import DecodeError

from thinwire.wire import update_pb2 as pb
from thinwire.wire._errors import WireError
from thinwire.wire._indices import read_indices, write_indices
from thinwire.wire._limits import FORMAT_VERSION, MAX_SENDER_BYTES, SEEDED_DOMAIN_LIMIT, Limits
from thinwire.wire._multiscale import read_multiscale, write_multiscale
from thinwire.wire._values import read_values, write_values
from thinwire.wire.payload import (
    DenseSupport,
    FactorSupport,
    Kind,
    MultiScaleValues,
    Payload,
    RawValues,
    SeededSupport,
    SeedScheme,
    SparseSupport,
    Support,
    TensorSpec,
    Update,
)

__all__ = ["decode", "encode"]

_KINDS = frozenset(int(k) for k in Kind)
_SCHEMES = frozenset(int(s) for s in SeedScheme)
_MAX_NUMEL = 1 << 62
"""Spec sizes must stay below this, so index arithmetic cannot overflow int64."""
_SHOWN = 64
"""Characters of an untrusted string quoted in an error message."""


def encode(update: Update) -> bytes:
    """Serializes an update; the same update always gives the same bytes.

    Only the compact payload tensors (k values, k indices, packed levels) are moved to the
    host; a dense n-vector is read only when the support itself is dense.

    Args:
        update: the update to send; its tensors in the receiver's spec order.

    Returns:
        The `update.proto` message, serialized deterministically.

    Raises:
        ValueError: if the update breaks the format: a sender id over 128 bytes, a
            non-finite metric, or a malformed payload (naming the tensor): values that do not
            match the support's count, sparse indices not strictly increasing in [0, n),
            levels outside [-s, s], a dtype the format does not carry.
    """
    if len(update.sender.encode()) > MAX_SENDER_BYTES:
        raise ValueError(f"sender id {update.sender[:_SHOWN]!r} is over {MAX_SENDER_BYTES} bytes")
    message = pb.Update(
        format=FORMAT_VERSION,
        sender=update.sender,
        round=update.round,
        kind=Kind(update.kind).value,  # type: ignore[arg-type]
    )
    for key, value in update.metrics.items():
        if not math.isfinite(value):
            raise ValueError(f"metric {key!r} is {value}; metrics must be finite")
        message.metrics[key] = float(value)
    for name, payload in update.tensors.items():
        try:
            tensor = message.tensors.add(name=name, shape=payload.shape)
            count = _write_support(payload.support, payload.shape, tensor)
            if isinstance(payload.values, MultiScaleValues):
                write_multiscale(payload.values, count, tensor.multiscale)
            else:
                write_values(payload.values, count, tensor)
        except ValueError as error:
            raise ValueError(f"tensor {name!r}: {error}") from None
    return message.SerializeToString(deterministic=True)


def _write_support(support: Support, shape: tuple[int, ...], tensor: pb.Tensor) -> int:
    """Writes the support into `tensor` and returns its number of carried values."""
    n = math.prod(shape)
    match support:
        case DenseSupport():
            tensor.dense.SetInParent()
            return n
        case SparseSupport(indices=indices):
            if indices.dim() != 1 or indices.dtype.is_floating_point:
                raise ValueError("sparse indices must be a 1-D integer tensor")
            write_indices(indices.detach().cpu().numpy(), n, tensor.sparse)
            return tensor.sparse.count
        case SeededSupport(seed=seed, scheme=scheme, count=count):
            if not 1 <= n <= SEEDED_DOMAIN_LIMIT or not 0 <= count <= n:
                raise ValueError(
                    f"a seeded support needs 0 <= count <= n <= 2**40 and n >= 1, "
                    f"got count {count} of n = {n}"
                )
            tensor.seeded.seed = seed
            tensor.seeded.scheme = int(scheme)  # type: ignore[assignment]
            tensor.seeded.count = count
            return count
        case FactorSupport(rank=rank):
            if len(shape) != 2 or not 1 <= rank <= min(shape):
                raise ValueError(
                    f"factors need a 2-D domain and 1 <= rank <= min(n, m), "
                    f"got rank {rank} of shape {shape}"
                )
            tensor.factors.rank = rank
            return (shape[0] + shape[1]) * rank
    raise TypeError(
        f"expected DenseSupport, SparseSupport, SeededSupport or FactorSupport, got {support!r}"
    )


def decode(
    data: bytes,
    spec: Sequence[TensorSpec] | Mapping[Kind, Sequence[TensorSpec]],
    *,
    limits: Limits = Limits(),  # noqa: B008 - Limits is frozen, so sharing it is safe
    kind: Kind | None = None,
) -> Update:
    """Rebuilds an `Update` from untrusted bytes, validated against the receiver's spec.

    Args:
        data: the serialized message.
        spec: the tensors the receiver expects, in order (names unique); or, where a
            receiver accepts several kinds whose tensors differ (a full model or a
            compressed model delta), a mapping from each accepted kind to its spec.
        limits: caps on sizes and counts; see `Limits`.
        kind: the kind of update expected here, or None to accept any known kind (or any
            kind of the `spec` mapping).

    Returns:
        The update; its tensors are CPU tensors in spec order, each payload shaped as its
        spec says.

    Raises:
        WireError: for any problem with `data`; the message names the tensor if there is
            one. Nothing else is raised for bad input.
        ValueError: if `spec` itself repeats a name or has an impossible shape (a caller's
            mistake, not the sender's).
    """
    specs = dict(spec) if isinstance(spec, Mapping) else None
    if specs is not None and kind is not None:
        raise ValueError("pass either a spec per kind or an expected kind, not both")
    for one in specs.values() if specs is not None else [spec]:
        if isinstance(one, Mapping):
            raise ValueError("a spec per kind maps each kind to a sequence of TensorSpec")
        _check_spec(one)
    if len(data) > limits.max_bytes:
        raise WireError(f"message is {len(data)} bytes, more than the {limits.max_bytes} allowed")
    try:
        message = pb.Update.FromString(data)
    except DecodeError as error:
        raise WireError(f"not an Update message: {error}") from None
    _check_header(message, limits, kind)
    if specs is not None:
        if message.kind not in specs:
            accepted = ", ".join(k.name for k in specs)
            raise WireError(f"expected a {accepted} update, got {Kind(message.kind).name}")
        spec = specs[Kind(message.kind)]
    if isinstance(spec, Mapping):  # checked above; narrows the type
        raise ValueError("a spec per kind maps each kind to a sequence of TensorSpec")
    metrics = _read_metrics(message, limits)
    if len(message.tensors) > limits.max_tensors:
        raise WireError(
            f"message has {len(message.tensors)} tensors, more than the "
            f"{limits.max_tensors} allowed"
        )
    if len(message.tensors) != len(spec):
        raise WireError(_count_mismatch(message, spec))
    tensors: dict[str, Payload] = {}
    for tensor, expected in zip(message.tensors, spec, strict=True):
        try:
            tensors[expected.name] = _read_tensor(tensor, expected, limits)
        except WireError as error:
            raise WireError(f"tensor {expected.name!r}: {error}") from None
    return Update(
        sender=message.sender,
        round=message.round,
        kind=Kind(message.kind),
        tensors=tensors,
        metrics=metrics,
    )


def _check_spec(spec: Sequence[TensorSpec]) -> None:
    names = [s.name for s in spec]
    if len(set(names)) != len(names):
        repeated = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"spec names must be unique; repeated: {repeated}")
    for expected in spec:
        if any(d < 0 for d in expected.shape) or expected.numel >= _MAX_NUMEL:
            raise ValueError(f"spec {expected.name!r} has an impossible shape {expected.shape}")


def _shown(text: str) -> str:
    return repr(text if len(text) <= _SHOWN else text[:_SHOWN] + "...")


def _check_header(message: pb.Update, limits: Limits, kind: Kind | None) -> None:
    if message.format != FORMAT_VERSION:
        raise WireError(f"format version {message.format}, this receiver reads {FORMAT_VERSION}")
    if message.kind not in _KINDS:
        raise WireError(f"unknown update kind {message.kind}")
    if kind is not None and message.kind != kind:
        raise WireError(f"expected a {kind.name} update, got {Kind(message.kind).name}")
    sender_length = len(message.sender.encode())
    if sender_length > limits.max_sender_length:
        raise WireError(
            f"sender id is {sender_length} bytes, more than the {limits.max_sender_length} allowed"
        )
    if message.round > limits.max_round:
        raise WireError(f"round {message.round} out of range [0, {limits.max_round}]")


def _read_metrics(message: pb.Update, limits: Limits) -> dict[str, float]:
    if len(message.metrics) > limits.max_metrics:
        raise WireError(
            f"message has {len(message.metrics)} metrics, more than the "
            f"{limits.max_metrics} allowed"
        )
    metrics: dict[str, float] = {}
    for key in sorted(message.metrics):
        if len(key.encode()) > limits.max_name_length:
            raise WireError(f"metric name {_shown(key)} is longer than {limits.max_name_length}")
        value = message.metrics[key]
        if not math.isfinite(value):
            raise WireError(f"metric {_shown(key)} is {value}, not finite")
        metrics[key] = value
    return metrics


def _count_mismatch(message: pb.Update, spec: Sequence[TensorSpec]) -> str:
    got = len(message.tensors)
    if got < len(spec):
        return f"expected {len(spec)} tensors, got {got} (first missing: {spec[got].name!r})"
    extra = _shown(message.tensors[len(spec)].name)
    return f"expected {len(spec)} tensors, got {got} (first extra: {extra})"


def _read_tensor(tensor: pb.Tensor, expected: TensorSpec, limits: Limits) -> Payload:
    if len(tensor.name.encode()) > limits.max_name_length:
        raise WireError(f"name {_shown(tensor.name)} is longer than {limits.max_name_length}")
    if tensor.name != expected.name:
        raise WireError(f"found {_shown(tensor.name)} in its place (tensors must follow the spec)")
    if len(tensor.shape) != len(expected.shape) or tuple(tensor.shape) != expected.shape:
        shape = tuple(tensor.shape) if len(tensor.shape) <= 8 else f"<{len(tensor.shape)} dims>"
        raise WireError(f"shape {shape} does not match the expected {expected.shape}")
    if tensor.WhichOneof("support") == "factors":
        return _read_factors(tensor, expected.shape, limits)
    support, count = _read_support(tensor, expected.numel)
    if tensor.WhichOneof("values") == "multiscale":
        return Payload(expected.shape, support, read_multiscale(tensor.multiscale, count, limits))
    return Payload(expected.shape, support, read_values(tensor, count, limits))


def _read_support(tensor: pb.Tensor, n: int) -> tuple[Support, int]:
    """The support and its number of coordinates, validated against a domain of n.

    It is read before the values, so that a sparse support's count is backed by its index
    stream before any value array of that length is allocated.
    """
    which = tensor.WhichOneof("support")
    if which == "dense":
        return DenseSupport(), n
    if which == "sparse":
        indices = read_indices(tensor.sparse, n)
        return SparseSupport(torch.from_numpy(indices)), indices.size
    if which == "seeded":
        seeded = tensor.seeded
        if seeded.scheme not in _SCHEMES:
            raise WireError(f"unknown seed scheme {seeded.scheme}")
        if not 1 <= n <= SEEDED_DOMAIN_LIMIT:
            raise WireError(f"a seeded support needs a domain of 1 to 2**40 coordinates, not {n}")
        if seeded.count > n:
            raise WireError(f"seeded support carries {seeded.count} coordinates of a domain of {n}")
        support = SeededSupport(seeded.seed, SeedScheme(seeded.scheme), seeded.count)
        return support, seeded.count
    raise WireError("has no support (dense, sparse, seeded or factors)")


def _read_factors(tensor: pb.Tensor, shape: tuple[int, ...], limits: Limits) -> Payload:
    """A factor payload: rank within the domain, exactly (n + m) r raw values, all finite.

    Non-finite factors are refused whatever `limits.allow_nonfinite` says: one NaN in P or
    Q spreads over a whole row or column of the product.
    """
    if len(shape) != 2:
        raise WireError(f"factors need a 2-D domain (n, m), this tensor's is {shape}")
    rank = tensor.factors.rank
    if not 1 <= rank <= min(shape):
        raise WireError(f"factor rank {rank} is outside [1, min(n, m) = {min(shape)}]")
    if tensor.WhichOneof("values") != "raw":
        raise WireError(f"factors travel as raw values, got {tensor.WhichOneof('values')}")
    values = read_values(tensor, (shape[0] + shape[1]) * rank, limits)
    if not isinstance(values, RawValues):  # read_values of a raw field; narrows the type
        raise WireError("factors travel as raw values")
    if not bool(torch.isfinite(values.data).all()):
        raise WireError(f"rank-{rank} factors hold non-finite values")
    return Payload(shape, FactorSupport(rank), values)
