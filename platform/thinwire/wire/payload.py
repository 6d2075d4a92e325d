"""The in-memory form of what travels: an `Update` of per-tensor `Payload`s.

A codec produces a `Payload` on the tensor's device; `thinwire.wire.encode` serializes it and
`thinwire.wire.decode` rebuilds it, validated, from untrusted bytes. A payload is two
independent choices, as in `update.proto`: its *support* (which coordinates are carried) and
its *values* (how the carried coordinates are written).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

__all__ = [
    "DenseSupport",
    "FactorSupport",
    "Kind",
    "MultiScaleValues",
    "Payload",
    "QuantizedValues",
    "RawValues",
    "SeedScheme",
    "SeededSupport",
    "SignValues",
    "SparseSupport",
    "Support",
    "TensorSpec",
    "Update",
    "Values",
    "client_id",
    "factors",
]


class Kind(enum.IntEnum):
    """What an update's tensors mean to the receiver (values match `update.proto`)."""

    MODEL_DELTA = 1
    MODEL = 2
    GOSSIP_CORRECTION = 3


class SeedScheme(enum.IntEnum):
    """How a receiver regenerates seeded coordinates (values match `update.proto`)."""

    RANDOM_K = 1
    RANDOM_BLOCK = 2


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """What a receiver expects of one tensor: its name and the shape its payload indexes."""

    name: str
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        """Number of coordinates, prod(shape)."""
        return math.prod(self.shape)


@dataclass(frozen=True, slots=True)
class DenseSupport:
    """Every coordinate, in row-major order."""


@dataclass(frozen=True, slots=True)
class SparseSupport:
    """An explicit list of coordinates."""

    indices: torch.Tensor  # (k,) int64, strictly increasing, in [0, n)


@dataclass(frozen=True, slots=True)
class SeededSupport:
    """Coordinates the receiver regenerates from a seed; see `thinwire.codecs.seeded`."""

    seed: int  # in [0, 2**64)
    scheme: SeedScheme
    count: int  # k, in [0, n]


@dataclass(frozen=True, slots=True)
class FactorSupport:
    """A rank-r matrix P Q^T over a 2-D domain (n, m): the values are P's then Q's entries.

    The payload's raw values hold (n + m) * rank floats, P (n, r) then Q (m, r), each
    row-major; `factors` splits them and the receiver multiplies them out (PowerSGD).
    """

    rank: int  # r, in [1, min(n, m)]


Support = DenseSupport | SparseSupport | SeededSupport | FactorSupport


@dataclass(frozen=True, slots=True)
class RawValues:
    """Plain floats."""

    data: torch.Tensor  # (k,) float32, float16 or bfloat16


@dataclass(frozen=True, slots=True)
class QuantizedValues:
    """QSGD levels: value_i = norms[i // bucket] * levels[i] / s."""

    levels: torch.Tensor  # (k,) int8/int16/int32 in [-s, s]
    norms: torch.Tensor  # (ceil(k / bucket),) float32; one entry when bucket == 0
    s: int  # number of positive levels, >= 1
    bucket: int  # carried values per norm; 0 means a single bucket


@dataclass(frozen=True, slots=True)
class SignValues:
    """Scaled signs: value_i = scales[i // bucket] * (-1 if negative[i] else +1).

    Two-sided (`negative_scales` set): a negative value is -negative_scales[i // bucket]
    instead, so each bucket carries two magnitudes (A2SGD's two means).
    """

    negative: torch.Tensor  # (k,) bool
    scales: torch.Tensor  # (ceil(k / bucket),) float32; one entry when bucket == 0
    bucket: int  # carried values per scale; 0 means a single bucket
    negative_scales: torch.Tensor | None = None  # like `scales`; None: one-sided (symmetric)


