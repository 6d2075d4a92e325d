"""Hostile bytes never crash decode: it returns a valid Update or raises WireError, nothing else.

A message decode accepts must also be one the sender side can produce: whatever comes out
re-encodes and decodes to the same bytes.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wire_samples import rich_update

from thinwire.wire import WireError, decode, encode
from thinwire.wire import update_pb2 as pb

UPDATE, SPEC = rich_update()
DATA = encode(UPDATE)
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

INTERESTING = (
    0,
    1,
    2,
    3,
    7,
    8,
    33,
    40,
    41,
    255,
    2**16,
    2**20 + 1,
    2**31,
    2**32 - 1,
    2**40,
    2**40 + 1,
    2**62,
    2**63,
    2**64 - 1,
)


def decodes_or_rejects(data: bytes) -> None:
    """The property: a WireError, or an update that survives a round trip unchanged."""
    try:
        update = decode(data, SPEC)
    except WireError:
        return
    again = encode(update)
    assert encode(decode(again, SPEC)) == again


def test_the_fuzzed_message_is_valid_and_rich():
    assert len(SPEC) == 48  # 5 supports x 9 value forms, and factors in 3 raw forms
    decodes_or_rejects(DATA)
    assert decode(DATA, SPEC).tensors.keys() == UPDATE.tensors.keys()


@FUZZ
@given(st.binary(max_size=3000))
def test_random_bytes(data):
    decodes_or_rejects(data)


@FUZZ
@given(st.binary(min_size=1, max_size=400))
def test_random_bytes_after_a_valid_prefix(tail):
    decodes_or_rejects(DATA[: len(DATA) // 2] + tail)


@FUZZ
@given(st.integers(0, len(DATA) - 1))
def test_truncations(cut):
    decodes_or_rejects(DATA[:cut])


@FUZZ
@given(st.lists(st.integers(0, 8 * len(DATA) - 1), min_size=1, max_size=6))
def test_bit_flips(flips):
    data = bytearray(DATA)
    for bit in flips:
        data[bit // 8] ^= 1 << (bit % 8)
    decodes_or_rejects(bytes(data))


# ------------------------------------------------------------------- field mutations

Path = tuple[tuple[str, int | None], ...]


def fields(message: Message, path: Path = ()) -> Iterator[tuple[Path, FieldDescriptor]]:
    """Every set scalar, bytes, string or repeated field, and every set oneof member."""
    for field, value in message.ListFields():
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            yield (*path, (field.name, None)), field
        elif field.message_type is not None and field.is_repeated:
            for i, item in enumerate(value):
                yield from fields(item, (*path, (field.name, i)))
        elif field.message_type is not None:
            yield (*path, (field.name, None)), field
            yield from fields(value, (*path, (field.name, None)))
        else:
            yield (*path, (field.name, None)), field


def parent(message: Message, path: Path) -> Message:
    for name, index in path[:-1]:
        message = getattr(message, name) if index is None else getattr(message, name)[index]
    return message


LOCATIONS = list(fields(pb.Update.FromString(DATA)))


def mutate(message: Message, path: Path, field: FieldDescriptor, draw) -> None:
    holder, name = parent(message, path), path[-1][0]
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        key = draw(st.sampled_from(["num_examples", "loss", "x" * 2000]))
        holder.metrics[key] = draw(st.sampled_from([math.nan, math.inf, -1.0, 1e308]))
    elif field.message_type is not None:
        if field.containing_oneof is not None and draw(st.booleans()):
            holder.ClearField(field.containing_oneof.name)
        else:
            holder.ClearField(name)
    elif field.is_repeated:  # Tensor.shape (uint64), MultiScaleValues.scales (uint32)
        shape = getattr(holder, name)
        bits = 32 if field.type == FieldDescriptor.TYPE_UINT32 else 64
        fitting = [v for v in INTERESTING if v < 2**bits]
        choice = draw(st.integers(0, 2))
        if choice == 0:
            shape.append(draw(st.sampled_from(fitting)))
        elif choice == 1 and len(shape):
            del shape[-1]
        elif len(shape):
            shape[draw(st.integers(0, len(shape) - 1))] = draw(st.sampled_from(fitting))
    elif field.type == FieldDescriptor.TYPE_BYTES:
        old = getattr(holder, name)
        new = draw(
            st.one_of(
                st.just(old[:-1]),
                st.just(old + b"\x00"),
                st.just(old + b"\xff"),
                st.binary(min_size=len(old), max_size=len(old)),
                st.just(b"\x00\x00\xc0\x7f" * (len(old) // 4)),  # float32 NaNs
                st.just(b""),
            )
        )
        setattr(holder, name, new)
    elif field.type == FieldDescriptor.TYPE_STRING:
        names = [t.name for t in message.tensors] + ["", "é" * 200]
        setattr(holder, name, draw(st.sampled_from(names)))
    elif field.type == FieldDescriptor.TYPE_DOUBLE:
        setattr(holder, name, draw(st.sampled_from([math.nan, -math.inf, 0.0])))
    else:  # integers and enums
        bits = 32 if field.type in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_ENUM) else 64
        signed = field.type == FieldDescriptor.TYPE_ENUM
        values = [v for v in INTERESTING if v < 2 ** (bits - signed)] + ([-1] if signed else [])
        setattr(holder, name, draw(st.sampled_from(values)))


@pytest.mark.slow
@settings(FUZZ, max_examples=400)
@given(st.data())
def test_field_mutations(data):
    message = pb.Update.FromString(DATA)
    for _ in range(data.draw(st.integers(1, 3))):
        path, field = data.draw(st.sampled_from(LOCATIONS))
        try:
            mutate(message, path, field, data.draw)
        except (IndexError, AttributeError):
            continue  # an earlier mutation removed what this path points into
    decodes_or_rejects(message.SerializeToString())


@pytest.mark.parametrize("i", range(len(SPEC)))
def test_swapping_any_two_names_is_rejected(i):
    message = pb.Update.FromString(DATA)
    j = (i + 1) % len(SPEC)
    message.tensors[i].name, message.tensors[j].name = (
        message.tensors[j].name,
        message.tensors[i].name,
    )
    with pytest.raises(WireError, match=f"tensor '{SPEC[min(i, j)].name}'"):
        decode(message.SerializeToString(), SPEC)
