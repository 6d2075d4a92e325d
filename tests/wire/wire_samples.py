"""Payload builders and message surgery shared by the wire tests."""

from __future__ import annotations

from collections.abc import Callable

import torch

from thinwire.wire import (
    DenseSupport,
    FactorSupport,
    Kind,
    MultiScaleValues,
    Payload,
    QuantizedValues,
    RawValues,
    SeededSupport,
    SeedScheme,
    SignValues,
    SparseSupport,
    Support,
    TensorSpec,
    Update,
    Values,
)
from thinwire.wire import update_pb2 as pb

SUPPORTS = ("dense", "sparse_gaps", "sparse_bitmap", "seeded_k", "seeded_block")
VALUES = (
    "fp32",
    "fp16",
    "bf16",
    "qsgd_packed",
    "qsgd_sparse",
    "qsgd_bucketed",
    "sign",
    "multiscale",
    "multiscale_single",
)


def generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def support(kind: str, n: int, seed: int = 0) -> tuple[Support, int]:
    """A support of the given kind over n coordinates, and its count k."""
    g = generator(seed)
    if kind == "dense":
        return DenseSupport(), n
    if kind in ("sparse_gaps", "sparse_bitmap"):
        k = max(1, n // 50) if kind == "sparse_gaps" else (n * 3) // 5
        k = min(k, n)
        indices = torch.sort(torch.randperm(n, generator=g)[:k]).values
        return SparseSupport(indices), k
    scheme = SeedScheme.RANDOM_K if kind == "seeded_k" else SeedScheme.RANDOM_BLOCK
    k = max(1, n // 10) if n else 0
    return SeededSupport(seed=1234 + seed, scheme=scheme, count=k), k


def values(kind: str, k: int, seed: int = 0) -> Values:
    """Values of the given kind for k carried coordinates."""
    g = generator(seed + 1)
    if kind in ("fp32", "fp16", "bf16"):
        dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[kind]
        return RawValues(torch.randn(k, generator=g).to(dtype))
    if kind == "qsgd_packed":
        levels = torch.randint(-4, 5, (k,), generator=g, dtype=torch.int8)
        return QuantizedValues(levels, torch.rand(1, generator=g), s=4, bucket=0)
    if kind == "qsgd_sparse":
        mask = torch.rand(k, generator=g) < 0.03
        levels = torch.randint(-16, 17, (k,), generator=g, dtype=torch.int16) * mask
        return QuantizedValues(levels.to(torch.int8), torch.rand(1, generator=g), s=16, bucket=0)
    if kind == "qsgd_bucketed":
        bucket = 7
        levels = torch.randint(-300, 301, (k,), generator=g, dtype=torch.int16)
        norms = torch.rand(-(-k // bucket), generator=g)
        return QuantizedValues(levels, norms, s=300, bucket=bucket)
    if kind == "sign":
        bucket = 5
        return SignValues(
            torch.rand(k, generator=g) < 0.5, torch.rand(-(-k // bucket), generator=g), bucket
        )
    if kind == "multiscale":
        bucket = 6
        levels = torch.randint(-7, 8, (k,), generator=g, dtype=torch.int8)
        index = torch.randint(0, 3, (k,), generator=g, dtype=torch.uint8)
        norms = torch.rand(-(-k // bucket), generator=g)
        return MultiScaleValues(levels, index, norms, (7, 56, 448), 4, bucket)
    if kind == "multiscale_single":
        levels = torch.randint(-511, 512, (k,), generator=g, dtype=torch.int16)
        index = torch.zeros(k, dtype=torch.uint8)
        return MultiScaleValues(levels, index, torch.rand(1, generator=g), (300,), 10, 0)
    raise ValueError(kind)


def payload(support_kind: str, values_kind: str, shape: tuple[int, ...], seed: int = 0) -> Payload:
    n = 1
    for d in shape:
        n *= d
    sup, k = support(support_kind, n, seed)
    return Payload(shape, sup, values(values_kind, k, seed))


FACTOR_VALUES = ("fp32", "fp16", "bf16")
"""The raw value forms rank-r factors may travel in."""


def factor_payload(values_kind: str, shape: tuple[int, int], rank: int, seed: int = 0) -> Payload:
    """Rank-`rank` factors over a matrix of `shape`: (n + m) * rank raw values."""
    k = (shape[0] + shape[1]) * rank
    return Payload(shape, FactorSupport(rank), values(values_kind, k, seed))


def rich_update() -> tuple[Update, list[TensorSpec]]:
    """An update holding every support x values combination, and its spec."""
    tensors: dict[str, Payload] = {}
    for i, s in enumerate(SUPPORTS):
        for j, v in enumerate(VALUES):
            shape = (3, 40 + i + 3 * j)
            tensors[f"layer{i}.{s}.{v}"] = payload(s, v, shape, seed=10 * i + j)
    for j, v in enumerate(FACTOR_VALUES):
        tensors[f"factors.{v}"] = factor_payload(v, (12 + j, 9), 3, seed=90 + j)
    update = Update("client-7", 12, Kind.MODEL_DELTA, tensors, {"num_examples": 640.0})
    return update, spec_of(update)


def spec_of(update: Update) -> list[TensorSpec]:
    return [TensorSpec(name, p.shape) for name, p in update.tensors.items()]


def single(name: str, p: Payload) -> tuple[Update, list[TensorSpec]]:
    """A one-tensor update and its spec."""
    update = Update("client-0", 0, Kind.MODEL_DELTA, {name: p})
    return update, spec_of(update)


def edited(data: bytes, edit: Callable[[pb.Update], object]) -> bytes:
    """The message `data` with `edit` applied to its parsed protobuf form."""
    message = pb.Update.FromString(data)
    edit(message)
    return message.SerializeToString(deterministic=True)


def _bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.is_floating_point:
        view = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}
        return torch.equal(a.view(view[a.dtype]), b.view(view[b.dtype]))
    return torch.equal(a, b)


def assert_same_payload(sent: Payload, got: Payload) -> None:
    """Asserts `got` carries exactly what `sent` did (levels may come back narrower)."""
    assert got.shape == sent.shape
    assert type(got.support) is type(sent.support)
    if isinstance(sent.support, SparseSupport):
        assert isinstance(got.support, SparseSupport)
        assert got.support.indices.dtype == torch.int64
        assert torch.equal(got.support.indices, sent.support.indices.to(torch.int64))
    else:
        assert got.support == sent.support
    match sent.values:
        case RawValues(data=data):
            assert isinstance(got.values, RawValues)
            assert _bits_equal(got.values.data, data)
        case QuantizedValues(levels=levels, norms=norms, s=s, bucket=bucket):
            assert isinstance(got.values, QuantizedValues)
            assert (got.values.s, got.values.bucket) == (s, bucket)
            assert torch.equal(got.values.levels.to(torch.int64), levels.to(torch.int64))
            assert _bits_equal(got.values.norms, norms)
        case SignValues(negative=negative, scales=scales, bucket=bucket):
            assert isinstance(got.values, SignValues)
            assert got.values.bucket == bucket
            assert torch.equal(got.values.negative, negative)
            assert _bits_equal(got.values.scales, scales)
        case MultiScaleValues(levels=levels, scale_index=index, norms=norms):
            assert isinstance(got.values, MultiScaleValues)
            got_header = (got.values.bits, got.values.scales, got.values.bucket)
            assert got_header == (sent.values.bits, sent.values.scales, sent.values.bucket)
            assert torch.equal(got.values.levels.to(torch.int64), levels.to(torch.int64))
            assert torch.equal(got.values.scale_index, index)
            assert _bits_equal(got.values.norms, norms)
