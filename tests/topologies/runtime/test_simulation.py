"""The in-process gossip runtime: real bytes, round records of the average model."""

from __future__ import annotations

import math

import pytest
import torch

from thinwire.learning import flatten
from thinwire.metrics import CORE_KEYS
from thinwire.runtimes.simulation import simulate
from thinwire.topologies.runtime.simulation import (
    average_model,
    consensus_distance,
    simulate_gossip,
)

from ..gossip_support import experiment

CHOCO = {"kind": "choco", "gamma": 0.5}
TOP_10 = {"select": {"kind": "topk", "density": 0.1}}


@pytest.fixture(scope="module")
def run():
    nodes, rounds = [], []
    result = simulate_gossip(
        experiment(
            CHOCO,
            TOP_10,
            rounds=3,
            train={
                "rounds": 3,
                "local_steps": 2,
                "batch_size": 16,
                "lr": 0.1,
                "device": "cpu",
                "eval_every": 2,
            },
        ),
        on_round=rounds.append,
        on_node=nodes.append,
    )
    return result, nodes, rounds


def test_helpers_measure_the_average_and_the_spread_of_the_models():
    vectors = [torch.tensor([0.0, 2.0]), torch.tensor([2.0, 2.0])]
    assert torch.equal(average_model(vectors), torch.tensor([1.0, 2.0]))
    assert consensus_distance(vectors) == 1.0
    with pytest.raises(ValueError, match="no models"):
        average_model([])


def test_every_round_records_the_core_keys_and_the_gossip_ones(run):
    result, _, rounds = run
    assert rounds == result.records and [r["round"] for r in rounds] == [1, 2, 3]
    for record in rounds:
        assert set(CORE_KEYS) <= set(record)
        assert {"consensus_distance", "fired", "missing", "rejected", "refreshed"} <= set(record)
        assert record["fired"] == 4 and record["missing"] == record["rejected"] == 0
    assert math.isnan(rounds[0]["accuracy"])
    assert 0.0 <= rounds[1]["accuracy"] <= 1.0 and 0.0 <= rounds[2]["accuracy"] <= 1.0


def test_bytes_are_the_lengths_of_the_messages_each_node_sent(run):
    result, nodes, rounds = run
    assert len(nodes) == 12 and [r.node for r in nodes[:4]] == [0, 1, 2, 3]
    for round, (record, reports) in enumerate(zip(rounds, result.reports, strict=True), 1):
        assert all(r.round == round for r in reports)
        assert record["bytes_up"] == sum(r.bytes_sent for r in reports)
        assert record["bytes_down"] == record["bytes_up"]  # nothing lost in simulation
        assert record["updates_sent"] == 8  # 4 nodes x 2 neighbours on the ring
    assert rounds[-1]["cum_bytes_up"] == sum(r["bytes_up"] for r in rounds)


def test_the_run_reports_the_average_model_and_the_spread_of_the_nodes(run):
    result, _, rounds = run
    stacked = torch.stack(result.models)
    assert torch.allclose(flatten(result.model), stacked.mean(dim=0))
    assert rounds[-1]["consensus_distance"] == pytest.approx(consensus_distance(result.models))


def test_a_seeded_run_is_reproducible_to_the_bit():
    config = experiment(CHOCO, TOP_10, rounds=2)
    first, second = simulate_gossip(config), simulate_gossip(config)
    assert all(torch.equal(a, b) for a, b in zip(first.models, second.models, strict=True))
    assert [r["bytes_up"] for r in first.records] == [r["bytes_up"] for r in second.records]


def test_silent_and_local_rounds_cost_no_bytes_and_no_network_time():
    sparq = {
        "kind": "sparq",
        "gamma": 0.5,
        "sync_every": 2,
        "threshold": {"kind": "constant", "c": 1e12},
    }
    records = simulate_gossip(experiment(sparq, TOP_10, rounds=2)).records
    assert [(r["bytes_up"], r["updates_sent"], r["fired"], r["sim_time_s"]) for r in records] == [
        (0, 0, 0, 0.0),
        (0, 0, 0, 0.0),
    ]


def test_network_time_is_the_slowest_nodes_transfer_on_its_link():
    channel = {"uplink_mbps": 1.0, "downlink_mbps": 100.0, "latency_ms": 10.0}
    result = simulate_gossip(experiment(rounds=1, channel=channel))
    (reports,) = result.reports
    slowest = max(0.01 + r.bytes_sent * 8 / 1e6 for r in reports)
    assert result.records[0]["sim_time_s"] == pytest.approx(slowest)


def test_simulate_runs_a_decentralized_experiment_as_gossip():
    config = experiment(rounds=1)
    result = simulate(config)
    gossip = simulate_gossip(config)
    assert [set(r) for r in result.records] == [set(r) for r in gossip.records]
    assert all(torch.equal(result.model[k], gossip.model[k]) for k in gossip.model)


def test_choco_gossips_powersgd_factors_at_a_fraction_of_the_bytes():
    # Each node's correction q = C(x - x_hat) travels as rank-2 factors (biases dense); every
    # neighbour decodes it on its own, so the per-sender form needs no shared state.
    powersgd = {"lowrank": {"kind": "powersgd", "rank": 2}}
    low = simulate_gossip(experiment(CHOCO, powersgd, rounds=3))
    dense = simulate_gossip(experiment(CHOCO, {}, rounds=3))
    sent_low = sum(r["bytes_up"] for r in low.records)
    sent_dense = sum(r["bytes_up"] for r in dense.records)
    assert 0 < sent_low < sent_dense / 2  # a small model: its biases and headers weigh in
    assert math.isfinite(low.records[-1]["accuracy"])  # evaluated in the last round
    assert all(bool(torch.isfinite(m).all()) for m in low.models)