@dataclass(frozen=True, slots=True)
class MultiScaleValues:
    """Multi-scale levels: value_i = norms[i // bucket] * levels[i] / scales[scale_index[i]]."""

    levels: torch.Tensor  # (k,) int8/int16, |level| <= 2**(bits - 1) - 1
    scale_index: torch.Tensor  # (k,) uint8, each < len(scales)
    norms: torch.Tensor  # (ceil(k / bucket),) float32; one entry when bucket == 0
    scales: tuple[int, ...]  # levels per unit norm, strictly increasing
    bits: int  # width of a level code
    bucket: int  # carried values per norm; 0 means a single bucket


Values = RawValues | QuantizedValues | SignValues | MultiScaleValues


def _count(values: Values) -> int:
    match values:
        case RawValues(data=data):
            return int(data.numel())
        case QuantizedValues(levels=levels):
            return int(levels.numel())
        case SignValues(negative=negative):
            return int(negative.numel())
        case MultiScaleValues(levels=levels):
            return int(levels.numel())


@dataclass(frozen=True, slots=True)
class Payload:
    """One tensor as it travels: the domain's shape, the carried coordinates, their values."""

    shape: tuple[int, ...]
    support: Support
    values: Values

    @property
    def numel(self) -> int:
        """Size n of the domain the support indexes."""
        return math.prod(self.shape)

    @property
    def count(self) -> int:
        """Number k of carried values."""
        return _count(self.values)

    def to(self, device: torch.device | str) -> Payload:
        """The same payload with every tensor on `device` (cheap: only k values move)."""
        return Payload(
            self.shape, _move_support(self.support, device), _move_values(self.values, device)
        )


def _move_support(support: Support, device: torch.device | str) -> Support:
    if isinstance(support, SparseSupport):
        return SparseSupport(support.indices.to(device))
    return support


def _move_values(values: Values, device: torch.device | str) -> Values:
    match values:
        case RawValues(data=data):
            return RawValues(data.to(device))
        case QuantizedValues(levels=levels, norms=norms, s=s, bucket=bucket):
            return QuantizedValues(levels.to(device), norms.to(device), s, bucket)
        case SignValues(negative=negative, scales=scales, bucket=bucket):
            two_sided = values.negative_scales
            moved = None if two_sided is None else two_sided.to(device)
            return SignValues(negative.to(device), scales.to(device), bucket, moved)
        case MultiScaleValues(levels=levels, scale_index=index, norms=norms):
            return MultiScaleValues(
                levels.to(device),
                index.to(device),
                norms.to(device),
                values.scales,
                values.bits,
                values.bucket,
            )


def factors(payload: Payload) -> tuple[torch.Tensor, torch.Tensor]:
    """The (P, Q) of a factor payload: views of its raw values, (n, r) and (m, r).

    Raises:
        ValueError: if the payload is not a factor support over a 2-D domain with raw
            values of exactly (n + m) * rank entries (the wire refuses such payloads first).
    """
    support, values = payload.support, payload.values
    if not isinstance(support, FactorSupport) or not isinstance(values, RawValues):
        raise ValueError("factors() needs a FactorSupport payload with raw values")
    if len(payload.shape) != 2:
        raise ValueError(f"a factor payload needs a 2-D domain, got shape {payload.shape}")
    (n, m), r = payload.shape, support.rank
    data = values.data.reshape(-1)
    if data.numel() != (n + m) * r:
        raise ValueError(f"rank-{r} factors of {n} x {m} need {(n + m) * r} values")
    return data[: n * r].view(n, r), data[n * r :].view(m, r)


@dataclass(frozen=True, slots=True)
class Update:
    """One message between roles: who sent it, for which round, and one payload per tensor."""

    sender: str
    round: int
    kind: Kind
    tensors: Mapping[str, Payload]  # in the receiver's spec order
    metrics: Mapping[str, float] = field(default_factory=dict)


def client_id(index: int) -> str:
    """The sender id of federated client `index` (0-based), as written into its updates."""
    return f"client-{index}"
