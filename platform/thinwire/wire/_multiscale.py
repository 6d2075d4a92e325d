"""Multi-scale quantized values on the wire: b-bit levels, a scale index each, per-bucket norms.

A coordinate's value is norm_b * level_i / scales[scale_i]. The levels travel as codes
level + L at `bits` bits apiece, with L = 2**(bits - 1) - 1 the largest magnitude, and the
scale indices at ceil(log2(len(scales))) bits apiece (none for a single scale), so the
payload costs exactly count * (bits + index width) bits plus 32 per norm, padded per stream
to a whole byte.

Decoding checks every field against the format before it allocates: widths and the scale
list first, then each stream's exact length, its zero padding, and every code's range.
"""

from __future__ import annotations

import numpy as np
import torch

from thinwire.wire import _bits
from thinwire.wire import update_pb2 as pb
from thinwire.wire._errors import WireError
from thinwire.wire._limits import Limits
from thinwire.wire._values import bucket_count, floats_bytes, host_array, read_scales
from thinwire.wire.payload import MultiScaleValues

__all__ = [
    "MULTISCALE_BITS",
    "MULTISCALE_MAX_SCALES",
    "index_width",
    "largest_level",
    "multiscale_problem",
    "read_multiscale",
    "write_multiscale",
]

MULTISCALE_BITS = (2, 16)
"""Smallest and largest level width: 2 bits hold levels {-1, 0, 1}; 16 fill an int16."""

MULTISCALE_MAX_SCALES = 16
"""Most scales one payload names (a 4-bit index)."""


def largest_level(bits: int) -> int:
    """L = 2**(bits - 1) - 1, the largest level magnitude a `bits`-bit code holds."""
    return (1 << (bits - 1)) - 1


def index_width(scales: int) -> int:
    """Bits per scale index, ceil(log2(scales)); 0 for a single scale."""
    return (scales - 1).bit_length()


def _level_dtype(bits: int) -> np.dtype:
    return np.dtype("<i1") if bits <= 8 else np.dtype("<i2")


def multiscale_problem(
    bits: int, scales: tuple[int, ...], bucket: int, max_levels: int
) -> str | None:
    """What is wrong with a multi-scale header, in words, or None when it is valid."""
    low, high = MULTISCALE_BITS
    if not low <= bits <= high:
        return f"level width {bits} bits out of range [{low}, {high}]"
    if not 1 <= len(scales) <= MULTISCALE_MAX_SCALES:
        return f"{len(scales)} scales, expected 1 to {MULTISCALE_MAX_SCALES}"
    if not 1 <= scales[0] <= largest_level(bits):
        return (
            f"coarsest scale {scales[0]} out of range [1, {largest_level(bits)}] "
            f"(every value must fit at the coarsest scale in {bits} bits)"
        )
    if any(b <= a for a, b in zip(scales, scales[1:], strict=False)):
        return f"scales {list(scales)} are not strictly increasing"
    if scales[-1] > max_levels:
        return f"finest scale {scales[-1]} is above the {max_levels} allowed"
    if bucket < 0:
        return f"bucket {bucket} is negative"
    return None


