"""encode/decode: every payload round-trips exactly, deterministically, into CPU tensors."""

import warnings

import pytest
import torch
from torch.overrides import TorchFunctionMode
from wire_samples import (
    SUPPORTS,
    VALUES,
    assert_same_payload,
    payload,
    rich_update,
    single,
    values,
)

from thinwire.codecs.support import scatter, seeded_indices
from thinwire.wire import (
    DenseSupport,
    Kind,
    Payload,
    QuantizedValues,
    RawValues,
    SeededSupport,
    SeedScheme,
    SignValues,
    SparseSupport,
    TensorSpec,
    Update,
    decode,
    encode,
)
from thinwire.wire import update_pb2 as pb


@pytest.mark.parametrize("values_kind", VALUES)
@pytest.mark.parametrize("support_kind", SUPPORTS)
def test_every_support_and_values_combination_round_trips(support_kind, values_kind):
    sent = payload(support_kind, values_kind, (6, 50))
    update, spec = single("w", sent)
    got = decode(encode(update), spec)
    assert_same_payload(sent, got.tensors["w"])


@pytest.mark.parametrize(
    ("support_kind", "coding"), [("sparse_gaps", "gaps"), ("sparse_bitmap", "bitmap")]
)
def test_sparse_supports_use_the_coding_their_density_favours(support_kind, coding):
    update, _ = single("w", payload(support_kind, "fp32", (1000,)))
    message = pb.Update.FromString(encode(update))
    assert message.tensors[0].sparse.WhichOneof("coding") == coding


@pytest.mark.parametrize(
    ("values_kind", "form"), [("qsgd_packed", "packed"), ("qsgd_sparse", "sparse")]
)
def test_qsgd_levels_use_the_smaller_form(values_kind, form):
    update, _ = single("w", payload("dense", values_kind, (5000,)))
    message = pb.Update.FromString(encode(update))
    assert message.tensors[0].quantized.WhichOneof("codes") == form


def test_a_rich_update_round_trips_with_header_and_metrics():
    update, spec = rich_update()
    got = decode(encode(update), spec)
    assert (got.sender, got.round, got.kind) == ("client-7", 12, Kind.MODEL_DELTA)
    assert got.metrics == {"num_examples": 640.0}
    assert list(got.tensors) == [s.name for s in spec]
    for name, sent in update.tensors.items():
        assert_same_payload(sent, got.tensors[name])


def test_encode_is_deterministic_whatever_the_metrics_insertion_order():
    update, _ = rich_update()
    reordered = Update(
        update.sender, update.round, update.kind, update.tensors, {"b": 2.0, "a": 1.0}
    )
    ordered = Update(update.sender, update.round, update.kind, update.tensors, {"a": 1.0, "b": 2.0})
    assert encode(reordered) == encode(ordered) == encode(ordered)


@pytest.mark.parametrize("support_kind", ["dense", "sparse_gaps", "seeded_k"])
@pytest.mark.parametrize("values_kind", ["fp32", "qsgd_packed", "qsgd_sparse", "sign"])
def test_empty_tensors_round_trip(support_kind, values_kind):
    shape = (0, 4) if support_kind == "dense" else (8,)
    if support_kind == "dense":
        sup, k = DenseSupport(), 0
    elif support_kind == "sparse_gaps":
        sup, k = SparseSupport(torch.zeros(0, dtype=torch.int64)), 0
    else:
        sup, k = SeededSupport(seed=3, scheme=SeedScheme.RANDOM_K, count=0), 0
    sent = Payload(shape, sup, values(values_kind, k))
    update, spec = single("empty", sent)
    assert_same_payload(sent, decode(encode(update), spec).tensors["empty"])


def test_scalars_round_trip():
    sent = Payload((), DenseSupport(), RawValues(torch.tensor([2.5])))
    update, spec = single("scale", sent)
    got = decode(encode(update), spec).tensors["scale"]
    assert got.shape == () and got.numel == 1
    assert_same_payload(sent, got)


