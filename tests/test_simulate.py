"""The in-process runtime: deterministic, and every byte counted is a byte serialized."""

import math

import torch
from star_helpers import tiny_experiment

from thinwire.server import Aggregator
from thinwire.simulate import simulate

TIMINGS = {"wall_s", "compute_s"}


def strip(records):
    return [{k: v for k, v in r.items() if k not in TIMINGS} for r in records]


def test_same_seeded_config_gives_bitwise_identical_runs():
    experiment = tiny_experiment(
        codec={"select": {"kind": "topk", "density": 0.05}, "error_feedback": True}
    )
    first, second = simulate(experiment), simulate(experiment)
    assert strip(first.records) == strip(second.records)
    assert all(torch.equal(first.model[k], second.model[k]) for k in first.model)
    other = simulate(experiment.model_copy(update={"seed": 8}))
    assert strip(other.records) != strip(first.records)


def test_byte_counts_are_the_lengths_of_the_serialized_messages(monkeypatch):
    sizes: dict[int, list[int]] = {}
    original = Aggregator.receive

    def spy(self, client, data):
        sizes.setdefault(self._round, []).append(len(data))
        return original(self, client, data)

    monkeypatch.setattr(Aggregator, "receive", spy)
    experiment = tiny_experiment(codec={"select": {"kind": "random_k", "density": 0.2}})
    result = simulate(experiment)
    for record in result.records:
        assert record["bytes_up"] == sum(sizes[record["round"]])
        assert record["updates_sent"] == len(sizes[record["round"]])


def test_partial_participation_and_periodic_evaluation():
    experiment = tiny_experiment(train={"rounds": 4, "participation": 0.5, "eval_every": 2})
    records = simulate(experiment).records
    assert [r["participants"] for r in records] == [2, 2, 2, 2]
    assert [math.isnan(r["accuracy"]) for r in records] == [True, False, True, False]
    assert records[-1]["cum_bytes_up"] == sum(r["bytes_up"] for r in records)


def test_training_improves_the_global_model():
    experiment = tiny_experiment(train={"rounds": 8, "local_steps": 10})
    records = simulate(experiment).records
    assert records[-1]["accuracy"] > 0.6
    assert records[-1]["loss"] < records[0]["loss"]
