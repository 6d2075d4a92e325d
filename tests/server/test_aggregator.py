"""The server's round: silent clients (CSGD stale reuse) and random-access slot arbitration."""

import pytest
import torch
from torch import nn

from thinwire.config import parse_config
from thinwire.learning import Workspace
from thinwire.server import Aggregator
from thinwire.wire import Kind, Update, client_id, encode

CENSOR = {"kind": "censor", "threshold": {"kind": "constant", "tau": 1.0}}
RANDOM_ACCESS = {"kind": "random_access", "rule": {"kind": "uniform"}}


def server(**sections):
    experiment = parse_config({"name": "t", "data": {"clients": 4}, **sections})
    model = nn.Linear(2, 1)
    with torch.no_grad():
        model.weight.zero_()
        model.bias.zero_()
    workspace = Workspace(model, torch.device("cpu"))
    return Aggregator(experiment=experiment, workspace=workspace, initial=workspace.tensors())


def update(aggregator, client, round, value, *, examples=1.0, slot=None):
    tensors = {k: torch.full_like(v, value) for k, v in aggregator.model.items()}
    payloads, _ = aggregator.uplink.encode(tensors, aggregator.uplink.init(tensors))
    metrics = {"num_examples": examples}
    if slot is not None:
        metrics["slot"] = slot
    return encode(Update(client_id(client), round, Kind.MODEL_DELTA, payloads, metrics))


def bias(aggregator):
    return aggregator.model["bias"].item()


def test_a_silent_client_is_averaged_with_its_last_delivered_update():
    agg = server(policy=CENSOR)
    assert agg.reuses_silent
    agg.broadcast(1, [0, 1])
    agg.receive(0, update(agg, 0, 1, 1.0, examples=1))
    agg.receive(1, update(agg, 1, 1, 3.0, examples=3))
    agg.finish_round()
    assert bias(agg) == pytest.approx((1 * 1 + 3 * 3) / 4)
    agg.broadcast(2, [0, 1])
    agg.receive(0, update(agg, 0, 2, 5.0, examples=1))
    assert agg.silent(1).accepted
    result = agg.finish_round()
    assert result.silent == (1,) and result.reused == (1,)
    assert result.delivered == {0: True}  # silence is not a delivery outcome
    assert bias(agg) == pytest.approx(2.5 + (5 * 1 + 3 * 3) / 4)


def test_a_silent_client_that_never_delivered_contributes_nothing():
    agg = server(policy=CENSOR)
    agg.broadcast(1, [0, 1])
    agg.receive(0, update(agg, 0, 1, 2.0))
    agg.silent(1)
    result = agg.finish_round()
    assert result.silent == (1,) and result.reused == ()
    assert bias(agg) == pytest.approx(2.0)


def test_without_reuse_a_silent_client_is_simply_absent():
    agg = server()
    assert not agg.reuses_silent
    agg.broadcast(1, [0, 1])
    agg.receive(0, update(agg, 0, 1, 2.0))
    agg.receive(1, update(agg, 1, 1, 4.0))
    agg.finish_round()
    agg.broadcast(2, [0, 1])
    agg.receive(0, update(agg, 0, 2, 1.0))
    agg.silent(1)
    result = agg.finish_round()
    assert result.reused == () and agg.state.stale == {}
    assert bias(agg) == pytest.approx(3.0 + 1.0)


def test_silence_from_a_client_not_asked_or_already_heard_is_refused():
    agg = server(policy=CENSOR)
    agg.broadcast(1, [0, 1])
    assert not agg.silent(3).accepted
    agg.receive(0, update(agg, 0, 1, 1.0))
    assert "already replied" in agg.silent(0).error
    assert agg.silent(1).accepted
    assert not agg.silent(1).accepted
    assert not agg.receive(1, update(agg, 1, 1, 1.0)).accepted


def test_the_server_keeps_one_stale_copy_per_delivering_client_in_its_state():
    agg = server(policy=CENSOR)
    agg.broadcast(1, [0, 1, 2])
    agg.receive(0, update(agg, 0, 1, 1.0, examples=2))
    agg.receive(2, update(agg, 2, 1, 7.0, examples=5))
    agg.silent(1)
    agg.finish_round()
    assert sorted(agg.state.stale) == ["0", "2"]
    assert agg.state.stale_examples == {"0": 2.0, "2": 5.0}
    assert torch.equal(agg.state.stale["2"]["bias"], torch.tensor([7.0]))


def test_a_collision_loses_every_update_in_the_slot():
    agg = server(policy=RANDOM_ACCESS, channel={"slots": 3})
    agg.broadcast(1, [0, 1, 2, 3])
    agg.receive(0, update(agg, 0, 1, 1.0, slot=0))
    agg.receive(1, update(agg, 1, 1, 1.0, slot=0))
    agg.receive(2, update(agg, 2, 1, 8.0, slot=2))
    agg.silent(3)
    result = agg.finish_round()
    assert result.delivered == {0: False, 1: False, 2: True}
    assert result.collided == (0, 1) and result.accepted == [2]
    assert (result.slots.successes, result.slots.collisions, result.slots.idle) == (1, 1, 1)
    # summed over the 4 selected clients (AoG's G / N), not averaged over the 1 delivery
    assert bias(agg) == pytest.approx(8.0 / 4)


@pytest.mark.parametrize("slot", [None, -1.0, 3.0, 0.5])
def test_an_update_without_a_valid_slot_is_rejected(slot):
    agg = server(policy=RANDOM_ACCESS, channel={"slots": 3})
    agg.broadcast(1, [0])
    receipt = agg.receive(0, update(agg, 0, 1, 1.0, slot=slot))
    assert not receipt.accepted and "slot" in receipt.error
    assert agg.finish_round().delivered == {0: False}
