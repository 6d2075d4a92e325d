"""Transport settings and the gRPC channel and server options derived from them.

Retries are declared, not coded: the channel's service config retries a push that failed
with UNAVAILABLE (the peer is not up yet, or the connection dropped) or RESOURCE_EXHAUSTED
(the receiver had no stream free for it at that moment), with exponential backoff, and
nothing else; every other status is a verdict of the receiver and final.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from thinwire.config import GossipRuntime
from thinwire.topologies.transport.admission import StreamLimits
from thinwire.topologies.transport.framing import FRAME_OVERHEAD, SERVICE_NAME

__all__ = [
    "TransportSettings",
    "channel_options",
    "message_bound",
    "server_options",
    "service_config",
]

_ENVELOPE = 64 * 1024
"""Room for a header frame (run id, counters) on top of one data frame, in bytes."""
_DEFAULT_MAX_BYTES = 2**30
"""The size cap of settings made without a model to derive one from (see `message_bound`)."""
_BUFFERED_FRAMES = 4
"""Frames gRPC keeps for a retry; beyond them a push is committed and no longer retried."""


@dataclass(frozen=True, slots=True)
class TransportSettings:
    """How pushes travel; the defaults are those of the gossip runtime's config section."""

    chunk_bytes: int = 2**20  # bytes of the update per data frame
    max_message_bytes: int = _DEFAULT_MAX_BYTES  # largest update a receiver accepts
    timeout_s: float = 30.0  # deadline of every push, in seconds
    retries: int = 3  # extra attempts after UNAVAILABLE, 0..4
    backoff_s: float = 0.2  # bound of the first retry's random backoff, in seconds
    keepalive_s: float = 60.0  # interval of HTTP/2 keepalive pings, in seconds
    frame_timeout_s: float | None = None  # a push's longest wait for a frame; None: timeout_s / 2
    max_streams: int = 64  # push streams a node serves at once (its worker threads)
    max_streams_per_host: int = 32  # push streams it serves from one remote address

    def __post_init__(self) -> None:
        if self.chunk_bytes < 1:
            raise ValueError(f"chunk_bytes must be >= 1, got {self.chunk_bytes}")
        if self.max_message_bytes < 0:
            raise ValueError(f"max_message_bytes must be >= 0, got {self.max_message_bytes}")
        if not 0 <= self.retries <= 4:
            raise ValueError(
                f"retries must be in 0..4 (gRPC caps attempts at 5), got {self.retries}"
            )
        for name in ("timeout_s", "backoff_s", "keepalive_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0 seconds, got {getattr(self, name)}")
        if self.frame_timeout_s is not None and not self.frame_timeout_s > 0:
            raise ValueError(f"frame_timeout_s must be > 0 seconds, got {self.frame_timeout_s}")
        if self.max_streams < 1 or self.max_streams_per_host < 1:
            raise ValueError(
                f"max_streams and max_streams_per_host must be >= 1, got {self.max_streams} "
                f"and {self.max_streams_per_host}"
            )

    @classmethod
    def from_runtime(
        cls, runtime: GossipRuntime, model: Sequence[int] | None = None
    ) -> TransportSettings:
        """The settings a gossip runtime section declares.

        Args:
            runtime: the section.
            model: the element count of each of the model's tensors; when given and the
                section leaves `max_message_bytes` unset, the cap is `message_bound(model)`.
        """
        if runtime.max_message_bytes is not None:
            max_bytes = runtime.max_message_bytes
        elif model is not None:
            max_bytes = message_bound(model)
        else:
            max_bytes = _DEFAULT_MAX_BYTES
        return cls(
            chunk_bytes=runtime.chunk_bytes,
            max_message_bytes=max_bytes,
            timeout_s=runtime.deadline_s,
            retries=runtime.retries,
            backoff_s=runtime.backoff_s,
            keepalive_s=runtime.keepalive_s,
            frame_timeout_s=runtime.frame_timeout_s,
            max_streams=runtime.max_streams,
            max_streams_per_host=runtime.max_streams_per_host,
        )

    @property
    def stream_limits(self) -> StreamLimits:
        """The receiving side's limits on concurrent and slow push streams."""
        return StreamLimits(
            total=self.max_streams,
            per_host=min(self.max_streams_per_host, self.max_streams),
            frame_timeout_s=self.frame_timeout_s or self.timeout_s / 2,
            stream_timeout_s=self.timeout_s,
        )

    @property
    def frame_limit(self) -> int:
        """Largest gRPC message a push stream may carry, in bytes."""
        return self.chunk_bytes + FRAME_OVERHEAD + _ENVELOPE


