"""Sparse index streams: exact round trips, the smaller coding, near the information bound."""

import math

import numpy as np
import pytest

from thinwire.wire import WireError
from thinwire.wire import update_pb2 as pb
from thinwire.wire._indices import read_indices, write_indices


def written(indices, n: int) -> pb.SparseSupport:
    out = pb.SparseSupport()
    write_indices(np.asarray(indices, np.int64), n, out)
    return out


def stream_bits(support: pb.SparseSupport) -> int:
    if support.WhichOneof("coding") == "bitmap":
        return 8 * len(support.bitmap)
    return 8 * (len(support.gaps.low) + len(support.gaps.high))


def log2_binomial(n: int, k: int) -> float:
    return (math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)) / math.log(2)


@pytest.mark.parametrize("k", [1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000])
def test_index_streams_stay_within_ten_percent_of_the_information_bound(k):
    n = 1_000_000
    indices = np.sort(np.random.default_rng(k).choice(n, k, replace=False))
    support = written(indices, n)
    assert stream_bits(support) <= 1.10 * log2_binomial(n, k)
    assert np.array_equal(read_indices(support, n), indices)


@pytest.mark.parametrize("density", [0.0, 0.001, 0.05, 0.3, 0.5, 0.9, 1.0])
def test_round_trips_at_every_density(density):
    n = 5000
    rng = np.random.default_rng(1)
    indices = np.sort(rng.choice(n, int(density * n), replace=False))
    support = written(indices, n)
    assert support.count == indices.size
    decoded = read_indices(support, n)
    assert decoded.dtype == np.int64
    assert np.array_equal(decoded, indices)


def test_the_smaller_coding_is_kept():
    n = 4096
    sparse, dense = written(np.arange(0, n, 97), n), written(np.arange(0, n, 2), n)
    assert sparse.WhichOneof("coding") == "gaps"
    assert dense.WhichOneof("coding") == "bitmap"
    assert len(dense.bitmap) == n // 8
    assert stream_bits(dense) < 8 * (n // 2) * 1 + 8  # a bitmap beats >= 1 bit per gap


def test_extreme_coordinates_round_trip():
    n = 1 << 33
    indices = np.array([0, 1, n - 2, n - 1], np.int64)
    assert np.array_equal(read_indices(written(indices, n), n), indices)


@pytest.mark.parametrize(
    ("indices", "problem"),
    [([3, 3], "strictly increasing"), ([5, 2], "strictly increasing"), ([-1, 2], "strictly")],
)
def test_write_rejects_indices_that_are_not_strictly_increasing(indices, problem):
    with pytest.raises(ValueError, match=problem):
        written(indices, 10)


def test_write_rejects_an_index_beyond_the_domain():
    with pytest.raises(ValueError, match=r"sparse index 10 out of range \[0, 10\)"):
        written([2, 10], 10)


def test_read_rejects_more_coordinates_than_the_domain_holds():
    support = written([1, 2], 10)
    support.count = 11
    with pytest.raises(WireError, match="carries 11 coordinates of a domain of 10"):
        read_indices(support, 10)


def test_read_rejects_a_support_without_coding():
    with pytest.raises(WireError, match="no index coding"):
        read_indices(pb.SparseSupport(count=1), 10)


def test_read_rejects_gaps_that_run_past_the_domain():
    n = 1 << 20
    support = written([5, n - 1], n)
    with pytest.raises(WireError, match=rf"sparse index {n - 1} out of range \[0, {n - 5}\)"):
        read_indices(support, n - 5)


def test_read_rejects_a_count_the_gap_stream_does_not_hold():
    support = written([5, 9, 30], 100)
    support.count = 2
    with pytest.raises(WireError, match="holds 3 values, expected 2"):
        read_indices(support, 100)


def test_read_rejects_bitmaps_of_the_wrong_length():
    support = written(np.arange(0, 64, 2), 64)
    with pytest.raises(WireError, match="sparse bitmap is 8 bytes, a domain of 65 needs 9"):
        read_indices(support, 65)


def test_read_rejects_bitmap_bits_beyond_the_domain():
    support = pb.SparseSupport(count=1, bitmap=bytes([0, 0x10]))
    with pytest.raises(WireError, match="sets bits beyond coordinate 11"):
        read_indices(support, 12)


def test_read_rejects_a_bitmap_whose_popcount_is_not_the_count():
    support = pb.SparseSupport(count=3, bitmap=bytes([0b1011, 0]))
    assert np.array_equal(read_indices(support, 16), [0, 1, 3])
    support.count = 2
    with pytest.raises(WireError, match="sets 3 coordinates, the support says 2"):
        read_indices(support, 16)
