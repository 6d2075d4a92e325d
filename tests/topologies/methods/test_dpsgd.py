"""D-PSGD: every node averages its neighbours' trained models with the mixing weights."""

from __future__ import annotations

import torch

from thinwire.statetree import flatten as flatten_state

from ..gossip_support import experiment, make_nodes, play


def test_a_round_is_local_training_then_the_mixing_matrix_row():
    nodes = make_nodes(experiment())
    prepared, _ = play(nodes, 1)
    trained = []
    for j, message in ((j, next(iter(prepared[j].messages.items()))) for j in range(4)):
        receiver, data = message
        trained.append(nodes[receiver].open(j, 1, data).values)
    weights = nodes[0].core.schedule.at(1).mixing
    expected = sum(float(weights[0, j]) * trained[j] for j in range(4))
    assert float(weights[0, 2]) == 0.0
    assert torch.allclose(nodes[0].vector(), expected, atol=1e-6)
    assert all(p.fired and p.refreshed == () for p in prepared)


def test_every_neighbour_gets_the_same_dense_model_message():
    nodes = make_nodes(experiment())
    prepared, absorbed = play(nodes, 1)
    messages = prepared[0].messages
    assert sorted(messages) == [1, 3]
    assert messages[1] is messages[3]
    assert len(messages[1]) > 4 * nodes[0].core.size  # fp32 values plus framing
    assert absorbed[0].received == {1: len(messages[1]), 3: len(messages[1])}


def test_a_missing_neighbour_counts_with_the_nodes_own_model():
    nodes = make_nodes(experiment())
    prepared = [node.prepare(1) for node in nodes]
    own = nodes[0].vector().clone()
    from_3 = nodes[0].open(3, 1, prepared[3].messages[0]).values
    absorbed = nodes[0].absorb(1, {3: prepared[3].messages[0]})
    w = nodes[0].core.weights(1)
    expected = (w[0] + w[1]) * own + w[3] * from_3
    assert absorbed.missing == (1,)
    assert torch.allclose(nodes[0].vector(), expected, atol=1e-6)


def test_a_corrupted_model_is_rejected_counted_and_replaced_by_the_own_model():
    nodes = make_nodes(experiment())
    prepared = [node.prepare(1) for node in nodes]
    own = nodes[0].vector().clone()
    from_3 = nodes[0].open(3, 1, prepared[3].messages[0]).values
    truncated = prepared[1].messages[0][:-7]
    absorbed = nodes[0].absorb(1, {1: truncated, 3: prepared[3].messages[0]})
    w = nodes[0].core.weights(1)
    assert absorbed.rejected == (1,) and absorbed.missing == ()
    assert absorbed.received == {3: len(prepared[3].messages[0])}
    assert torch.allclose(nodes[0].vector(), (w[0] + w[1]) * own + w[3] * from_3, atol=1e-6)


def test_state_round_trips_through_a_state_dict():
    nodes = make_nodes(experiment())
    play(nodes, 1)
    saved = nodes[0].state_dict()
    assert set(saved) == {"x"}
    fresh = make_nodes(experiment())[0]
    fresh.load_state_dict(saved)
    fresh.desynchronized()
    assert torch.equal(fresh.vector(), nodes[0].vector())
    assert flatten_state(fresh.state).keys() == saved.keys()
