"""The client: bytes in (the server's model), bytes out (its compressed update)."""

import pytest
import torch
from star_helpers import tiny_experiment

from thinwire.clients import Client
from thinwire.learning import load_federation
from thinwire.server import Aggregator
from thinwire.wire import Kind, WireError, decode

TOPK = {"select": {"kind": "topk", "density": 0.1}, "error_feedback": True}


def setup(**sections):
    experiment = tiny_experiment(**sections)
    federation = load_federation(experiment)
    workspace = federation.workspace
    aggregator = Aggregator(experiment=experiment, workspace=workspace, initial=workspace.tensors())
    x, y = federation.client_data(0)
    client = Client(index=0, experiment=experiment, x=x, y=y, workspace=workspace)
    return aggregator, client


def test_update_is_a_validated_model_delta_from_this_client():
    aggregator, client = setup(codec=TOPK)
    downlink = aggregator.broadcast(1, [0])[0]
    result = client.train_round(downlink, 1, delivered=None)
    update = decode(result.data, client.uplink.wire_spec, kind=Kind.MODEL_DELTA)
    assert update.sender == "client-0" and update.round == 1
    assert update.metrics["num_examples"] == client.x.shape[0]
    assert result.num_examples == 3 * 16 and result.train_loss > 0
    payload = update.tensors["fc1.weight"]
    assert payload.count == pytest.approx(0.1 * payload.numel, abs=1)


def test_error_feedback_keeps_what_top_k_dropped():
    aggregator, client = setup(codec=TOPK)
    downlink = aggregator.broadcast(1, [0])[0]
    result = client.train_round(downlink, 1, delivered=None)
    sent = client.uplink.decode(
        decode(result.data, client.uplink.wire_spec).tensors, client.workspace.device
    )
    residual = client.state.codec["fc1.weight"].residual
    view = client.dense.decode(decode(downlink, client.workspace.spec).tensors, "cpu")
    local_minus_view = client.workspace.tensors()["fc1.weight"] - view["fc1.weight"]
    assert torch.equal(sent["fc1.weight"] + residual, local_minus_view)


def test_an_undelivered_update_is_carried_into_the_next_round():
    aggregator, client = setup()
    spec, device = client.uplink.wire_spec, client.workspace.device
    first = client.train_round(aggregator.broadcast(1, [0])[0], 1, delivered=None)
    lost = client.uplink.decode(decode(first.data, spec).tensors, device)
    aggregator.finish_round()  # the update never reached the server
    downlink = aggregator.broadcast(2, [0])[0]
    view = client.dense.decode(decode(downlink, client.workspace.spec).tensors, device)
    second = client.train_round(downlink, 2, delivered=False)
    sent = client.uplink.decode(decode(second.data, spec).tensors, device)
    local = client.workspace.tensors()
    for k in sent:
        assert torch.equal(sent[k], local[k] - view[k] + lost[k])
    assert client.state.carry == {}


def test_a_downlink_for_another_round_is_rejected():
    aggregator, client = setup()
    downlink = aggregator.broadcast(1, [0])[0]
    with pytest.raises(WireError, match="downlink is for round 1, expected round 2"):
        client.train_round(downlink, 2, delivered=None)


def test_garbage_downlink_is_a_wire_error():
    _, client = setup()
    with pytest.raises(WireError):
        client.train_round(b"\x00garbage", 1, delivered=None)
