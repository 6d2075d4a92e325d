"""decode refuses every malformed message with a WireError that names the tensor and problem."""

import math
import re

import numpy as np
import pytest
import torch
from wire_samples import edited

from thinwire.wire import (
    DenseSupport,
    Kind,
    Limits,
    Payload,
    QuantizedValues,
    RawValues,
    SeededSupport,
    SeedScheme,
    SignValues,
    SparseSupport,
    TensorSpec,
    Update,
    WireError,
    _bits,
    decode,
    encode,
)
from thinwire.wire import update_pb2 as pb

SHAPE = (4, 8)
N = 32
SPEC = [TensorSpec("fc.weight", SHAPE), TensorSpec("fc.bias", (4,))]


def message(weight: Payload, **header) -> bytes:
    bias = Payload((4,), DenseSupport(), RawValues(torch.ones(4)))
    update = Update(
        header.get("sender", "client-1"),
        header.get("round", 3),
        header.get("kind", Kind.MODEL_DELTA),
        {"fc.weight": weight, "fc.bias": bias},
        header.get("metrics", {"num_examples": 32.0}),
    )
    return encode(update)


SPARSE = message(
    Payload(SHAPE, SparseSupport(torch.tensor([1, 4, 9, 20, 31])), RawValues(torch.arange(5.0)))
)
BITMAP = message(Payload(SHAPE, SparseSupport(torch.arange(0, N, 2)), RawValues(torch.ones(16))))
SEEDED = message(Payload(SHAPE, SeededSupport(7, SeedScheme.RANDOM_K, 6), RawValues(torch.ones(6))))
PACKED = message(
    Payload(
        SHAPE,
        DenseSupport(),
        QuantizedValues(torch.arange(N, dtype=torch.int8) % 7 - 3, torch.ones(4), 3, 8),
    )
)
ENTROPY = message(
    Payload(
        SHAPE,
        DenseSupport(),
        QuantizedValues(
            torch.tensor([0] * 20 + [5, 0, -2, 0] + [0] * 7 + [1], dtype=torch.int8),
            torch.ones(1),
            5,
            0,
        ),
    )
)
SIGN = message(
    Payload(SHAPE, DenseSupport(), SignValues(torch.arange(N) % 3 == 0, torch.ones(2), 16))
)


def weight(m: pb.Update) -> pb.Tensor:
    return m.tensors[0]


def rejects(data: bytes, problem: str, *, spec=SPEC, tensor: str | None = "fc.weight", **kw):
    prefix = rf"tensor '{tensor}': " if tensor else ""
    with pytest.raises(WireError, match=f"^{prefix}{problem}") as caught:
        decode(data, spec, **kw)
    assert type(caught.value) is WireError
    return str(caught.value)


def rejects_message(data: bytes, problem: str, **kw):
    """A problem with the message as a whole, before any tensor."""
    return rejects(data, problem, tensor=None, **kw)


def test_the_base_messages_are_valid():
    assert ENTROPY != PACKED
    assert pb.Update.FromString(ENTROPY).tensors[0].quantized.WhichOneof("codes") == "sparse"
    assert pb.Update.FromString(PACKED).tensors[0].quantized.WhichOneof("codes") == "packed"
    assert pb.Update.FromString(BITMAP).tensors[0].sparse.WhichOneof("coding") == "bitmap"
    for data in (SPARSE, BITMAP, SEEDED, PACKED, ENTROPY, SIGN):
        assert list(decode(data, SPEC).tensors) == ["fc.weight", "fc.bias"]


# ------------------------------------------------------------------------------- message


def test_size_is_capped_before_parsing():
    rejects_message(
        SPARSE,
        f"message is {len(SPARSE)} bytes, more than the 100 allowed",
        limits=Limits(max_bytes=100),
    )


def test_bytes_that_do_not_parse():
    rejects_message(b"\xff\xff\xff\xff", "not an Update message")
    rejects_message(SPARSE[:-3], "not an Update message")


