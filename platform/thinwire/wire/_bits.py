"""Bit-level coding for the wire: fixed-width packing, bitmaps and two-stream Rice codes.

Every stream follows `update.proto`: bits are packed least-significant first within each
byte, and a stream is zero-padded to a whole byte. All work is vectorized numpy; the only
Python loops run over the (at most 64) code slots of one packing group, never over elements.

Fixed-width packing runs in two vectorized stages over uint64 words, in cache-sized blocks.
Codes start one per power-of-two lane (a byte for widths up to 8); `_squeeze` merges lanes
pairwise with masks and shifts until each uint64 holds its codes side by side (8 codes of a
6-bit QSGD level in 48 bits), and `_join` concatenates those chunks into the dense stream,
one strided pass per chunk slot of a group that fills whole words. Unpacking runs the stages
backwards. Widths 8, 16, 32 and 64 are plain little-endian integers. Every pass is a
contiguous or word-strided numpy ufunc, about 15 ms per 25M codes at the QSGD widths on one
core, instead of an `unpackbits` of every bit.

Rice codes (`update.proto`'s `Rice`) split each value v into its low `bits` bits, packed at
fixed width, and its high part v >> bits, written in unary (that many 0 bits, then a 1 bit).
Both halves code and decode with cumulative sums and bit scatters/gathers, no per-value loop.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from thinwire.wire._errors import WireError
from thinwire.wire._limits import RICE_MAX_BITS

__all__ = [
    "Rice",
    "RicePlan",
    "bitmap",
    "gaps",
    "pack",
    "packed_nbytes",
    "padding_is_zero",
    "plan_rice",
    "popcount",
    "positions_in_place",
    "rice_decode",
    "rice_encode",
    "rice_nbytes",
    "set_bits",
    "unpack",
    "unsigned_dtype",
]

MAX_WIDTH = 64
"""Widest code `pack` and `unpack` handle."""

_SUM_CHUNK = 1 << 22
"""Values summed per int64 partial sum when a total must be exact (2**22 values < 2**41 each)."""

_INT64_MAX = (1 << 63) - 1

_HISTOGRAM_LIMIT = 1 << 16
"""Values below this are histogrammed to size every Rice parameter exactly in one pass."""

_WORD = np.dtype("<u8")
_BLOCK = 1 << 16
"""uint64 words per pass of a packing stage: a few hundred KiB, so a block stays in cache."""

_WHOLE_WIDTHS = (8, 16, 32, 64)
"""Widths whose codes are whole little-endian integers: packing is a dtype conversion."""


def packed_nbytes(count: int, width: int) -> int:
    """Bytes holding `count` codes of `width` bits, padded to a whole byte."""
    return (count * width + 7) // 8


def unsigned_dtype(width: int) -> np.dtype:
    """The narrowest little-endian unsigned dtype holding `width`-bit codes."""
    for itemsize in (1, 2, 4, 8):
        if width <= 8 * itemsize:
            return np.dtype(f"<u{itemsize}")
    raise ValueError(f"code width must be at most {MAX_WIDTH} bits, got {width}")


def _lane_bits(width: int) -> int:
    """Bits of the power-of-two lane (at least a byte) that holds one `width`-bit code."""
    return max(8, 1 << (width - 1).bit_length())


class _Plan(NamedTuple):
    """How codes of one width travel through the two packing stages (module docstring)."""

    lane: np.dtype  # unsigned little-endian lane holding one code before packing
    chunk_bits: int  # bits of one packed uint64 chunk (codes per uint64 times width)
    steps: tuple[tuple[int, np.uint64, np.uint64], ...]  # per merge: shift, low mask, high mask
    chunks: int  # chunks per group (a group fills `words` whole uint64 words)
    words: int  # words per group
    slots: tuple[tuple[int, int], ...]  # per chunk of a group: (word index, bit shift)

    @property
    def codes_per_group(self) -> int:
        return self.chunks * 64 // (8 * self.lane.itemsize)


@functools.lru_cache(maxsize=MAX_WIDTH)
def _plan(width: int) -> _Plan:
    lane_bits = _lane_bits(width)
    steps = []
    lane, per = lane_bits, 1
    while lane < 64:
        # Lanes of 2 * lane bits hold two half-lanes, each with `per` codes in its low bits;
        # moving the upper half down next to the lower one doubles `per`.
        low = high = 0
        field = (1 << (per * width)) - 1
        for k in range(64 // (2 * lane)):
            low |= field << (2 * k * lane)
            high |= field << ((2 * k + 1) * lane)
        steps.append((lane - per * width, np.uint64(low), np.uint64(high)))
        lane, per = 2 * lane, 2 * per
    chunk_bits = (64 // lane_bits) * width
    chunks = 64 // math.gcd(chunk_bits, 64)
    slots = tuple(divmod(p * chunk_bits, 64) for p in range(chunks))
    return _Plan(
        np.dtype(f"<u{lane_bits // 8}"),
        chunk_bits,
        tuple(steps),
        chunks,
        chunks * chunk_bits // 64,
        slots,
    )


def _squeeze(x: np.ndarray, plan: _Plan) -> None:
    """In place: each uint64 of lanes becomes its codes side by side in the low bits."""
    spare = np.empty(min(_BLOCK, x.size), _WORD)
    for start in range(0, x.size, _BLOCK):
        block = x[start : start + _BLOCK]
        tmp = spare[: block.size]
        for shift, low, high in plan.steps:
            np.bitwise_and(block, high, out=tmp)
            np.right_shift(tmp, shift, out=tmp)
            np.bitwise_and(block, low, out=block)
            np.bitwise_or(block, tmp, out=block)


def _spread(x: np.ndarray, plan: _Plan) -> None:
    """In place: the inverse of `_squeeze`, one code per lane again."""
    spare = np.empty(min(_BLOCK, x.size), _WORD)
    for start in range(0, x.size, _BLOCK):
        block = x[start : start + _BLOCK]
        tmp = spare[: block.size]
        for shift, low, high in reversed(plan.steps):
            np.left_shift(block, shift, out=tmp)
            np.bitwise_and(tmp, high, out=tmp)
            np.bitwise_and(block, low, out=block)
            np.bitwise_or(block, tmp, out=block)


def _join(chunks: np.ndarray, plan: _Plan) -> np.ndarray:
    """Concatenates `chunk_bits`-bit chunks (one per uint64) into a dense uint64 stream."""
    if plan.chunks == 1:
        return chunks
    grid = chunks.reshape(-1, plan.chunks)
    out = np.zeros((grid.shape[0], plan.words), _WORD)
    rows = max(1, _BLOCK // plan.chunks)
    spare = np.empty(min(rows, grid.shape[0]), _WORD)
    for start in range(0, grid.shape[0], rows):
        src, dst = grid[start : start + rows], out[start : start + rows]
        tmp = spare[: src.shape[0]]
        for p, (q, shift) in enumerate(plan.slots):
            np.left_shift(src[:, p], shift, out=tmp)
            np.bitwise_or(dst[:, q], tmp, out=dst[:, q])
            if shift + plan.chunk_bits > 64:
                np.right_shift(src[:, p], 64 - shift, out=tmp)
                np.bitwise_or(dst[:, q + 1], tmp, out=dst[:, q + 1])
    return out.reshape(-1)


def _split(words: np.ndarray, plan: _Plan) -> np.ndarray:
    """The inverse of `_join`: one chunk per uint64 again."""
    if plan.chunks == 1:
        return words
    grid = words.reshape(-1, plan.words)
    out = np.empty((grid.shape[0], plan.chunks), _WORD)
    rows = max(1, _BLOCK // plan.chunks)
    spare = np.empty(min(rows, grid.shape[0]), _WORD)
    mask = np.uint64((1 << plan.chunk_bits) - 1)
    for start in range(0, grid.shape[0], rows):
        src, dst = grid[start : start + rows], out[start : start + rows]
        tmp = spare[: src.shape[0]]
        for p, (q, shift) in enumerate(plan.slots):
            chunk = dst[:, p]
            np.right_shift(src[:, q], shift, out=chunk)
            if shift + plan.chunk_bits > 64:
                np.left_shift(src[:, q + 1], 64 - shift, out=tmp)
                np.bitwise_or(chunk, tmp, out=chunk)
            if shift + plan.chunk_bits != 64:
                np.bitwise_and(chunk, mask, out=chunk)
    return out.reshape(-1)


def _check_width(width: int) -> None:
    if not 0 <= width <= MAX_WIDTH:
        raise ValueError(f"code width must be in [0, {MAX_WIDTH}], got {width}")


def pack(codes: np.ndarray, width: int) -> np.ndarray:
    """Packs unsigned integer codes, each below 2**width, at `width` bits apiece.

    Args:
        codes: 1-D array of non-negative integers < 2**width (not checked: callers derive
            them from validated data).
        width: bits per code, 0 to 64 (0 gives an empty stream).

    Returns:
        uint8 array of `packed_nbytes(len(codes), width)` bytes, padding bits zero.
    """
    _check_width(width)
    count = int(codes.size)
    nbytes = packed_nbytes(count, width)
    if width == 0 or count == 0:
        return np.zeros(nbytes, np.uint8)
    if width in _WHOLE_WIDTHS:
        return codes.astype(f"<u{width // 8}", copy=False).reshape(-1).view(np.uint8)
    plan = _plan(width)
    lanes = np.zeros(-(-count // plan.codes_per_group) * plan.codes_per_group, plan.lane)
    lanes[:count] = codes
    chunks = lanes.view(_WORD)
    _squeeze(chunks, plan)
    return _join(chunks, plan).view(np.uint8)[:nbytes]


def unpack(buf: np.ndarray, width: int, count: int) -> np.ndarray:
    """Reads `count` codes of `width` bits from a packed stream (inverse of `pack`).

    Args:
        buf: uint8 array of exactly `packed_nbytes(count, width)` bytes.
        width: bits per code, 0 to 64.
        count: number of codes.

    Returns:
        A new (writable) array of `count` codes in `unsigned_dtype(width)`.
    """
    _check_width(width)
    if buf.size != packed_nbytes(count, width):
        raise ValueError(f"{count} codes of {width} bits need {packed_nbytes(count, width)} bytes")
    if width == 0 or count == 0:
        return np.zeros(count, unsigned_dtype(max(width, 1)))
    if width in _WHOLE_WIDTHS:
        return buf.view(f"<u{width // 8}").copy()
    plan = _plan(width)
    groups = -(-count // plan.codes_per_group)
    words = np.zeros(groups * plan.words, _WORD)
    words.view(np.uint8)[: buf.size] = buf
    chunks = _split(words, plan)
    _spread(chunks, plan)
    return chunks.view(plan.lane)[:count]


def padding_is_zero(buf: np.ndarray, nbits: int) -> bool:
    """Whether the bits after the first `nbits` of a byte-padded stream are all zero."""
    tail = nbits % 8
    return tail == 0 or int(buf[nbits // 8]) >> tail == 0


def popcount(buf: np.ndarray) -> int:
    """Number of 1 bits in a uint8 array."""
    return int(np.bitwise_count(buf).sum(dtype=np.int64))


def bitmap(positions: np.ndarray, nbits: int) -> np.ndarray:
    """The `nbits`-bit stream (byte-padded) whose 1 bits are at `positions`.

    Args:
        positions: distinct int64 bit positions in [0, nbits).
        nbits: stream length in bits.

    Returns:
        uint8 array of ceil(nbits / 8) bytes. Callers use it for streams at least a few
        percent ones (unary codes, bitmaps that beat Rice), where a bool scatter and
        `packbits` beat per-byte reductions by ~10x.
    """
    flags = np.zeros(nbits, np.bool_)
    flags[positions] = True
    return np.packbits(flags, bitorder="little")


def set_bits(buf: np.ndarray) -> np.ndarray:
    """Positions (int64, increasing) of the 1 bits of a uint8 stream."""
    # numpy's nonzero has a fast path for bool input, several times faster than for uint8.
    return np.flatnonzero(np.unpackbits(buf, bitorder="little").view(np.bool_))


def gaps(positions: np.ndarray) -> np.ndarray:
    """The gaps p_j - p_(j-1) - 1 (with p_(-1) = -1) of increasing int64 positions."""
    out = np.empty_like(positions)
    if positions.size:
        out[0] = positions[0] + 1
        np.subtract(positions[1:], positions[:-1], out=out[1:])
        out -= 1
    return out


def positions_in_place(gaps: np.ndarray) -> np.ndarray:
    """The inverse of `gaps`, computed in the gaps' own int64 buffer (which it returns)."""
    gaps += 1
    np.cumsum(gaps, out=gaps)
    gaps -= 1
    return gaps


