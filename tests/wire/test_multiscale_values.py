"""Multi-scale values on the wire: exact bit cost, round trip, every malformed variant refused."""

import numpy as np
import pytest
import torch
from wire_samples import edited

from thinwire.wire import (
    DenseSupport,
    Kind,
    Limits,
    MultiScaleValues,
    Payload,
    SparseSupport,
    TensorSpec,
    Update,
    WireError,
    _bits,
    decode,
    encode,
)
from thinwire.wire import update_pb2 as pb

N = 30
SPEC = [TensorSpec("w", (N,))]


def multiscale(levels=None, index=None, norms=None, scales=(7, 56, 448), bits=4, bucket=8):
    g = torch.Generator().manual_seed(0)
    if levels is None:
        levels = torch.randint(-7, 8, (N,), generator=g, dtype=torch.int8)
    if index is None:
        index = torch.randint(0, len(scales), (N,), generator=g, dtype=torch.uint8)
    if norms is None:
        norms = torch.rand(-(-N // bucket) if bucket else 1, generator=g)
    return MultiScaleValues(levels, index, norms, scales, bits, bucket)


def message(values: MultiScaleValues, support=None) -> bytes:
    payload = Payload((N,), support or DenseSupport(), values)
    return encode(Update("client-0", 1, Kind.MODEL_DELTA, {"w": payload}))


BASE = message(multiscale())


def field(m: pb.Update) -> pb.MultiScaleValues:
    return m.tensors[0].multiscale


def rejects(data: bytes, problem: str, **kw) -> None:
    with pytest.raises(WireError, match="^tensor 'w': " + problem):
        decode(data, SPEC, **kw)


def test_values_round_trip_exactly_with_dense_and_sparse_supports():
    sent = multiscale()
    got = decode(BASE, SPEC).tensors["w"].values
    assert isinstance(got, MultiScaleValues)
    assert (got.bits, got.scales, got.bucket) == (4, (7, 56, 448), 8)
    assert torch.equal(got.levels.long(), sent.levels.long())
    assert torch.equal(got.scale_index, sent.scale_index)
    assert torch.equal(got.norms, sent.norms)
    indices = torch.tensor([2, 5, 11])
    small = multiscale(torch.tensor([1, -7, 0], dtype=torch.int8), torch.tensor([0, 2, 1]).byte())
    small = MultiScaleValues(small.levels, small.scale_index, torch.ones(1), (7, 56, 448), 4, 0)
    payload = decode(message(small, SparseSupport(indices)), SPEC).tensors["w"]
    assert torch.equal(payload.support.indices, indices)
    assert payload.values.levels.tolist() == [1, -7, 0]


def test_streams_cost_exactly_their_bits():
    m = field(pb.Update.FromString(BASE))
    assert len(m.levels) == _bits.packed_nbytes(N, 4)  # 4-bit codes
    assert len(m.scale_index) == _bits.packed_nbytes(N, 2)  # 3 scales: 2-bit indices
    assert len(m.norms) == 4 * 4  # ceil(30 / 8) fp32 norms
    single = message(multiscale(index=torch.zeros(N, dtype=torch.uint8), scales=(7,)))
    assert field(pb.Update.FromString(single)).scale_index == b""  # one scale: no index


def test_wide_levels_use_int16():
    levels = torch.arange(N, dtype=torch.int16) * 1000 - 15000
    data = message(multiscale(levels, scales=(32767,), bits=16, index=torch.zeros(N).byte()))
    got = decode(data, SPEC).tensors["w"].values
    assert got.levels.dtype == torch.int16 and torch.equal(got.levels, levels)


def set_scales(scales):
    def edit(m):
        del field(m).scales[:]
        field(m).scales.extend(scales)

    return edit


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (lambda m: setattr(field(m), "bits", 1), "multi-scale values: level width 1 bits"),
        (lambda m: setattr(field(m), "bits", 17), "multi-scale values: level width 17 bits"),
        (set_scales([]), "multi-scale values: 0 scales, expected 1 to 16"),
        (set_scales(range(1, 18)), "multi-scale values have 17 scales, at most 16"),
        (set_scales([0, 56, 448]), "multi-scale values: coarsest scale 0 out of range"),
        (set_scales([8, 56, 448]), r"multi-scale values: coarsest scale 8 out of range \[1, 7\]"),
        (set_scales([7, 56, 56]), "multi-scale values: scales .* are not strictly increasing"),
        (set_scales([7, 448, 56]), "multi-scale values: scales .* are not strictly increasing"),
        (
            lambda m: setattr(field(m), "bucket", 0),
            "multi-scale norms are 16 bytes, 1 buckets need 4",
        ),
        (
            lambda m: setattr(field(m), "norms", field(m).norms[:-1]),
            "multi-scale norms are 15 bytes",
        ),
        (
            lambda m: setattr(field(m), "norms", np.array([1, -1, 1, 1], "<f4").tobytes()),
            r"multi-scale norms\[1\] is -1.0",
        ),
        (
            lambda m: setattr(field(m), "norms", np.array([1, 1, np.nan, 1], "<f4").tobytes()),
            r"multi-scale norms\[2\] is nan",
        ),
        (
            lambda m: setattr(field(m), "levels", field(m).levels + b"\x00"),
            "multi-scale levels are 16 bytes, 30 codes of 4 bits need 15",
        ),
        (
            lambda m: setattr(field(m), "levels", field(m).levels[:-1]),
            "multi-scale levels are 14 bytes",
        ),
        (
            lambda m: setattr(field(m), "levels", b"\xff" * 15),
            "multi-scale level code 15 at 0 exceeds 14",
        ),
        (
            lambda m: setattr(field(m), "scale_index", field(m).scale_index[:-1]),
            "multi-scale scale indices are 7 bytes, 30 codes of 2 bits need 8",
        ),
        (
            lambda m: setattr(field(m), "scale_index", b"\x00" * 7 + b"\x10"),
            "multi-scale scale indices have non-zero padding bits",
        ),
        (
            lambda m: setattr(field(m), "scale_index", b"\x03" + b"\x00" * 7),
            "multi-scale scale index 3 at 0 names none of 3 scales",
        ),
        (
            lambda m: setattr(field(m), "scale_index", b"\x00"),
            "multi-scale scale indices are 1 bytes",
        ),
    ],
)
def test_every_malformed_variant_is_refused(edit, problem):
    rejects(edited(BASE, edit), problem)


