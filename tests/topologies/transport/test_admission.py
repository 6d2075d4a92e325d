"""A node's push workers cannot be held: lanes, caps, frame and stream time limits, memory.

Each limit is shown alone (the pure pieces) and on a real server, where a stream that would
exceed a limit is refused at once and a stalled one is cancelled, while a neighbour's push
still goes through.
"""

from __future__ import annotations

import threading
import time
import tracemalloc
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from thinwire.topologies.transport import (
    Delivery,
    FrameWatchdog,
    GossipReceiver,
    Mailbox,
    StreamGate,
    StreamLimits,
    claim_metadata,
    gossip_pb2,
    message_bound,
    read_claim,
)
from thinwire.topologies.transport.admission import remote_host
from thinwire.topologies.transport.framing import PUSH_METHOD, frame_data, frame_header, push_frames
from thinwire.topologies.transport.receiver import PushRejected

from ..support import RUN, raw_bytes, raw_push

Code = grpc.StatusCode


def header(**fields: Any) -> gossip_pb2.Header:
    values = {"run_id": RUN, "round": 0, "sender": 1, "total_bytes": 6, "chunks": 2}
    return gossip_pb2.Header(**{**values, **fields})


def good(sender: int = 1, message: bytes = b"abcdef") -> list[bytes]:
    return list(push_frames(header(sender=sender, total_bytes=len(message)), message, 3))


def claim(sender: int, round: int = 0, run: str = RUN) -> tuple[tuple[str, str]]:
    return claim_metadata(run, sender, round)


# --- the pure pieces -----------------------------------------------------------------------


def test_a_claim_is_run_sender_and_round():
    assert read_claim(claim(3, 7)) == (RUN, 3, 7)
    assert read_claim([("other", "x"), ("thinwire-push", b"r/un/1/2")]) == ("r/un", 1, 2)
    assert read_claim(None) is None and read_claim([("user-agent", "grpc")]) is None
    for bad in ("1/2", "run/-1/2", "run/1/x", "/1/2", "run/1/" + "9" * 20):
        with pytest.raises(ValueError, match="is not <run id>/<sender>/<round>"):
            read_claim([("thinwire-push", bad)])


def test_remote_host_drops_the_port():
    assert remote_host("ipv4:10.0.0.2:5123") == "ipv4:10.0.0.2"
    assert remote_host("ipv6:[::1]:41000") == "ipv6:[::1]"
    assert remote_host("unix:/tmp/sock") == "unix:/tmp/sock"


def test_limits_must_be_positive():
    with pytest.raises(ValueError, match="per_sender must be >= 1"):
        StreamLimits(per_sender=0)
    with pytest.raises(ValueError, match="frame_timeout_s must be > 0"):
        StreamLimits(frame_timeout_s=0)


def refusal(gate: StreamGate, host: str, sender: int | None) -> str:
    with pytest.raises(PushRejected) as info, gate.admit(host, sender):
        pass
    assert info.value.code is Code.RESOURCE_EXHAUSTED and info.value.transient
    return info.value.reason


def test_the_gate_keeps_each_lane_and_cap_and_frees_places_on_exit():
    gate = StreamGate(StreamLimits(total=6, per_host=4, per_sender=2, unclaimed=1))
    with gate.admit("a", 1), gate.admit("a", 1):
        assert refusal(gate, "b", 1) == "2 streams of node 1 are open already"
        with gate.admit("b", None):
            assert refusal(gate, "c", None) == "1 streams claiming no sender are open already"
            with gate.admit("a", 2), gate.admit("a", 3):
                assert refusal(gate, "a", 4) == "4 push streams from a are open already"
                with gate.admit("b", 4):
                    assert refusal(gate, "c", 5) == "6 push streams are open already"
                    assert gate.open_streams == 6
    assert gate.open_streams == 0
    with gate.admit("a", 1), gate.admit("a", 1):
        pass


