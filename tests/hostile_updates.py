"""The hostile updates of issue 11, as bytes a client could send, for every runtime's tests.

Each case names the uplink codec of the server it is sent to (so the attack is the one the
issue describes: a foreign form, or numbers a matching form can carry) and builds the
update bytes for a model spec. None of them may crash a receiver or reach the model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch

from thinwire.codecs.model import ModelCodec
from thinwire.config import CodecConfig
from thinwire.wire import (
    DenseSupport,
    Kind,
    Payload,
    SignValues,
    TensorSpec,
    Update,
    client_id,
    encode,
)
from thinwire.wire import update_pb2 as pb

TOPK: dict[str, Any] = {"select": {"kind": "topk", "density": 0.1}}
SIGN: dict[str, Any] = {"quantize": {"kind": "sign"}}
DENSE: dict[str, Any] = {}


class Hostile(NamedTuple):
    """One attack: the server codec it targets, its payloads, the claimed example count."""

    server_codec: dict[str, Any]
    payloads: Callable[[Sequence[TensorSpec]], dict[str, Payload]]
    examples: float
    reason: str  # a fragment of the rejection reason
    nonfinite: float | None = None  # a value written into the raw bytes after encoding


def _tensors(spec: Sequence[TensorSpec], value: float | None = None) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    if value is None:
        return {s.name: torch.randn(s.shape, generator=g) * 0.01 for s in spec}
    return {s.name: torch.full(s.shape, value) for s in spec}


def _encoded(config: dict[str, Any], value: float | None = None) -> Callable[..., Any]:
    def payloads(spec: Sequence[TensorSpec]) -> dict[str, Payload]:
        codec = ModelCodec(CodecConfig.model_validate(config), spec, seed=3)
        tensors = _tensors(spec, value)
        out, _ = codec.encode(tensors, codec.init(tensors))
        return out

    return payloads


def _huge_sign_scale(spec: Sequence[TensorSpec]) -> dict[str, Payload]:
    # Finite scales whose s - 2s overflowed float32 in the old scaled-sign decoder.
    return {
        s.name: Payload(
            s.shape,
            DenseSupport(),
            SignValues(torch.arange(s.numel) % 2 == 0, torch.tensor([1.7e38]), 0),
        )
        for s in spec
    }


CASES: dict[str, Hostile] = {
    "qsgd_to_topk": Hostile(
        TOPK, _encoded({"quantize": {"kind": "qsgd", "levels": 4}}), 10, "qsgd(s=4, bucket=0)"
    ),
    "sign_to_topk": Hostile(TOPK, _encoded(SIGN), 10, "sign(bucket=0) values"),
    "dense_to_topk": Hostile(TOPK, _encoded(DENSE), 10, "dense support with fp32 values"),
    "topk_1e30": Hostile(TOPK, _encoded(TOPK, 1e30), 10, "above this receiver's bound"),
    "sign_scale_1.7e38": Hostile(SIGN, _huge_sign_scale, 10, "above this receiver's bound"),
    "dense_3e38_examples_2**40": Hostile(DENSE, _encoded(DENSE, 3e38), 2.0**40, "num_examples"),
    "dense_3e38": Hostile(DENSE, _encoded(DENSE, 3e38), 10, "above this receiver's bound"),
    "values_1e30": Hostile(DENSE, _encoded(DENSE, 1e30), 10, "above this receiver's bound"),
    "nan": Hostile(DENSE, _encoded(DENSE), 10, "is nan", nonfinite=float("nan")),
    "inf": Hostile(DENSE, _encoded(DENSE), 10, "is inf", nonfinite=float("inf")),
}


def hostile_bytes(case: str, spec: Sequence[TensorSpec], client: int, round: int) -> bytes:
    """The update of `case` from `client` for `round`, against the server's uplink `spec`."""
    hostile = CASES[case]
    metrics = {"num_examples": float(hostile.examples)}
    update = Update(client_id(client), round, Kind.MODEL_DELTA, hostile.payloads(spec), metrics)
    data = encode(update)
    if hostile.nonfinite is None:
        return data
    # encode writes what it is given; the wire is where NaN / Inf are refused.
    message = pb.Update.FromString(data)
    raw = message.tensors[0].raw
    values = torch.frombuffer(bytearray(raw.data), dtype=torch.float32).clone()
    values[1] = hostile.nonfinite
    raw.data = values.numpy().tobytes()
    return message.SerializeToString(deterministic=True)