def test_sender_must_be_utf8():
    data = bytes([0x12, 2, 0xFF, 0xFE])  # field 2 (sender), length 2, invalid UTF-8
    rejects_message(data, "not an Update message")


def test_format_version():
    rejects_message(edited(SPARSE, lambda m: setattr(m, "format", 2)), "format version 2")
    rejects_message(edited(SPARSE, lambda m: m.ClearField("format")), "format version 0")


@pytest.mark.parametrize("kind", [0, 4, 99])
def test_kind_must_be_known(kind):
    rejects_message(
        edited(SPARSE, lambda m: setattr(m, "kind", kind)),
        f"unknown update kind {kind}",
    )


def test_kind_must_be_the_expected_one():
    rejects_message(SPARSE, "expected a MODEL update, got MODEL_DELTA", kind=Kind.MODEL)


def test_sender_length():
    data = edited(SPARSE, lambda m: setattr(m, "sender", "p" * 129))
    rejects_message(data, "sender id is 129 bytes, more than the 128 allowed")
    rejects_message(
        SPARSE,
        "sender id is 8 bytes, more than the 4 allowed",
        limits=Limits(max_sender_length=4),
    )


def test_round_range():
    data = edited(SPARSE, lambda m: setattr(m, "round", 2**64 - 1))
    rejects_message(data, rf"round {2**64 - 1} out of range \[0, {2**31 - 1}\]")


def test_metric_count():
    data = edited(SPARSE, lambda m: m.metrics.update({"a": 1.0, "b": 2.0}))
    rejects_message(
        data,
        "message has 3 metrics, more than the 2 allowed",
        limits=Limits(max_metrics=2),
    )


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_metrics_must_be_finite(value):
    data = edited(SPARSE, lambda m: m.metrics.update({"loss": value}))
    rejects_message(data, f"metric 'loss' is {value}, not finite")


def test_metric_name_length():
    data = edited(SPARSE, lambda m: m.metrics.update({"x" * 2000: 1.0}))
    rejects_message(data, "metric name 'xxx.*' is longer than 1024")


def test_too_many_tensors():
    rejects_message(
        SPARSE,
        "message has 2 tensors, more than the 1 allowed",
        limits=Limits(max_tensors=1),
    )


def test_a_missing_tensor_is_named():
    spec = [*SPEC, TensorSpec("head.weight", (2,))]
    rejects_message(
        SPARSE,
        r"expected 3 tensors, got 2 \(first missing: 'head.weight'\)",
        spec=spec,
    )


def test_an_extra_tensor_is_named():
    rejects_message(SPARSE, r"expected 1 tensors, got 2 \(first extra: 'fc.bias'\)", spec=SPEC[:1])


def test_a_spec_with_repeated_names_is_the_callers_mistake():
    with pytest.raises(ValueError, match="repeated") as caught:
        decode(SPARSE, [SPEC[0], SPEC[0]])
    assert not isinstance(caught.value, WireError)


# ------------------------------------------------------------------------------ identity


def test_tensors_must_come_in_spec_order():
    def swap(m: pb.Update) -> None:
        m.tensors[0].name, m.tensors[1].name = m.tensors[1].name, m.tensors[0].name

    rejects(edited(SPARSE, swap), "found 'fc.bias' in its place")


def test_duplicate_names_are_refused():
    data = edited(SPARSE, lambda m: setattr(m.tensors[1], "name", "fc.weight"))
    rejects(data, "found 'fc.weight' in its place", tensor="fc.bias")


def test_name_length():
    data = edited(SPARSE, lambda m: setattr(weight(m), "name", "w" * 5000))
    rejects(data, "name 'www.*' is longer than 1024")


@pytest.mark.parametrize("shape", [(8, 4), (32,), (4, 8, 1), ()])
def test_shape_must_match_the_spec(shape):
    def reshape(m: pb.Update) -> None:
        del weight(m).shape[:]
        weight(m).shape.extend(shape)

    expected = re.escape(f"shape {shape} does not match the expected (4, 8)")
    rejects(edited(SPARSE, reshape), expected)


def test_a_support_is_required():
    rejects(edited(SPARSE, lambda m: weight(m).ClearField("support")), "has no support")


