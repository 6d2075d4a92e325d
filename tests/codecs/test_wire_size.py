"""Codec payloads through the real wire format: they survive it, and cost what they should."""

import pytest
import torch

import thinwire.wire
from thinwire.codecs import (
    cast,
    chain,
    information_bits,
    multiscale_qsgd,
    qsgd,
    random_block,
    random_k,
    sampled_top_k,
    scaled_sign,
    top_k,
    wavelet,
    with_error_feedback,
)
from thinwire.wire.payload import Kind, TensorSpec, Update

CODECS = {
    "top_k": lambda: chain(top_k(0.01)),
    "sampled_top_k-fp16": lambda: chain(sampled_top_k(0.01), cast("fp16")),
    "random_k": lambda: chain(random_k(0.01, seed=1)),
    "random_block": lambda: chain(random_block(0.01, seed=2)),
    "qsgd": lambda: chain(qsgd(4, 512, seed=3)),
    "multiscale_qsgd": lambda: chain(multiscale_qsgd(4, (7, 56, 448), 512, seed=3)),
    "top_k-multiscale_qsgd": lambda: chain(top_k(0.01), multiscale_qsgd(3, (3,), seed=3)),
    "sign_top_k": lambda: chain(top_k(0.01), scaled_sign()),
    "sign": lambda: chain(scaled_sign(64)),
    "bf16": lambda: chain(cast("bf16")),
    "wavelet": lambda: chain(wavelet("sym2", 4), top_k(0.05)),
    "ef-top_k": lambda: with_error_feedback(chain(top_k(0.01))),
}


def round_trip(codec, x):
    payload, _ = codec.encode(x, codec.init(x))
    data = thinwire.wire.encode(Update("client-0", 3, Kind.MODEL_DELTA, {"x": payload}))
    spec = [TensorSpec("x", codec.wire_shape(tuple(x.shape)))]
    received = thinwire.wire.decode(data, spec).tensors["x"]
    return payload, data, received


@pytest.mark.parametrize("name", CODECS)
def test_payloads_survive_the_wire_bit_for_bit(name):
    codec = CODECS[name]()
    x = torch.randn(100, 300, generator=torch.Generator().manual_seed(0))
    payload, _, received = round_trip(codec, x)
    assert torch.equal(codec.decode(received, x.shape), codec.decode(payload, x.shape))


def test_sparse_top_k_costs_within_ten_percent_of_the_bound():
    x = torch.randn(1_000_000, generator=torch.Generator().manual_seed(1))
    payload, data, _ = round_trip(chain(sampled_top_k(0.01)), x)
    assert len(data) <= 1.1 * information_bits(payload) / 8


@pytest.mark.parametrize("name", ["random_k", "random_block"])
def test_seeded_payloads_carry_no_indices(name):
    x = torch.randn(100_000, generator=torch.Generator().manual_seed(2))
    payload, data, _ = round_trip(CODECS[name](), x)
    values_bytes = 4 * payload.count
    assert values_bytes < len(data) < values_bytes + 100


def test_sign_payloads_cost_a_bit_per_value():
    x = torch.randn(64_000, generator=torch.Generator().manual_seed(3))
    payload, data, _ = round_trip(CODECS["sign"](), x)
    assert len(data) <= 64_000 / 8 + 4 * 1000 + 100
    assert len(data) <= 1.05 * information_bits(payload) / 8