class Stalling:
    """Frames that arrive `pauses` apart; `cancel` wakes a pause with an RpcError."""

    def __init__(self, pauses: list[float]) -> None:
        self.pauses = pauses
        self.cancelled = threading.Event()

    def cancel(self) -> None:
        self.cancelled.set()

    def __iter__(self) -> Iterator[bytes]:
        for pause in self.pauses:
            if self.cancelled.wait(pause):
                raise grpc.RpcError()
            yield b"frame"


def test_the_watchdog_passes_a_stream_that_keeps_pace():
    stream = Stalling([0.01] * 5)
    frames = FrameWatchdog(0.5, 5.0).watch(iter(stream), stream.cancel)
    assert list(frames) == [b"frame"] * 5 and not stream.cancelled.is_set()


def test_the_watchdog_cancels_a_stream_whose_next_frame_is_late():
    stream = Stalling([0.01, 30.0])
    start = time.monotonic()
    with pytest.raises(PushRejected) as info:
        list(FrameWatchdog(0.3, 30.0).watch(iter(stream), stream.cancel))
    assert info.value.code is Code.DEADLINE_EXCEEDED and stream.cancelled.is_set()
    assert 0.3 <= time.monotonic() - start < 5


def test_the_watchdog_cuts_a_trickle_at_the_stream_limit():
    stream = Stalling([0.1] * 100)  # every frame in time, the whole far too slow
    start = time.monotonic()
    with pytest.raises(PushRejected, match="or the push over 0.8 s"):
        list(FrameWatchdog(0.5, 0.8).watch(iter(stream), stream.cancel))
    assert 0.8 <= time.monotonic() - start < 5


def test_the_receiver_reserves_nothing_for_a_declared_size():
    receiver = GossipReceiver(
        node=0,
        run_id=RUN,
        neighbours=lambda r: {1},
        mailbox=Mailbox(window=2),
        handler=raw_bytes,
        max_message_bytes=2**30,
    )
    declared = header(total_bytes=2**30 - 1, chunks=2**20)

    def lying() -> Iterator[bytes]:
        yield frame_header(declared)
        yield frame_data(bytes(1000))
        raise grpc.RpcError()  # the pusher gives up after one small chunk

    tracemalloc.start()
    try:
        with pytest.raises(grpc.RpcError):
            receiver.receive(lying())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20  # a MiB at most, for a declared GiB


@pytest.mark.slow
def test_honest_messages_of_every_method_fit_half_the_bound():
    from thinwire.config import parse_config
    from thinwire.topologies.runtime.simulation import simulate_gossip

    codecs = {
        "dense": {},
        "topk": {"select": {"kind": "topk", "density": 0.5}},
        "qsgd-bucket-1": {"quantize": {"kind": "qsgd", "levels": 2**20, "bucket": 1}},
        "sign-bucket-1": {"quantize": {"kind": "sign", "bucket": 1}},
        "wavelet": {"transform": {"kind": "wavelet", "wavelet": "db20", "level": 6}},
    }
    gossips = [{"kind": "choco", "gamma": 0.3, "codec": c} for c in codecs.values()]
    gossips += [{"kind": "dpsgd"}, {"kind": "jwins"}]
    for gossip in gossips:
        raw = {
            "name": "bound",
            "data": {"clients": 3},
            "model": {"kind": "mlp", "hidden": [16]},
            "train": {"rounds": 1, "local_steps": 1, "device": "cpu"},
            "topology": {"kind": "ring"},
            "gossip": {k: v for k, v in gossip.items() if k != "codec"},
        }
        if "codec" in gossip:
            raw["codec"] = gossip["codec"]
        run = simulate_gossip(parse_config(raw))
        largest = max(n for report in run.reports[0] for n in report.sent.values())
        bound = message_bound([64 * 16, 16, 16 * 10, 10])
        assert 0 < largest <= bound / 2, (gossip, largest, bound)
    assert message_bound([64 * 16, 16, 16 * 10, 10]) < 2**18  # not 1 GiB