def test_values_are_required():
    rejects(edited(SPARSE, lambda m: weight(m).ClearField("values")), "has no values")


# ------------------------------------------------------------------------------- supports


def test_sparse_count_is_at_most_n():
    data = edited(SPARSE, lambda m: setattr(weight(m).sparse, "count", 2**40))
    rejects(data, f"sparse support carries {2**40} coordinates of a domain of 32")


def test_sparse_coding_is_required():
    rejects(
        edited(SPARSE, lambda m: weight(m).sparse.ClearField("coding")),
        "sparse support has no index coding",
    )


def test_rice_parameter_range():
    data = edited(SPARSE, lambda m: setattr(weight(m).sparse.gaps, "bits", 41))
    rejects(data, r"Rice parameter 41 out of range \[0, 40\]")


def test_rice_low_stream_length():
    data = edited(SPARSE, lambda m: setattr(weight(m).sparse.gaps, "low", b"\x00" * 9))
    rejects(data, "Rice low stream is 9 bytes")


def test_rice_low_stream_padding():
    def edit(m: pb.Update) -> None:
        gaps = weight(m).sparse.gaps
        low = bytearray(gaps.low)
        low[-1] |= 0x80
        gaps.low = bytes(low)

    assert (5 * pb.Update.FromString(SPARSE).tensors[0].sparse.gaps.bits) % 8 != 0
    rejects(edited(SPARSE, edit), "Rice low stream has non-zero padding bits")


def test_rice_high_stream_count():
    def edit(m: pb.Update) -> None:
        gaps = weight(m).sparse.gaps
        gaps.bits, gaps.low = 0, b""
        gaps.high = _bits.rice_encode(np.array([1, 2, 4, 10], np.int64), 0).high.tobytes()

    rejects(edited(SPARSE, edit), "Rice high stream holds 4 values, expected 5")


def test_rice_high_stream_trailing_bytes():
    roomy = message(
        Payload((1024,), SparseSupport(torch.tensor([5, 600])), RawValues(torch.ones(2)))
    )
    spec = [TensorSpec("fc.weight", (1024,)), SPEC[1]]

    def pad(m: pb.Update) -> None:
        weight(m).sparse.gaps.high += b"\x00"

    rejects(edited(roomy, pad), "Rice high stream has trailing zero bytes", spec=spec)


def test_sparse_indices_must_fall_inside_the_domain():
    wide = message(
        Payload((64,), SparseSupport(torch.tensor([3, 40, 63])), RawValues(torch.ones(3)))
    )

    def narrow(m: pb.Update) -> None:
        del weight(m).shape[:]
        weight(m).shape.extend(SHAPE)

    rejects(edited(wide, narrow), r"sparse index 63 out of range \[0, 32\)")


def test_bitmap_length():
    data = edited(BITMAP, lambda m: setattr(weight(m).sparse, "bitmap", b"\x55" * 5))
    rejects(data, "sparse bitmap is 5 bytes, a domain of 32 needs 4")


def test_bitmap_popcount():
    data = edited(BITMAP, lambda m: setattr(weight(m).sparse, "bitmap", b"\x55\x55\x55\x57"))
    rejects(data, "sparse bitmap sets 17 coordinates, the support says 16")


def test_bitmap_padding():
    data = message(Payload((12,), SparseSupport(torch.arange(0, 12, 2)), RawValues(torch.ones(6))))
    spec = [TensorSpec("fc.weight", (12,)), SPEC[1]]
    assert pb.Update.FromString(data).tensors[0].sparse.WhichOneof("coding") == "bitmap"
    bad = edited(data, lambda m: setattr(weight(m).sparse, "bitmap", b"\x55\x15"))
    rejects(bad, "sparse bitmap sets bits beyond coordinate 11", spec=spec)


@pytest.mark.parametrize("scheme", [0, 3, 1000])
def test_seed_scheme_must_be_known(scheme):
    data = edited(SEEDED, lambda m: setattr(weight(m).seeded, "scheme", scheme))
    rejects(data, f"unknown seed scheme {scheme}")


