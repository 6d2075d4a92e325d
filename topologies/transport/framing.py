"""Push streams as bytes: one header frame, then the update's bytes in data frames.

Every frame is a serialized `Chunk` of `gossip.proto`. Data frames are written and read by
hand here instead of through a `Chunk` object: the frame is the field's tag, the length as a
varint, then the slice itself (byte-identical to `Chunk(data=piece).SerializeToString()`, as
the tests check), so a 1 MiB slice is copied once on the way out instead of three times, and
read back as a zero-copy `memoryview` of the frame gRPC handed over. Header frames, and any
frame that is not exactly one data field, go through the generated protobuf code.
"""

from __future__ import annotations

from collections.abc import Iterator

from google.protobuf.message import DecodeError

from thinwire.topologies.transport import gossip_pb2

__all__ = [
    "FRAME_OVERHEAD",
    "PUSH_METHOD",
    "SERVICE_NAME",
    "chunk_count",
    "frame_data",
    "frame_header",
    "parse_frame",
    "push_frames",
]

_SERVICE = gossip_pb2.DESCRIPTOR.services_by_name["Gossip"]
SERVICE_NAME = _SERVICE.full_name
"""Fully qualified name of the gRPC service, `thinwire.topologies.v1.Gossip`."""
PUSH_METHOD = f"/{SERVICE_NAME}/{_SERVICE.methods_by_name['Push'].name}"
"""The method path a channel calls to push."""

_DATA_FIELD = gossip_pb2.Chunk.DESCRIPTOR.fields_by_name["data"].number
_DATA_TAG = bytes([_DATA_FIELD << 3 | 2])  # field number, wire type 2 (length-delimited)
FRAME_OVERHEAD = 1 + 10
"""Most bytes a data frame adds to its slice: the tag and a varint of up to 10 bytes."""


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def frame_data(piece: bytes | memoryview) -> bytes:
    """A data frame holding `piece`: the serialized `Chunk(data=piece)`, built with one copy."""
    return b"".join((_DATA_TAG, _varint(len(piece)), piece))


def frame_header(header: gossip_pb2.Header) -> bytes:
    """The header frame, the serialized `Chunk(header=header)`."""
    return gossip_pb2.Chunk(header=header).SerializeToString()


def chunk_count(total_bytes: int, chunk_bytes: int) -> int:
    """Number of data frames that carry `total_bytes` in slices of at most `chunk_bytes`."""
    if chunk_bytes < 1:
        raise ValueError(f"chunk_bytes must be >= 1, got {chunk_bytes}")
    return -(-total_bytes // chunk_bytes)


def push_frames(header: gossip_pb2.Header, message: bytes, chunk_bytes: int) -> Iterator[bytes]:
    """The frames of one push: the header, then `message` in slices of `chunk_bytes`.

    Raises:
        ValueError: if the header's `total_bytes` or `chunks` do not describe `message`.
    """
    if header.total_bytes != len(message) or header.chunks != chunk_count(
        len(message), chunk_bytes
    ):
        raise ValueError(
            f"header declares {header.total_bytes} bytes in {header.chunks} chunks; the "
            f"message has {len(message)} bytes, {chunk_count(len(message), chunk_bytes)} chunks"
        )
    yield frame_header(header)
    view = memoryview(message)
    for start in range(0, len(message), chunk_bytes):
        yield frame_data(view[start : start + chunk_bytes])


def _read_varint(frame: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    for index in range(position, min(position + 10, len(frame))):
        byte = frame[index]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, index + 1
        shift += 7
    return -1, position


def parse_frame(frame: bytes) -> gossip_pb2.Header | memoryview:
    """Reads one frame: its `Header`, or a view of its data slice (no copy).

    Raises:
        ValueError: for bytes that are not a `Chunk`, or a `Chunk` with neither part set.
    """
    if frame[:1] == _DATA_TAG:
        length, start = _read_varint(frame, 1)
        if length >= 0 and start + length == len(frame):
            return memoryview(frame)[start:]
    try:
        chunk = gossip_pb2.Chunk.FromString(frame)
    except DecodeError as exc:
        raise ValueError(f"a frame of {len(frame)} bytes is not a Chunk: {exc}") from None
    part = chunk.WhichOneof("part")
    if part == "header":
        return chunk.header
    if part == "data":
        return memoryview(chunk.data)
    raise ValueError("a Chunk carries neither a header nor data")
