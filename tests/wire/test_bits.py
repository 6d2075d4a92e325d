"""Bit-level coding: fixed-width packing, bitmaps and two-stream Rice codes."""

import numpy as np
import pytest

from thinwire.wire import WireError, _bits


def reference_pack(codes: np.ndarray, width: int) -> np.ndarray:
    """The format's definition: each code's bits LSB first, streams LSB first per byte."""
    bits = (codes.astype(np.uint64)[:, None] >> np.arange(width, dtype=np.uint64)) & np.uint64(1)
    return np.packbits(bits.astype(np.uint8).reshape(-1), bitorder="little")


@pytest.mark.parametrize("width", range(1, 65))
def test_pack_lays_codes_out_lsb_first_and_unpack_inverts_it(width):
    rng = np.random.default_rng(width)
    for count in (1, 7, 63, 64, 65, 129, 1000):
        codes = rng.integers(0, (1 << width) - 1, count, dtype=np.uint64, endpoint=True)
        packed = _bits.pack(codes, width)
        assert np.array_equal(packed, reference_pack(codes, width))
        assert packed.size == _bits.packed_nbytes(count, width)
        unpacked = _bits.unpack(packed, width, count)
        assert unpacked.dtype == _bits.unsigned_dtype(width)
        assert np.array_equal(unpacked.astype(np.uint64), codes)


def test_packing_accepts_narrow_input_dtypes():
    codes = np.arange(40, dtype=np.uint8) % 33
    assert np.array_equal(_bits.pack(codes, 6), reference_pack(codes, 6))


def test_pack_pads_with_zero_bits():
    packed = _bits.pack(np.array([7, 7, 7], np.uint8), 3)  # 9 bits in 2 bytes
    assert packed.tolist() == [0xFF, 0x01]
    assert _bits.padding_is_zero(packed, 9)
    assert not _bits.padding_is_zero(np.array([0xFF, 0x03], np.uint8), 9)


def test_width_zero_and_empty_streams():
    assert _bits.pack(np.array([0, 0, 0]), 0).size == 0
    assert _bits.unpack(np.zeros(0, np.uint8), 0, 3).tolist() == [0, 0, 0]
    assert _bits.pack(np.zeros(0, np.uint8), 5).size == 0
    assert _bits.unpack(np.zeros(0, np.uint8), 5, 0).size == 0


def test_unpack_refuses_a_stream_of_the_wrong_length():
    with pytest.raises(ValueError, match="need 2 bytes"):
        _bits.unpack(np.zeros(3, np.uint8), 3, 5)


def test_unpacked_codes_are_writable():
    codes = _bits.unpack(np.frombuffer(bytes([0x1B]), np.uint8), 2, 4)
    codes += 1
    assert codes.tolist() == [4, 3, 2, 1]


def test_bitmap_and_set_bits_are_inverse():
    positions = np.array([0, 3, 8, 9, 23], np.int64)
    stream = _bits.bitmap(positions, 24)
    assert stream.tolist() == [0b00001001, 0b00000011, 0b10000000]
    assert _bits.set_bits(stream).tolist() == positions.tolist()
    assert _bits.popcount(stream) == 5


def test_gaps_and_positions_are_inverse():
    positions = np.array([0, 1, 5, 9], np.int64)
    gaps = _bits.gaps(positions)
    assert gaps.tolist() == [0, 0, 3, 3]
    assert _bits.positions_in_place(gaps).tolist() == positions.tolist()
    assert _bits.gaps(np.array([4], np.int64)).tolist() == [4]


def test_rice_streams_follow_the_format():
    # bits = 1: low parts 0, 1, 0 -> 0b010; high parts 0, 2, 1 -> "1", "001", "01".
    rice = _bits.rice_encode(np.array([0, 5, 2], np.int64), bits=1)
    assert rice.low.tolist() == [0b010]
    assert rice.high.tolist() == [0b101001]


