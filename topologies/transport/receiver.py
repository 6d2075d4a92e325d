"""The receiving side of a push, without gRPC: check, reassemble, decode, buffer.

`GossipReceiver.receive` takes the frames of one push and either answers it with a
`PushReply` or raises `PushRejected` carrying the gRPC status the servicer aborts with.
Everything is checked on the header first, before a byte of the update is read (and a
push's claim, from its call metadata, is screened by `screen` before even the header; see
`thinwire.topologies.transport.admission`):

| check | status |
|---|---|
| no header frame first, or a malformed header | INVALID_ARGUMENT |
| the header differs from the push's claim (run, sender, round) | INVALID_ARGUMENT |
| the header names another run | FAILED_PRECONDITION |
| the caller's certificate names another node than the header's sender | PERMISSION_DENIED |
| more bytes declared than `max_message_bytes` | RESOURCE_EXHAUSTED |
| chunk count impossible for the declared size | INVALID_ARGUMENT |
| sender is not this node's neighbour in that round | PERMISSION_DENIED |
| round at or beyond current + window | OUT_OF_RANGE |
| (sender, round) already delivered / round already collected | reply DUPLICATE / STALE |

Then the data frames are appended to one buffer as they arrive, so memory follows the bytes
received, never the size declared (a second header, an empty
frame, or bytes or frames beyond or short of the declared counts are INVALID_ARGUMENT), and
the complete update goes to the injected handler: typically `thinwire.wire` decoding and
validation against the model. A handler that raises `ValueError` rejects the update
(INVALID_ARGUMENT); any other exception is the receiver's own failure (INTERNAL, logged with
its traceback). Either way the node keeps serving. What the handler returns is buffered in
the `Mailbox` for the node to collect.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Generic, NamedTuple, TypeVar

import grpc

from thinwire.topologies.naming import node_from_common_name
from thinwire.topologies.transport import gossip_pb2
from thinwire.topologies.transport.framing import parse_frame
from thinwire.topologies.transport.mailbox import Admission, Mailbox
from thinwire.topologies.transport.traffic import Traffic

__all__ = ["Delivery", "GossipReceiver", "PushRejected", "ReceiverCounters"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


class PushRejected(Exception):
    """A push the receiver refuses, with the gRPC status to answer it with.

    `transient` marks a refusal the same push may pass moments later (no stream was free);
    every other refusal is a verdict on the push, and the pusher must not retry it.
    """

    def __init__(self, code: grpc.StatusCode, reason: str, *, transient: bool = False) -> None:
        super().__init__(f"{code.name}: {reason}")
        self.code = code
        self.reason = reason
        self.transient = transient


class Delivery(NamedTuple):
    """One complete update, as handed to the receiver's handler."""

    sender: int  # node id, a verified neighbour of this node in `round`
    round: int
    payload: memoryview  # read-only view of the update's bytes; bytes(payload) copies it


@dataclass(frozen=True, slots=True)
class ReceiverCounters:
    """Refused pushes, by the status they were answered with, and bad updates by sender."""

    rejected: Mapping[str, int] = field(default_factory=dict)  # status name -> pushes
    invalid: Mapping[int, int] = field(
        default_factory=dict
    )  # sender -> updates its handler refused


_OUTCOMES = {
    Admission.OPEN: gossip_pb2.DELIVERED,
    Admission.DUPLICATE: gossip_pb2.DUPLICATE,
    Admission.STALE: gossip_pb2.STALE,
}


