"""JWINS: the most-changed wavelet coefficients, a random cut-off, gaps filled with own values."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch

from thinwire.codecs.model import FLAT_NAME
from thinwire.wire import (
    DenseSupport,
    Kind,
    Payload,
    QuantizedValues,
    RawValues,
    SparseSupport,
    Update,
    WireError,
    decode,
    encode,
)

from ..gossip_support import experiment, make_nodes, play, vectors


def jwins(alphas=(0.25,), *, rounds: int = 4, topology=None, **fields):
    gossip = {"kind": "jwins", "alphas": list(alphas), "wavelet": "haar", **fields}
    return make_nodes(experiment(gossip, rounds=rounds, topology=topology))


def payload_of(node, message: bytes) -> Payload:
    return decode(message, node._specs[Kind.MODEL]).tensors[FLAT_NAME]


def test_with_every_cut_off_at_one_jwins_is_dpsgd():
    plain = make_nodes(experiment({"kind": "dpsgd"}))
    full = jwins(alphas=(1.0,))
    for round in (1, 2, 3):
        play(plain, round)
        play(full, round)
    for a, b in zip(vectors(plain), vectors(full), strict=True):
        # sum_j w_ij T(x_j) transformed back: D-PSGD up to the transform's float rounding.
        assert torch.allclose(a, b, atol=1e-5, rtol=0)


def test_a_partial_share_sends_ceil_alpha_d_current_coefficient_values():
    nodes = jwins(alphas=(0.25,))
    node = nodes[0]
    prepared = node.prepare(1)
    payload = payload_of(node, prepared.messages[1])
    assert isinstance(payload.support, SparseSupport)
    k = math.ceil(0.25 * node.coefficients)
    assert payload.support.indices.numel() == k
    assert torch.all(payload.support.indices[1:] > payload.support.indices[:-1])
    coefficients = node.transform.forward(node.vector())
    assert torch.equal(payload.values.data, coefficients[payload.support.indices])


def test_the_shared_coordinates_are_those_that_changed_most_and_their_change_is_rewound():
    node = jwins(alphas=(0.25,))[0]
    before = node.vector().clone()
    payload = payload_of(node, node.prepare(1).messages[1])
    change = node.transform.forward(node.vector() - before).abs()
    chosen = payload.support.indices
    threshold = change[chosen].min()
    unchosen = torch.ones_like(change, dtype=torch.bool)
    unchosen[chosen] = False
    assert change[unchosen].max() <= threshold
    assert not node.state.pending[chosen].any()  # accumulator zeroed where shared


def test_unshared_change_accumulates_across_rounds():
    node, *_ = nodes = jwins(alphas=(0.1,))
    play(nodes, 1)
    anchor = node.state.anchor.clone()
    pending = node.state.pending.clone()
    assert pending.abs().sum() > 0
    assert torch.equal(anchor, node.vector())  # x_prev is the model after averaging


def test_a_cut_off_at_or_above_the_cap_shares_everything_and_clears_the_accumulator():
    node = jwins(alphas=(0.5,))[0]  # metadata_cap 0.5
    payload = payload_of(node, node.prepare(1).messages[1])
    assert isinstance(payload.support, DenseSupport)
    assert payload.values.data.numel() == node.coefficients
    assert not node.state.pending.any()


def test_cut_offs_are_drawn_uniformly_per_node_and_round_and_reproducibly():
    node, other, *_ = jwins(alphas=(0.1, 0.2, 0.4, 1.0), rounds=400)
    draws = [node.alpha(r) for r in range(1, 401)]
    assert draws == [node.alpha(r) for r in range(1, 401)]
    assert draws != [other.alpha(r) for r in range(1, 401)]
    counts = Counter(draws)
    assert set(counts) == {0.1, 0.2, 0.4, 1.0}
    assert all(60 <= n <= 140 for n in counts.values())


def test_receivers_fill_unsent_coefficients_with_their_own():
    nodes = jwins(alphas=(0.25,))
    prepared = [node.prepare(1) for node in nodes]
    receiver = nodes[1]
    own = receiver.transform.forward(receiver.vector())
    message = receiver.open(0, 1, prepared[0].messages[1])
    w = receiver.core.weights(1)
    filled = own.clone()
    filled[message.indices] = message.values
    expected = receiver.transform.inverse(
        w[1] * own + w[0] * filled + w[2] * own, receiver.core.size
    )
    absorbed = receiver.absorb(1, {0: prepared[0].messages[1]})  # node 2 is missing
    assert absorbed.missing == (2,)
    assert torch.allclose(receiver.vector(), expected, atol=1e-6)


def test_coefficients_must_travel_as_float32_values_at_explicit_indices():
    node = jwins()[1]
    shape = (node.coefficients,)
    levels = torch.zeros(node.coefficients, dtype=torch.int8)
    quantized = Payload(shape, DenseSupport(), QuantizedValues(levels, torch.ones(1), 4, 0))
    half = Payload(shape, DenseSupport(), RawValues(torch.zeros(node.coefficients).half()))
    for payload in (quantized, half):
        data = encode(Update("node-0", 1, Kind.MODEL, {FLAT_NAME: payload}))
        with pytest.raises(WireError, match="unquantized float32"):
            node.open(0, 1, data)


def test_jwins_runs_on_a_graph_redrawn_every_round():
    nodes = jwins(alphas=(0.25,), topology={"kind": "matching"})
    for round in (1, 2):
        prepared, absorbed = play(nodes, round)
        assert all(len(p.messages) == 1 for p in prepared)  # one partner per round
        assert all(a.missing == () for a in absorbed)


def test_state_round_trips():
    nodes = jwins()
    play(nodes, 1)
    twin = jwins()[0]
    twin.load_state_dict(nodes[0].state_dict())
    assert twin.prepare(2).messages == nodes[0].prepare(2).messages
