"""No update a client can send takes down a round at the server (issue 11).

Each hostile form goes to an `Aggregator` whose uplink codec it targets, next to honest
updates: the hostile one is refused with its reason and counted, the honest ones are
averaged, the model stays finite, and the next round runs.
"""

from __future__ import annotations

import math

import pytest
import torch
from hostile_updates import CASES, hostile_bytes
from star_helpers import tiny_experiment

from thinwire.clients import Client
from thinwire.codecs.model import ModelCodec
from thinwire.learning import load_federation
from thinwire.runtimes.simulation import simulate
from thinwire.server import Aggregator
from thinwire.wire import Kind, Update, client_id, encode

HOSTILE = 3


def setup(codec: dict, **sections):
    experiment = tiny_experiment(codec=codec, **sections)
    workspace = load_federation(experiment).workspace
    aggregator = Aggregator(experiment=experiment, workspace=workspace, initial=workspace.tensors())
    return experiment, workspace, aggregator


def honest_bytes(aggregator: Aggregator, client: int, round: int, scale: float = 0.01) -> bytes:
    codec = aggregator.uplink
    g = torch.Generator().manual_seed(100 * round + client)
    tensors = {s.name: torch.randn(s.shape, generator=g) * scale for s in codec.spec}
    payloads, _ = codec.encode(tensors, codec.init(tensors))
    update = Update(client_id(client), round, Kind.MODEL_DELTA, payloads, {"num_examples": 20.0})
    return encode(update)


def finite(model: dict[str, torch.Tensor]) -> bool:
    return all(bool(torch.isfinite(v).all()) for v in model.values())


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_hostile_update_is_refused_and_the_round_goes_on(case: str) -> None:
    hostile = CASES[case]
    _, _, aggregator = setup(hostile.server_codec)
    for round in (1, 2):
        before = {k: v.clone() for k, v in aggregator.model.items()}
        aggregator.broadcast(round, [0, 1, 2, HOSTILE])
        for c in (0, 1, 2):
            assert aggregator.receive(c, honest_bytes(aggregator, c, round)).accepted
        aggregator.receive(
            HOSTILE, hostile_bytes(case, aggregator.uplink.wire_spec, HOSTILE, round)
        )
        result = aggregator.finish_round()
        assert result.accepted == [0, 1, 2]
        assert set(result.rejected) == {HOSTILE}
        assert hostile.reason in result.rejected[HOSTILE]
        assert result.delivered[HOSTILE] is False
        assert finite(aggregator.model)
        assert any(not torch.equal(aggregator.model[k], before[k]) for k in before)


def test_a_top_k_server_names_the_tensor_and_both_forms() -> None:
    _, _, aggregator = setup(CASES["dense_to_topk"].server_codec)
    aggregator.broadcast(1, [0])
    receipt = aggregator.receive(
        0, hostile_bytes("dense_to_topk", aggregator.uplink.wire_spec, 0, 1)
    )
    assert not receipt.accepted
    name = aggregator.uplink.spec[0].name
    assert receipt.error == (
        f"tensor {name!r}: dense support with fp32 values, but this receiver's codec sends "
        "sparse support with fp32 values"
    )


def test_the_simulator_holds_clients_to_their_true_example_count() -> None:
    experiment = tiny_experiment()
    federation = load_federation(experiment)
    counts = {i: int(x.shape[0]) for i, (x, _) in enumerate(federation.all_client_data())}
    workspace = federation.workspace
    aggregator = Aggregator(
        experiment=experiment, workspace=workspace, initial=workspace.tensors(), examples=counts
    )
    aggregator.broadcast(1, [0])
    codec = ModelCodec.dense(workspace.spec)
    zeros = workspace.zeros()
    payloads, _ = codec.encode(zeros, codec.init(zeros))
    lie = {"num_examples": float(counts[0] + 1)}
    receipt = aggregator.receive(0, encode(Update("client-0", 1, Kind.MODEL_DELTA, payloads, lie)))
    assert not receipt.accepted
    assert f"num_examples must be in [1, {counts[0]}]" in str(receipt.error)


def test_the_flower_cap_on_examples_is_configurable() -> None:
    _, _, aggregator = setup({}, aggregation={"max_examples": 50})
    aggregator.broadcast(1, [0, 1])
    aggregator.receive(0, honest_bytes(aggregator, 0, 1))  # claims 20
    data = hostile_bytes("dense_3e38_examples_2**40", aggregator.uplink.wire_spec, 1, 1)
    receipt = aggregator.receive(1, data)
    assert "num_examples must be in [1, 50]" in str(receipt.error)


def test_the_norm_bound_follows_the_models_norm_and_the_configured_ratio() -> None:
    _, workspace, aggregator = setup({}, aggregation={"max_norm_ratio": 2.0})
    norm = math.sqrt(sum(float((v.double() ** 2).sum()) for v in aggregator.model.values()))
    bound = 2.0 * max(norm, 1.0)
    numel = sum(s.numel for s in workspace.spec)
    aggregator.broadcast(1, [0, 1])
    # Client 0 just inside the bound, client 1 just outside: constant deltas of norm c sqrt(n).
    for client, factor in ((0, 0.99), (1, 1.01)):
        value = factor * bound / math.sqrt(numel)
        tensors = {s.name: torch.full(s.shape, value) for s in workspace.spec}
        codec = aggregator.uplink
        payloads, _ = codec.encode(tensors, codec.init(tensors))
        metrics = {"num_examples": 5.0}
        update = Update(client_id(client), 1, Kind.MODEL_DELTA, payloads, metrics)
        assert aggregator.receive(client, encode(update)).accepted
    result = aggregator.finish_round()
    assert result.accepted == [0]
    assert f"above this receiver's bound {bound:.4g}" in result.rejected[1]


def test_a_non_finite_initial_model_is_refused() -> None:
    experiment = tiny_experiment()
    workspace = load_federation(experiment).workspace
    initial = {k: torch.full_like(v, math.inf) for k, v in workspace.tensors().items()}
    with pytest.raises(ValueError, match="NaN or infinite"):
        Aggregator(experiment=experiment, workspace=workspace, initial=initial)


def test_a_step_that_would_overflow_the_model_is_not_taken() -> None:
    # Every update within the bound, but the server lr makes the step overflow float32.
    _, workspace, aggregator = setup({}, train={"server": {"lr": 1e38}})
    before = {k: v.clone() for k, v in aggregator.model.items()}
    aggregator.broadcast(1, [0])
    assert aggregator.receive(0, honest_bytes(aggregator, 0, 1, scale=5.0)).accepted
    result = aggregator.finish_round()
    assert result.accepted == [0]
    assert all(torch.equal(aggregator.model[k], before[k]) for k in before)
    assert aggregator.state.round == 1


@pytest.mark.parametrize("case", ["qsgd_to_topk", "topk_1e30"])
def test_the_simulator_counts_a_hostile_clients_update_in_the_rejected_column(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    experiment = tiny_experiment(codec=CASES[case].server_codec, train={"rounds": 3})
    honest = Client.train_round

    def train_round(self: Client, downlink: bytes, round: int, *, delivered):
        result = honest(self, downlink, round, delivered=delivered)
        if self.index != HOSTILE:
            return result
        return result._replace(data=hostile_bytes(case, self.uplink.wire_spec, HOSTILE, round))

    monkeypatch.setattr(Client, "train_round", train_round)
    run = simulate(experiment)
    assert [r["rejected"] for r in run.records] == [1, 1, 1]
    assert [r["updates_sent"] for r in run.records] == [4, 4, 4]
    assert finite(run.model)