# --- on a real server ----------------------------------------------------------------------


class Streams:
    """Push calls held open by the test, each until `release` (or the server ends it)."""

    def __init__(self, port: int) -> None:
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self.push = self.channel.stream_unary(
            PUSH_METHOD, response_deserializer=gossip_pb2.PushReply.FromString
        )
        self.released = threading.Event()
        self.calls: list[Any] = []

    def _frames(self, first: list[bytes], every_s: float | None) -> Iterator[bytes]:
        yield from first
        while not self.released.wait(every_s if every_s is not None else 60):
            if every_s is not None:
                yield frame_data(b"x")

    def open(
        self, first: list[bytes] = (), metadata: Any = None, every_s: float | None = None
    ) -> Any:
        call = self.push.future(self._frames(list(first), every_s), timeout=30, metadata=metadata)
        self.calls.append(call)
        return call

    def close(self) -> None:
        self.released.set()
        for call in self.calls:
            call.cancel()
        self.channel.close()


@pytest.fixture
def streams():
    opened: list[Streams] = []

    def make(port: int) -> Streams:
        opened.append(Streams(port))
        return opened[-1]

    yield make
    for s in opened:
        s.close()


def code_of(call: Any, timeout: float = 10) -> Code:
    try:
        call.result(timeout=timeout)
    except grpc.RpcError as error:
        return error.code()
    return Code.OK


def wait_open(node, count: int, timeout: float = 10) -> None:
    # Until the server holds `count` streams (they are admitted asynchronously).
    deadline = time.monotonic() + timeout
    while node.servicer.gate.open_streams < count:
        assert time.monotonic() < deadline, "streams were not admitted"
        time.sleep(0.01)


def wait_rejected(node, expected: dict[str, int], timeout: float = 10) -> None:
    # The server counts a refusal after the caller has seen it end, so poll for the count.
    deadline = time.monotonic() + timeout
    while node.receiver.counters.rejected != expected:
        assert time.monotonic() < deadline, f"{node.receiver.counters.rejected} != {expected}"
        time.sleep(0.01)


@pytest.fixture
def guarded(start_node):
    limits = StreamLimits(
        total=8, per_host=8, per_sender=2, unclaimed=2, frame_timeout_s=1.0, stream_timeout_s=3.0
    )
    return start_node(0, neighbours={1, 2}, limits=limits)


def test_idle_strangers_are_refused_at_once_and_a_neighbour_still_gets_through(start_node, streams):
    node = start_node(0, neighbours={1, 2}, limits=StreamLimits(unclaimed=2, frame_timeout_s=60))
    idle = streams(node.port)
    held = [idle.open() for _ in range(2)]
    wait_open(node, 2)
    refused = [idle.open() for _ in range(20)]
    assert {code_of(call) for call in refused} == {Code.RESOURCE_EXHAUSTED}
    assert raw_push(node.port, good(), metadata=claim(1)).outcome == gossip_pb2.DELIVERED
    assert not any(call.done() for call in held)  # the strangers still hold their lane
    wait_rejected(node, {"RESOURCE_EXHAUSTED": 20})


def test_an_unclaimed_stream_that_sends_nothing_is_cancelled_after_the_frame_limit(
    guarded, streams
):
    start = time.monotonic()
    call = streams(guarded.port).open()
    assert code_of(call) is Code.CANCELLED  # what the pusher sees of a cancelled stream
    assert 1.0 <= time.monotonic() - start < 5.0  # the upper bound only guards a hang
    wait_rejected(guarded, {"DEADLINE_EXCEEDED": 1})


def test_a_claimed_stream_that_sends_nothing_is_cancelled_after_the_frame_limit(guarded, streams):
    start = time.monotonic()
    call = streams(guarded.port).open(metadata=claim(1))
    assert code_of(call) is Code.CANCELLED
    assert 1.0 <= time.monotonic() - start < 5.0  # the upper bound only guards a hang
    wait_rejected(guarded, {"DEADLINE_EXCEEDED": 1})
    assert raw_push(guarded.port, good(), metadata=claim(1)).outcome == gossip_pb2.DELIVERED


