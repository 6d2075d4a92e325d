"""PeerClient against real servers on loopback: exchange, chunking, retries, deadlines."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import grpc
import numpy as np
import pytest

from thinwire.topologies.transport import LinkTraffic, PeerClient, TransportSettings, gossip_pb2
from thinwire.topologies.transport.framing import SERVICE_NAME, frame_header, parse_frame

from ..support import FAST, RUN

Code = grpc.StatusCode


def client(node: int, addresses: dict[int, str], settings: TransportSettings = FAST) -> PeerClient:
    return PeerClient(
        node=node, run_id=RUN, resolve=addresses.__getitem__, settings=settings, insecure=True
    )


def test_three_nodes_exchange_their_updates(start_node):
    nodes = [start_node(i, neighbours={0, 1, 2} - {i}) for i in range(3)]
    addresses = {n.node: n.address for n in nodes}
    messages = {i: f"update of node {i}".encode() * (i + 1) for i in range(3)}
    clients = [client(i, addresses) for i in range(3)]
    try:
        for i, c in enumerate(clients):
            results = c.push(0, messages[i], {0, 1, 2} - {i})
            assert all(r.ok and r.outcome == "DELIVERED" for r in results.values())
    finally:
        for c in clients:
            c.close()
    for n in nodes:
        inbox = n.mailbox.collect(0, {0, 1, 2} - {n.node}, timeout=5)
        assert inbox.messages == {j: messages[j] for j in {0, 1, 2} - {n.node}}
        assert not inbox.missing


def test_byte_counters_split_payload_and_metadata_per_neighbour(start_node):
    a, b = start_node(1, neighbours={0}), start_node(2, neighbours={0})
    message = bytes(2500)
    settings = TransportSettings(chunk_bytes=1000, timeout_s=10)
    with client(0, {1: a.address, 2: b.address}, settings) as sender:
        sender.push(0, message, {1, 2})
    header = gossip_pb2.Header(run_id=RUN, round=0, sender=0, total_bytes=2500, chunks=3)
    framing = 3 * (1 + 2)  # tag + two-byte varint length per data frame
    reply = gossip_pb2.PushReply(outcome=gossip_pb2.DELIVERED, received_bytes=2500).ByteSize()
    expected = LinkTraffic(
        payload_sent=2500,
        metadata_sent=len(frame_header(header)) + framing,
        metadata_received=reply,
    )
    assert sender.traffic.links() == {1: expected, 2: expected}
    assert a.traffic.links() == {
        0: LinkTraffic(
            payload_received=2500,
            metadata_received=expected.metadata_sent,
            metadata_sent=reply,
        )
    }


def test_a_large_message_is_chunked_and_reassembled_byte_exact(start_node):
    message = np.random.default_rng(0).bytes(20 * 2**20 + 12345)
    seen = []

    def checksum(delivery):
        seen.append(len(delivery.payload))
        return delivery.payload.tobytes() == message

    node = start_node(1, neighbours={0}, handler=checksum)
    with client(0, {1: node.address}) as sender:
        result = sender.push(0, message, {1})[1]
    assert result.ok and result.outcome == "DELIVERED"
    assert node.mailbox.collect(0, {0}, timeout=5).messages == {0: True}
    assert seen == [len(message)]
    assert sender.traffic.links()[1].payload_sent == len(message)


def test_an_oversized_message_is_refused_with_resource_exhausted(start_node):
    small = TransportSettings(max_message_bytes=10_000, chunk_bytes=4096)
    node = start_node(1, neighbours={0}, settings=small)
    with client(0, {1: node.address}) as sender:
        result = sender.push(0, bytes(10_001), {1})[1]
    assert result.code is Code.RESOURCE_EXHAUSTED
    assert "10001 bytes exceeds this node's limit of 10000" in result.detail
    assert node.receiver.counters.rejected == {"RESOURCE_EXHAUSTED": 1}


def test_sender_refuses_what_it_may_not_send():
    with client(0, {}, TransportSettings(max_message_bytes=5)) as sender:
        with pytest.raises(ValueError, match="6 bytes exceeds max_message_bytes"):
            sender.push(0, bytes(6), {1})
        with pytest.raises(ValueError, match="cannot push to itself"):
            sender.push(0, b"x", {0, 1})
        with pytest.raises(ValueError, match="round must be >= 0"):
            sender.push(-1, b"x", {1})
    with pytest.raises(ValueError, match="exactly one of tls"):
        PeerClient(node=0, run_id=RUN, resolve=str)
    closed = client(0, {1: "127.0.0.1:1"})
    closed.close()
    with pytest.raises(RuntimeError, match="closed"):
        closed.push(0, b"x", {1})


class FlakyGossip:
    """A Gossip service that answers the first `failures` pushes with `code`."""

    def __init__(self, failures: int, code: Code = Code.UNAVAILABLE) -> None:
        self.failures, self.code = failures, code
        self.attempts = 0
        self.lock = threading.Lock()

    def push(self, frames: Iterator[bytes], context: grpc.ServicerContext) -> bytes:
        received = sum(len(parse_frame(f)) for f in list(frames)[1:])
        with self.lock:
            self.attempts += 1
            failing = self.attempts <= self.failures
        if failing:
            context.abort(self.code, "not now")
        return gossip_pb2.PushReply(
            outcome=gossip_pb2.DELIVERED, received_bytes=received
        ).SerializeToString()


@pytest.fixture
def flaky_server():
    servers = []

    def start(service: FlakyGossip) -> str:
        server = grpc.server(ThreadPoolExecutor(2))
        handler = grpc.stream_unary_rpc_method_handler(service.push)
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE_NAME, {"Push": handler}),)
        )
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        servers.append(server)
        return f"127.0.0.1:{port}"

    try:
        yield start
    finally:
        for server in servers:
            server.stop(0).wait()


@pytest.mark.parametrize("size", [100, 3 * 2**20])
def test_unavailable_is_retried_with_backoff(flaky_server, size):
    service = FlakyGossip(failures=2)
    address = flaky_server(service)
    with client(0, {1: address}, TransportSettings(retries=2, backoff_s=0.01)) as sender:
        result = sender.push(0, bytes(size), {1})[1]
    assert result.ok and service.attempts == 3


def test_retries_give_up_after_the_declared_attempts(flaky_server):
    service = FlakyGossip(failures=5)
    address = flaky_server(service)
    with client(0, {1: address}, TransportSettings(retries=1, backoff_s=0.01)) as sender:
        result = sender.push(0, b"x", {1})[1]
    assert result.code is Code.UNAVAILABLE and service.attempts == 2


def test_other_statuses_are_never_retried(flaky_server):
    service = FlakyGossip(failures=1, code=Code.INVALID_ARGUMENT)
    address = flaky_server(service)
    with client(0, {1: address}, TransportSettings(retries=4, backoff_s=0.01)) as sender:
        assert sender.push(0, b"x", {1})[1].code is Code.INVALID_ARGUMENT
    assert service.attempts == 1


def test_every_push_has_a_deadline(flaky_server):
    release = threading.Event()

    class Stuck(FlakyGossip):
        def push(self, frames, context):
            release.wait(10)
            return b""

    address = flaky_server(Stuck(0))
    try:
        with client(0, {1: address}, TransportSettings(timeout_s=0.2)) as sender:
            result = sender.push(0, b"x", {1})[1]
    finally:
        release.set()
    assert result.code is Code.DEADLINE_EXCEEDED and not result.ok


def test_a_dead_neighbour_is_a_failed_result_not_an_exception(start_node):
    alive = start_node(1, neighbours={0})
    addresses = {1: alive.address, 2: "127.0.0.1:1"}  # nothing listens on port 1
    with client(0, addresses, TransportSettings(retries=1, backoff_s=0.01)) as sender:
        results = sender.push(0, b"hello", {1, 2})
    assert results[1].ok and results[1].outcome == "DELIVERED"
    assert results[2].code is Code.UNAVAILABLE and results[2].outcome == ""
    assert alive.mailbox.collect(0, {0}, timeout=5).messages == {0: b"hello"}
