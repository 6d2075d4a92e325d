"""Rank-r factor payloads (PowerSGD's P and Q) on the wire: what travels and what is refused.

A factor payload is a `FactorSupport(rank)` over a 2-D domain (n, m) with (n + m) * rank
raw values. Everything about it comes from the sender, so decode checks the rank against
the domain, the value count against the rank and every value for finiteness, and names the
tensor, before any codec multiplies the factors out.
"""

import math

import pytest
import torch
from wire_samples import assert_same_payload, edited, factor_payload, single

from thinwire.wire import (
    DenseSupport,
    FactorSupport,
    Kind,
    Limits,
    Payload,
    RawValues,
    TensorSpec,
    Update,
    WireError,
    decode,
    encode,
    factors,
)
from thinwire.wire import update_pb2 as pb

SHAPE = (6, 4)
RANK = 2
SPEC = [TensorSpec("fc.weight", SHAPE)]


def factor_message(rank: int = RANK, count: int | None = None) -> bytes:
    k = (SHAPE[0] + SHAPE[1]) * rank if count is None else count
    payload = Payload(SHAPE, FactorSupport(rank), RawValues(torch.arange(float(k))))
    message = pb.Update(format=1, sender="client-1", round=1, kind=pb.MODEL_DELTA)
    tensor = message.tensors.add(name="fc.weight", shape=SHAPE)
    tensor.factors.rank = rank
    tensor.raw.dtype = pb.FP32
    tensor.raw.data = payload.values.data.numpy().astype("<f4").tobytes()
    return message.SerializeToString(deterministic=True)


def rejects(data: bytes, problem: str, spec=SPEC, **kw) -> None:
    with pytest.raises(WireError, match=rf"^tensor 'fc.weight': {problem}"):
        decode(data, spec, **kw)


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_factors_round_trip_bit_for_bit(dtype):
    sent = factor_payload(dtype, (12, 9), 3)
    update, spec = single("w", sent)
    data = encode(update)
    assert_same_payload(sent, decode(data, spec).tensors["w"])
    # (n + m) r values and a few bytes of framing, nothing more.
    itemsize = 4 if dtype == "fp32" else 2
    assert (12 + 9) * 3 * itemsize < len(data) <= (12 + 9) * 3 * itemsize + 40


def test_factors_split_into_p_then_q_row_major():
    p, q = torch.randn(6, 2), torch.randn(4, 2)
    payload = Payload(SHAPE, FactorSupport(2), RawValues(torch.cat([p.reshape(-1), q.reshape(-1)])))
    got_p, got_q = factors(
        decode(
            encode(Update("c", 1, Kind.MODEL_DELTA, {"w": payload})), [TensorSpec("w", SHAPE)]
        ).tensors["w"]
    )
    assert torch.equal(got_p, p) and torch.equal(got_q, q)


def test_the_base_factor_message_is_valid():
    got = decode(factor_message(), SPEC).tensors["fc.weight"]
    assert got.support == FactorSupport(RANK) and got.count == (6 + 4) * RANK


@pytest.mark.parametrize("rank", [0, 5, 2**32 - 1])
def test_a_rank_outside_one_to_min_n_m_is_refused(rank):
    rejects(factor_message(rank=rank, count=10), rf"factor rank {rank} is outside \[1, min")


@pytest.mark.parametrize("count", [0, 19, 21, 10 * 4])
def test_a_value_count_that_does_not_match_the_factor_shapes_is_refused(count):
    # Wrong factor shapes and truncated factors read the same: bytes for another count.
    rejects(factor_message(count=count), r"raw values are \d+ bytes, 20 FP32 values need 80")


def test_truncated_factor_bytes_are_refused():
    data = edited(
        factor_message(), lambda m: setattr(m.tensors[0].raw, "data", m.tensors[0].raw.data[:-3])
    )
    rejects(data, "raw values are 77 bytes")


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("allow_nonfinite", [False, True])
def test_non_finite_factors_are_refused_whatever_the_limits(bad, allow_nonfinite):
    def poison(m):
        values = torch.frombuffer(bytearray(m.tensors[0].raw.data), dtype=torch.float32).clone()
        values[7] = bad
        m.tensors[0].raw.data = values.numpy().tobytes()

    data = edited(factor_message(), poison)
    problem = "rank-2 factors hold non-finite values" if allow_nonfinite else "raw value 7 is"
    rejects(data, problem, limits=Limits(allow_nonfinite=allow_nonfinite))


@pytest.mark.parametrize("shape", [(24,), (2, 3, 4)])
def test_factors_need_a_two_dimensional_domain(shape):
    def reshape(m):
        del m.tensors[0].shape[:]
        m.tensors[0].shape.extend(shape)

    data = edited(factor_message(), reshape)
    rejects(data, r"factors need a 2-D domain", spec=[TensorSpec("fc.weight", shape)])


@pytest.mark.parametrize("values", ["quantized", "sign"])
def test_factors_travel_only_as_raw_values(values):
    def swap(m):
        m.tensors[0].ClearField("raw")
        getattr(m.tensors[0], values).SetInParent()

    rejects(edited(factor_message(), swap), f"factors travel as raw values, got {values}")


def test_encode_refuses_factors_it_could_not_decode():
    for shape, rank in (((6, 4), 5), ((24,), 1), ((6, 4), 0)):
        payload = Payload(shape, FactorSupport(rank), RawValues(torch.zeros(10)))
        with pytest.raises(ValueError, match="tensor 'w': factors need a 2-D domain"):
            encode(Update("c", 1, Kind.MODEL_DELTA, {"w": payload}))
    short = Payload(SHAPE, FactorSupport(2), RawValues(torch.zeros(19)))
    with pytest.raises(ValueError, match="19 values for a support of 20 coordinates"):
        encode(Update("c", 1, Kind.MODEL_DELTA, {"w": short}))


def test_a_dense_payload_still_decodes_beside_factors():
    dense = Payload((4,), DenseSupport(), RawValues(torch.ones(4)))
    update = Update("c", 1, Kind.MODEL_DELTA, {"w": factor_payload("fp32", SHAPE, 2), "b": dense})
    got = decode(encode(update), [TensorSpec("w", SHAPE), TensorSpec("b", (4,))])
    assert isinstance(got.tensors["b"].support, DenseSupport)
