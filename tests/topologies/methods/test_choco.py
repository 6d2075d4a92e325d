"""CHOCO-SGD: compressed corrections keep public estimates identical on every holder."""

from __future__ import annotations

import pytest
import torch

from thinwire.codecs.forms import FormError
from thinwire.config import MatchingTopology, ResidualFeedback
from thinwire.topologies.methods.node import ASK
from thinwire.wire import Kind, decode

from ..gossip_support import experiment, make_nodes, play, vectors

TOP_10 = {"select": {"kind": "topk", "density": 0.1}}


def choco(gamma: float = 0.5, codec: dict | None = None, **gossip) -> list:
    config = experiment(
        {"kind": "choco", "gamma": gamma, **gossip}, TOP_10 if codec is None else codec, rounds=6
    )
    return make_nodes(config)


def copies_match(nodes) -> bool:
    """Every node's copy of every neighbour's estimate equals that neighbour's own."""
    return all(
        torch.equal(node.state.copies[str(j)], nodes[j].state.estimate)
        for node in nodes
        for j in node.neighbours
    )


def test_with_the_identity_codec_and_gamma_one_choco_is_dpsgd():
    plain = make_nodes(experiment({"kind": "dpsgd"}))
    exact = choco(gamma=1.0, codec={})
    for round in (1, 2, 3):
        play(plain, round)
        play(exact, round)
    for a, b in zip(vectors(plain), vectors(exact), strict=True):
        # x + (sum_j w_ij x_j - x) differs from sum_j w_ij x_j only by float rounding.
        assert torch.allclose(a, b, atol=1e-6, rtol=0)


def test_corrections_keep_every_copy_of_an_estimate_bit_for_bit_equal():
    nodes = choco()
    for round in (1, 2, 3):
        play(nodes, round)
        assert copies_match(nodes)
        assert all(all(link.current for link in n.state.links.values()) for n in nodes)


def test_the_consensus_step_keeps_the_average_model():
    nodes = choco()
    prepared = [node.prepare(1) for node in nodes]
    trained = torch.stack(vectors(nodes)).mean(dim=0)
    for i, node in enumerate(nodes):
        node.absorb(1, {j: prepared[j].messages[i] for j in node.neighbours})
    assert torch.allclose(torch.stack(vectors(nodes)).mean(dim=0), trained, atol=1e-6)


def test_a_round_sends_one_compressed_correction_to_all_neighbours():
    nodes = choco()
    prepared, _ = play(nodes, 1)
    messages = prepared[0].messages
    assert messages[1] is messages[3]
    update = decode(messages[1], nodes[1].codec.wire_spec)
    assert update.kind == Kind.GOSSIP_CORRECTION
    dense = len(nodes[0].core.encode_dense(1, nodes[0].vector()))
    assert len(messages[1]) < dense / 3


def test_estimates_start_at_the_initial_model_or_at_zero():
    initial = choco()[0]
    assert torch.equal(initial.state.estimate, initial.core.initial)
    zero = choco(estimates="zero")[0]
    assert not zero.state.estimate.any()
    assert all(not copy.any() for copy in zero.state.copies.values())


def test_a_lost_correction_is_repaired_with_full_estimates_both_ways():
    nodes = choco()
    play(nodes, 1)
    play(nodes, 2, deliver=lambda sender, receiver, m: None if (sender, receiver) == (0, 1) else m)
    link = nodes[1].state.links["0"]
    assert not link.current  # node 1 no longer knows node 0's estimate
    prepared, absorbed = play(nodes, 3)
    assert prepared[1].refreshed == (0,)  # node 1 sends its full estimate and asks for 0's
    assert decode(prepared[1].messages[0], nodes[1].core.dense.wire_spec).metrics == {ASK: 1.0}
    assert nodes[0].state.links["1"].owed
    prepared, _ = play(nodes, 4)
    assert prepared[0].refreshed == (1,)  # node 0 answers with its full estimate
    assert copies_match(nodes)
    prepared, _ = play(nodes, 5)
    assert all(p.refreshed == () for p in prepared)  # and no ping-pong afterwards


def test_a_stale_neighbour_drops_out_of_the_consensus_step_until_repaired():
    nodes = choco()
    play(nodes, 1, deliver=lambda sender, receiver, m: None if sender == 0 else m)
    node = nodes[1]
    prepared = [n.prepare(2) for n in nodes]
    inbox = {j: prepared[j].messages[1] for j in node.neighbours}
    x_half, estimate = node.vector().clone(), node.state.estimate
    node.absorb(2, {2: inbox[2]})  # node 0 is stale, and missing again
    w = node.core.weights(2)
    pull = w[2] * (node.state.copies["2"] - estimate)
    assert torch.allclose(node.vector(), x_half + node.gamma * pull, atol=1e-6)


def test_after_missed_rounds_every_link_resynchronizes_in_two_rounds():
    nodes = choco()
    play(nodes, 1)
    nodes[2].desynchronized()
    prepared, _ = play(nodes, 2)
    assert prepared[2].refreshed == (1, 3)
    play(nodes, 3)
    play(nodes, 4)
    assert copies_match(nodes)
    assert all(all(link.current for link in n.state.links.values()) for n in nodes)


def test_a_correction_in_another_codecs_form_is_refused():
    nodes = choco()
    dense_codec = choco(codec={})
    foreign = dense_codec[0].prepare(1).messages[1]  # dense fp32 correction, not top-k
    expected = "dense support with fp32 values, but this receiver's codec sends sparse support"
    with pytest.raises(FormError, match=expected):
        nodes[1].open(0, 1, foreign)


def test_state_round_trips_and_the_restored_node_sends_the_same_bytes():
    nodes = choco()
    play(nodes, 1)
    twin = choco()[0]
    twin.load_state_dict(nodes[0].state_dict())
    assert twin.prepare(2).messages == nodes[0].prepare(2).messages


def test_the_node_refuses_a_graph_redrawn_every_round_and_error_feedback():
    config = experiment({"kind": "choco", "gamma": 0.5}, TOP_10)
    with pytest.raises(ValueError, match="needs a fixed graph"):
        make_nodes(config.model_copy(update={"topology": MatchingTopology()}))
    feedback = config.codec.model_copy(update={"error_feedback": ResidualFeedback()})
    with pytest.raises(ValueError, match="must not add error feedback"):
        make_nodes(config.model_copy(update={"codec": feedback}))
