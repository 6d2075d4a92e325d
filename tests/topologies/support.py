"""Helpers shared by the topology tests."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from thinwire.topologies.transport import (
    Delivery,
    GossipReceiver,
    GossipServicer,
    Mailbox,
    RunCertificates,
    TLSIdentity,
    Traffic,
    TransportSettings,
    gossip_pb2,
)
from thinwire.topologies.transport.framing import PUSH_METHOD

RUN = "run-a"
FAST = TransportSettings(timeout_s=10.0, retries=2, backoff_s=0.05)


def raw_bytes(delivery: Delivery) -> bytes:
    return bytes(delivery.payload)


@dataclass
class Node:
    node: int
    port: int
    mailbox: Mailbox[Any]
    receiver: GossipReceiver[Any]
    traffic: Traffic
    servicer: GossipServicer | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


def raw_push(
    port: int,
    frames: Iterator[bytes] | list[bytes],
    *,
    timeout: float = 10.0,
    metadata: tuple[tuple[str, str], ...] | None = None,
) -> gossip_pb2.PushReply:
    """Sends hand-made frames on an insecure channel, bypassing PeerClient's checks."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        push = channel.stream_unary(
            PUSH_METHOD, response_deserializer=gossip_pb2.PushReply.FromString
        )
        return push(iter(frames), timeout=timeout, metadata=metadata)


def identity(certs: RunCertificates, node: int, *, ca: Path | None = None) -> TLSIdentity:
    files = certs.peers[node]
    return TLSIdentity.from_files(ca or certs.ca, files.cert, files.key)
