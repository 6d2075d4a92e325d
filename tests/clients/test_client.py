"""The client: bytes in (the server's model), bytes out (its compressed update); with a
policy or a privacy section: silence, batches, slots, epsilon."""

import warnings

import pytest
import torch
from star_helpers import tiny_experiment

from thinwire.clients import Client
from thinwire.config import parse_config
from thinwire.learning import PrivacyPlan, load_federation
from thinwire.policies import Decision, Policy
from thinwire.privacy import epsilon
from thinwire.server import Aggregator
from thinwire.wire import Kind, WireError, decode
from thinwire.wire.payload import SeededSupport

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


pytestmark = pytest.mark.filterwarnings("ignore:DP noise is drawn from seeds")

BASE = {
    "name": "t",
    "data": {"dataset": "digits", "clients": 2},
    "model": {"kind": "logreg"},
    "train": {"rounds": 3, "local_steps": 4, "batch_size": 16, "lr": 0.1, "device": "cpu"},
}


def star(**sections):
    experiment = parse_config({**BASE, **sections})
    federation = load_federation(experiment)
    workspace = federation.workspace
    aggregator = Aggregator(experiment=experiment, workspace=workspace, initial=workspace.tensors())
    clients = [
        Client(index=i, experiment=experiment, x=x, y=y, workspace=workspace)
        for i, (x, y) in enumerate(federation.all_client_data())
    ]
    return experiment, aggregator, clients


def censor(tau, batch=None):
    section = {"kind": "censor", "threshold": {"kind": "constant", "tau": tau}}
    return {**section, "batch": batch} if batch else section


def test_a_censored_round_sends_nothing_and_carries_nothing():
    _, aggregator, clients = star(policy=censor(1e9))
    downlink = aggregator.broadcast(1, [0])
    result = clients[0].train_round(downlink[0], 1, delivered=None)
    assert result.data is None and not result.decision.transmit
    assert clients[0].state.carry == {} and clients[0].state.pending.numel() == 0


def test_an_informative_update_is_sent():
    _, aggregator, clients = star(policy=censor(0.0))
    downlink = aggregator.broadcast(1, [0])
    result = clients[0].train_round(downlink[0], 1, delivered=None)
    assert result.data is not None and aggregator.receive(0, result.data).accepted


def test_the_policy_sets_each_rounds_batch_size():
    _, aggregator, clients = star(policy=censor(0.0, batch={"kind": "linear"}))
    seen = []
    for round in (1, 2):
        downlink = aggregator.broadcast(round, [0])
        result = clients[0].train_round(downlink[0], round, delivered=None)
        aggregator.receive(0, result.data)
        aggregator.finish_round()
        seen.append(result.num_examples)
    assert seen == [4 * 16, 4 * 32]  # 4 steps of B_1 = 16, then of B_2 = 32


def test_a_collided_update_comes_back_as_carried_memory_beside_the_fresh_update():
    _, aggregator, clients = star(
        policy={"kind": "random_access", "rule": {"kind": "always"}}, channel={"slots": 1}
    )
    seen = []
    spy = clients[0].policy

    def decide(inputs, state):
        seen.append(inputs)
        return Decision(transmit=True, slot=0), state

    for client in clients:
        client.policy = Policy(spy.init, decide, spy.delivered)
    outcomes = {}
    for round in (1, 2):
        downlink = aggregator.broadcast(round, [0, 1])
        for c, client in enumerate(clients):
            result = client.train_round(downlink[c], round, delivered=outcomes.get(c))
            assert result.decision.slot == 0
            aggregator.receive(c, result.data)
        outcomes = aggregator.finish_round().delivered
        assert outcomes == {0: False, 1: False}  # both in slot 0: a collision
    first, second = seen[0], seen[2]  # client 0, rounds 1 and 2
    assert first.fresh is None  # nothing carried yet
    carried = {k: second.update[k] - second.fresh[k] for k in second.update}
    assert all(torch.allclose(carried[k], first.update[k], atol=1e-6) for k in carried)


PRIVATE = {"target_epsilon": 1.0, "delta": 1e-4, "max_grad_norm": 1.0}


@pytest.mark.slow
def test_a_private_client_reports_epsilon_growing_to_its_target():
    experiment, aggregator, clients = star(privacy=PRIVATE)
    spent = []
    for round in (1, 2, 3):
        downlink = aggregator.broadcast(round, [0])
        result = clients[0].train_round(downlink[0], round, delivered=None)
        message = decode(result.data, clients[0].uplink.wire_spec)
        assert message.metrics["epsilon"] == result.epsilon
        aggregator.receive(0, result.data)
        aggregator.finish_round()
        spent.append(result.epsilon)
    assert spent[0] < spent[1] < spent[2]
    # calibrated for 3 rounds x 4 steps: the last round lands on the target
    assert 1.0 - 0.011 <= spent[-1] <= 1.0
    ledger = clients[0].state.privacy
    assert ledger.history[0][2] == 12
    assert epsilon(ledger.history, 1e-4) == spent[-1]


def test_a_configured_noise_multiplier_is_used_as_is():
    _, _, clients = star(privacy={"noise_multiplier": 0.8, "delta": 1e-4})
    client = clients[0]
    assert client.trainer.name == "private(local_sgd)"
    plan = PrivacyPlan.for_client(client.experiment, client.experiment.privacy, client.x.shape[0])
    assert plan.noise_multiplier == 0.8 and plan.batch_size == 16
    assert plan.sample_rate == pytest.approx(16 / client.x.shape[0])
    assert client.state.privacy.history == ((0.8, plan.sample_rate, 0),)
    assert client.trainer.init() == client.state.privacy


def test_delta_must_be_below_one_over_the_clients_data():
    with pytest.raises(ValueError, match=r"privacy.delta = 0.01 must be below 1/N = 1/719"):
        star(privacy={"noise_multiplier": 1.0, "delta": 0.01})


def test_seeded_noise_is_announced_as_a_risk():
    with pytest.warns(UserWarning, match="regenerate and remove the noise"):
        star(privacy={"noise_multiplier": 1.0, "delta": 1e-4})


def test_a_masked_private_update_travels_as_seed_and_kept_values():
    sparse = {
        **PRIVATE,
        "target_epsilon": None,
        "noise_multiplier": 1.0,
        "sparsity": {"final_rate": 0.8, "schedule": "constant"},
    }
    _, aggregator, clients = star(
        privacy=sparse, codec={"scope": "model", "select": {"kind": "shared_mask"}}
    )
    _, dense_aggregator, dense_clients = star(privacy={**sparse, "sparsity": None})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        masked = clients[0].train_round(aggregator.broadcast(1, [0])[0], 1, delivered=None)
        plain = dense_clients[0].train_round(
            dense_aggregator.broadcast(1, [0])[0], 1, delivered=None
        )
    payload = decode(masked.data, clients[0].uplink.wire_spec).tensors["model"]
    n = payload.numel
    assert isinstance(payload.support, SeededSupport)
    assert payload.count == n - int(0.8 * n)
    assert len(masked.data) < 0.3 * len(plain.data)
    assert aggregator.receive(0, masked.data).accepted
