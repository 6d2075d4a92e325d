"""Push frames: byte-identical to protobuf, read back without copies."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from thinwire.topologies.transport import gossip_pb2
from thinwire.topologies.transport.framing import (
    FRAME_OVERHEAD,
    PUSH_METHOD,
    chunk_count,
    frame_data,
    frame_header,
    parse_frame,
    push_frames,
)


@given(st.binary(max_size=3000))
def test_data_frames_are_exactly_protobuf_chunks(piece):
    frame = frame_data(piece)
    assert frame == gossip_pb2.Chunk(data=piece).SerializeToString()
    assert len(frame) - len(piece) <= FRAME_OVERHEAD
    parsed = parse_frame(frame)
    assert isinstance(parsed, memoryview) and parsed.tobytes() == piece


@pytest.mark.parametrize("size", [127, 128, 16383, 16384, 2**20, 2**21 + 5])
def test_varint_boundaries(size):
    piece = bytes(size)
    assert frame_data(piece) == gossip_pb2.Chunk(data=piece).SerializeToString()
    assert len(parse_frame(frame_data(piece))) == size


def test_header_frames_round_trip():
    header = gossip_pb2.Header(run_id="r", round=7, sender=3, total_bytes=10, chunks=2)
    assert parse_frame(frame_header(header)) == header


def test_frames_parsed_by_protobuf_when_not_a_bare_data_field():
    # A data field followed by an unknown field is still a data chunk to protobuf.
    frame = frame_data(b"abc") + b"\x18\x01"
    assert parse_frame(frame).tobytes() == b"abc"


@pytest.mark.parametrize(
    ("frame", "message"),
    [(b"", "neither a header nor data"), (b"\x12\x05ab", "is not a Chunk")],
)
def test_malformed_frames_are_value_errors(frame, message):
    with pytest.raises(ValueError, match=message):
        parse_frame(frame)


def test_push_frames_slice_the_message_after_one_header():
    message = bytes(range(250)) * 4  # 1000 bytes
    header = gossip_pb2.Header(run_id="r", total_bytes=1000, chunks=chunk_count(1000, 300))
    frames = list(push_frames(header, message, 300))
    assert header.chunks == 4 and len(frames) == 5
    assert parse_frame(frames[0]) == header
    assert b"".join(parse_frame(f).tobytes() for f in frames[1:]) == message
    assert [len(parse_frame(f)) for f in frames[1:]] == [300, 300, 300, 100]


def test_push_frames_refuse_a_header_that_does_not_describe_the_message():
    header = gossip_pb2.Header(total_bytes=5, chunks=1)
    with pytest.raises(ValueError, match="header declares 5 bytes in 1 chunks"):
        list(push_frames(header, b"123456", 10))


def test_chunk_count():
    assert [chunk_count(n, 4) for n in (0, 1, 4, 5, 8)] == [0, 1, 1, 2, 2]
    with pytest.raises(ValueError, match="chunk_bytes must be >= 1"):
        chunk_count(3, 0)


def test_method_path_comes_from_the_proto():
    assert PUSH_METHOD == "/thinwire.topologies.v1.Gossip/Push"
