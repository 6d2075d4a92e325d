"""A client never trains on a model it cannot trust: the downlink goes through the same
receive path as the server's uplink (form check, decode, finite values)."""

from __future__ import annotations

import pytest
import torch
from star_helpers import tiny_experiment

from thinwire.clients import Client
from thinwire.codecs.model import ModelCodec
from thinwire.config import CodecConfig
from thinwire.learning import load_federation
from thinwire.server import Aggregator
from thinwire.wire import Kind, Update, WireError, encode

TOPK_DOWN = {"select": {"kind": "topk", "density": 0.2}}


def setup():
    experiment = tiny_experiment(downlink=TOPK_DOWN)
    federation = load_federation(experiment)
    workspace = federation.workspace
    aggregator = Aggregator(experiment=experiment, workspace=workspace, initial=workspace.tensors())
    x, y = federation.client_data(0)
    client = Client(index=0, experiment=experiment, x=x, y=y, workspace=workspace)
    return aggregator, client


def delta_message(client: Client, codec: dict, value: float, round: int) -> bytes:
    spec = client.workspace.spec
    model_codec = ModelCodec(CodecConfig.model_validate(codec), spec, seed=0)
    tensors = {s.name: torch.full(s.shape, value) for s in spec}
    payloads, _ = model_codec.encode(tensors, model_codec.init(tensors))
    return encode(Update("server", round, Kind.MODEL_DELTA, payloads))


def test_a_downlink_delta_of_another_form_is_refused() -> None:
    aggregator, client = setup()
    client.train_round(aggregator.broadcast(1, [0])[0], 1, delivered=None)
    foreign = delta_message(client, {"quantize": {"kind": "sign"}}, 0.1, 2)
    with pytest.raises(WireError, match="but this receiver's codec sends sparse support"):
        client.train_round(foreign, 2, delivered=True)


def test_a_downlink_that_would_make_the_model_non_finite_is_refused() -> None:
    # Finite values whose sum with the client's copy overflows float32.
    aggregator, client = setup()
    client.train_round(aggregator.broadcast(1, [0])[0], 1, delivered=None)
    state = client.state
    client.state = state._replace(view={k: torch.full_like(v, 3e38) for k, v in state.view.items()})
    huge = delta_message(client, TOPK_DOWN, 3e38, 2)
    with pytest.raises(WireError, match="model after the downlink delta is not finite"):
        client.train_round(huge, 2, delivered=True)
