"""Wire-format benchmarks: encode/decode speed and index-stream size against the bound.

Run `python benchmarks/wire.py` (about a minute on 2 cores). Times are the best of several
runs, in milliseconds, on CPU tensors; sizes are `len()` of the serialized message.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np
import torch

from thinwire.wire import (
    DenseSupport,
    Kind,
    Payload,
    QuantizedValues,
    RawValues,
    SparseSupport,
    TensorSpec,
    Update,
    _bits,
    decode,
    encode,
)
from thinwire.wire import update_pb2 as pb
from thinwire.wire._indices import write_indices

N = 25_000_000


def best_ms(fn: Callable[[], object], repeats: int = 7) -> float:
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return 1e3 * best


def qsgd_levels(x: torch.Tensor, s: int, bucket: int, g: torch.Generator) -> QuantizedValues:
    """Stochastic QSGD levels of x (the quantizer itself lives in thinwire.codecs)."""
    rows = x.reshape(-1, bucket) if bucket else x.reshape(1, -1)
    norms = rows.norm(dim=1)
    scaled = rows.abs() / norms[:, None] * s
    low = scaled.floor()
    levels = low + (torch.rand(scaled.shape, generator=g) < scaled - low).float()
    levels = (levels * rows.sign()).reshape(-1)
    dtype = torch.int8 if s < 128 else torch.int32
    return QuantizedValues(levels.to(dtype), norms.float(), s, bucket)


def row(label: str, payload: Payload, repeats: int = 7) -> None:
    update = Update("bench", 0, Kind.MODEL_DELTA, {"w": payload})
    spec = [TensorSpec("w", payload.shape)]
    data = encode(update)
    message = pb.Update.FromString(data).tensors[0]
    form = message.WhichOneof("support")
    if form == "sparse":
        form += "/" + message.sparse.WhichOneof("coding")
    form += " + " + message.WhichOneof("values")
    if message.HasField("quantized"):
        form += "/" + message.quantized.WhichOneof("codes")
    enc = best_ms(lambda: encode(update), repeats)
    dec = best_ms(lambda: decode(data, spec), repeats)
    print(f"{label:<34} {form:<30} {len(data) / 1e6:>9.3f} {enc:>8.1f} {dec:>8.1f}")


def updates_table() -> None:
    g = torch.Generator().manual_seed(0)
    print(f"\nUpdate encode/decode, n = {N:,} (best of several runs)")
    print(f"{'payload':<34} {'form':<30} {'MB':>9} {'enc ms':>8} {'dec ms':>8}")
    k = N // 100
    indices = torch.sort(torch.randperm(N, generator=g)[:k]).values
    row("top-1% fp32 (k = 250k)", Payload((N,), SparseSupport(indices), RawValues(torch.randn(k))))
    row(
        "top-1% fp16",
        Payload((N,), SparseSupport(indices), RawValues(torch.randn(k).half())),
    )
    x = torch.randn(N, generator=g)
    row("dense fp32", Payload((N,), DenseSupport(), RawValues(x)), repeats=3)
    for s, bucket in ((1, 0), (16, 0), (4, 500), (16, 500), (127, 500)):
        label = f"QSGD s={s}, bucket={bucket or 'all'}"
        row(label, Payload((N,), DenseSupport(), qsgd_levels(x, s, bucket, g)), repeats=3)


def packing_table() -> None:
    rng = np.random.default_rng(0)
    print(f"\nFixed-width packing of {N:,} codes")
    print(f"{'width':>5} {'pack ms':>8} {'unpack ms':>10}")
    for width in (2, 3, 4, 6, 8, 10, 22):
        codes = rng.integers(0, 1 << width, N).astype(_bits.unsigned_dtype(width))
        packed = _bits.pack(codes, width)
        pack = best_ms(lambda: _bits.pack(codes, width), 3)  # noqa: B023
        unpack = best_ms(lambda: _bits.unpack(packed, width, N), 3)  # noqa: B023
        print(f"{width:>5} {pack:>8.1f} {unpack:>10.1f}")


def varint_bits(gaps: np.ndarray) -> int:
    lengths = np.ones(gaps.size, np.int64)
    for shift in range(7, 64, 7):
        lengths += gaps >= (1 << shift)
    return 8 * int(lengths.sum())


def index_table() -> None:
    n = 1_000_000
    print(f"\nIndex streams, n = {n:,}, uniformly random k-subsets; bits per index and ratio")
    print("to the bound log2 C(n, k)")
    header = f"{'k/n':>6} {'bound':>7} {'thinwire':>9} {'ratio':>6} {'varint':>7} {'ratio':>6}"
    print(f"{header} {'bitmap ratio':>13}")
    rng = np.random.default_rng(0)
    for density in (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.3, 0.5):
        k = int(density * n)
        indices = np.sort(rng.choice(n, k, replace=False))
        support = pb.SparseSupport()
        write_indices(indices, n, support)
        if support.WhichOneof("coding") == "bitmap":
            bits = 8 * len(support.bitmap)
        else:
            bits = 8 * (len(support.gaps.low) + len(support.gaps.high))
        bound = (math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)) / math.log(2)
        varint = varint_bits(_bits.gaps(indices))
        print(
            f"{density:>6.1%} {bound / k:>7.2f} {bits / k:>9.2f} {bits / bound:>6.3f} "
            f"{varint / k:>7.2f} {varint / bound:>6.3f} {n / bound:>13.2f}"
        )


if __name__ == "__main__":
    index_table()
    packing_table()
    updates_table()
