"""The part every gossip node shares: training, message checks, sorting out an inbox."""

from __future__ import annotations

import pytest
import torch

from thinwire.topologies.methods.node import ASK, Received
from thinwire.wire import Kind, Update, WireError, decode, encode

from ..gossip_support import experiment, make_nodes


@pytest.fixture(scope="module")
def nodes():
    return make_nodes(experiment(rounds=3))


def test_training_is_reproducible_from_the_seed_node_and_round(nodes):
    core = nodes[1].core
    first, stats = core.train(core.initial, round=2)
    again, _ = core.train(core.initial, round=2)
    other, _ = core.train(core.initial, round=3)
    assert torch.equal(first, again)
    assert not torch.equal(first, other)
    assert stats.steps == 2 and first.shape == (core.size,)


def test_a_dense_message_names_its_sender_and_round_and_carries_the_model(nodes):
    core = nodes[0].core
    data = core.encode_dense(2, core.initial)
    update = decode(data, core.dense.wire_spec)
    assert (update.sender, update.round, update.kind) == ("node-0", 2, Kind.MODEL)
    assert torch.equal(core.dense_values(update), core.initial)
    assert update.metrics == {}
    assert decode(core.encode_dense(2, core.initial, ask=True), core.dense.wire_spec).metrics == {
        ASK: 1.0
    }


def test_a_message_that_claims_another_sender_or_round_is_refused(nodes):
    receiver = nodes[1]
    data = nodes[0].core.encode_dense(2, nodes[0].core.initial)
    with pytest.raises(WireError, match="came from node 2"):
        receiver.open(2, 2, data)
    with pytest.raises(WireError, match="came for round 3"):
        receiver.open(0, 3, data)
    assert receiver.open(0, 2, data).values.shape == (receiver.core.size,)


def test_unknown_metrics_and_silence_from_a_method_that_never_stays_silent_are_refused(nodes):
    core = nodes[0].core
    payloads, _ = core.dense.encode(core.named(core.initial), core.dense.init(core.template))
    noisy = encode(Update("node-0", 1, Kind.MODEL, payloads, {"loss": 0.5}))
    with pytest.raises(WireError, match="unexpected metrics"):
        nodes[1].open(0, 1, noisy)
    with pytest.raises(WireError, match="never stays silent"):
        nodes[1].open(0, 1, b"")


def test_garbage_is_a_wire_error_never_a_crash(nodes):
    with pytest.raises(WireError):
        nodes[1].open(0, 1, b"\x08\x01 not an update")


def test_unpack_sorts_accepted_rejected_and_missing_neighbours(nodes):
    receiver = nodes[1]  # neighbours 0 and 2 on the ring of 4
    good = nodes[0].core.encode_dense(1, nodes[0].core.initial)
    accepted, absorbed = receiver.core.unpack(1, {0: good, 2: b"junk"}, receiver.open)
    assert list(accepted) == [0]
    assert absorbed.rejected == (2,) and absorbed.missing == ()
    assert absorbed.received == {0: len(good)}
    _, absorbed = receiver.core.unpack(1, {2: b"junk"}, receiver.open)
    assert absorbed.missing == (0,)


def test_unpack_takes_already_opened_messages_as_they_are(nodes):
    receiver = nodes[1]
    opened = receiver.open(0, 1, nodes[0].core.encode_dense(1, nodes[0].core.initial))
    accepted, _ = receiver.core.unpack(1, {0: opened}, receiver.open)
    assert accepted[0] is opened


def test_unpack_refuses_strangers_and_misfiled_messages(nodes):
    receiver = nodes[1]
    with pytest.raises(ValueError, match=r"nodes \[3\] are not neighbours of 1"):
        receiver.core.unpack(1, {3: b""}, receiver.open)
    misfiled = Received(0, 2, Kind.MODEL, torch.zeros(1), None, False, 1)
    with pytest.raises(ValueError, match="filed under node 0, round 1"):
        receiver.core.unpack(1, {0: misfiled}, receiver.open)


def test_a_node_must_be_in_the_graph_and_have_data():
    from thinwire.topologies.methods.node import NodeCore

    config = experiment()
    (node, *_) = make_nodes(config)
    core = node.core
    kwargs = dict(
        experiment=config,
        workspace=core.workspace,
        schedule=core.schedule,
        initial=core.initial,
    )
    with pytest.raises(ValueError, match="not in the graph's nodes 0..3"):
        NodeCore(index=4, x=core.x, y=core.y, **kwargs)
    with pytest.raises(ValueError, match="non-empty data"):
        NodeCore(index=0, x=core.x[:0], y=core.y[:0], **kwargs)
    with pytest.raises(ValueError, match="initial model has shape"):
        NodeCore(index=0, x=core.x, y=core.y, **{**kwargs, "initial": core.initial[:-1]})
