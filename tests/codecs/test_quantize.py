"""Quantizers: QSGD's unbiasedness and variance, scaled sign's delta, 16-bit casts."""

import math

import pytest
import torch

from thinwire.codecs import cast, chain, qsgd, scaled_sign, top_k
from thinwire.codecs import quantize as quantize_module
from thinwire.wire import WireError
from thinwire.wire.payload import QuantizedValues, RawValues, SignValues


def gaussian(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, generator=torch.Generator().manual_seed(seed))


def draws(codec, x, count):
    state = codec.init(x)
    for _ in range(count):
        payload, state = codec.encode(x, state)
        yield payload, codec.decode(payload, x.shape)


@pytest.mark.parametrize(("levels", "bucket"), [(1, 0), (4, 0), (4, 16), (127, 7)])
def test_qsgd_is_unbiased(levels, bucket):
    n, count = 64, 2000
    x = gaussian(n, seed=levels)
    codec = chain(qsgd(levels, bucket, seed=5))
    total = torch.zeros(n)
    for _, decoded in draws(codec, x, count):
        total += decoded
    # Each coordinate rounds between two levels norm/s apart: sd <= norm / (2 s sqrt(count)).
    norm = float(x.norm())  # a bucket's norm is at most the vector's
    bound = 5 * norm / (2 * levels * math.sqrt(count))
    assert float((total / count - x).abs().max()) < bound


@pytest.mark.parametrize(("levels", "bucket"), [(1, 0), (2, 0), (8, 0), (2, 8), (16, 32)])
def test_qsgd_variance_is_within_omega(levels, bucket):
    n, count = 256, 500
    x = gaussian(n, seed=1) * torch.linspace(0.1, 2.0, n)
    codec = chain(qsgd(levels, bucket, seed=2))
    errors = [float((d - x).square().sum()) for _, d in draws(codec, x, count)]
    omega = codec.info.omega(n)
    assert omega == pytest.approx(
        min(min(n, bucket or n) / levels**2, math.sqrt(bucket or n) / levels)
    )
    assert sum(errors) / count <= omega * float(x.square().sum())
    assert codec.info.unbiased


@pytest.mark.parametrize(
    ("levels", "dtype"),
    [
        (1, torch.int8),
        (127, torch.int8),
        (128, torch.int16),
        (32767, torch.int16),
        (40000, torch.int32),
    ],
)
def test_qsgd_levels_use_the_smallest_integer_type(levels, dtype):
    x = gaussian(100)
    codec = chain(qsgd(levels, seed=0))
    payload, _ = codec.encode(x, codec.init(x))
    values = payload.values
    assert isinstance(values, QuantizedValues)
    assert values.levels.dtype == dtype and values.s == levels
    assert int(values.levels.abs().max()) <= levels


def test_qsgd_one_norm_per_bucket_and_levels_reconstruct_the_values():
    x = gaussian(25, seed=3)
    codec = chain(qsgd(8, bucket=10, seed=0))
    payload, _ = codec.encode(x, codec.init(x))
    values = payload.values
    expected_norms = torch.stack([x[:10].norm(), x[10:20].norm(), x[20:].norm()])
    assert torch.allclose(values.norms, expected_norms)
    scale = expected_norms.repeat_interleave(10)[:25] / 8
    assert torch.allclose(codec.decode(payload, x.shape), values.levels.float() * scale)
    # Each level is one of the two integers around s * x_i / norm_b.
    ratio = 8 * x / expected_norms.repeat_interleave(10)[:25]
    assert bool(((values.levels.float() - ratio).abs() < 1 + 1e-5).all())


def test_qsgd_of_zero_is_zero():
    x = torch.zeros(10)
    codec = chain(qsgd(4, bucket=4, seed=0))
    payload, _ = codec.encode(x, codec.init(x))
    assert payload.values.levels.count_nonzero() == 0
    assert torch.equal(codec.decode(payload, x.shape), x)


def test_qsgd_draws_afresh_each_step_and_repeats_from_the_same_state():
    x = gaussian(1000)
    codec = chain(qsgd(2, seed=9))
    state = codec.init(x)
    first, later = codec.encode(x, state)
    again, _ = codec.encode(x, state)
    assert torch.equal(first.values.levels, again.values.levels)
    second, _ = codec.encode(x, later)
    assert not torch.equal(first.values.levels, second.values.levels)


def test_qsgd_cpu_chunks_keep_bucket_alignment(monkeypatch):
    monkeypatch.setattr(quantize_module, "_CPU_CHUNK", 64)
    x = gaussian(1000, seed=4)
    codec = chain(qsgd(16, bucket=24, seed=1))
    payload, _ = codec.encode(x, codec.init(x))
    values = payload.values
    norms = values.norms.repeat_interleave(24)[:1000]
    ratio = 16 * x / norms
    assert bool(((values.levels.float() - ratio).abs() < 1 + 1e-4).all())
    assert torch.allclose(codec.decode(payload, x.shape), values.levels.float() * norms / 16)


def test_qsgd_rejects_bad_arguments():
    with pytest.raises(ValueError, match="levels"):
        qsgd(0, seed=0)
    with pytest.raises(ValueError, match="bucket"):
        qsgd(4, -1, seed=0)


