"""The vote's shared pieces: top-K votes, the tally, index sets and values on the wire."""

from __future__ import annotations

import time

import pytest
import torch

from thinwire.voting import (
    MASK,
    VALUES,
    VOTE,
    index_payload,
    index_spec,
    read_index_set,
    read_values,
    support_size,
    tally,
    top_k_vote,
    values_payload,
    values_spec,
)
from thinwire.wire import (
    DenseSupport,
    Kind,
    Payload,
    QuantizedValues,
    RawValues,
    SparseSupport,
    Update,
    WireError,
    decode,
    encode,
)
from thinwire.wire import update_pb2 as pb


def ids(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int64)


def test_a_vote_is_the_sorted_top_k_of_the_magnitudes():
    a = torch.tensor([0.1, -5.0, 0.3, 4.0, -0.2, 3.0])
    assert top_k_vote(a, 3).tolist() == [1, 3, 5]


def test_the_tally_keeps_the_k_most_voted_coordinates():
    votes = [ids(0, 1, 2), ids(1, 2, 3), ids(2, 3, 4)]  # counts 1, 2, 3, 2, 1
    assert tally(votes, 6, 3, seed=0, round=1).tolist() == [1, 2, 3]
    assert tally(votes, 6, 1, seed=0, round=1).tolist() == [2]


def test_ties_are_broken_by_a_seeded_draw_that_every_runtime_repeats():
    votes = [ids(0, 1), ids(2, 3)]  # four coordinates with one vote each, K = 2
    picks = {tuple(tally(votes, 8, 2, seed=s, round=r).tolist()) for s in range(4) for r in (1, 2)}
    assert all(set(p) <= {0, 1, 2, 3} for p in picks)  # never an unvoted coordinate
    assert len(picks) > 1  # the draw depends on seed and round
    again = tally(votes, 8, 2, seed=3, round=2)
    assert torch.equal(again, tally(votes, 8, 2, seed=3, round=2))


def test_without_votes_the_mask_is_k_seeded_coordinates():
    mask = tally([], 100, 5, seed=1, round=1)
    assert mask.numel() == 5 and bool((mask[1:] > mask[:-1]).all())


def test_k_is_ceil_density_times_d_as_top_k_counts_it():
    assert support_size(0.01, 4810) == 49
    assert support_size(1.0, 7) == 7


def test_an_index_set_travels_as_the_smaller_of_rice_gaps_and_a_bitmap():
    d = 1000
    sparse = encode(Update("c", 1, Kind.MODEL_DELTA, {VOTE: index_payload(ids(3, 500), d)}))
    dense = encode(
        Update("c", 1, Kind.MODEL_DELTA, {VOTE: index_payload(torch.arange(0, d, 2), d)})
    )
    assert len(sparse) < 60  # two gaps, not a 125-byte bitmap
    assert len(dense) < d // 8 + 60  # 500 indices as a bitmap, not 500 int32
    back = decode(sparse, [index_spec(VOTE, d)]).tensors[VOTE]
    assert read_index_set(back, k=2, exact=True, what="vote").tolist() == [3, 500]


def test_values_on_s_are_a_header_and_four_bytes_a_value():
    for k in (10, 1000):
        header = len(
            encode(
                Update("client-0", 1, Kind.MODEL_DELTA, {VALUES: values_payload(torch.zeros(0))})
            )
        )
        data = encode(
            Update("client-0", 1, Kind.MODEL_DELTA, {VALUES: values_payload(torch.ones(k))})
        )
        assert len(data) - header - 4 * k <= 6  # longer length prefixes, nothing else
        assert "indices" not in str(decode(data, [values_spec(VALUES, k)]).tensors[VALUES].support)


@pytest.mark.parametrize(
    ("payload", "k", "exact", "problem"),
    [
        (index_payload(ids(1, 2, 3), 10), 2, False, "lists 3 indices, at most K = 2"),
        (index_payload(ids(1, 2), 10), 3, True, "lists 2 indices, exactly K = 3"),
        (
            Payload(
                (10,),
                SparseSupport(ids(2, 2)),
                QuantizedValues(torch.zeros(2, dtype=torch.int8), torch.zeros(1), 1, 0),
            ),
            2,
            False,
            "repeats an index",
        ),
        (
            Payload(
                (10,),
                SparseSupport(ids(1, 12)),
                QuantizedValues(torch.zeros(2, dtype=torch.int8), torch.zeros(1), 1, 0),
            ),
            2,
            False,
            r"outside \[0, 10\)",
        ),
        (
            Payload((10,), DenseSupport(), RawValues(torch.zeros(10))),
            2,
            False,
            "must list its indices",
        ),
        (
            Payload((10,), SparseSupport(ids(1)), RawValues(torch.ones(1))),
            2,
            False,
            "carries values",
        ),
    ],
    ids=["too-many", "not-k", "duplicate", "out-of-range", "dense", "with-values"],
)
def test_a_hostile_index_set_is_refused_naming_the_problem(payload, k, exact, problem):
    with pytest.raises(WireError, match=problem):
        read_index_set(payload, k=k, exact=exact, what="vote")


def test_duplicates_and_wrong_bitmaps_cannot_pass_the_wire_either():
    with pytest.raises(ValueError, match="strictly increasing"):
        encode(Update("c", 1, Kind.MODEL_DELTA, {VOTE: index_payload(ids(4, 4), 10)}))
    d = 16
    data = encode(Update("c", 1, Kind.MODEL_DELTA, {VOTE: index_payload(torch.arange(16), d)}))
    message = pb.Update.FromString(data)
    assert message.tensors[0].sparse.WhichOneof("coding") == "bitmap"
    message.tensors[0].sparse.bitmap = b"\xff" * 5  # 40 bits for a domain of 16
    with pytest.raises(WireError, match="bitmap"):
        decode(message.SerializeToString(), [index_spec(VOTE, d)])
    with pytest.raises(WireError, match="does not match"):  # a vote over another d
        decode(data, [index_spec(VOTE, 2 * d)])
    with pytest.raises(WireError, match=MASK):  # a vote where a mask is expected
        decode(data, [index_spec(MASK, d)])


def test_values_of_another_length_or_not_finite_are_refused():
    k = 4
    data = encode(Update("c", 1, Kind.MODEL_DELTA, {VALUES: values_payload(torch.ones(k + 1))}))
    with pytest.raises(WireError, match="does not match"):
        decode(data, [values_spec(VALUES, k)])
    with pytest.raises(WireError, match="not finite"):
        read_values(
            Payload((k,), DenseSupport(), RawValues(torch.full((k,), float("nan")))),
            k=k,
            what="values",
        )


def test_the_vote_and_tally_are_fast_at_a_million_coordinates():
    d, clients = 1_200_000, 10
    k = support_size(0.01, d)
    generator = torch.Generator().manual_seed(0)
    start = time.perf_counter()
    votes = [top_k_vote(torch.randn(d, generator=generator), k) for _ in range(clients)]
    mask = tally(votes, d, k, seed=0, round=1)
    elapsed = time.perf_counter() - start
    assert mask.numel() == k and bool((mask[1:] > mask[:-1]).all())
    assert elapsed < 10.0  # torch ops over the coordinates, no Python loop
    counts = torch.bincount(torch.cat(votes), minlength=d)
    assert int(counts[mask].min()) >= int(counts[~torch.isin(torch.arange(d), mask)].max())
    data = encode(Update("c", 1, Kind.MODEL_DELTA, {VOTE: index_payload(votes[0], d)}))
    assert len(data) < 4 * k  # a vote costs fewer bytes than K int32 indices
