"""Quantizers: how the carried values are written (fp16/bf16 casts, QSGD, scaled sign).

Each factory returns a `Quantizer` whose `quantize` writes a (k,) vector of carried values
and whose `dequantize` returns them as float32 on the payload's device. Buckets split the
carried values into runs of `bucket` consecutive entries with one norm or scale each
(0 = one bucket); the last bucket may be shorter.

On CPU the elementwise passes run over cache-sized chunks: a fresh 100 MB temporary costs
more in first-touch page faults than the arithmetic on it. On other devices each pass is
one kernel over the whole vector.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Literal, NamedTuple

import numpy as np
import torch

from thinwire.codecs.base import CodecInfo, EmptyState, Quantizer
from thinwire.codecs.forms import qsgd_form, raw_form, sign_form, values_form
from thinwire.seeding import step_seed
from thinwire.wire import WireError
from thinwire.wire.payload import QuantizedValues, RawValues, SignValues, Values

__all__ = ["QSGDState", "cast", "qsgd", "scaled_sign"]

_CPU_CHUNK = 1 << 20
_FP16_MAX = 65504.0


def _spans(k: int, bucket: int, device: torch.device) -> Iterator[tuple[int, int]]:
    # Consecutive [start, stop) spans covering [0, k), each a whole number of buckets.
    if device.type != "cpu" or k <= _CPU_CHUNK:
        yield 0, k
        return
    step = _CPU_CHUNK if bucket == 0 else max(bucket, _CPU_CHUNK // bucket * bucket)
    for start in range(0, k, step):
        yield start, min(k, start + step)


def _per_bucket_norms(v: torch.Tensor, bucket: int, order: float) -> torch.Tensor:
    # (ceil(k / bucket),) float32 norms of each bucket of v; one entry when bucket == 0.
    k = v.numel()
    if k == 0:
        return torch.zeros(0 if bucket else 1, device=v.device)
    if bucket == 0 or bucket >= k:
        return torch.linalg.vector_norm(v, order, dtype=torch.float32).reshape(1)
    full = k - k % bucket
    by_bucket = v[:full].reshape(-1, bucket)
    norms = torch.linalg.vector_norm(by_bucket, order, dim=1, dtype=torch.float32)
    if full == k:
        return norms
    tail = torch.linalg.vector_norm(v[full:], order, dtype=torch.float32).reshape(1)
    return torch.cat([norms, tail])


def _bucket_sizes(k: int, bucket: int, count: int, device: torch.device) -> torch.Tensor:
    # (count,) float32 number of entries in each bucket.
    sizes = torch.full((count,), float(bucket or k), device=device)
    if bucket and k % bucket:
        sizes[-1] = k % bucket
    return sizes


def _expand(per_bucket: torch.Tensor, bucket: int, start: int, stop: int) -> torch.Tensor:
    # The per-bucket factor for entries [start, stop) (start a multiple of `bucket`).
    if bucket == 0 or per_bucket.numel() == 1:
        return per_bucket[0]
    first, last = start // bucket, math.ceil(stop / bucket)
    return per_bucket[first:last].repeat_interleave(bucket)[: stop - start]


def _check_bucket(bucket: int) -> None:
    if bucket < 0:
        raise ValueError(f"bucket must be >= 0 (0 = one bucket), got {bucket}")


def cast(dtype: Literal["fp16", "bf16"]) -> Quantizer:
    """Values travel as 16-bit floats (round to nearest even).

    The half-precision compression of PyTorch's DDP `fp16_compress_hook`. fp16 keeps an
    11-bit significand (relative error <= 2**-11 for |v| in [6.1e-5, 65504]), bf16 an 8-bit
    one with fp32's range (relative error <= 2**-8). Deterministic rounding, so biased; no
    contraction bound holds for every input (tiny values flush to zero), so `info.delta` is
    None. fp16 saturates at +-65504 instead of overflowing to infinity, which keeps error
    feedback residuals finite.

    State: none.

    Args:
        dtype: "fp16" or "bf16".

    Returns:
        A `Quantizer` emitting `RawValues` of that dtype.

    Example:
        >>> import torch
        >>> from thinwire.codecs import cast, chain
        >>> codec = chain(cast("fp16"))
        >>> x = torch.tensor([1e5, 0.1])
        >>> codec.decode(codec.encode(x, codec.init(x))[0], x.shape)
        tensor([6.5504e+04, 9.9976e-02])
    """
    if dtype not in ("fp16", "bf16"):
        raise ValueError(f"cast() takes 'fp16' or 'bf16', got {dtype!r}")
    target = torch.float16 if dtype == "fp16" else torch.bfloat16

    def init(device: torch.device) -> EmptyState:
        del device
        return EmptyState()

    def quantize(v: torch.Tensor, state: EmptyState) -> tuple[Values, EmptyState]:
        if target == torch.bfloat16:
            return RawValues(v.to(target)), state
        out = torch.empty(v.shape, dtype=target, device=v.device)
        for start, stop in _spans(v.numel(), 0, v.device):
            out[start:stop] = v[start:stop].clamp(-_FP16_MAX, _FP16_MAX)
        return RawValues(out), state

    def dequantize(values: Values) -> torch.Tensor:
        if not isinstance(values, RawValues):
            raise WireError(f"cast({dtype!r}) decodes plain values, got {values_form(values)}")
        return values.data.float()

    info = CodecInfo(unbiased=False)
    return Quantizer(init, quantize, dequantize, info, name=dtype, values=raw_form(target))


class QSGDState(NamedTuple):
    """State of `qsgd`."""

    seed: int  # base seed, 64-bit Python int
    step: int  # calls so far, Python int; the call's seed is step_seed(seed, step)


def _level_dtype(levels: int) -> torch.dtype:
    # The smallest signed integer type holding [-levels, levels].
    for dtype in (torch.int8, torch.int16, torch.int32):
        if levels <= torch.iinfo(dtype).max:
            return dtype
    raise ValueError(f"qsgd levels must be < 2**31, got {levels}")


def _qsgd_omega(levels: int, bucket: int) -> CodecInfo:
    def omega(n: int) -> float:
        size = min(n, bucket) if bucket else n
        return min(size / levels**2, math.sqrt(size) / levels)

    return CodecInfo(unbiased=True, omega=omega)


def _uniform_source(seed: int, device: torch.device) -> Callable[[int], torch.Tensor]:
    # count -> float32 uniforms on [0, 1) on `device`, a fresh stream per seed. On CPU the
    # bits come from NumPy's SFC64 generator, 24 per draw (exact in float32): about half
    # the cost of torch's mt19937 `uniform_` there, which dominates QSGD's encode. Other
    # devices draw with a torch.Generator on the device (no host round trip).
    if device.type == "cpu":
        bits = np.random.SFC64(seed)

        def draw_cpu(count: int) -> torch.Tensor:
            raw = torch.from_numpy(bits.random_raw((count + 1) // 2).view(np.int32)[:count])
            return ((raw >> 8) & 0xFFFFFF).float().mul_(2.0**-24)

        return draw_cpu
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)

    def draw_device(count: int) -> torch.Tensor:
        return torch.rand(count, generator=generator, device=device)

    return draw_device


def qsgd(levels: int, bucket: int = 0, *, seed: int) -> Quantizer:
    """QSGD: each value becomes norm * level / s with an unbiased random integer level.

    Alistarh et al. (NeurIPS'17, algorithms.md §7.6). For a bucket b with l2 norm ||v_b||
    and r_i = s * v_i / ||v_b|| in [-s, s], the level is floor(r_i + u_i) with u_i uniform
    on [0, 1): it rounds r_i to a neighbouring integer with probabilities that make it
    exact in expectation (the same law as the paper's sign(v_i) * xi_i). Unbiased, with
    E||Q(v) - v||^2 <= min(d/s^2, sqrt(d)/s) ||v||^2 for buckets of d entries.

    Levels travel as the smallest signed integer type holding [-s, s] (int8 up to s = 127),
    norms as float32 (one per bucket); the wire encoder packs or entropy-codes the levels.

    Tuning: s = 2**b - 1 levels for a b+1-bit budget; buckets of 512 (4-bit) to 8192
    (8-bit) keep the variance small, at one float per bucket. Unbucketed QSGD on a large
    vector sends mostly zeros (variance sqrt(d)/s).

    State: (seed, step); the uniforms come from a generator seeded with
    step_seed(seed, step) (NumPy's SFC64 on CPU, a `torch.Generator` on the values'
    device elsewhere, so CPU and CUDA draws differ). The receiver needs no seed.

    Args:
        levels: s >= 1, the number of positive levels.
        bucket: entries per norm; 0 = one norm for the whole vector.
        seed: base seed of the rounding noise.

    Returns:
        A `Quantizer` emitting `QuantizedValues`.

    Example:
        >>> import torch
        >>> from thinwire.codecs import chain, qsgd
        >>> codec = chain(qsgd(levels=4, seed=0))
        >>> x = torch.tensor([3.0, -4.0])
        >>> payload, _ = codec.encode(x, codec.init(x))
        >>> payload.values.norms, payload.values.levels.dtype
        (tensor([5.]), torch.int8)
    """
    if not levels >= 1:
        raise ValueError(f"qsgd levels (s) must be >= 1, got {levels}")
    _check_bucket(bucket)
    level_dtype = _level_dtype(levels)

    def init(device: torch.device) -> QSGDState:
        del device
        return QSGDState(seed, 0)

    def quantize(v: torch.Tensor, state: QSGDState) -> tuple[Values, QSGDState]:
        k = v.numel()
        norms = _per_bucket_norms(v, bucket, 2.0)
        safe = torch.where(norms > 0, norms, torch.ones_like(norms))
        factors = torch.where(norms > 0, levels / safe, torch.zeros_like(norms))
        draw = _uniform_source(step_seed(state.seed, state.step), v.device)
        codes = torch.empty(k, dtype=level_dtype, device=v.device)
        for start, stop in _spans(k, bucket, v.device):
            rounded = draw(stop - start).addcmul_(
                v[start:stop], _expand(factors, bucket, start, stop)
            )
            codes[start:stop] = rounded.floor_().clamp_(-levels, levels)
        values = QuantizedValues(codes, norms, levels, bucket)
        return values, QSGDState(state.seed, state.step + 1)

    def dequantize(values: Values) -> torch.Tensor:
        if not isinstance(values, QuantizedValues):
            raise WireError(f"qsgd decodes quantized values, got {values_form(values)}")
        codes, scale = values.levels, values.norms.float() / values.s
        out = torch.empty(codes.shape, dtype=torch.float32, device=codes.device)
        for start, stop in _spans(codes.numel(), values.bucket, codes.device):
            torch.mul(
                codes[start:stop], _expand(scale, values.bucket, start, stop), out=out[start:stop]
            )
        return out

    return Quantizer(
        init,
        quantize,
        dequantize,
        _qsgd_omega(levels, bucket),
        name=f"qsgd({levels})",
        values=qsgd_form(levels, bucket),
    )


def scaled_sign(bucket: int = 0) -> Quantizer:
    """Scaled sign: each value becomes s_b * sign(v_i) with s_b = ||v_b||_1 / |b|.

    signSGD with a scale (Karimireddy et al. 2019, "Error Feedback Fixes SignSGD";
    SPARQ-SGD's SignTop_k = chain(top_k(d), scaled_sign()), algorithms.md §2.4). The l1
    mean is the scale that minimises the error, which is then exactly
    ||v - C(v)||^2 = ||v||^2 - ||v||_1^2 / d per bucket of d entries; by Cauchy-Schwarz
    the contraction is delta = ||v||_1^2 / (d ||v||^2) >= 1/d. Zeros are sent as +s_b.

    Costs one bit per value plus one float per bucket. State: none.

    Args:
        bucket: entries per scale; 0 = one scale for the whole vector.

    Returns:
        A `Quantizer` emitting `SignValues`.

    Example:
        >>> import torch
        >>> from thinwire.codecs import chain, scaled_sign
        >>> codec = chain(scaled_sign())
        >>> x = torch.tensor([1.0, -3.0, 2.0])
        >>> codec.decode(codec.encode(x, codec.init(x))[0], x.shape)
        tensor([ 2., -2.,  2.])
    """
    _check_bucket(bucket)

    def init(device: torch.device) -> EmptyState:
        del device
        return EmptyState()

    def quantize(v: torch.Tensor, state: EmptyState) -> tuple[Values, EmptyState]:
        k = v.numel()
        l1 = _per_bucket_norms(v, bucket, 1.0)
        scales = l1 / _bucket_sizes(k, bucket, l1.numel(), v.device).clamp_min(1.0)
        return SignValues(v < 0, scales, bucket), state

    def dequantize(values: Values) -> torch.Tensor:
        if not isinstance(values, SignValues):
            raise WireError(f"scaled_sign decodes sign values, got {values_form(values)}")
        negative, scales = values.negative, values.scales.float()
        out = torch.empty(negative.shape, dtype=torch.float32, device=negative.device)
        for start, stop in _spans(negative.numel(), values.bucket, negative.device):
            # (1 - 2 [negative]) * s: exact, and finite for every finite s (s - 2 s [negative]
            # overflows once 2 s does). torch.where on a bool mask is several times slower on
            # CPU.
            scale = _expand(scales, values.bucket, start, stop)
            torch.mul(negative[start:stop], -2.0, out=out[start:stop]).add_(1.0).mul_(scale)
        return out

    info = CodecInfo(unbiased=False, delta=lambda n: 1.0 / (min(n, bucket) if bucket else n))
    return Quantizer(init, quantize, dequantize, info, name="sign", values=sign_form(bucket))