def test_a_large_sparse_tensor_round_trips():
    n, k = 1 << 24, 20_000
    g = torch.Generator().manual_seed(5)
    indices = torch.sort(torch.randperm(n, generator=g)[:k]).values
    sent = Payload((n,), SparseSupport(indices), RawValues(torch.randn(k, generator=g)))
    update, spec = single("big", sent)
    data = encode(update)
    assert len(data) < k * 4 + k * 2  # values plus under 16 bits per index
    assert_same_payload(sent, decode(data, spec).tensors["big"])


def test_every_sparse_coordinate_of_a_full_support_round_trips():
    n = 777
    sent = Payload((n,), SparseSupport(torch.arange(n)), RawValues(torch.randn(n)))
    update, spec = single("full", sent)
    assert_same_payload(sent, decode(encode(update), spec).tensors["full"])


def test_qsgd_level_dtypes_follow_s():
    for s, dtype in [(1, torch.int8), (127, torch.int8), (128, torch.int16), (40000, torch.int32)]:
        levels = torch.tensor([-s, 0, s, 1], dtype=torch.int32)
        sent = Payload((4,), DenseSupport(), QuantizedValues(levels, torch.ones(1), s, 0))
        update, spec = single("q", sent)
        got = decode(encode(update), spec).tensors["q"].values
        assert isinstance(got, QuantizedValues)
        assert got.levels.dtype == dtype
        assert got.levels.tolist() == [-s, 0, s, 1]


def test_decoded_tensors_are_writable_cpu_tensors():
    update, spec = rich_update()
    got = decode(encode(update), spec)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for p in got.tensors.values():
            for t in _tensors(p):
                assert t.device.type == "cpu"
                t.add_(0) if t.dtype != torch.bool else t.logical_or_(t)


def _tensors(p: Payload) -> list[torch.Tensor]:
    found = [p.support.indices] if isinstance(p.support, SparseSupport) else []
    match p.values:
        case RawValues(data=d):
            found.append(d)
        case QuantizedValues(levels=levels, norms=norms):
            found += [levels, norms]
        case SignValues(negative=negative, scales=scales):
            found += [negative, scales]
    return found


def test_decoded_payloads_scatter_like_the_sent_ones():
    for support_kind in SUPPORTS:
        sent = payload(support_kind, "fp32", (4, 25), seed=3)
        update, spec = single("w", sent)
        got = decode(encode(update), spec).tensors["w"]
        assert isinstance(got.values, RawValues) and isinstance(sent.values, RawValues)
        assert torch.equal(
            scatter(got.support, got.values.data, 100), scatter(sent.support, sent.values.data, 100)
        )


def test_seeded_supports_regenerate_the_same_indices_after_decoding():
    sent = SeededSupport(seed=2**64 - 1, scheme=SeedScheme.RANDOM_K, count=33)
    p = Payload((1000,), sent, RawValues(torch.zeros(33)))
    update, spec = single("w", p)
    got = decode(encode(update), spec).tensors["w"].support
    assert got == sent
    assert torch.equal(seeded_indices(got, 1000), seeded_indices(sent, 1000))


def test_encode_reads_non_contiguous_tensors():
    data = torch.randn(10, 2)[:, 0]
    sent = Payload((10,), DenseSupport(), RawValues(data))
    update, spec = single("w", sent)
    got = decode(encode(update), spec).tensors["w"].values
    assert isinstance(got, RawValues) and torch.equal(got.data, data)