@pytest.mark.parametrize("bucket", [0, 1, 5, 64])
def test_scaled_sign_error_identity_and_delta(bucket):
    n = 37
    x = gaussian(n, seed=bucket) * torch.linspace(0.1, 5.0, n)
    codec = chain(scaled_sign(bucket))
    payload, _ = codec.encode(x, codec.init(x))
    assert isinstance(payload.values, SignValues)
    decoded = codec.decode(payload, x.shape)
    size = bucket or n
    blocks = [x[i : i + size] for i in range(0, n, size)]
    identity = sum(float(b.square().sum() - b.abs().sum() ** 2 / b.numel()) for b in blocks)
    error = float((x - decoded).square().sum())
    assert error == pytest.approx(identity, rel=1e-5, abs=1e-6)
    assert error <= (1 - codec.info.delta(n)) * float(x.square().sum()) + 1e-6
    assert codec.info.delta(n) == pytest.approx(1 / min(n, size))


def test_scaled_sign_sends_zero_as_plus_scale():
    x = torch.tensor([0.0, -2.0, 4.0])
    codec = chain(scaled_sign())
    payload, _ = codec.encode(x, codec.init(x))
    assert payload.values.negative.tolist() == [False, True, False]
    assert codec.decode(payload, x.shape).tolist() == [2.0, -2.0, 2.0]


@pytest.mark.parametrize("density", [0.01, 0.1, 0.5])
def test_sign_top_k_meets_sparqs_identity(density):
    # ||x - C(x)||^2 = ||x||^2 - ||Top_k x||_1^2 / k  (algorithms.md §2.4)
    x = gaussian(1000, seed=7)
    codec = chain(top_k(density), scaled_sign())
    payload, _ = codec.encode(x, codec.init(x))
    k = payload.count
    top = x[payload.support.indices]
    expected = float(x.square().sum() - top.abs().sum() ** 2 / k)
    error = float((x - codec.decode(payload, x.shape)).square().sum())
    assert error == pytest.approx(expected, rel=1e-5)
    assert error <= (1 - codec.info.delta(1000)) * float(x.square().sum())
    assert codec.info.delta(1000) == pytest.approx(density / 1000)  # composed bound


@pytest.mark.parametrize(
    ("dtype", "torch_dtype", "bits"), [("fp16", torch.float16, 11), ("bf16", torch.bfloat16, 8)]
)
def test_cast_rounds_to_nearest_within_half_an_ulp(dtype, torch_dtype, bits):
    x = gaussian(1000) * 10
    codec = chain(cast(dtype))
    payload, _ = codec.encode(x, codec.init(x))
    assert isinstance(payload.values, RawValues) and payload.values.data.dtype == torch_dtype
    decoded = codec.decode(payload, x.shape)
    assert decoded.dtype == torch.float32
    assert bool(((decoded - x).abs() <= x.abs() * 2.0**-bits).all())
    assert torch.equal(decoded, x.to(torch_dtype).float())


def test_fp16_saturates_instead_of_overflowing():
    x = torch.tensor([1e6, -1e6, 1.0])
    codec = chain(cast("fp16"))
    decoded = codec.decode(codec.encode(x, codec.init(x))[0], x.shape)
    assert decoded.tolist() == [65504.0, -65504.0, 1.0]


def test_fp16_cpu_chunks(monkeypatch):
    monkeypatch.setattr(quantize_module, "_CPU_CHUNK", 100)
    x = gaussian(1050) * 1e5
    codec = chain(cast("fp16"))
    payload, _ = codec.encode(x, codec.init(x))
    assert torch.equal(payload.values.data, x.clamp(-65504, 65504).half())


def test_cast_rejects_unknown_dtypes_and_foreign_values():
    with pytest.raises(ValueError, match="'fp16' or 'bf16'"):
        cast("fp8")
    # A foreign form is a sender's fault: WireError, the one error a decoder raises.
    quantizer = cast("fp16")
    with pytest.raises(WireError, match=r"plain values, got sign\(bucket=0\)"):
        quantizer.dequantize(SignValues(torch.zeros(1, dtype=torch.bool), torch.ones(1), 0))
    with pytest.raises(WireError, match="quantized values, got fp32"):
        qsgd(2, seed=0).dequantize(RawValues(torch.zeros(1)))
    with pytest.raises(WireError, match="sign values, got fp32"):
        scaled_sign().dequantize(RawValues(torch.zeros(1)))


def test_scaled_sign_decodes_every_finite_scale_without_overflow():
    # s - 2 s [negative] overflowed to -inf for s >= 2**127 (about 1.7e38); +-s never does.
    top = torch.finfo(torch.float32).max
    scales = torch.tensor([1.7e38, top, 1e-45])
    negative = torch.tensor([True, False, True, True, False, True])
    decoded = scaled_sign(bucket=2).dequantize(SignValues(negative, scales, 2))
    expected = torch.tensor([-1.7e38, 1.7e38, -top, -top, 1e-45, -1e-45])
    assert torch.equal(decoded, expected)
