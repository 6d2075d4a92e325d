"""Carried values on the wire: raw floats, QSGD levels and scaled signs.

Multi-scale levels have a module of their own, `_multiscale`, which reuses the norm helpers.

QSGD levels travel in whichever of two forms is smaller: every level bit-packed at
ceil(log2(2s + 1)) bits, or, when most levels are zero (a fine quantizer on a long vector, as
in the QSGD paper's Elias coding), the non-zero levels' positions and magnitudes Rice-coded
plus one sign bit each. Both are sized exactly before either is built, but the entropy-coded
form only while sizing it is cheap: with at most a quarter of the levels non-zero (its work is
proportional to the non-zero count) and a size floor of 3 bits per non-zero level that still
undercuts the packed form.

Decoded arrays are fresh and writable: protobuf hands out immutable `bytes`, and torch has
no read-only tensors, so a tensor aliasing them could be written through. Raw values are
therefore copied once (k values); every other array is computed, not aliased.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from thinwire.wire import _bits
from thinwire.wire import update_pb2 as pb
from thinwire.wire._errors import WireError
from thinwire.wire._limits import Limits
from thinwire.wire.payload import QuantizedValues, RawValues, SignValues, Values

__all__ = [
    "bucket_count",
    "floats_bytes",
    "host_array",
    "level_width",
    "read_scales",
    "read_values",
    "write_values",
]


class _RawType(NamedTuple):
    wire: int  # update.proto's ValueType
    torch: torch.dtype
    numpy: np.dtype  # little-endian storage; int16 for bfloat16, which numpy lacks
    exponent: int  # exponent bits of the 16-bit types (all set: inf or NaN); 0 for fp32


_RAW_TYPES = (
    _RawType(pb.FP32, torch.float32, np.dtype("<f4"), 0),
    _RawType(pb.FP16, torch.float16, np.dtype("<f2"), 0x7C00),
    _RawType(pb.BF16, torch.bfloat16, np.dtype("<i2"), 0x7F80),
)
_RAW_BY_TORCH = {t.torch: t for t in _RAW_TYPES}
_RAW_BY_WIRE = {t.wire: t for t in _RAW_TYPES}
_FLOAT32 = np.dtype("<f4")
_LEVEL_DTYPES = (np.dtype("<i1"), np.dtype("<i2"), np.dtype("<i4"))
_SPARSE_LEVELS_SHARE = 4
"""The entropy-coded QSGD form is sized only when at most 1/4 of the levels are non-zero."""


def bucket_count(count: int, bucket: int) -> int:
    """Norms (or scales) for `count` values in buckets of `bucket`; 0 means one bucket."""
    return 1 if bucket == 0 else -(-count // bucket)


def level_width(s: int) -> int:
    """Bits per packed QSGD code, ceil(log2(2s + 1)): codes are level + s in [0, 2s]."""
    return (2 * s).bit_length()


def _level_dtype(s: int) -> np.dtype:
    """The narrowest signed dtype holding levels in [-s, s] (same width as their codes)."""
    return next(d for d in _LEVEL_DTYPES if s < 1 << (8 * d.itemsize - 1))


def host_array(tensor: torch.Tensor) -> np.ndarray:
    """The flattened tensor as a CPU numpy array; only its own (k) elements move."""
    flat = tensor.detach().reshape(-1)
    if flat.dtype == torch.bfloat16:
        flat = flat.view(torch.int16)
    return flat.cpu().numpy()


def floats_bytes(tensor: torch.Tensor, what: str, count: int) -> bytes:
    if tensor.dtype != torch.float32:
        raise ValueError(f"{what} must be float32, got {tensor.dtype}")
    if tensor.numel() != count:
        raise ValueError(f"{what}: expected {count} entries, got {tensor.numel()}")
    return host_array(tensor).astype(_FLOAT32, copy=False).tobytes()


# ------------------------------------------------------------------------------- encode


def write_values(values: Values, count: int, tensor: pb.Tensor) -> None:
    """Writes a payload's values into `tensor`'s `values` oneof.

    Args:
        values: the values, `count` of them.
        count: the support's number of coordinates.
        tensor: the message to fill.

    Raises:
        ValueError: if the values are malformed (wrong dtype, count, or levels out of range).
    """
    match values:
        case RawValues(data=data):
            raw = _RAW_BY_TORCH.get(data.dtype)
            if raw is None:
                raise ValueError(
                    f"raw values must be float32, float16 or bfloat16, not {data.dtype}"
                )
            _check_count(data.numel(), count)
            tensor.raw.dtype = raw.wire  # type: ignore[assignment]
            tensor.raw.data = host_array(data).astype(raw.numpy, copy=False).tobytes()
        case QuantizedValues():
            _write_quantized(values, count, tensor.quantized)
        case SignValues(negative=negative, scales=scales, bucket=bucket):
            if negative.dtype != torch.bool:
                raise ValueError(f"sign values must be a bool tensor, got {negative.dtype}")
            if bucket < 0:
                raise ValueError(f"sign bucket must be >= 0, got {bucket}")
            _check_count(negative.numel(), count)
            tensor.sign.bucket = bucket
            tensor.sign.scales = floats_bytes(scales, "sign scales", bucket_count(count, bucket))
            tensor.sign.negative = np.packbits(host_array(negative), bitorder="little").tobytes()
            if values.negative_scales is not None:
                tensor.sign.negative_scales = floats_bytes(
                    values.negative_scales, "sign negative scales", bucket_count(count, bucket)
                )
        case _:
            raise TypeError(f"expected RawValues, QuantizedValues or SignValues, got {values!r}")


def _check_count(carried: int, count: int) -> None:
    if carried != count:
        raise ValueError(f"{carried} values for a support of {count} coordinates")


def _write_quantized(values: QuantizedValues, count: int, out: pb.QuantizedValues) -> None:
    s, bucket = values.s, values.bucket
    if s < 1 or bucket < 0:
        raise ValueError(f"QSGD needs s >= 1 and bucket >= 0, got s={s}, bucket={bucket}")
    if values.levels.dtype.is_floating_point or values.levels.dtype == torch.bool:
        raise ValueError(f"QSGD levels must be an integer tensor, got {values.levels.dtype}")
    _check_count(values.levels.numel(), count)
    levels = host_array(values.levels)
    if count and not -s <= int(levels.min()) <= int(levels.max()) <= s:
        raise ValueError(f"QSGD levels must lie in [-{s}, {s}]")
    out.levels = s
    out.bucket = bucket
    out.norms = floats_bytes(values.norms, "QSGD norms", bucket_count(count, bucket))
    packed_nbytes = _bits.packed_nbytes(count, level_width(s))
    nonzero = int(np.count_nonzero(levels))
    # The entropy-coded form spends at least 3 bits per non-zero level (position,
    # magnitude, sign); size it only when that floor leaves it a chance and it is cheap.
    cheap = nonzero <= count // _SPARSE_LEVELS_SHARE
    if (
        cheap
        and 3 * nonzero < 8 * packed_nbytes
        and _write_sparse_levels(levels, packed_nbytes, out)
    ):
        return
    out.packed.data = _pack_levels(levels, s).tobytes()


def _pack_levels(levels: np.ndarray, s: int) -> np.ndarray:
    """Levels as codes level + s, bit-packed at `level_width(s)` bits."""
    itemsize = levels.dtype.itemsize
    if 2 * s < 1 << (8 * itemsize):
        # Offset in the unsigned twin of the levels' dtype: wrap-around lands exactly on
        # level + s, which fits, so no wider copy is made.
        codes = levels.view(f"<u{itemsize}") + np.dtype(f"<u{itemsize}").type(s)
    else:
        codes = levels.astype(np.int64) + s
    return _bits.pack(codes, level_width(s))


def _write_sparse_levels(levels: np.ndarray, limit: int, out: pb.QuantizedValues) -> bool:
    """Writes the entropy-coded form if it is smaller than `limit` bytes; says whether it did."""
    positions = np.flatnonzero(levels != 0)  # bool input takes numpy's fast path
    gaps = _bits.gaps(positions)
    picked = levels[positions]
    magnitudes = np.abs(picked).astype(np.int64)
    magnitudes -= 1
    gap_plan, magnitude_plan = _bits.plan_rice(gaps), _bits.plan_rice(magnitudes)
    if gap_plan.nbytes + magnitude_plan.nbytes + (picked.size + 7) // 8 >= limit:
        return False
    sparse = out.sparse
    sparse.nonzero = picked.size
    for rice, message in (
        (_bits.rice_encode(gaps, gap_plan.bits), sparse.positions),
        (_bits.rice_encode(magnitudes, magnitude_plan.bits), sparse.magnitudes),
    ):
        message.bits = rice.bits
        message.low = rice.low.tobytes()
        message.high = rice.high.tobytes()
    sparse.negative = np.packbits(picked < 0, bitorder="little").tobytes()
    return True


# ------------------------------------------------------------------------------- decode


def read_values(tensor: pb.Tensor, count: int, limits: Limits) -> Values:
    """Decodes and validates an untrusted tensor's values for a support of `count` coordinates.

    Raises:
        WireError: naming the first problem found.
    """
    which = tensor.WhichOneof("values")
    if which == "raw":
        return _read_raw(tensor.raw, count, limits)
    if which == "quantized":
        return _read_quantized(tensor.quantized, count, limits)
    if which == "sign":
        return _read_sign(tensor.sign, count)
    raise WireError("has no values (raw, quantized, sign or multiscale)")


def _read_raw(raw: pb.RawValues, count: int, limits: Limits) -> RawValues:
    kind = _RAW_BY_WIRE.get(raw.dtype)
    if kind is None:
        raise WireError(f"raw values have unknown dtype {raw.dtype}")
    data = raw.data
    need = count * kind.numpy.itemsize
    if len(data) != need:
        name = pb.ValueType.Name(kind.wire)
        raise WireError(f"raw values are {len(data)} bytes, {count} {name} values need {need}")
    array = np.frombuffer(data, kind.numpy).copy()
    tensor = torch.from_numpy(array)
    if kind.torch == torch.bfloat16:
        tensor = tensor.view(torch.bfloat16)
    if not limits.allow_nonfinite and count:
        first = _first_nonfinite(array, kind)
        if first is not None:
            raise WireError(
                f"raw value {first} is {float(tensor[first])} "
                "(non-finite values need Limits(allow_nonfinite=True))"
            )
    return RawValues(tensor)


def _first_nonfinite(array: np.ndarray, kind: _RawType) -> int | None:
    """Index of the first NaN or infinity, if any, in a couple of vectorized passes.

    float32 uses min and max (NaN propagates through both); the 16-bit types test their
    exponent bits, several times faster than numpy's float16 reductions or `torch.isfinite`.
    """
    if not kind.exponent:
        if np.isfinite(array.min()) and np.isfinite(array.max()):
            return None
        return int(np.argmin(np.isfinite(array)))
    exponent = np.bitwise_and(array.view(np.uint16), kind.exponent)
    bad = exponent == kind.exponent
    return int(np.argmax(bad)) if bad.any() else None


def read_scales(data: bytes, count: int, bucket: int, what: str) -> torch.Tensor:
    """Per-bucket float32 norms or scales: exact count, all finite and non-negative."""
    expected = bucket_count(count, bucket)
    if len(data) != 4 * expected:
        raise WireError(
            f"{what} are {len(data)} bytes, {expected} buckets need {4 * expected} "
            f"({count} values, bucket {bucket})"
        )
    scales = np.frombuffer(data, _FLOAT32).copy()
    bad = np.flatnonzero(~(np.isfinite(scales) & (scales >= 0)))
    if bad.size:
        raise WireError(f"{what}[{int(bad[0])}] is {scales[bad[0]]}, not a finite value >= 0")
    return torch.from_numpy(scales)


def _read_bit_flags(data: bytes, count: int, what: str) -> np.ndarray:
    if len(data) != (count + 7) // 8:
        raise WireError(f"{what} are {len(data)} bytes, {count} bits need {(count + 7) // 8}")
    buf = np.frombuffer(data, np.uint8)
    if not _bits.padding_is_zero(buf, count):
        raise WireError(f"{what} have non-zero padding bits")
    return np.unpackbits(buf, count=count, bitorder="little").view(np.bool_)


def _read_quantized(q: pb.QuantizedValues, count: int, limits: Limits) -> QuantizedValues:
    s = q.levels
    if not 1 <= s <= limits.max_levels:
        raise WireError(f"QSGD levels s={s} out of range [1, {limits.max_levels}]")
    norms = read_scales(q.norms, count, q.bucket, "QSGD norms")
    dtype = _level_dtype(s)
    codes = q.WhichOneof("codes")
    if codes == "packed":
        levels = _read_packed_levels(q.packed.data, count, s, dtype)
    elif codes == "sparse":
        levels = _read_sparse_levels(q.sparse, count, s, dtype)
    else:
        raise WireError("QSGD values have no level codes (packed or sparse)")
    return QuantizedValues(torch.from_numpy(levels), norms, s, q.bucket)


def _read_packed_levels(data: bytes, count: int, s: int, dtype: np.dtype) -> np.ndarray:
    width = level_width(s)
    need = _bits.packed_nbytes(count, width)
    if len(data) != need:
        raise WireError(
            f"packed QSGD levels are {len(data)} bytes, {count} codes of {width} bits need {need}"
        )
    buf = np.frombuffer(data, np.uint8)
    if not _bits.padding_is_zero(buf, count * width):
        raise WireError("packed QSGD levels have non-zero padding bits")
    codes = _bits.unpack(buf, width, count)
    if count and int(codes.max()) > 2 * s:
        bad = int(np.argmax(codes > 2 * s))
        raise WireError(f"packed QSGD code {int(codes[bad])} at {bad} exceeds 2s = {2 * s}")
    codes -= codes.dtype.type(s)
    return codes.view(dtype)


def _read_sparse_levels(sparse: pb.SparseLevels, count: int, s: int, dtype: np.dtype) -> np.ndarray:
    nonzero = sparse.nonzero
    if nonzero > count:
        raise WireError(f"sparse QSGD levels have {nonzero} non-zero of {count} levels")
    gaps = _bits.rice_decode(
        sparse.positions.bits,
        sparse.positions.low,
        sparse.positions.high,
        nonzero,
        max_value=count - nonzero,
        max_total=count - nonzero,
        excess=lambda total: (
            f"sparse QSGD level position {total + nonzero - 1} out of range [0, {count})"
        ),
    )
    magnitudes = _bits.rice_decode(
        sparse.magnitudes.bits,
        sparse.magnitudes.low,
        sparse.magnitudes.high,
        nonzero,
        max_value=s - 1,
        max_total=nonzero * (s - 1),
    )
    negative = _read_bit_flags(sparse.negative, nonzero, "sparse QSGD level signs")
    positions = _bits.positions_in_place(gaps)
    picked = magnitudes.astype(dtype)
    picked += 1
    flip = -negative.view(np.int8).astype(dtype)  # -1 where negative, else 0
    picked ^= flip  # two's complement negation where flip is -1: (x ^ -1) + 1 = -x
    picked -= flip
    try:
        # The one output not backed by message bytes: `count` is bounded by the spec (the
        # receiver's own tensor size), but report an impossible spec as bad input, not a crash.
        levels = np.zeros(count, dtype)
    except MemoryError:
        raise WireError(f"{count} QSGD levels do not fit in memory") from None
    levels[positions] = picked
    return levels


def _read_sign(sign: pb.SignValues, count: int) -> SignValues:
    scales = read_scales(sign.scales, count, sign.bucket, "sign scales")
    negative = _read_bit_flags(sign.negative, count, "sign bits")
    negative_scales = None
    if sign.negative_scales:
        negative_scales = read_scales(
            sign.negative_scales, count, sign.bucket, "sign negative scales"
        )
    return SignValues(torch.from_numpy(negative), scales, sign.bucket, negative_scales)
