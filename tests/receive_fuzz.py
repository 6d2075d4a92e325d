"""Mutated updates through the server's whole receive path, for the property tests and
`benchmarks/fuzz.py`.

`SERVERS` holds one star server (an `Aggregator`) per uplink codec; `messages()` a valid
update of each codec's form, for a 4810-parameter MLP (digits, one hidden layer of 64).
`mutate(rng, data, donors)` damages one message the ways an attacker or a broken client
might: bit flips and byte splices, truncation, fields of another codec's message spliced in,
extreme or non-finite numbers in a matching form, lies about shapes, counts and metrics.
`receive(server, data)` sends the bytes through `Aggregator.receive` and `finish_round` and
says which stage stopped them.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch

from thinwire.codecs.model import ModelCodec
from thinwire.config import Experiment, parse_config
from thinwire.learning import Workspace, load_federation
from thinwire.server import Aggregator, AggregatorState
from thinwire.wire import Kind, Update, client_id, encode
from thinwire.wire import update_pb2 as pb

CODECS: dict[str, dict[str, Any]] = {
    "dense": {},
    "fp16": {"quantize": {"kind": "fp16"}},
    "bf16": {"quantize": {"kind": "bf16"}},
    "topk": {"select": {"kind": "topk", "density": 0.05}},
    "topk_sampled": {"select": {"kind": "topk_sampled", "density": 0.05}},
    "rtopk": {"select": {"kind": "rtopk", "density": 0.05}},
    "threshold": {"select": {"kind": "threshold", "lam": 0.01}},
    "adaptive": {"select": {"kind": "adaptive", "density": 0.05}},
    "random_k": {"select": {"kind": "random_k", "density": 0.05}},
    "random_block": {"select": {"kind": "random_block", "density": 0.05}},
    "qsgd": {"quantize": {"kind": "qsgd", "levels": 16, "bucket": 512}},
    "sign": {"quantize": {"kind": "sign", "bucket": 256}},
    "topk_sign": {"select": {"kind": "topk", "density": 0.05}, "quantize": {"kind": "sign"}},
    "topk_qsgd": {"select": {"kind": "topk", "density": 0.05}, "quantize": {"kind": "qsgd"}},
    "multiscale_qsgd": {"quantize": {"kind": "multiscale_qsgd", "bits": 4, "scales": 3}},
    "topk_multiscale_qsgd": {
        "select": {"kind": "topk", "density": 0.05},
        "quantize": {"kind": "multiscale_qsgd", "bucket": 0},
    },
    "wavelet_topk": {
        "scope": "model",
        "transform": {"kind": "wavelet", "wavelet": "sym2", "level": 3},
        "select": {"kind": "topk", "density": 0.05},
    },
    "powersgd": {"lowrank": {"kind": "powersgd", "rank": 2}, "error_feedback": True},
}
"""Every codec family: each selector, each quantizer, their combinations, a transform, and
a low-rank codec (rank-2 factors for the weight matrices, dense biases)."""

OUTCOMES = ("accepted", "wire", "form", "codec", "bound", "internal")
"""Where a message ended: averaged, or refused by `wire.decode` and the header checks, by
the form check, by the codec's decode, by the finite / norm bound; `internal` would be a
decoder bug (an exception other than `WireError`), which the property tests forbid."""


class Server(NamedTuple):
    """A star server for one codec, reset to its initial state before each message."""

    name: str
    aggregator: Aggregator
    start: AggregatorState
    valid: bytes  # a valid update of this codec's form, from client 0 for round 1


class Outcome(NamedTuple):
    stage: str  # one of OUTCOMES
    reason: str  # the refusal, "" when accepted


def experiment(codec: dict[str, Any]) -> Experiment:
    return parse_config(
        {
            "name": "fuzz",
            "seed": 5,
            "data": {"dataset": "digits", "clients": 4},
            "model": {"kind": "mlp", "hidden": [64]},
            "train": {"rounds": 1, "local_steps": 1, "device": "cpu"},
            "codec": codec,
        }
    )


def _valid_update(codec: ModelCodec, workspace: Workspace) -> bytes:
    g = torch.Generator().manual_seed(11)
    delta = {s.name: torch.randn(s.shape, generator=g) * 0.01 for s in workspace.spec}
    payloads, _ = codec.encode(delta, codec.init(delta))
    metrics = {"num_examples": 40.0, "train_loss": 0.5}
    return encode(Update(client_id(0), 1, Kind.MODEL_DELTA, payloads, metrics))


def servers() -> list[Server]:
    """One server per codec of `CODECS`, with a valid update of its form."""
    out = []
    workspace = load_federation(experiment({})).workspace
    initial = workspace.tensors()
    for name, codec in CODECS.items():
        aggregator = Aggregator(experiment=experiment(codec), workspace=workspace, initial=initial)
        uplink = ModelCodec(aggregator.experiment.codec, workspace.spec, seed=7)
        out.append(Server(name, aggregator, aggregator.state, _valid_update(uplink, workspace)))
    return out


def receive(server: Server, data: bytes) -> Outcome:
    """`data` from client 0 through the server's round 1: receive, then finish_round.

    Raises:
        AssertionError: if the model after the round is not finite or not shaped as before.
    """
    aggregator = server.aggregator
    aggregator.state = server.start
    aggregator.broadcast(1, [0])
    receipt = aggregator.receive(0, data)
    result = aggregator.finish_round()
    model = aggregator.model
    for name, value in server.start.model.items():
        assert model[name].shape == value.shape, name
        assert bool(torch.isfinite(model[name]).all()), name
    if not receipt.accepted:
        reason = str(receipt.error)
        return Outcome("form" if "receiver's codec sends" in reason else "wire", reason)
    if 0 in result.rejected:
        reason = result.rejected[0]
        return Outcome(_decode_stage(reason), reason)
    return Outcome("accepted", "")


def _decode_stage(reason: str) -> str:
    if reason.startswith("internal error"):
        return "internal"
    if "receiver's bound" in reason or "is not finite" in reason:
        return "bound"
    return "codec"


# ----------------------------------------------------------------------------- mutations

Mutation = Callable[[random.Random, bytes, Sequence[bytes]], bytes]

EXTREMES = (1e30, -1e30, 3e38, -3.4e38, 1.7e38, float("nan"), float("inf"), -float("inf"), 1e-45)
BIG_COUNTS = (0, 1, 2**31, 2**32 - 1, 2**40, 2**40 + 1, 2**63, 2**64 - 1)


def _bit_flips(rng: random.Random, data: bytes, donors: Sequence[bytes]) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        i = rng.randrange(len(out))
        out[i] ^= 1 << rng.randrange(8)
    return bytes(out)


def _byte_splice(rng: random.Random, data: bytes, donors: Sequence[bytes]) -> bytes:
    donor = rng.choice(donors)
    start, length = rng.randrange(len(data)), rng.randint(1, 64)
    at = rng.randrange(len(donor))
    return data[:start] + donor[at : at + length] + data[start + length :]


def _truncate(rng: random.Random, data: bytes, donors: Sequence[bytes]) -> bytes:
    return data[: rng.randrange(len(data))]


def _edit(data: bytes, edit: Callable[[pb.Update], None]) -> bytes:
    message = pb.Update.FromString(data)
    edit(message)
    return message.SerializeToString(deterministic=True)


def _field_splice(rng: random.Random, data: bytes, donors: Sequence[bytes]) -> bytes:
    # The support or the values of a tensor taken from another codec's message.
    donor = pb.Update.FromString(rng.choice(donors))

    def edit(message: pb.Update) -> None:
        index = rng.randrange(len(message.tensors))
        tensor = message.tensors[index]
        same = [t for t in donor.tensors if t.name == tensor.name]
        # Mostly the same tensor of the other codec (a well-formed payload of a foreign
        # form), sometimes any tensor (counts that do not fit either).
        source = same[0] if same and rng.random() < 0.7 else rng.choice(donor.tensors)
        oneof = rng.choice(["support", "values"])
        which = source.WhichOneof(oneof)
        if which is not None:
            getattr(tensor, which).CopyFrom(getattr(source, which))
        if rng.random() < 0.3:
            tensor.ClearField("shape")
            tensor.shape.extend(source.shape)

    return _edit(data, edit)


def _float32s(raw: bytes, rng: random.Random) -> bytes:
    if len(raw) < 4:
        return raw
    i = 4 * rng.randrange(len(raw) // 4)
    return raw[:i] + struct.pack("<f", rng.choice(EXTREMES)) + raw[i + 4 :]


def _extreme_numbers(rng: random.Random, data: bytes, donors: Sequence[bytes]) -> bytes:
    # A matching form with numbers at the edges of float32: values, norms, scales.
    def edit(message: pb.Update) -> None:
        for _ in range(rng.randint(1, 4)):
            tensor = rng.choice(message.tensors)
            which = tensor.WhichOneof("values")
            if which == "raw" and tensor.raw.dtype == pb.FP32:
                tensor.raw.data = _float32s(tensor.raw.data, rng)
            elif which == "quantized":
                tensor.quantized.norms = _float32s(tensor.quantized.norms, rng)
            elif which == "sign":
                tensor.sign.scales = _float32s(tensor.sign.scales, rng)
            elif which == "multiscale":
                tensor.multiscale.norms = _float32s(tensor.multiscale.norms, rng)

    return _edit(data, edit)


def _all_extreme(rng: random.Random, data: bytes, donors: Sequence[bytes]) -> bytes:
    # Every fp32 number of one tensor the same extreme (the 3e38 / 1e30 updates).
    value = struct.pack("<f", rng.choice(EXTREMES))

    def edit(message: pb.Update) -> None:
        tensor = rng.choice(message.tensors)
        which = tensor.WhichOneof("values")
        if which == "raw" and tensor.raw.dtype == pb.FP32:
            tensor.raw.data = value * (len(tensor.raw.data) // 4)
        elif which == "quantized":
            tensor.quantized.norms = value * (len(tensor.quantized.norms) // 4)
        elif which == "sign":
            tensor.sign.scales = value * (len(tensor.sign.scales) // 4)
        elif which == "multiscale":
            tensor.multiscale.norms = value * (len(tensor.multiscale.norms) // 4)

    return _edit(data, edit)


def _count_lies(rng: random.Random, data: bytes, donors: Sequence[bytes]) -> bytes:
    def edit(message: pb.Update) -> None:
        tensor = rng.choice(message.tensors)
        count = rng.choice(BIG_COUNTS)
        match rng.randrange(7):
            case 0:
                tensor.shape[rng.randrange(len(tensor.shape))] = count % 2**64
            case 1 if tensor.WhichOneof("support") == "sparse":
                tensor.sparse.count = count
            case 2 if tensor.WhichOneof("support") == "seeded":
                tensor.seeded.count = count
            case 3 if tensor.WhichOneof("values") == "quantized":
                tensor.quantized.levels = count % 2**32
            case 4 if tensor.WhichOneof("values") == "multiscale":
                tensor.multiscale.scales[-1] = count % 2**32
            case 5 if tensor.WhichOneof("values") == "multiscale":
                tensor.multiscale.scales.append(count % 2**32)
            case _:
                tensor.shape.append(rng.randint(1, 3))

    return _edit(data, edit)


def _metric_lies(rng: random.Random, data: bytes, donors: Sequence[bytes]) -> bytes:
    def edit(message: pb.Update) -> None:
        key = rng.choice(["num_examples", "train_loss", "slot", "x" * 2000])
        message.metrics[key] = rng.choice([0.0, -1.0, 0.5, 2.0**40, 1e300, *EXTREMES])
        if rng.random() < 0.3:
            message.round = rng.choice([0, 2, 2**40])
        if rng.random() < 0.2:
            message.sender = rng.choice(["client-1", "", "client-0\x00", "c" * 200])

    return _edit(data, edit)


MUTATIONS: dict[str, Mutation] = {
    "bit_flips": _bit_flips,
    "byte_splice": _byte_splice,
    "truncate": _truncate,
    "field_splice": _field_splice,
    "extreme_numbers": _extreme_numbers,
    "all_extreme": _all_extreme,
    "count_lies": _count_lies,
    "metric_lies": _metric_lies,
}


def mutate(rng: random.Random, kind: str, data: bytes, donors: Sequence[bytes]) -> bytes:
    """`data` damaged by the mutation `kind` (randomness from `rng`)."""
    return MUTATIONS[kind](rng, data, donors)