class GossipReceiver(Generic[T]):
    """Turns the frames of a push into a buffered, validated message (see the module doc).

    Args:
        node: this node's id.
        run_id: the run this node belongs to.
        neighbours: the nodes allowed to push to this node in a given round.
        mailbox: where handled messages wait for the node.
        handler: decodes and validates a complete update; raises `ValueError` to reject it.
        max_message_bytes: largest update accepted, in bytes.
        traffic: ledger for the bytes received (shared with the node's sender).
    """

    def __init__(
        self,
        *,
        node: int,
        run_id: str,
        neighbours: Callable[[int], Collection[int]],
        mailbox: Mailbox[T],
        handler: Callable[[Delivery], T],
        max_message_bytes: int,
        traffic: Traffic | None = None,
    ) -> None:
        if node < 0:
            raise ValueError(f"node must be >= 0, got {node}")
        if max_message_bytes < 0:
            raise ValueError(f"max_message_bytes must be >= 0, got {max_message_bytes}")
        self.node = node
        self.run_id = run_id
        self.mailbox = mailbox
        self.traffic = traffic if traffic is not None else Traffic()
        self.max_message_bytes = max_message_bytes
        self._neighbours = neighbours
        self._handler = handler
        self._rejected: Counter[str] = Counter()
        self._invalid: Counter[int] = Counter()
        self._lock = threading.Lock()

    @property
    def counters(self) -> ReceiverCounters:
        """A snapshot of the refusal counters."""
        with self._lock:
            return ReceiverCounters(dict(self._rejected), dict(self._invalid))

    def receive(
        self,
        frames: Iterator[bytes],
        *,
        identity: str | None = None,
        claim: tuple[str, int, int] | None = None,
    ) -> gossip_pb2.PushReply:
        """Handles one push, from its header frame to the reply.

        Args:
            frames: the push's frames, as gRPC delivers them.
            identity: the common name of the caller's verified client certificate, if any.
            claim: the (run id, sender, round) the push named before its first frame, if
                it did (see `screen`); the header must agree.

        Raises:
            PushRejected: with the status to answer; the refusal is counted and logged.
        """
        try:
            return self._receive(frames, identity, claim)
        except PushRejected as rejected:
            raise self.refused(rejected) from None

    def screen(self, run_id: str, sender: int, round: int, identity: str | None = None) -> None:
        """Checks what a push claims to be before any of its frames is read (see `receive`).

        Raises:
            PushRejected: FAILED_PRECONDITION for another run; PERMISSION_DENIED when the
                caller's certificate names another node, or `sender` is not this node's
                neighbour in `round`. Counted.
        """
        try:
            self._check_run(run_id)
            self._check_identity(sender, identity)
            self._check_neighbour(sender, round)
        except PushRejected as rejected:
            raise self.refused(rejected) from None

    def refused(self, rejected: PushRejected) -> PushRejected:
        """Counts and logs a refusal (made here or by the transport); returns it to raise."""
        with self._lock:
            self._rejected[rejected.code.name] += 1
        # A full lane is routine under load (the pusher retries) and, under a flood, would
        # write a line per stream: counted always, logged at debug level only.
        level = logging.DEBUG if rejected.transient else logging.WARNING
        logger.log(level, "node %d refused a push: %s", self.node, rejected)
        return rejected

    def _receive(
        self, frames: Iterator[bytes], identity: str | None, claim: tuple[str, int, int] | None
    ) -> gossip_pb2.PushReply:
        first = next(frames, None)
        if first is None:
            raise PushRejected(grpc.StatusCode.INVALID_ARGUMENT, "empty push: no header frame")
        header = self._header(first)
        if claim is not None and (header.run_id, header.sender, header.round) != tuple(claim):
            raise PushRejected(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"the push claimed run {claim[0]!r}, node {claim[1]}, round {claim[2]}; its "
                f"header says run {header.run_id!r}, node {header.sender}, round {header.round}",
            )
        admission = self._admit(header, identity)
        if admission is not Admission.OPEN:
            return self._reply(header, admission, received=0, metadata=len(first))
        payload, framing = self._read(header, frames)
        item = self._handle(Delivery(header.sender, header.round, payload))
        admission = self.mailbox.put(header.sender, header.round, item)
        if admission is Admission.TOO_EARLY:  # only if the mailbox was restored meanwhile
            raise self._beyond_window(header)
        return self._reply(header, admission, received=len(payload), metadata=len(first) + framing)

    def _reply(
        self, header: gossip_pb2.Header, admission: Admission, *, received: int, metadata: int
    ) -> gossip_pb2.PushReply:
        reply = gossip_pb2.PushReply(outcome=_OUTCOMES[admission], received_bytes=received)
        self.traffic.received(header.sender, payload=received, metadata=metadata)
        self.traffic.sent(header.sender, payload=0, metadata=reply.ByteSize())
        if admission is not Admission.OPEN:
            logger.info(
                "node %d: push from %d for round %d is %s",
                self.node,
                header.sender,
                header.round,
                admission.value,
            )
        return reply

    @staticmethod
    def _header(frame: bytes) -> gossip_pb2.Header:
        try:
            part = parse_frame(frame)
        except ValueError as exc:
            raise PushRejected(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from None
        if not isinstance(part, gossip_pb2.Header):
            raise PushRejected(grpc.StatusCode.INVALID_ARGUMENT, "the first frame is not a header")
        return part

    def _admit(self, header: gossip_pb2.Header, identity: str | None) -> Admission:
        code = grpc.StatusCode
        self._check_run(header.run_id)
        self._check_identity(header.sender, identity)
        if header.total_bytes > self.max_message_bytes:
            raise PushRejected(
                code.RESOURCE_EXHAUSTED,
                f"update of {header.total_bytes} bytes exceeds this node's limit of "
                f"{self.max_message_bytes} bytes",
            )
        if not (
            header.chunks == 0
            if header.total_bytes == 0
            else 1 <= header.chunks <= header.total_bytes
        ):
            raise PushRejected(
                code.INVALID_ARGUMENT,
                f"{header.chunks} chunks cannot carry {header.total_bytes} bytes "
                "(every chunk holds at least one byte)",
            )
        self._check_neighbour(header.sender, header.round)
        admission = self.mailbox.screen(header.sender, header.round)
        if admission is Admission.TOO_EARLY:
            raise self._beyond_window(header)
        return admission

    def _check_run(self, run_id: str) -> None:
        if run_id != self.run_id:
            raise PushRejected(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"push for run {run_id!r}; this node serves run {self.run_id!r}",
            )

    @staticmethod
    def _check_identity(sender: int, identity: str | None) -> None:
        if identity is not None and node_from_common_name(identity) != sender:
            raise PushRejected(
                grpc.StatusCode.PERMISSION_DENIED,
                f"the caller's certificate names {identity!r}; it cannot push as node {sender}",
            )

    def _check_neighbour(self, sender: int, round: int) -> None:
        if sender == self.node or sender not in self._neighbours(round):
            raise PushRejected(
                grpc.StatusCode.PERMISSION_DENIED,
                f"node {sender} is not a neighbour of node {self.node} in round {round}",
            )

    def _beyond_window(self, header: gossip_pb2.Header) -> PushRejected:
        return PushRejected(
            grpc.StatusCode.OUT_OF_RANGE,
            f"round {header.round} is beyond this node's window (current round "
            f"{self.mailbox.current_round}, window {self.mailbox.window})",
        )

    @staticmethod
    def _read(header: gossip_pb2.Header, frames: Iterator[bytes]) -> tuple[memoryview, int]:
        total, chunks = header.total_bytes, header.chunks
        # Grows with the bytes that arrive: a declared size reserves nothing.
        buffer = bytearray()
        count = framing = 0
        for frame in frames:
            try:
                part = parse_frame(frame)
            except ValueError as exc:
                raise PushRejected(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from None
            if isinstance(part, gossip_pb2.Header):
                raise PushRejected(grpc.StatusCode.INVALID_ARGUMENT, "a second header frame")
            size = len(part)
            count += 1
            if size == 0 or count > chunks or len(buffer) + size > total:
                raise PushRejected(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"data chunk {count} ({size} bytes) does not fit the header's "
                    f"{total} bytes in {chunks} non-empty chunks",
                )
            buffer += part
            framing += len(frame) - size
        if len(buffer) != total or count != chunks:
            raise PushRejected(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"stream ended after {len(buffer)} bytes in {count} chunks; the header declared "
                f"{total} bytes in {chunks}",
            )
        return memoryview(buffer).toreadonly(), framing

    def _handle(self, delivery: Delivery) -> T:
        try:
            return self._handler(delivery)
        except ValueError as exc:
            with self._lock:
                self._invalid[delivery.sender] += 1
            raise PushRejected(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"update from node {delivery.sender} for round {delivery.round} is invalid: {exc}",
            ) from None
        except Exception:
            logger.exception(
                "node %d: handler failed on the update from node %d for round %d",
                self.node,
                delivery.sender,
                delivery.round,
            )
            raise PushRejected(
                grpc.StatusCode.INTERNAL, "the receiver failed to handle the update"
            ) from None