def test_rice_round_trips_and_picks_the_smallest_parameter():
    rng = np.random.default_rng(0)
    for trial in range(60):
        count = int(rng.integers(0, 3000))
        scale = 10 ** rng.uniform(0, 9)
        values = (rng.geometric(1 / (1 + scale), count) - 1).astype(np.int64)
        if trial % 3 == 0:
            values = values % 50  # small values take the histogram path
        plan = _bits.plan_rice(values)
        sizes = [_bits.rice_nbytes(values, b) for b in range(41)]
        assert plan.nbytes == sizes[plan.bits] == min(sizes)
        rice = _bits.rice_encode(values, plan.bits)
        assert rice.low.size + rice.high.size == plan.nbytes
        top = int(values.max(initial=0))
        decoded = _bits.rice_decode(
            rice.bits,
            rice.low.tobytes(),
            rice.high.tobytes(),
            count,
            max_value=top,
            max_total=int(values.sum()),
        )
        assert np.array_equal(decoded, values)


def _decode(rice: _bits.Rice, count: int, max_value: int = 1000, max_total: int = 1000):
    return _bits.rice_decode(
        rice.bits,
        bytes(rice.low),
        bytes(rice.high),
        count,
        max_value=max_value,
        max_total=max_total,
    )


SAMPLE = _bits.rice_encode(np.array([3, 0, 9, 4, 4], np.int64), bits=2)
UNARY = _bits.rice_encode(np.array([3, 0, 9, 4, 4], np.int64), bits=0)


@pytest.mark.parametrize(
    ("rice", "count", "problem"),
    [
        (SAMPLE._replace(bits=41), 5, r"Rice parameter 41 out of range \[0, 40\]"),
        (
            SAMPLE._replace(low=SAMPLE.low[:1]),
            5,
            "low stream is 1 bytes, 5 values of 2 bits need 2",
        ),
        (SAMPLE._replace(low=np.array([0, 0xFC], np.uint8)), 5, "non-zero padding"),
        (SAMPLE._replace(high=np.zeros(0, np.uint8)), 5, "high stream is 0 bytes"),
        (UNARY, 4, "high stream holds 5 values, expected 4"),
        (SAMPLE._replace(high=np.append(SAMPLE.high, 0).astype(np.uint8)), 5, "trailing zero"),
        (SAMPLE, 0, "low stream"),
    ],
)
def test_rice_decode_rejects_malformed_streams(rice, count, problem):
    with pytest.raises(WireError, match=problem):
        _decode(rice, count)


def test_rice_decode_bounds_the_sum_before_materializing_values():
    with pytest.raises(WireError, match="sum to 20, more than the 19 allowed"):
        _decode(SAMPLE, 5, max_total=19)
    with pytest.raises(WireError, match="overruns by 20"):
        _bits.rice_decode(
            SAMPLE.bits,
            bytes(SAMPLE.low),
            bytes(SAMPLE.high),
            5,
            max_value=10,
            max_total=19,
            excess=lambda total: f"overruns by {total}",
        )


def test_rice_decode_bounds_each_value():
    with pytest.raises(WireError, match="value 9 exceeds the largest allowed, 8"):
        _decode(SAMPLE, 5, max_value=8)


def test_rice_decode_refuses_a_high_stream_longer_than_the_total_allows():
    # 3 values summing to at most 8 at bits = 0 need at most 11 unary bits (2 bytes).
    rice = _bits.Rice(0, np.zeros(0, np.uint8), np.array([1, 0, 0, 0x03], np.uint8))
    with pytest.raises(WireError, match="high stream is 4 bytes, 3 values need 1 to 2"):
        _decode(rice, 3, max_value=8, max_total=8)


def test_rice_decode_sums_huge_low_parts_exactly():
    values = np.full(5, (1 << 40) - 1, np.int64)
    rice = _bits.rice_encode(values, bits=40)
    with pytest.raises(WireError, match=f"sum to {5 * ((1 << 40) - 1)}"):
        _decode(rice, 5, max_value=1 << 41, max_total=(1 << 42))
