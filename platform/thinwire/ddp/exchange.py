"""A thinwire codec over a DDP bucket: encode, the collective that suits the payload, decode.

The route follows from what the codec produced, per call:

- **allreduce** when every rank's payload indexes the same coordinates with plain values:
  dense supports with fp32/fp16/bf16 values (casts), and seeded supports (random-k, random
  block) when all ranks share the seed. The values are divided by the world size in their
  own dtype first (as PyTorch's fp16 hook does, so half-precision sums do not overflow),
  summed, and decoded once. The values' bytes are counted.
- **all-gather** of serialized payloads otherwise (top-k, thresholds, QSGD and sign values
  with each rank's own norms): each rank serializes its payload as a thinwire `Update`,
  the sizes travel first and then the bytes padded to the largest; every rank validates
  and decodes every payload (`thinwire.wire.decode`) and averages them in rank order. The
  serialized length is counted as payload, the sizes and padding as overhead.

Error feedback belongs to the codec (`with_error_feedback`, DGC): its residual is the
bucket's, on the bucket's device.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.distributed as dist

from thinwire.codecs.base import Codec
from thinwire.ddp.collectives import (
    Group,
    Traffic,
    all_gather_bytes,
    all_gather_tensors,
    world_size,
)
from thinwire.wire import (
    DenseSupport,
    Kind,
    Payload,
    RawValues,
    SeededSupport,
    TensorSpec,
    Update,
    WireError,
    decode,
    encode,
)

__all__ = ["BUCKET_NAME", "check_shared_seed", "codec_allreduce", "reducible"]

BUCKET_NAME = "bucket"
"""Name of the one tensor in a bucket's serialized `Update`."""


def reducible(payload: Payload) -> bool:
    """Whether payloads like this one sum coordinate-wise (given a shared seed)."""
    return isinstance(payload.values, RawValues) and isinstance(
        payload.support, DenseSupport | SeededSupport
    )


def check_shared_seed(
    support: SeededSupport, group: Group, traffic: Traffic, device: torch.device
) -> None:
    """Raises `ValueError` unless every rank drew its seeded support from the same seed."""
    mine = torch.tensor([support.seed - 2**63], dtype=torch.int64, device=device)
    seeds = [int(t.item()) for t in all_gather_tensors(mine, group, traffic, counted=0)]
    if len(set(seeds)) > 1:
        raise ValueError(
            "a seeded codec (random-k, random block) reduces by allreduce only when every "
            "rank draws the same coordinates, but the ranks' seeds differ: build the codec "
            "with the same seed on every rank (thinwire.ddp.register builds it so from a "
            "config section)"
        )


def codec_allreduce(
    codec: Codec,
    flat: torch.Tensor,
    state: Any,
    *,
    step: int,
    check_seed: bool,
    group: Group,
    traffic: Traffic,
) -> tuple[torch.futures.Future[torch.Tensor], Any]:
    """Encodes `flat` (one bucket), exchanges it, and returns the future mean and new state.

    Args:
        codec: the bucket's codec, built with the same seed on every rank.
        flat: this rank's flat gradient bucket.
        state: the codec's state for this bucket.
        step: the hook's step counter (the serialized update's round).
        check_seed: verify that seeded supports agree across ranks (first call).
        group: the process group.
        traffic: where the bytes are counted.

    Raises:
        ValueError: seeded supports that differ across ranks.
        WireError: a rank's serialized payload fails validation.
    """
    shape = tuple(flat.shape)
    payload, state = codec.encode(flat, state)
    ranks = world_size(group)
    if isinstance(payload.values, RawValues) and reducible(payload):
        if check_seed and isinstance(payload.support, SeededSupport):
            check_shared_seed(payload.support, group, traffic, flat.device)
        values = payload.values.data.div(ranks).contiguous()
        traffic.payload += values.numel() * values.element_size()
        work = dist.all_reduce(values, group=group, async_op=True)
        if work is None:  # async_op=True always returns a handle
            raise RuntimeError("all_reduce returned no handle for an asynchronous call")
        support = payload.support

        def finish(fut: torch.futures.Future[list[torch.Tensor]]) -> torch.Tensor:
            total = fut.value()[0]
            mean = codec.decode(Payload(payload.shape, support, RawValues(total)), shape)
            return mean.to(flat.dtype)

        return work.get_future().then(finish), state
    mean = _gathered_mean(codec, payload, shape, step, group, traffic, flat.device)
    done: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    done.set_result(mean.to(flat.dtype))
    return done, state


def _gathered_mean(
    codec: Codec,
    payload: Payload,
    shape: tuple[int, ...],
    step: int,
    group: Group,
    traffic: Traffic,
    device: torch.device,
) -> torch.Tensor:
    rank = dist.get_rank(group)
    data = encode(Update(f"rank-{rank}", step, Kind.MODEL_DELTA, {BUCKET_NAME: payload.to("cpu")}))
    spec = [TensorSpec(BUCKET_NAME, codec.wire_shape(shape))]
    total = torch.zeros(math.prod(shape), dtype=torch.float32, device=device)
    for sender, blob in enumerate(all_gather_bytes(data, group, traffic, device=device)):
        try:
            update = decode(blob, spec, kind=Kind.MODEL_DELTA)
        except WireError as exc:
            raise WireError(f"rank {sender}'s payload for a bucket of {shape}: {exc}") from None
        total += codec.decode(update.tensors[BUCKET_NAME].to(device), shape).reshape(-1)
    return (total / world_size(group)).reshape(shape)