@pytest.mark.parametrize(
    ("p", "problem"),
    [
        (Payload((4,), DenseSupport(), RawValues(torch.zeros(3))), "3 values for a support of 4"),
        (
            Payload((4,), DenseSupport(), RawValues(torch.zeros(4, dtype=torch.float64))),
            "float32, float16 or bfloat16",
        ),
        (
            Payload((4,), SparseSupport(torch.tensor([2, 1])), RawValues(torch.zeros(2))),
            "strictly increasing",
        ),
        (
            Payload((4,), SparseSupport(torch.tensor([1, 4])), RawValues(torch.zeros(2))),
            r"sparse index 4 out of range \[0, 4\)",
        ),
        (
            Payload((4,), SparseSupport(torch.tensor([[1]])), RawValues(torch.zeros(1))),
            "1-D integer tensor",
        ),
        (
            Payload((4,), SeededSupport(1, SeedScheme.RANDOM_K, 5), RawValues(torch.zeros(5))),
            "count 5 of n = 4",
        ),
        (
            Payload(
                (4,),
                DenseSupport(),
                QuantizedValues(torch.tensor([0, 0, 3, 0]), torch.ones(1), 2, 0),
            ),
            r"levels must lie in \[-2, 2\]",
        ),
        (
            Payload((4,), DenseSupport(), QuantizedValues(torch.zeros(4), torch.ones(1), 2, 0)),
            "integer tensor",
        ),
        (
            Payload(
                (4,),
                DenseSupport(),
                QuantizedValues(torch.zeros(4, dtype=torch.int8), torch.ones(2), 2, 0),
            ),
            "QSGD norms: expected 1 entries",
        ),
        (
            Payload(
                (4,),
                DenseSupport(),
                QuantizedValues(torch.zeros(4, dtype=torch.int8), torch.ones(1), 0, 0),
            ),
            "s >= 1",
        ),
        (
            Payload((4,), DenseSupport(), SignValues(torch.zeros(4), torch.ones(1), 0)),
            "bool tensor",
        ),
        (
            Payload(
                (4,), DenseSupport(), SignValues(torch.zeros(4, dtype=torch.bool), torch.ones(3), 2)
            ),
            "sign scales: expected 2 entries",
        ),
    ],
)
def test_encode_rejects_malformed_payloads_naming_the_tensor(p, problem):
    update, _ = single("fc.weight", p)
    with pytest.raises(ValueError, match=rf"tensor 'fc\.weight': .*{problem}"):
        encode(update)


def test_decode_accepts_a_matching_expected_kind():
    update, spec = single("w", payload("dense", "fp32", (3,)))
    assert decode(encode(update), spec, kind=Kind.MODEL_DELTA).kind == Kind.MODEL_DELTA


def test_spec_shapes_need_not_be_flat():
    update, spec = single("conv", payload("sparse_gaps", "fp16", (4, 3, 3, 3)))
    assert spec == [TensorSpec("conv", (4, 3, 3, 3))]
    assert decode(encode(update), spec).tensors["conv"].shape == (4, 3, 3, 3)


def test_encode_rejects_what_the_format_cannot_carry():
    update, _ = single("w", payload("dense", "fp32", (3,)))
    with pytest.raises(ValueError, match="sender id 'xxx.*' is over 128 bytes"):
        encode(Update("x" * 129, 0, Kind.MODEL, update.tensors))
    with pytest.raises(ValueError, match="metric 'loss' is nan; metrics must be finite"):
        encode(Update("c", 0, Kind.MODEL, update.tensors, {"loss": float("nan")}))


class _HostMoves(TorchFunctionMode):
    """Records the size of every tensor read out to the host."""

    def __init__(self) -> None:
        super().__init__()
        self.sizes: list[int] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in (torch.Tensor.cpu, torch.Tensor.numpy, torch.Tensor.to):
            self.sizes.append(args[0].numel())
        return func(*args, **(kwargs or {}))


def test_encode_reads_only_the_compact_payload_tensors():
    n, k = 1_000_000, 300
    indices = torch.sort(torch.randperm(n)[:k]).values
    levels = torch.randint(-2, 3, (k,), dtype=torch.int8)
    sent = Payload((n,), SparseSupport(indices), QuantizedValues(levels, torch.ones(30), 2, 10))
    update, _ = single("w", sent)
    with _HostMoves() as moves:
        encode(update)
    assert moves.sizes and max(moves.sizes) <= k