_BYTES_PER_COORDINATE = 8
"""The most an honest encoder spends on one coordinate: an fp32 value and its index (a
bitmap bit, or a cheaper index stream), or a QSGD code with one fp32 norm per coordinate."""
_COORDINATE_SLACK = 1024
"""Extra coordinates per tensor: a wavelet transform lengthens a vector by at most
level * filter length (12 * 76 for the longest PyWavelets filter at the deepest level)."""
_TENSOR_OVERHEAD = 2048
"""Bytes per tensor for its name (at most 1 KiB on the wire), shape and field tags."""


def message_bound(model: Sequence[int]) -> int:
    """Twice the largest update an honest node sends for a model of these tensor sizes.

    Whatever the codec or gossip method (dense, sparse, seeded, quantized, sign; one
    payload per tensor or one for the flattened model; wavelet coefficients), no honest
    encoding spends more than `_BYTES_PER_COORDINATE` per coordinate; the bound adds room
    for wavelet lengthening, tensor names and the message envelope, then doubles it. For the
    digits MLP with 16 hidden units (1,210 parameters in 4 tensors) it is 227 KiB.

    Raises:
        ValueError: for an empty model or a negative size.
    """
    if not model or min(model) < 0:
        raise ValueError(f"a model needs tensors of >= 0 elements, got {list(model)[:8]}")
    coordinates = sum(model) + _COORDINATE_SLACK * len(model)
    return 2 * (_BYTES_PER_COORDINATE * coordinates + _TENSOR_OVERHEAD * len(model) + _ENVELOPE)


def service_config(settings: TransportSettings) -> str:
    """The channel's service config (JSON): the retry policy of `Push`."""
    method: dict[str, Any] = {"name": [{"service": SERVICE_NAME}]}
    if settings.retries:
        method["retryPolicy"] = {
            "maxAttempts": settings.retries + 1,
            "initialBackoff": f"{settings.backoff_s:.3f}s",
            "maxBackoff": f"{settings.backoff_s * 2**settings.retries:.3f}s",
            "backoffMultiplier": 2,
            "retryableStatusCodes": ["UNAVAILABLE", "RESOURCE_EXHAUSTED"],
        }
    return json.dumps({"methodConfig": [method]})


def _keepalive(settings: TransportSettings) -> list[tuple[str, Any]]:
    interval = int(settings.keepalive_s * 1000)
    return [
        ("grpc.keepalive_time_ms", interval),
        ("grpc.keepalive_timeout_ms", min(interval, 20_000)),
        ("grpc.http2.max_pings_without_data", 0),
    ]


def channel_options(settings: TransportSettings) -> list[tuple[str, Any]]:
    """Options of a channel to one neighbour: sizes, retries, keepalive."""
    return [
        ("grpc.max_send_message_length", settings.frame_limit),
        ("grpc.max_receive_message_length", _ENVELOPE),
        ("grpc.enable_retries", 1 if settings.retries else 0),
        ("grpc.service_config", service_config(settings)),
        ("grpc.per_rpc_retry_buffer_size", _BUFFERED_FRAMES * settings.frame_limit),
        *_keepalive(settings),
        ("grpc.keepalive_permit_without_calls", 0),
    ]


def server_options(settings: TransportSettings) -> list[tuple[str, Any]]:
    """Options of a node's server: frame size cap, keepalive, and tolerance of peers' pings."""
    interval = int(settings.keepalive_s * 1000)
    return [
        ("grpc.max_receive_message_length", settings.frame_limit),
        ("grpc.max_send_message_length", _ENVELOPE),
        *_keepalive(settings),
        ("grpc.http2.min_ping_interval_without_data_ms", interval // 2),
        ("grpc.keepalive_permit_without_calls", 1),
        # Two nodes configured with one port must not silently share it.
        ("grpc.so_reuseport", 0),
    ]
