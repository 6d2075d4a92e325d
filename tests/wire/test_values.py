"""Carried values: raw floats bit-exact, QSGD levels in their smaller form, signs LSB first."""

import numpy as np
import pytest
import torch

from thinwire.wire import Limits, QuantizedValues, RawValues, SignValues, _bits
from thinwire.wire import update_pb2 as pb
from thinwire.wire._values import bucket_count, level_width, read_values, write_values


def round_trip(values, count: int):
    tensor = pb.Tensor()
    write_values(values, count, tensor)
    return tensor, read_values(pb.Tensor.FromString(tensor.SerializeToString()), count, Limits())


def qsgd(levels, s: int, bucket: int = 0) -> QuantizedValues:
    levels = torch.as_tensor(levels)
    return QuantizedValues(levels, torch.ones(bucket_count(levels.numel(), bucket)), s, bucket)


@pytest.mark.parametrize(
    ("s", "width"), [(1, 2), (2, 3), (3, 3), (4, 4), (16, 6), (127, 8), (2**20, 22)]
)
def test_level_width_is_ceil_log2_of_2s_plus_1(s, width):
    assert level_width(s) == width == int(np.ceil(np.log2(2 * s + 1)))


def test_bucket_count():
    assert [bucket_count(10, b) for b in (0, 1, 3, 10, 11)] == [1, 10, 4, 1, 1]
    assert bucket_count(0, 0) == 1 and bucket_count(0, 4) == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_raw_values_round_trip_bit_exactly(dtype):
    special = torch.tensor([0.0, -0.0, 1e-40, 65504.0, -3.5, 1e-7]).to(dtype)
    tensor, got = round_trip(RawValues(special), 6)
    assert len(tensor.raw.data) == 6 * special.element_size()
    assert isinstance(got, RawValues) and got.data.dtype == dtype
    bits = torch.int32 if dtype == torch.float32 else torch.int16
    assert torch.equal(got.data.view(bits), special.view(bits))


def test_raw_values_are_little_endian():
    tensor, _ = round_trip(RawValues(torch.tensor([1.0])), 1)
    assert tensor.raw.data == b"\x00\x00\x80\x3f"


def test_packed_levels_are_offset_codes():
    tensor, got = round_trip(qsgd(torch.tensor([-2, 2, 0, 1], dtype=torch.int8), s=2), 4)
    assert tensor.quantized.WhichOneof("codes") == "packed"
    codes = _bits.unpack(np.frombuffer(tensor.quantized.packed.data, np.uint8), 3, 4)
    assert codes.tolist() == [0, 4, 2, 3]
    assert isinstance(got, QuantizedValues) and got.levels.tolist() == [-2, 2, 0, 1]


def test_mostly_zero_levels_are_entropy_coded_and_smaller():
    levels = torch.zeros(100_000, dtype=torch.int8)
    levels[::997] = 3
    levels[5::1999] = -16
    tensor, got = round_trip(qsgd(levels, s=16), 100_000)
    sparse = tensor.quantized.sparse
    assert tensor.quantized.WhichOneof("codes") == "sparse"
    assert sparse.nonzero == int((levels != 0).sum())
    assert len(tensor.quantized.SerializeToString()) < _bits.packed_nbytes(100_000, 6) / 50
    assert isinstance(got, QuantizedValues) and torch.equal(got.levels, levels)


def test_levels_with_more_than_a_quarter_non_zero_travel_packed():
    levels = torch.zeros(4000, dtype=torch.int8)
    levels[::3] = 1
    tensor, got = round_trip(qsgd(levels, s=64), 4000)
    assert tensor.quantized.WhichOneof("codes") == "packed"
    assert isinstance(got, QuantizedValues) and torch.equal(got.levels, levels)


@pytest.mark.parametrize("s", [1, 127, 128, 32767, 32768, 2**20])
def test_both_level_forms_round_trip_at_every_level_width(s):
    g = torch.Generator().manual_seed(s)
    dense = torch.randint(-s, s + 1, (3001,), generator=g, dtype=torch.int64)
    sparse = dense * (torch.rand(3001, generator=g) < 0.02)
    for levels, form in ((dense, "packed"), (sparse, "sparse")):
        tensor, got = round_trip(qsgd(levels.to(torch.int32), s, bucket=100), 3001)
        assert tensor.quantized.WhichOneof("codes") == form
        assert isinstance(got, QuantizedValues)
        assert torch.equal(got.levels.to(torch.int64), levels)
        assert got.norms.shape == (31,)


def test_extreme_levels_round_trip_in_the_entropy_coded_form():
    levels = torch.zeros(1000, dtype=torch.int8)
    levels[[0, 500, 999]] = torch.tensor([-127, 127, -1], dtype=torch.int8)
    tensor, got = round_trip(qsgd(levels, s=127), 1000)
    assert tensor.quantized.WhichOneof("codes") == "sparse"
    assert isinstance(got, QuantizedValues) and torch.equal(got.levels, levels)


def test_sign_bits_are_set_where_values_are_negative_lsb_first():
    negative = torch.tensor([True, False, False, True, False, False, False, False, True])
    tensor, got = round_trip(SignValues(negative, torch.tensor([0.5, 2.0]), bucket=8), 9)
    assert tensor.sign.negative == bytes([0b00001001, 0b1])
    assert isinstance(got, SignValues)
    assert torch.equal(got.negative, negative) and got.scales.tolist() == [0.5, 2.0]


def test_norms_and_scales_travel_as_float32():
    _, got = round_trip(qsgd(torch.tensor([1, 0], dtype=torch.int8), s=1, bucket=1), 2)
    assert isinstance(got, QuantizedValues) and got.norms.dtype == torch.float32
