"""SPARQ-SGD: CHOCO on synchronization rounds only, and only when the trigger fires."""

from __future__ import annotations

import pytest
import torch

from thinwire.config import ConstantThreshold, PolynomialThreshold, StepThreshold
from thinwire.topologies.methods.sparq import Trigger, threshold
from thinwire.wire import SignValues, SparseSupport, decode

from ..gossip_support import experiment, make_nodes, play, vectors

TOP_10 = {"select": {"kind": "topk", "density": 0.1}}


def sparq(c: float, *, sync_every: int = 1, codec: dict | None = TOP_10, rounds: int = 4):
    gossip = {
        "kind": "sparq",
        "gamma": 0.5,
        "sync_every": sync_every,
        "threshold": {"kind": "constant", "c": c},
    }
    return make_nodes(experiment(gossip, codec, rounds=rounds))


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (ConstantThreshold(c=2.0), [2.0, 2.0, 2.0]),
        (StepThreshold(c=2.0, increment=1.0, every=10), [2.0, 2.0, 3.0]),
        (PolynomialThreshold(c=2.0, power=0.5), [2.0, 2.0 * 10**0.5, 2.0 * 11**0.5]),
    ],
)
def test_threshold_schedules(config, expected):
    assert [threshold(config, t) for t in (1, 10, 11)] == pytest.approx(expected)


def test_threshold_rounds_count_from_one():
    with pytest.raises(ValueError, match="rounds count from 1"):
        threshold(ConstantThreshold(c=1.0), 0)


def test_the_trigger_compares_the_distance_with_c_times_the_learning_rate_squared():
    trigger = Trigger(ConstantThreshold(c=4.0), sync_every=3)
    assert [trigger.synchronizes(t) for t in range(1, 7)] == [False, False, True] * 2
    assert not trigger.fires(round=3, lr=0.5, distance=1.0)  # 1.0 is not > 4 * 0.25
    assert trigger.fires(round=3, lr=0.5, distance=1.01)
    with pytest.raises(ValueError, match="distance"):
        trigger.fires(round=3, lr=0.5, distance=float("nan"))


def test_with_c_zero_and_every_round_synchronizing_sparq_is_choco_bit_for_bit():
    choco = make_nodes(experiment({"kind": "choco", "gamma": 0.5}, TOP_10))
    always = sparq(0.0)
    for round in (1, 2, 3):
        a, _ = play(choco, round)
        b, _ = play(always, round)
        assert [p.messages for p in a] == [p.messages for p in b]
    assert all(torch.equal(x, y) for x, y in zip(vectors(choco), vectors(always), strict=True))


def test_a_node_that_does_not_fire_sends_an_empty_message_and_keeps_its_estimate():
    nodes = sparq(1e12)  # nobody ever fires
    estimates = [node.state.estimate.clone() for node in nodes]
    prepared, absorbed = play(nodes, 1)
    assert all(not p.fired for p in prepared)
    assert all(m == b"" for p in prepared for m in p.messages.values())
    assert all(
        a.received == {j: 0 for j in node.neighbours}
        for a, node in zip(absorbed, nodes, strict=True)
    )
    assert all(torch.equal(n.state.estimate, e) for n, e in zip(nodes, estimates, strict=True))
    assert all(all(link.current for link in n.state.links.values()) for n in nodes)


def test_silence_still_takes_the_consensus_step_on_the_estimates():
    nodes = sparq(1e12)
    node = nodes[0]
    node.state = node.state._replace(estimate=node.state.estimate + 1.0)  # x_hat_i != x_hat_j
    prepared = [n.prepare(1) for n in nodes]
    x_half = node.vector().clone()
    node.absorb(1, {j: prepared[j].messages[0] for j in node.neighbours})
    assert not torch.equal(node.vector(), x_half)


def test_rounds_between_synchronization_indices_only_train():
    nodes = sparq(0.0, sync_every=2)
    before = vectors(nodes)
    prepared, absorbed = play(nodes, 1)
    assert all(p.messages == {} and not p.fired for p in prepared)
    assert all(a.received == {} and a.missing == () for a in absorbed)
    assert all(not torch.equal(x, y) for x, y in zip(vectors(nodes), before, strict=True))
    assert [n.communicates(r) for n in nodes[:1] for r in (1, 2, 3, 4)] == [False, True] * 2
    prepared, _ = play(nodes, 2)
    assert all(p.fired and len(p.messages) == 2 for p in prepared)
    with pytest.raises(ValueError, match="exchanges nothing"):
        nodes[0].absorb(3, {1: b""})


def test_fired_corrections_travel_as_the_sign_of_the_top_k_by_default():
    nodes = sparq(0.0, codec=None)
    prepared, _ = play(nodes, 1)
    update = decode(prepared[0].messages[1], nodes[1].codec.wire_spec)
    payload = next(iter(update.tensors.values()))
    assert isinstance(payload.support, SparseSupport)
    assert isinstance(payload.values, SignValues)


def test_an_empty_message_is_silence_not_an_error():
    nodes = sparq(0.0)
    received = nodes[1].open(0, 1, b"")
    assert received.kind is None and received.size == 0