def test_padding_of_the_level_stream_is_refused():
    # 30 codes of 3 bits: 90 bits, so the last byte has 6 padding bits.
    values = multiscale(torch.zeros(N, dtype=torch.int8), bits=3, scales=(3, 24, 192))
    data = message(values)
    last = field(pb.Update.FromString(data)).levels[-1]
    padded = edited(
        data, lambda m: setattr(field(m), "levels", field(m).levels[:-1] + bytes([last | 0x80]))
    )
    rejects(padded, "multi-scale levels have non-zero padding bits")


def test_a_finest_scale_above_the_receivers_limit_is_refused():
    rejects(
        BASE,
        "multi-scale values: finest scale 448 is above the 100 allowed",
        limits=Limits(max_levels=100),
    )


@pytest.mark.parametrize(
    ("values", "problem"),
    [
        (multiscale(scales=(8, 56)), "coarsest scale 8"),
        (multiscale(bits=1), "level width 1"),
        (multiscale(levels=torch.full((N,), 8, dtype=torch.int8)), r"levels must lie in \[-7, 7\]"),
        (multiscale(levels=torch.zeros(N)), "must be an integer tensor"),
        (multiscale(index=torch.full((N,), 3, dtype=torch.uint8)), r"indices must lie in \[0, 3\)"),
        (multiscale(index=torch.zeros(N, dtype=torch.int64)), "must be uint8"),
        (multiscale(levels=torch.zeros(N - 1, dtype=torch.int8)), "29 multi-scale levels for 30"),
        (multiscale(norms=torch.ones(2)), "multi-scale norms: expected 4 entries, got 2"),
    ],
)
def test_encode_refuses_values_that_break_the_format(values, problem):
    with pytest.raises(ValueError, match=f"^tensor 'w': .*{problem}"):
        message(values)