def test_seeded_count_is_at_most_n():
    data = edited(SEEDED, lambda m: setattr(weight(m).seeded, "count", 33))
    rejects(data, "seeded support carries 33 coordinates of a domain of 32")


@pytest.mark.parametrize("n", [0, 2**40 + 1])
def test_seeded_domain_is_bounded(n):
    def reshape(m: pb.Update) -> None:
        del weight(m).shape[:]
        weight(m).shape.append(n)

    spec = [TensorSpec("fc.weight", (n,)), SPEC[1]]
    rejects(
        edited(SEEDED, reshape),
        f"a seeded support needs a domain of 1 to 2\\*\\*40 coordinates, not {n}",
        spec=spec,
    )


# -------------------------------------------------------------------------------- values


@pytest.mark.parametrize("dtype", [0, 4, 77])
def test_raw_dtype_must_be_known(dtype):
    data = edited(SPARSE, lambda m: setattr(weight(m).raw, "dtype", dtype))
    rejects(data, f"raw values have unknown dtype {dtype}")


def test_raw_length_must_match_the_count():
    data = edited(SPARSE, lambda m: setattr(weight(m).raw, "data", b"\x00" * 16))
    rejects(data, "raw values are 16 bytes, 5 FP32 values need 20")
    half = edited(SPARSE, lambda m: setattr(weight(m).raw, "dtype", pb.FP16))
    rejects(half, "raw values are 20 bytes, 5 FP16 values need 10")


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_raw_values_must_be_finite_unless_allowed(bad, dtype):
    values = torch.tensor([0.0, 1.0, bad, 2.0], dtype=dtype)
    data = message(Payload(SHAPE, SparseSupport(torch.tensor([0, 1, 2, 3])), RawValues(values)))
    rejects(data, f"raw value 2 is {bad}")
    got = decode(data, SPEC, limits=Limits(allow_nonfinite=True)).tensors["fc.weight"].values
    assert isinstance(got, RawValues)
    assert torch.equal(got.data.isnan(), values.isnan())
    assert torch.equal(got.data.nan_to_num(), values.nan_to_num())


@pytest.mark.parametrize("s", [0, 2**20 + 1])
def test_qsgd_levels_range(s):
    data = edited(PACKED, lambda m: setattr(weight(m).quantized, "levels", s))
    rejects(data, rf"QSGD levels s={s} out of range \[1, 1048576\]")


def test_qsgd_levels_limit_is_configurable():
    rejects(PACKED, r"QSGD levels s=3 out of range \[1, 2\]", limits=Limits(max_levels=2))


def test_qsgd_norm_count_follows_the_bucket():
    data = edited(PACKED, lambda m: setattr(weight(m).quantized, "bucket", 5))
    rejects(data, r"QSGD norms are 16 bytes, 7 buckets need 28 \(32 values, bucket 5\)")
    one = edited(PACKED, lambda m: setattr(weight(m).quantized, "bucket", 0))
    rejects(one, "QSGD norms are 16 bytes, 1 buckets need 4")


@pytest.mark.parametrize("norm", [math.nan, math.inf, -1.0])
def test_qsgd_norms_are_finite_and_non_negative(norm):
    norms = np.ones(4, "<f4")
    norms[2] = norm
    data = edited(PACKED, lambda m: setattr(weight(m).quantized, "norms", norms.tobytes()))
    rejects(data, rf"QSGD norms\[2\] is {norm}, not a finite value >= 0")


def test_qsgd_codes_are_required():
    data = edited(PACKED, lambda m: weight(m).quantized.ClearField("codes"))
    rejects(data, r"QSGD values have no level codes")


def test_packed_levels_length():
    data = edited(PACKED, lambda m: setattr(weight(m).quantized.packed, "data", b"\x00" * 13))
    rejects(data, "packed QSGD levels are 13 bytes, 32 codes of 3 bits need 12")


