"""The server: broadcast, validate every update, average in a fixed order, step; silent
clients (CSGD stale reuse) and random-access slot arbitration."""

import pytest
import torch
from star_helpers import tiny_experiment
from torch import nn

from thinwire.codecs.model import ModelCodec
from thinwire.config import parse_config
from thinwire.learning import Workspace, load_federation
from thinwire.server import Aggregator
from thinwire.wire import Kind, Update, client_id, decode, encode


def setup(**sections):
    experiment = tiny_experiment(**sections)
    workspace = load_federation(experiment).workspace
    aggregator = Aggregator(experiment=experiment, workspace=workspace, initial=workspace.tensors())
    return experiment, workspace, aggregator


def delta_bytes(workspace, client, round, value, examples):
    codec = ModelCodec.dense(workspace.spec)
    tensors = {s.name: torch.full(s.shape, float(value)) for s in workspace.spec}
    payloads, _ = codec.encode(tensors, codec.init(tensors))
    metrics = {"num_examples": float(examples)}
    return encode(Update(f"client-{client}", round, Kind.MODEL_DELTA, payloads, metrics))


def test_average_is_weighted_by_examples():
    _, workspace, aggregator = setup()
    before = {k: v.clone() for k, v in aggregator.model.items()}
    aggregator.broadcast(1, [0, 1])
    assert aggregator.receive(0, delta_bytes(workspace, 0, 1, 1.0, 30)).accepted
    assert aggregator.receive(1, delta_bytes(workspace, 1, 1, 4.0, 10)).accepted
    result = aggregator.finish_round()
    assert result.accepted == [0, 1] and result.delivered == {0: True, 1: True}
    for k, v in aggregator.model.items():
        torch.testing.assert_close(v, before[k] + (30 * 1.0 + 10 * 4.0) / 40)


def test_arrival_order_does_not_change_a_bit():
    models = []
    for order in ([0, 1, 2], [2, 0, 1]):
        _, workspace, aggregator = setup()
        aggregator.broadcast(1, [0, 1, 2])
        for c in order:
            aggregator.receive(c, delta_bytes(workspace, c, 1, 0.1 * (c + 1) / 3, 7 + c))
        aggregator.finish_round()
        models.append(aggregator.model)
    assert all(torch.equal(models[0][k], models[1][k]) for k in models[0])


@pytest.mark.parametrize(
    ("client", "data", "reason"),
    [
        (0, b"\xff\x00not protobuf", "not an Update message"),
        (3, None, "not asked for an update"),
        (1, "wrong-sender", "does not match 'client-1'"),
        (0, "wrong-round", "expected 1"),
        (0, "no-examples", "num_examples"),
    ],
)
def test_bad_updates_are_rejected_and_the_round_goes_on(client, data, reason):
    _, workspace, aggregator = setup()
    aggregator.broadcast(1, [0, 1])
    if data is None:
        data = delta_bytes(workspace, client, 1, 1.0, 5)
    elif data == "wrong-sender":
        data = delta_bytes(workspace, 0, 1, 1.0, 5)
    elif data == "wrong-round":
        data = delta_bytes(workspace, 0, 2, 1.0, 5)
    elif data == "no-examples":
        data = delta_bytes(workspace, 0, 1, 1.0, 0)
    receipt = aggregator.receive(client, data)
    assert not receipt.accepted and reason in receipt.error
    assert aggregator.receive(
        0 if client else 1, delta_bytes(workspace, 0 if client else 1, 1, 1.0, 5)
    ).accepted
    result = aggregator.finish_round()
    assert result.rejected[client] == receipt.error
    assert result.delivered[client] is False


def test_a_second_update_from_the_same_client_is_refused():
    _, workspace, aggregator = setup()
    aggregator.broadcast(1, [0])
    assert aggregator.receive(0, delta_bytes(workspace, 0, 1, 1.0, 5)).accepted
    assert "already sent" in aggregator.receive(0, delta_bytes(workspace, 0, 1, 1.0, 5)).error


def test_server_momentum_accumulates_the_average():
    _, workspace, aggregator = setup(train={"server": {"lr": 1.0, "momentum": 0.5}})
    start = {k: v.clone() for k, v in aggregator.model.items()}
    for round in (1, 2):
        aggregator.broadcast(round, [0])
        aggregator.receive(0, delta_bytes(workspace, 0, round, 1.0, 1))
        aggregator.finish_round()
    for k, v in aggregator.model.items():  # steps of 1 then 0.5 * 1 + 1
        torch.testing.assert_close(v, start[k] + 2.5)


def test_compressed_downlink_goes_to_synced_clients_and_full_model_to_stale_ones():
    downlink = {"select": {"kind": "topk", "density": 0.1}}
    experiment, workspace, aggregator = setup(downlink=downlink)
    first = aggregator.broadcast(1, [0, 1])
    assert all(decode(b, {Kind.MODEL: workspace.spec}).kind == Kind.MODEL for b in first.values())
    aggregator.receive(0, delta_bytes(workspace, 0, 1, 0.5, 5))
    aggregator.finish_round()
    second = aggregator.broadcast(2, [0, 2])
    specs = {Kind.MODEL: workspace.spec, Kind.MODEL_DELTA: aggregator.downlink.wire_spec}
    assert decode(second[0], specs).kind == Kind.MODEL_DELTA
    assert decode(second[2], specs).kind == Kind.MODEL
    assert len(second[0]) < len(second[2]) / 5


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
    assert agg.half.name == "stale_reuse"
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
    assert agg.half.name == "plain"
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
    assert "already sent an update" in agg.silent(0).error
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
