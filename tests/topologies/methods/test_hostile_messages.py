"""A neighbour's hostile message costs its own contribution, never a gossip round (issue 11).

Node 0 of a 4-node ring sends node 1 a message that is well formed on the wire but either
of another codec's form or carrying 1e30 values. Node 1 refuses it (counted in
`Absorbed.rejected`, which the run folder's `rejected` column sums), its model stays finite,
and the run goes on; for CHOCO the link resynchronizes with full estimates as after a loss.
"""

from __future__ import annotations

import pytest
import torch

from thinwire.codecs.model import FLAT_NAME, ModelCodec
from thinwire.config import CodecConfig
from thinwire.topologies.methods.node import GossipNode
from thinwire.wire import DenseSupport, Kind, Payload, RawValues

from ..gossip_support import experiment, make_nodes, play, vectors

TOP_10 = {"select": {"kind": "topk", "density": 0.1}}
QSGD = {"quantize": {"kind": "qsgd", "levels": 4}}


def correction(node: GossipNode, codec: dict, value: float, round: int) -> bytes:
    """A correction from `node` encoded with `codec` for a vector of `value`s."""
    core = node.core
    model_codec = ModelCodec(CodecConfig.model_validate(codec), core.workspace.spec, seed=0)
    tensors = core.named(torch.full((core.size,), value))
    payloads, _ = model_codec.encode(tensors, model_codec.init(tensors))
    return core.encode(round, Kind.GOSSIP_CORRECTION, payloads)


def full_model(node: GossipNode, value: float, round: int) -> bytes:
    return node.core.encode_dense(round, torch.full((node.core.size,), value))


def jwins_coefficients(node: GossipNode, value: float, round: int) -> bytes:
    n = node.coefficients  # type: ignore[attr-defined]
    payload = Payload((n,), DenseSupport(), RawValues(torch.full((n,), value)))
    return node.core.encode(round, Kind.MODEL, {FLAT_NAME: payload})


CASES = {
    "choco_qsgd_form": (
        {"kind": "choco", "gamma": 0.5},
        TOP_10,
        lambda n, r: correction(n, QSGD, 0.01, r),
        "qsgd(s=4, bucket=0) values",
    ),
    "choco_1e30": (
        {"kind": "choco", "gamma": 0.5},
        TOP_10,
        lambda n, r: correction(n, TOP_10, 1e30, r),
        "above this receiver's bound",
    ),
    "dpsgd_1e30": ({"kind": "dpsgd"}, None, lambda n, r: full_model(n, 1e30, r), "bound"),
    "jwins_1e30": (
        {"kind": "jwins"},
        None,
        lambda n, r: jwins_coefficients(n, 1e30, r),
        "above this receiver's bound",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_hostile_neighbour_message_is_rejected_and_counted(case: str, caplog) -> None:
    gossip, codec, build, reason = CASES[case]
    nodes = make_nodes(experiment(gossip, codec, rounds=4))

    def deliver(sender: int, receiver: int, message: bytes) -> bytes:
        return build(nodes[0], round) if (sender, receiver) == (0, 1) else message

    for round in (1, 2, 3):
        _, absorbed = play(nodes, round, deliver if round == 1 else None)
        if round == 1:
            assert absorbed[1].rejected == (0,)
            assert all(a.rejected == () for i, a in enumerate(absorbed) if i != 1)
    assert reason in caplog.text
    assert all(bool(torch.isfinite(v).all()) for v in vectors(nodes))
    if gossip["kind"] == "choco":  # the link resynchronized after the refused correction
        assert all(link.current for link in nodes[1].state.links.values())
