"""Transport settings and the gRPC channel and server options derived from them.

Retries are declared, not coded: the channel's service config retries a push that failed
with UNAVAILABLE (the peer is not up yet, or the connection dropped), with exponential
backoff, and nothing else; every other status is a verdict of the receiver and final.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from thinwire.config import GossipRuntime
from thinwire.topologies.framing import FRAME_OVERHEAD, SERVICE_NAME

__all__ = ["TransportSettings", "channel_options", "server_options", "service_config"]

_ENVELOPE = 64 * 1024
"""Room for a header frame (run id, counters) on top of one data frame, in bytes."""
_BUFFERED_FRAMES = 4
"""Frames gRPC keeps for a retry; beyond them a push is committed and no longer retried."""


@dataclass(frozen=True, slots=True)
class TransportSettings:
    """How pushes travel; the defaults are those of the gossip runtime's config section."""

    chunk_bytes: int = 2**20  # bytes of the update per data frame
    max_message_bytes: int = 2**30  # largest update a receiver accepts
    timeout_s: float = 30.0  # deadline of every push, in seconds
    retries: int = 3  # extra attempts after UNAVAILABLE, 0..4
    backoff_s: float = 0.2  # bound of the first retry's random backoff, in seconds
    keepalive_s: float = 60.0  # interval of HTTP/2 keepalive pings, in seconds

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

    @classmethod
    def from_runtime(cls, runtime: GossipRuntime) -> TransportSettings:
        """The settings a gossip runtime section declares."""
        return cls(
            chunk_bytes=runtime.chunk_bytes,
            max_message_bytes=runtime.max_message_bytes,
            timeout_s=runtime.deadline_s,
            retries=runtime.retries,
            backoff_s=runtime.backoff_s,
            keepalive_s=runtime.keepalive_s,
        )

    @property
    def frame_limit(self) -> int:
        """Largest gRPC message a push stream may carry, in bytes."""
        return self.chunk_bytes + FRAME_OVERHEAD + _ENVELOPE


def service_config(settings: TransportSettings) -> str:
    """The channel's service config (JSON): the retry policy of `Push`."""
    method: dict[str, Any] = {"name": [{"service": SERVICE_NAME}]}
    if settings.retries:
        method["retryPolicy"] = {
            "maxAttempts": settings.retries + 1,
            "initialBackoff": f"{settings.backoff_s:.3f}s",
            "maxBackoff": f"{settings.backoff_s * 2**settings.retries:.3f}s",
            "backoffMultiplier": 2,
            "retryableStatusCodes": ["UNAVAILABLE"],
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