def test_a_trickle_is_cut_at_the_stream_limit(guarded, streams):
    first = [frame_header(header(total_bytes=1000, chunks=1000))]
    start = time.monotonic()
    call = streams(guarded.port).open(first, metadata=claim(1), every_s=0.2)
    assert code_of(call) is Code.CANCELLED
    assert 3.0 <= time.monotonic() - start < 6.0
    wait_rejected(guarded, {"DEADLINE_EXCEEDED": 1})


def test_a_full_lane_refuses_its_sender_not_the_other_neighbours(guarded, streams):
    spoofed = streams(guarded.port)
    held = [spoofed.open(metadata=claim(1)) for _ in range(2)]
    wait_open(guarded, 2)
    assert code_of(spoofed.open(metadata=claim(1))) is Code.RESOURCE_EXHAUSTED
    assert raw_push(guarded.port, good(2), metadata=claim(2)).outcome == gossip_pb2.DELIVERED
    assert not any(call.done() for call in held)


def test_the_total_cap_refuses_streams_at_once(start_node, streams):
    limits = StreamLimits(total=4, per_host=4, per_sender=4, unclaimed=4, frame_timeout_s=5.0)
    node = start_node(0, neighbours={1, 2}, limits=limits)
    held = streams(node.port)
    for _ in range(4):
        held.open(metadata=claim(1))
    wait_open(node, 4)
    start = time.monotonic()
    assert code_of(held.open(metadata=claim(2))) is Code.RESOURCE_EXHAUSTED
    assert time.monotonic() - start < 2.0


@pytest.mark.parametrize(
    ("metadata", "frames", "code", "says"),
    [
        (claim(5), good(), Code.PERMISSION_DENIED, "node 5 is not a neighbour of node 0"),
        (claim(1, run="run-b"), good(), Code.FAILED_PRECONDITION, "push for run 'run-b'"),
        ((("thinwire-push", "nonsense"),), good(), Code.INVALID_ARGUMENT, "is not <run id>"),
        (claim(2), good(1), Code.INVALID_ARGUMENT, "the push claimed run 'run-a', node 2"),
        (claim(1, round=1), good(1), Code.INVALID_ARGUMENT, "round 1; its header says"),
    ],
    ids=["non-neighbour", "other-run", "malformed", "other-sender", "other-round"],
)
def test_a_claim_is_screened_and_must_match_the_header(guarded, metadata, frames, code, says):
    with pytest.raises(grpc.RpcError) as info:
        raw_push(guarded.port, frames, metadata=metadata)
    assert info.value.code() is code and says in info.value.details()
    assert raw_push(guarded.port, good(), metadata=claim(1)).outcome == gossip_pb2.DELIVERED


def test_a_final_refusal_is_not_retried_by_the_pushers_channel(start_node):
    from thinwire.topologies.transport import PeerClient, TransportSettings

    node = start_node(1, neighbours={0}, settings=TransportSettings(max_message_bytes=100))
    settings = TransportSettings(retries=3, backoff_s=0.01)
    with PeerClient(
        node=0, run_id=RUN, resolve=lambda j: node.address, settings=settings, insecure=True
    ) as client:
        assert client.push(0, bytes(101), {1})[1].code is Code.RESOURCE_EXHAUSTED
    wait_rejected(node, {"RESOURCE_EXHAUSTED": 1})


def test_delivery_payload_is_read_only(start_node):
    seen: list[Delivery] = []

    def keep(delivery: Delivery) -> bytes:
        seen.append(delivery)
        return raw_bytes(delivery)

    node = start_node(0, neighbours={1}, handler=keep)
    assert raw_push(node.port, good(), metadata=claim(1)).outcome == gossip_pb2.DELIVERED
    assert seen[0].payload.readonly and bytes(seen[0].payload) == b"abcdef"
