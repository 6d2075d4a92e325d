"""The server: broadcast, validate every update, average in a fixed order, step."""

import pytest
import torch
from star_helpers import tiny_experiment

from thinwire.codecs.model import ModelCodec
from thinwire.learning import load_federation
from thinwire.server import Aggregator
from thinwire.wire import Kind, Update, decode, encode


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
