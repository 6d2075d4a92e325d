"""The sending side: push one encoded update to several neighbours at once.

`PeerClient.push` opens one client-streaming call per neighbour, all in flight together
(gRPC futures; each call's frames are pulled by gRPC's own thread), and waits for all of
them. Every call carries the settings' deadline; a call that fails with UNAVAILABLE is
retried by the channel's declared retry policy. A neighbour's failure is a value in the
result, never an exception: the round goes on with the neighbours that answered.

Channels are opened on first use and kept until `close`, one per neighbour, so a
time-varying graph reuses connections to peers it met before.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Iterator
from typing import Any, NamedTuple

import grpc

from thinwire.topologies.transport import gossip_pb2
from thinwire.topologies.transport.admission import claim_metadata
from thinwire.topologies.transport.framing import PUSH_METHOD, chunk_count, push_frames
from thinwire.topologies.transport.options import TransportSettings, channel_options
from thinwire.topologies.transport.security import TLSIdentity, require_security
from thinwire.topologies.transport.traffic import Traffic

__all__ = ["PeerClient", "PushResult"]

logger = logging.getLogger(__name__)


class PushResult(NamedTuple):
    """How one push to one neighbour ended."""

    peer: int
    code: grpc.StatusCode  # OK, or the status the call failed with
    detail: str  # the receiver's (or gRPC's) reason; "" on success
    outcome: str  # the reply's Outcome name (DELIVERED, DUPLICATE, STALE); "" on failure

    @property
    def ok(self) -> bool:
        """Whether the neighbour answered the push (delivered, or already had it)."""
        return self.code is grpc.StatusCode.OK


class _Counted:
    """The frames of one push, counting the payload and metadata bytes gRPC pulled from them.

    Retransmissions by gRPC's retry policy resend frames it buffered and are not counted.
    """

    def __init__(self, header: gossip_pb2.Header, message: bytes, chunk_bytes: int) -> None:
        self._header = header
        self._message = message
        self._chunk_bytes = chunk_bytes
        self.payload = self.metadata = 0

    def __iter__(self) -> Iterator[bytes]:
        frames = push_frames(self._header, self._message, self._chunk_bytes)
        header = next(frames)
        self.metadata += len(header)
        yield header
        remaining = len(self._message)
        for frame in frames:
            size = min(self._chunk_bytes, remaining)
            remaining -= size
            self.payload += size
            self.metadata += len(frame) - size
            yield frame


class PeerClient:
    """Pushes this node's updates to its neighbours (see the module docstring).

    Args:
        node: this node's id (the sender in every header).
        run_id: the run, checked by every receiver.
        resolve: a neighbour's `host:port`, given its node id.
        settings: chunking, deadline, retries, keepalive.
        tls: this node's TLS identity; or
        insecure: True for plaintext channels (must be explicit).
        traffic: ledger for the bytes sent (shared with the node's receiver).
    """

    def __init__(
        self,
        *,
        node: int,
        run_id: str,
        resolve: Callable[[int], str],
        settings: TransportSettings | None = None,
        tls: TLSIdentity | None = None,
        insecure: bool = False,
        traffic: Traffic | None = None,
    ) -> None:
        require_security(tls, insecure, "PeerClient")
        if node < 0:
            raise ValueError(f"node must be >= 0, got {node}")
        self.node = node
        self.run_id = run_id
        self.settings = settings or TransportSettings()
        self.traffic = traffic if traffic is not None else Traffic()
        self._resolve = resolve
        self._tls = tls
        self._channels: dict[int, tuple[grpc.Channel, Any]] = {}
        self._lock = threading.Lock()
        self._closed = False

    def _push_callable(self, peer: int) -> Any:
        with self._lock:
            if self._closed:
                raise RuntimeError("PeerClient is closed")
            if peer not in self._channels:
                address = self._resolve(peer)
                options = channel_options(self.settings)
                if self._tls is not None:
                    channel = grpc.secure_channel(
                        address, self._tls.channel_credentials(), options=options
                    )
                else:
                    channel = grpc.insecure_channel(address, options=options)
                push = channel.stream_unary(
                    PUSH_METHOD, response_deserializer=gossip_pb2.PushReply.FromString
                )
                self._channels[peer] = (channel, push)
            return self._channels[peer][1]

    def push(self, round: int, message: bytes, to: Collection[int]) -> dict[int, PushResult]:
        """Sends `message`, the encoded update of `round`, to every node in `to` at once.

        Returns:
            One `PushResult` per neighbour, after every call has ended (each within the
            deadline).

        Raises:
            ValueError: for a negative round, this node itself in `to`, or a message over
                `max_message_bytes`.
        """
        if round < 0:
            raise ValueError(f"round must be >= 0, got {round}")
        if self.node in to:
            raise ValueError(f"node {self.node} cannot push to itself")
        if len(message) > self.settings.max_message_bytes:
            raise ValueError(
                f"message of {len(message)} bytes exceeds max_message_bytes "
                f"({self.settings.max_message_bytes})"
            )
        chunk = self.settings.chunk_bytes
        header = gossip_pb2.Header(
            run_id=self.run_id,
            round=round,
            sender=self.node,
            total_bytes=len(message),
            chunks=chunk_count(len(message), chunk),
        )
        # Open every channel first: a neighbour that cannot be resolved fails the call
        # before any push is in flight.
        callables = {peer: self._push_callable(peer) for peer in sorted(set(to))}
        # The claim lets a receiver put the push in this node's lane before reading it.
        claim = claim_metadata(self.run_id, self.node, round)
        calls = {}
        for peer, call in callables.items():
            frames = _Counted(header, message, chunk)
            future = call.future(iter(frames), timeout=self.settings.timeout_s, metadata=claim)
            calls[peer] = (future, frames)
        return {peer: self._settle(round, peer, *call) for peer, call in calls.items()}

    def _settle(self, round: int, peer: int, future: Any, frames: _Counted) -> PushResult:
        try:
            reply = future.result()
            name = gossip_pb2.Outcome.Name(reply.outcome)
            result = PushResult(peer, grpc.StatusCode.OK, "", name)
            received = reply.ByteSize()
        except grpc.RpcError as error:
            result = PushResult(peer, error.code(), error.details() or "", "")
            received = 0
            logger.warning(
                "node %d: push of round %d to node %d failed: %s %s",
                self.node,
                round,
                peer,
                result.code.name,
                result.detail,
            )
        self.traffic.sent(peer, payload=frames.payload, metadata=frames.metadata)
        self.traffic.received(peer, payload=0, metadata=received)
        return result

    def close(self) -> None:
        """Closes every channel; pushes in flight are cancelled."""
        with self._lock:
            self._closed = True
            channels, self._channels = self._channels, {}
        for channel, _ in channels.values():
            channel.close()

    def __enter__(self) -> PeerClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
