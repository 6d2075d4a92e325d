"""The in-memory payload types: sizes, counts and device moves."""

import torch

from thinwire.wire import (
    DenseSupport,
    MultiScaleValues,
    Payload,
    QuantizedValues,
    RawValues,
    SeededSupport,
    SeedScheme,
    SignValues,
    SparseSupport,
    TensorSpec,
)


def test_numel_and_count():
    assert TensorSpec("w", (3, 4)).numel == 12 and TensorSpec("b", ()).numel == 1
    p = Payload((3, 4), SparseSupport(torch.tensor([1, 5])), RawValues(torch.ones(2)))
    assert (p.numel, p.count) == (12, 2)
    q = Payload(
        (8,), DenseSupport(), QuantizedValues(torch.zeros(8, dtype=torch.int8), torch.ones(1), 1, 0)
    )
    assert q.count == 8
    s = Payload(
        (8,),
        SeededSupport(1, SeedScheme.RANDOM_K, 3),
        SignValues(torch.ones(3, dtype=torch.bool), torch.ones(1), 0),
    )
    assert s.count == 3


def test_to_moves_every_tensor_and_keeps_the_rest():
    payloads = [
        Payload(
            (4,), SparseSupport(torch.tensor([0, 2])), RawValues(torch.ones(2, dtype=torch.float16))
        ),
        Payload(
            (4,),
            DenseSupport(),
            QuantizedValues(torch.zeros(4, dtype=torch.int8), torch.ones(2), 3, 2),
        ),
        Payload(
            (4,),
            SeededSupport(9, SeedScheme.RANDOM_BLOCK, 2),
            SignValues(torch.ones(2, dtype=torch.bool), torch.ones(1), 0),
        ),
        Payload(
            (4,),
            DenseSupport(),
            MultiScaleValues(
                torch.zeros(4, dtype=torch.int8),
                torch.ones(4, dtype=torch.uint8),
                torch.ones(1),
                (7, 56),
                4,
                0,
            ),
        ),
    ]
    for p in payloads:
        moved = p.to("meta")
        assert moved.shape == p.shape and moved.count == p.count
        if isinstance(p.support, SparseSupport):
            assert moved.support.indices.device.type == "meta"
        else:
            assert moved.support == p.support
        assert type(moved.values) is type(p.values)
        tensors = [
            getattr(moved.values, f.name) for f in moved.values.__dataclass_fields__.values()
        ]
        assert all(t.device.type == "meta" for t in tensors if isinstance(t, torch.Tensor))
        fields = moved.values.__dataclass_fields__
        kept = [getattr(p.values, f) for f in fields if not torch.is_tensor(getattr(p.values, f))]
        assert kept == [
            getattr(moved.values, f)
            for f in fields
            if not torch.is_tensor(getattr(moved.values, f))
        ]