class Rice(NamedTuple):
    """A Rice-coded sequence, as in `update.proto`."""

    bits: int  # Rice parameter: width of the low parts
    low: np.ndarray  # uint8, the low parts packed at `bits` bits each
    high: np.ndarray  # uint8, the high parts in unary, holding exactly len(values) 1 bits


class RicePlan(NamedTuple):
    """The best Rice parameter for a sequence and the exact size it gives."""

    bits: int  # Rice parameter
    nbytes: int  # bytes of both streams together


def rice_nbytes(values: np.ndarray, bits: int) -> int:
    """Exact encoded size, in bytes, of non-negative int64 `values` at Rice parameter `bits`."""
    count = int(values.size)
    unary = count + int(np.right_shift(values, bits).sum(dtype=np.int64))
    return packed_nbytes(count, bits) + (unary + 7) // 8


def plan_rice(values: np.ndarray) -> RicePlan:
    """The Rice parameter giving the smallest encoding of non-negative int64 `values`.

    Small values (below 2**16, e.g. QSGD magnitudes or the gaps of a dense support) are
    histogrammed once and every parameter is sized exactly from the histogram. Otherwise
    the search starts at floor(log2(mean)), near the optimum for geometric data, and walks
    to a neighbouring parameter while that shrinks the exact size; the size is unimodal in
    the parameter, so this ends at the best one after two or three passes over the data.
    """
    count = int(values.size)
    if count == 0:
        return RicePlan(0, 0)
    top = int(values.max())
    if top < _HISTOGRAM_LIMIT:
        histogram = np.bincount(values, minlength=top + 1).astype(np.int64)
        domain = np.arange(top + 1, dtype=np.int64)
        sizes = [
            packed_nbytes(count, b) + (count + int(histogram @ (domain >> b)) + 7) // 8
            for b in range(min(top.bit_length(), RICE_MAX_BITS) + 1)
        ]
        best = int(np.argmin(sizes))
        return RicePlan(best, sizes[best])
    mean = float(values.mean(dtype=np.float64))
    best = min(RICE_MAX_BITS, math.floor(math.log2(mean))) if mean >= 1 else 0
    size = rice_nbytes(values, best)
    for step in (1, -1):
        while 0 <= best + step <= RICE_MAX_BITS:
            candidate = rice_nbytes(values, best + step)
            if candidate >= size:
                break
            best, size = best + step, candidate
    return RicePlan(best, size)