def write_multiscale(values: MultiScaleValues, count: int, out: pb.MultiScaleValues) -> None:
    """Writes multi-scale values for a support of `count` coordinates.

    Raises:
        ValueError: if the values break the format (widths, scales, dtypes, counts, ranges).
    """
    scales = tuple(int(s) for s in values.scales)
    problem = multiscale_problem(values.bits, scales, values.bucket, 1 << 31)
    if problem is not None:
        raise ValueError(f"multi-scale values: {problem}")
    levels, index = values.levels, values.scale_index
    if levels.dtype.is_floating_point or levels.dtype == torch.bool:
        raise ValueError(f"multi-scale levels must be an integer tensor, got {levels.dtype}")
    if index.dtype != torch.uint8:
        raise ValueError(f"multi-scale scale indices must be uint8, got {index.dtype}")
    for what, tensor in (("levels", levels), ("scale indices", index)):
        if tensor.numel() != count:
            raise ValueError(f"{tensor.numel()} multi-scale {what} for {count} coordinates")
    top = largest_level(values.bits)
    level_array, index_array = host_array(levels), host_array(index)
    if count and not -top <= int(level_array.min()) <= int(level_array.max()) <= top:
        raise ValueError(f"multi-scale levels must lie in [-{top}, {top}]")
    if count and int(index_array.max()) >= len(scales):
        raise ValueError(f"multi-scale scale indices must lie in [0, {len(scales)})")
    out.bits = values.bits
    out.scales.extend(scales)
    out.bucket = values.bucket
    out.norms = floats_bytes(values.norms, "multi-scale norms", bucket_count(count, values.bucket))
    out.levels = _bits.pack(_codes(level_array, top), values.bits).tobytes()
    out.scale_index = _bits.pack(index_array, index_width(len(scales))).tobytes()


def _codes(levels: np.ndarray, top: int) -> np.ndarray:
    """Levels as codes level + L, in the unsigned twin of an 8- or 16-bit level dtype."""
    itemsize = levels.dtype.itemsize
    if itemsize <= 2 and 2 * top < 1 << (8 * itemsize):
        # Wrap-around in the unsigned twin lands exactly on level + L, which fits.
        return levels.view(f"<u{itemsize}") + np.dtype(f"<u{itemsize}").type(top)
    return levels.astype(np.int64) + top


def _read_codes(data: bytes, count: int, width: int, what: str) -> np.ndarray:
    need = _bits.packed_nbytes(count, width)
    if len(data) != need:
        raise WireError(f"{what} are {len(data)} bytes, {count} codes of {width} bits need {need}")
    buf = np.frombuffer(data, np.uint8)
    if not _bits.padding_is_zero(buf, count * width):
        raise WireError(f"{what} have non-zero padding bits")
    return _bits.unpack(buf, width, count)


def read_multiscale(message: pb.MultiScaleValues, count: int, limits: Limits) -> MultiScaleValues:
    """Decodes and validates untrusted multi-scale values for `count` coordinates.

    Raises:
        WireError: naming the first problem found.
    """
    if len(message.scales) > MULTISCALE_MAX_SCALES:
        raise WireError(
            f"multi-scale values have {len(message.scales)} scales, "
            f"at most {MULTISCALE_MAX_SCALES} allowed"
        )
    scales = tuple(message.scales)
    problem = multiscale_problem(message.bits, scales, message.bucket, limits.max_levels)
    if problem is not None:
        raise WireError(f"multi-scale values: {problem}")
    bits, top = message.bits, largest_level(message.bits)
    norms = read_scales(message.norms, count, message.bucket, "multi-scale norms")
    codes = _read_codes(message.levels, count, bits, "multi-scale levels")
    if count and int(codes.max()) > 2 * top:
        bad = int(np.argmax(codes > 2 * top))
        raise WireError(f"multi-scale level code {int(codes[bad])} at {bad} exceeds {2 * top}")
    width = index_width(len(scales))
    index = _read_codes(message.scale_index, count, width, "multi-scale scale indices")
    if count and width and int(index.max()) >= len(scales):
        bad = int(np.argmax(index >= len(scales)))
        raise WireError(
            f"multi-scale scale index {int(index[bad])} at {bad} names none of {len(scales)} scales"
        )
    # Codes come back in the unsigned twin of the level dtype (u1 up to 8 bits, else u2):
    # subtracting L in place and reading the bits as signed gives the levels, no copy.
    codes -= codes.dtype.type(top)
    levels = codes.view(_level_dtype(bits))
    return MultiScaleValues(
        torch.from_numpy(levels),
        torch.from_numpy(index.astype(np.uint8, copy=False)),
        norms,
        scales,
        bits,
        message.bucket,
    )
