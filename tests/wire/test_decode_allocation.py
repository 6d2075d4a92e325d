"""decode allocates in proportion to the bytes it was given, never to the counts they claim."""

import tracemalloc

import pytest
import torch

from thinwire.wire import (
    Kind,
    Payload,
    RawValues,
    SparseSupport,
    TensorSpec,
    Update,
    WireError,
    decode,
    encode,
)
from thinwire.wire import update_pb2 as pb

HUGE = 2**40
SPEC = [TensorSpec("w", (HUGE,))]


def hostile(tensor: pb.Tensor) -> bytes:
    tensor.name = "w"
    tensor.shape.append(HUGE)
    message = pb.Update(format=1, sender="mallory", kind=pb.MODEL_DELTA, tensors=[tensor])
    return message.SerializeToString()


def rice(bits: int = 0, low: bytes = b"", high: bytes = b"\x01") -> pb.Rice:
    return pb.Rice(bits=bits, low=low, high=high)


def raw(data: bytes = b"") -> pb.RawValues:
    return pb.RawValues(dtype=pb.FP32, data=data)


CLAIMS = {
    "sparse count, gap stream": pb.Tensor(
        sparse=pb.SparseSupport(count=HUGE - 1, gaps=rice()),
        quantized=pb.QuantizedValues(
            levels=1, norms=b"\0" * 4, sparse=pb.SparseLevels(positions=rice(high=b""))
        ),
    ),
    "sparse bitmap": pb.Tensor(
        sparse=pb.SparseSupport(count=3, bitmap=b"\x07"), raw=raw(b"\0" * 12)
    ),
    "seeded count, raw values": pb.Tensor(
        seeded=pb.SeededSupport(seed=1, scheme=pb.RANDOM_K, count=HUGE), raw=raw(b"\0" * 64)
    ),
    "seeded count, packed levels": pb.Tensor(
        seeded=pb.SeededSupport(seed=1, scheme=pb.RANDOM_K, count=HUGE),
        quantized=pb.QuantizedValues(
            levels=1, bucket=1, norms=b"\0" * 4, packed=pb.PackedLevels(data=b"\0" * 16)
        ),
    ),
    "seeded count, packed levels length": pb.Tensor(
        seeded=pb.SeededSupport(seed=1, scheme=pb.RANDOM_BLOCK, count=HUGE),
        quantized=pb.QuantizedValues(
            levels=1, norms=b"\0" * 4, packed=pb.PackedLevels(data=b"\0" * 16)
        ),
    ),
    "dense, sparse levels": pb.Tensor(
        dense=pb.DenseSupport(),
        quantized=pb.QuantizedValues(
            levels=3,
            norms=b"\0" * 4,
            sparse=pb.SparseLevels(nonzero=HUGE, positions=rice(), magnitudes=rice()),
        ),
    ),
    "dense, signs": pb.Tensor(
        dense=pb.DenseSupport(), sign=pb.SignValues(scales=b"\0" * 4, negative=b"\0" * 9)
    ),
    "dense, raw": pb.Tensor(dense=pb.DenseSupport(), raw=raw(b"\0" * 40)),
    "huge Rice parameter": pb.Tensor(
        sparse=pb.SparseSupport(count=4, gaps=rice(bits=2**31, low=b"\0")), raw=raw(b"\0" * 16)
    ),
}


def peak_bytes(data: bytes, spec) -> tuple[int, Exception | None]:
    tracemalloc.start()
    tracemalloc.reset_peak()
    error = None
    try:
        decode(data, spec)
    except WireError as caught:
        error = caught
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return peak, error


@pytest.mark.parametrize("claim", CLAIMS)
def test_tiny_messages_claiming_huge_counts_fail_fast_and_allocate_almost_nothing(claim):
    data = hostile(CLAIMS[claim])
    assert len(data) < 120
    peak, error = peak_bytes(data, SPEC)
    assert isinstance(error, WireError)
    assert peak < 64 * 1024, f"{claim}: {peak} bytes allocated before refusing"


def test_a_count_beyond_a_small_spec_is_refused_before_anything_else():
    data = hostile(CLAIMS["sparse count, gap stream"])
    spec = [TensorSpec("w", (1000,))]
    message = pb.Update.FromString(data)
    del message.tensors[0].shape[:]
    message.tensors[0].shape.append(1000)
    peak, error = peak_bytes(message.SerializeToString(), spec)
    assert "carries 1099511627775 coordinates of a domain of 1000" in str(error)
    assert peak < 64 * 1024


def test_entropy_coded_levels_allocate_at_most_the_specs_own_size():
    n = 1 << 22
    tensor = pb.Tensor(
        seeded=pb.SeededSupport(seed=1, scheme=pb.RANDOM_K, count=n),
        quantized=pb.QuantizedValues(
            levels=1, norms=b"\0" * 4, sparse=pb.SparseLevels(positions=rice(high=b""))
        ),
    )
    data = hostile(tensor)
    message = pb.Update.FromString(data)
    message.tensors[0].shape[0] = n
    peak, error = peak_bytes(message.SerializeToString(), [TensorSpec("w", (n,))])
    assert error is None  # all-zero levels for a seeded support: valid, and n bytes of int8
    assert n <= peak < n + 64 * 1024


def test_a_valid_message_allocates_a_small_multiple_of_its_size_and_output():
    n, k = 10_000_000, 100_000
    g = torch.Generator().manual_seed(0)
    indices = torch.sort(torch.randperm(n, generator=g)[:k]).values
    payload = Payload((n,), SparseSupport(indices), RawValues(torch.randn(k, generator=g)))
    data = encode(Update("c", 0, Kind.MODEL_DELTA, {"w": payload}))
    peak, error = peak_bytes(data, [TensorSpec("w", (n,))])
    assert error is None
    output = k * (8 + 4)
    assert peak < 4 * (len(data) + output)