def rice_encode(values: np.ndarray, bits: int | None = None) -> Rice:
    """Rice-codes non-negative int64 `values` (parameter chosen by `plan_rice` if None)."""
    if bits is None:
        bits = plan_rice(values).bits
    if values.size == 0:
        return Rice(bits, np.zeros(0, np.uint8), np.zeros(0, np.uint8))
    low = pack(values & ((1 << bits) - 1), bits)
    ones = positions_in_place(np.right_shift(values, bits))  # where each unary code ends
    return Rice(bits, low, bitmap(ones, int(ones[-1]) + 1))


def _exact_sum(values: np.ndarray) -> int:
    """Exact sum of non-negative int64 values below 2**41, whatever their number."""
    if values.size <= _SUM_CHUNK:
        return int(values.sum(dtype=np.int64))
    partial = np.add.reduceat(values, np.arange(0, values.size, _SUM_CHUNK), dtype=np.int64)
    return sum(int(p) for p in partial)


def rice_decode(
    bits: int,
    low: bytes,
    high: bytes,
    count: int,
    *,
    max_value: int,
    max_total: int,
    excess: Callable[[int], str] | None = None,
) -> np.ndarray:
    """Decodes and validates `count` Rice-coded values from untrusted streams.

    Everything that bounds an allocation is checked before it is made: the parameter range,
    the exact low-stream length, and a high-stream length consistent with `count` ones and
    at most `max_total >> bits` zeros. The sum of the values is then computed exactly (no
    int64 wrap-around) and checked against `max_total` before any value is materialized.

    Args:
        bits: the Rice parameter from the message.
        low: the low-part stream.
        high: the unary high-part stream.
        count: number of values the enclosing message promises.
        max_value: largest legal single value.
        max_total: largest legal sum of all values (sums of 2**63 or more are refused in
            any case: the values are int64).
        excess: formats the error for a sum above `max_total` in the caller's terms (an
            index list reports the index that overruns its domain).

    Returns:
        int64 array of `count` values, each <= max_value, summing to <= max_total.

    Raises:
        WireError: naming the first problem found.
    """
    if not 0 <= bits <= RICE_MAX_BITS:
        raise WireError(f"Rice parameter {bits} out of range [0, {RICE_MAX_BITS}]")
    max_total = min(max_total, _INT64_MAX)
    if len(low) != packed_nbytes(count, bits):
        raise WireError(
            f"Rice low stream is {len(low)} bytes, {count} values of {bits} bits need "
            f"{packed_nbytes(count, bits)}"
        )
    if count == 0:
        if high:
            raise WireError(f"Rice high stream is {len(high)} bytes for 0 values, expected 0")
        return np.zeros(0, np.int64)
    max_high_bits = count + (max_total >> bits)
    if not (count + 7) // 8 <= len(high) <= (max_high_bits + 7) // 8:
        raise WireError(
            f"Rice high stream is {len(high)} bytes, {count} values need "
            f"{(count + 7) // 8} to {(max_high_bits + 7) // 8}"
        )
    high_buf = np.frombuffer(high, np.uint8)
    ones = popcount(high_buf)
    if ones != count:
        raise WireError(f"Rice high stream holds {ones} values, expected {count}")
    if high_buf[-1] == 0:
        raise WireError("Rice high stream has trailing zero bytes")
    low_buf = np.frombuffer(low, np.uint8)
    if not padding_is_zero(low_buf, count * bits):
        raise WireError("Rice low stream has non-zero padding bits")
    ends = set_bits(high_buf)
    high_total = int(ends[-1]) + 1 - count
    low_parts = unpack(low_buf, bits, count).astype(np.int64, copy=False)
    total = (high_total << bits) + _exact_sum(low_parts)
    if total > max_total:
        if excess is not None:
            raise WireError(excess(total))
        raise WireError(f"Rice values sum to {total}, more than the {max_total} allowed")
    highs = gaps(ends)
    values = np.left_shift(highs, bits, out=highs)
    values |= low_parts
    if max_value < max_total and count > 0:
        largest = int(values.max())
        if largest > max_value:
            raise WireError(f"Rice value {largest} exceeds the largest allowed, {max_value}")
    return values
