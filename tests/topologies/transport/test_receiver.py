"""GossipReceiver without gRPC: every check on a push, in plain function calls."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import grpc
import pytest

from thinwire.topologies.transport import (
    Delivery,
    GossipReceiver,
    Mailbox,
    PushRejected,
    gossip_pb2,
)
from thinwire.topologies.transport.framing import frame_data, frame_header, push_frames

from ..support import RUN, raw_bytes

Code = grpc.StatusCode


def receiver(
    *,
    handler: Callable[[Delivery], Any] = raw_bytes,
    limit: int = 1000,
    window: int = 2,
) -> GossipReceiver[Any]:
    return GossipReceiver(
        node=0,
        run_id=RUN,
        neighbours=lambda r: {1, 2} if r < 5 else {3},
        mailbox=Mailbox(window=window),
        handler=handler,
        max_message_bytes=limit,
    )


def header(**fields: Any) -> gossip_pb2.Header:
    values = {"run_id": RUN, "round": 0, "sender": 1, "total_bytes": 6, "chunks": 2}
    return gossip_pb2.Header(**{**values, **fields})


def frames(message: bytes = b"abcdef", chunk: int = 3, **fields: Any) -> list[bytes]:
    return list(
        push_frames(
            header(total_bytes=len(message), chunks=-(-len(message) // chunk), **fields),
            message,
            chunk,
        )
    )


def rejected(
    box: GossipReceiver[Any], stream: list[bytes], identity: str | None = None
) -> PushRejected:
    with pytest.raises(PushRejected) as info:
        box.receive(iter(stream), identity=identity)
    return info.value


def test_a_valid_push_is_reassembled_handled_and_buffered():
    box = receiver()
    reply = box.receive(iter(frames(b"hello world", chunk=4)))
    assert reply.outcome == gossip_pb2.DELIVERED and reply.received_bytes == 11
    assert box.mailbox.collect(0, {1}, timeout=0).messages == {1: b"hello world"}
    link = box.traffic.links()[1]
    assert link.payload_received == 11
    assert link.metadata_received == len(frame_header(header(total_bytes=11, chunks=3))) + 3 * 2
    assert link.metadata_sent == reply.ByteSize()


def test_an_empty_update_needs_zero_chunks():
    box = receiver()
    assert box.receive(iter(frames(b""))).outcome == gossip_pb2.DELIVERED


def test_the_handler_sees_sender_round_and_a_read_only_view():
    seen: list[Delivery] = []
    box = receiver(handler=lambda d: seen.append(d) or "decoded")
    box.receive(iter(frames(round=1, sender=2)))
    (delivery,) = seen
    assert (delivery.sender, delivery.round, delivery.payload.tobytes()) == (2, 1, b"abcdef")
    assert delivery.payload.readonly
    assert box.mailbox.collect(1, {2}, timeout=0).messages == {2: "decoded"}


@pytest.mark.parametrize(
    ("stream", "code", "reason"),
    [
        ([], Code.INVALID_ARGUMENT, "empty push"),
        ([frame_data(b"abc")], Code.INVALID_ARGUMENT, "first frame is not a header"),
        ([b"\x12\x09x"], Code.INVALID_ARGUMENT, "not a Chunk"),
        (
            frames(run_id="run-b"),
            Code.FAILED_PRECONDITION,
            "run 'run-b'; this node serves run 'run-a'",
        ),
        (
            frames(sender=3),
            Code.PERMISSION_DENIED,
            "node 3 is not a neighbour of node 0 in round 0",
        ),
        (frames(sender=0), Code.PERMISSION_DENIED, "node 0 is not a neighbour"),
        (frames(round=6, sender=3), Code.OUT_OF_RANGE, "round 6 is beyond this node.s window"),
        (frames(round=2), Code.OUT_OF_RANGE, "current round 0, window 2"),
        (
            [frame_header(header(total_bytes=1001, chunks=1))],
            Code.RESOURCE_EXHAUSTED,
            "1001 bytes exceeds this node's limit of 1000",
        ),
        (
            [frame_header(header(total_bytes=2, chunks=3))],
            Code.INVALID_ARGUMENT,
            "3 chunks cannot carry 2",
        ),
        (
            [frame_header(header(total_bytes=0, chunks=1))],
            Code.INVALID_ARGUMENT,
            "1 chunks cannot carry 0",
        ),
        (
            [frame_header(header()), frame_data(b"abc"), frame_header(header())],
            Code.INVALID_ARGUMENT,
            "a second header",
        ),
        (
            [frame_header(header()), frame_data(b"abcd"), frame_data(b"efg")],
            Code.INVALID_ARGUMENT,
            "does not fit",
        ),
        (
            [frame_header(header()), frame_data(b"abc"), frame_data(b""), frame_data(b"def")],
            Code.INVALID_ARGUMENT,
            "data chunk 2 \\(0 bytes\\)",
        ),
        (
            [frame_header(header()), frame_data(b"ab"), frame_data(b"cd"), frame_data(b"ef")],
            Code.INVALID_ARGUMENT,
            "data chunk 3",
        ),
        (
            [frame_header(header()), frame_data(b"abc")],
            Code.INVALID_ARGUMENT,
            "stream ended after 3 bytes in 1 chunks; the header declared 6 bytes in 2",
        ),
    ],
    ids=[
        "empty",
        "no-header",
        "garbage",
        "run-id",
        "non-neighbour",
        "self",
        "far-future",
        "beyond-window",
        "too-large",
        "too-many-chunks",
        "chunks-for-nothing",
        "second-header",
        "overflow",
        "empty-chunk",
        "extra-chunk",
        "truncated",
    ],
)
def test_refusals_carry_the_right_status(stream, code, reason):
    box = receiver()
    error = rejected(box, stream)
    assert error.code is code
    assert re.search(reason, error.reason), error.reason
    assert box.counters.rejected == {code.name: 1}
    assert box.mailbox.collect(0, set(), timeout=0).messages == {}


def test_neighbours_are_those_of_the_push_round():
    box = receiver(window=10)
    assert box.receive(iter(frames(round=6, sender=3))).outcome == gossip_pb2.DELIVERED
    assert rejected(box, frames(round=6, sender=1)).code is Code.PERMISSION_DENIED


def test_certificate_identity_must_match_the_claimed_sender():
    box = receiver()
    assert box.receive(iter(frames(sender=1)), identity="node-1").outcome == gossip_pb2.DELIVERED
    error = rejected(box, frames(sender=2), identity="node-1")
    assert error.code is Code.PERMISSION_DENIED and "names 'node-1'" in error.reason
    assert rejected(box, frames(sender=2), identity="thinwire CA").code is Code.PERMISSION_DENIED


def test_handler_validation_errors_are_invalid_argument_and_counted_per_sender():
    def strict(delivery: Delivery) -> bytes:
        raise ValueError("tensor 'w' has 3 values, expected 4")

    box = receiver(handler=strict)
    error = rejected(box, frames())
    assert error.code is Code.INVALID_ARGUMENT
    assert "update from node 1 for round 0 is invalid: tensor 'w' has 3 values" in error.reason
    assert box.counters.invalid == {1: 1}


def test_handler_crashes_are_internal_and_logged(caplog):
    def broken(delivery: Delivery) -> bytes:
        raise RuntimeError("bug")

    error = rejected(receiver(handler=broken), frames())
    assert error.code is Code.INTERNAL and "bug" not in error.reason
    assert "handler failed" in caplog.text and "RuntimeError: bug" in caplog.text


def test_duplicates_and_stale_pushes_are_answered_without_reading_the_data():
    box = receiver()
    box.receive(iter(frames()))
    unread = iter(frames())
    reply = box.receive(unread)
    assert reply.outcome == gossip_pb2.DUPLICATE and reply.received_bytes == 0
    assert len(list(unread)) == 2  # the data frames were left in the stream
    box.mailbox.collect(0, {1, 2}, timeout=0)
    box.mailbox.collect(1, {1, 2}, timeout=0)
    assert box.receive(iter(frames(sender=2))).outcome == gossip_pb2.STALE


def test_constructor_validates():
    with pytest.raises(ValueError, match="node must be >= 0"):
        GossipReceiver(
            node=-1,
            run_id=RUN,
            neighbours=lambda r: (),
            mailbox=Mailbox(window=1),
            handler=raw_bytes,
            max_message_bytes=1,
        )
