"""The servicer on a real gRPC server: every refusal arrives as its status code."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from thinwire.topologies.transport import (
    Delivery,
    GossipReceiver,
    GossipServicer,
    Mailbox,
    TransportSettings,
    create_server,
    gossip_pb2,
    serving,
)
from thinwire.topologies.transport.framing import frame_data, frame_header, push_frames

from ..support import RUN, raw_bytes, raw_push

Code = grpc.StatusCode


def header(**fields: Any) -> gossip_pb2.Header:
    values = {"run_id": RUN, "round": 0, "sender": 1, "total_bytes": 6, "chunks": 2}
    return gossip_pb2.Header(**{**values, **fields})


def good(message: bytes = b"abcdef", **fields: Any) -> list[bytes]:
    return list(push_frames(header(total_bytes=len(message), chunks=2, **fields), message, 3))


def status_of(port: int, frames: list[bytes] | Iterator[bytes], **kwargs: Any) -> Code:
    with pytest.raises(grpc.RpcError) as info:
        raw_push(port, frames, **kwargs)
    return info.value.code()


@pytest.fixture
def node(start_node):
    return start_node(0, neighbours={1, 2})


def test_push_is_delivered(node):
    reply = raw_push(node.port, good())
    assert reply.outcome == gossip_pb2.DELIVERED and reply.received_bytes == 6
    assert node.mailbox.collect(0, {1}, timeout=5).messages == {1: b"abcdef"}


@pytest.mark.parametrize(
    ("frames", "code"),
    [
        ([], Code.INVALID_ARGUMENT),
        ([frame_data(b"abc")], Code.INVALID_ARGUMENT),
        (good(run_id="run-b"), Code.FAILED_PRECONDITION),
        (good(sender=5), Code.PERMISSION_DENIED),
        (good(round=7), Code.OUT_OF_RANGE),
        ([frame_header(header(total_bytes=2**40, chunks=2**20))], Code.RESOURCE_EXHAUSTED),
        ([frame_header(header()), frame_data(b"abcdefgh")], Code.INVALID_ARGUMENT),
        ([frame_header(header()), frame_data(b"abc")], Code.INVALID_ARGUMENT),
        ([frame_header(header()), frame_header(header())], Code.INVALID_ARGUMENT),
    ],
    ids=[
        "empty",
        "no-header",
        "run-id",
        "non-neighbour",
        "out-of-window",
        "oversized",
        "header-total-mismatch",
        "truncated",
        "second-header",
    ],
)
def test_refused_pushes_get_their_status_and_the_server_keeps_serving(node, frames, code):
    assert status_of(node.port, frames) is code
    assert node.receiver.counters.rejected == {code.name: 1}
    assert raw_push(node.port, good()).outcome == gossip_pb2.DELIVERED


def test_a_frame_over_the_size_cap_is_refused_by_grpc(start_node):
    node = start_node(0, neighbours={1}, settings=TransportSettings(chunk_bytes=1024))
    big = frame_data(bytes(200_000))
    assert status_of(node.port, [frame_header(header(total_bytes=200_000, chunks=1)), big]) is (
        Code.RESOURCE_EXHAUSTED
    )


def test_handler_validation_error_is_invalid_argument_and_counted(start_node):
    def decode(delivery: Delivery) -> bytes:
        if delivery.payload.tobytes().startswith(b"bad"):
            raise ValueError("not an Update")
        return raw_bytes(delivery)

    node = start_node(0, neighbours={1, 2}, handler=decode)
    with pytest.raises(grpc.RpcError) as info:
        raw_push(node.port, good(b"bad..."))
    assert info.value.code() is Code.INVALID_ARGUMENT
    assert "update from node 1 for round 0 is invalid: not an Update" in info.value.details()
    assert node.receiver.counters.invalid == {1: 1}
    assert raw_push(node.port, good(sender=2)).outcome == gossip_pb2.DELIVERED


def test_handler_crash_is_internal_and_the_server_keeps_serving(start_node):
    calls = []

    def flaky(delivery: Delivery) -> bytes:
        calls.append(delivery.sender)
        if len(calls) == 1:
            raise KeyError("bug in the handler")
        return raw_bytes(delivery)

    node = start_node(0, neighbours={1}, handler=flaky)
    assert status_of(node.port, good()) is Code.INTERNAL
    assert raw_push(node.port, good()).outcome == gossip_pb2.DELIVERED


def test_duplicate_and_stale_pushes_are_answered_ok(node):
    assert raw_push(node.port, good()).outcome == gossip_pb2.DELIVERED
    assert raw_push(node.port, good()).outcome == gossip_pb2.DUPLICATE
    node.mailbox.collect(0, {1}, timeout=0)
    node.mailbox.collect(1, {1}, timeout=0)
    assert raw_push(node.port, good(sender=2)).outcome == gossip_pb2.STALE
    assert node.mailbox.counters.duplicates == 1


def test_a_stream_abandoned_by_its_sender_is_dropped(node):
    release = threading.Event()

    def stalled() -> Iterator[bytes]:
        yield frame_header(header())
        yield frame_data(b"abc")
        release.wait(10)

    try:
        assert status_of(node.port, stalled(), timeout=0.3) is Code.DEADLINE_EXCEEDED
    finally:
        release.set()
    # Nothing of the abandoned push is delivered, and the sender's next push goes through.
    assert raw_push(node.port, good()).outcome == gossip_pb2.DELIVERED
    assert node.mailbox.collect(0, {1}, timeout=5).messages == {1: b"abcdef"}


def test_servers_need_explicit_security():
    servicer = GossipServicer(
        GossipReceiver(
            node=0,
            run_id=RUN,
            neighbours=lambda r: (),
            mailbox=Mailbox(window=1),
            handler=raw_bytes,
            max_message_bytes=10,
        )
    )
    with pytest.raises(
        ValueError, match="exactly one of tls=TLSIdentity\\(...\\) and insecure=True"
    ):
        create_server("127.0.0.1:0", servicer)
    with serving("127.0.0.1:0", servicer, insecure=True) as port:
        assert port > 0
        with pytest.raises(ValueError, match="cannot listen on"):
            create_server(f"127.0.0.1:{port}", servicer, insecure=True)
    with pytest.raises(grpc.RpcError) as info:
        raw_push(port, good(), timeout=2)
    assert info.value.code() is Code.UNAVAILABLE  # stopped on leaving the block