def test_packed_codes_are_at_most_2s():
    codes = np.full(N, 3, np.uint8)
    codes[17] = 7
    data = edited(
        PACKED,
        lambda m: setattr(weight(m).quantized.packed, "data", _bits.pack(codes, 3).tobytes()),
    )
    rejects(data, "packed QSGD code 7 at 17 exceeds 2s = 6")


def test_packed_level_padding():
    levels = torch.tensor([1, -1, 1], dtype=torch.int8)
    data = message(Payload((3,), DenseSupport(), QuantizedValues(levels, torch.ones(1), 1, 0)))
    spec = [TensorSpec("fc.weight", (3,)), SPEC[1]]
    packed = pb.Update.FromString(data).tensors[0].quantized.packed.data
    assert packed == bytes([0b100010])  # codes 2, 0, 2 at 2 bits each
    bad = edited(data, lambda m: setattr(weight(m).quantized.packed, "data", bytes([0b1100010])))
    rejects(bad, "packed QSGD levels have non-zero padding bits", spec=spec)


def test_sparse_levels_nonzero_is_at_most_the_count():
    assert pb.Update.FromString(ENTROPY).tensors[0].quantized.sparse.nonzero == 3
    data = edited(ENTROPY, lambda m: setattr(weight(m).quantized.sparse, "nonzero", 33))
    rejects(data, "sparse QSGD levels have 33 non-zero of 32 levels")


def test_sparse_level_positions_stay_inside_the_values():
    def edit(m: pb.Update) -> None:
        rice = _bits.rice_encode(np.array([20, 1, 20], np.int64), 3)
        positions = weight(m).quantized.sparse.positions
        positions.bits, positions.low, positions.high = 3, rice.low.tobytes(), rice.high.tobytes()

    rejects(edited(ENTROPY, edit), r"sparse QSGD level position 43 out of range \[0, 32\)")


def test_sparse_level_magnitudes_are_at_most_s():
    def edit(m: pb.Update) -> None:
        rice = _bits.rice_encode(np.array([4, 1, 5], np.int64), 1)
        magnitudes = weight(m).quantized.sparse.magnitudes
        magnitudes.bits, magnitudes.low, magnitudes.high = (
            1,
            rice.low.tobytes(),
            rice.high.tobytes(),
        )

    rejects(edited(ENTROPY, edit), "Rice value 5 exceeds the largest allowed, 4")


def test_sparse_level_signs_length_and_padding():
    long = edited(ENTROPY, lambda m: setattr(weight(m).quantized.sparse, "negative", b"\x02\x00"))
    rejects(long, "sparse QSGD level signs are 2 bytes, 3 bits need 1")
    padded = edited(ENTROPY, lambda m: setattr(weight(m).quantized.sparse, "negative", b"\x12"))
    rejects(padded, "sparse QSGD level signs have non-zero padding bits")


def test_sign_scales_count_and_finiteness():
    data = edited(SIGN, lambda m: setattr(weight(m).sign, "bucket", 0))
    rejects(data, "sign scales are 8 bytes, 1 buckets need 4")
    scales = np.array([1.0, np.inf], "<f4").tobytes()
    rejects(
        edited(SIGN, lambda m: setattr(weight(m).sign, "scales", scales)),
        r"sign scales\[1\] is inf",
    )


def test_sign_bits_length_and_padding():
    data = edited(SIGN, lambda m: setattr(weight(m).sign, "negative", b"\x00" * 3))
    rejects(data, "sign bits are 3 bytes, 32 bits need 4")
    odd = message(
        Payload(
            (5,), DenseSupport(), SignValues(torch.zeros(5, dtype=torch.bool), torch.ones(1), 0)
        )
    )
    spec = [TensorSpec("fc.weight", (5,)), SPEC[1]]
    rejects(
        edited(odd, lambda m: setattr(weight(m).sign, "negative", b"\x20")),
        "sign bits have non-zero padding bits",
        spec=spec,
    )


def test_problems_in_later_tensors_name_them():
    data = edited(SPARSE, lambda m: setattr(m.tensors[1].raw, "data", b""))
    rejects(data, "raw values are 0 bytes, 4 FP32 values need 16", tensor="fc.bias")
