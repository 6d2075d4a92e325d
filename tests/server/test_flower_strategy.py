"""`StarStrategy` as a Flower Strategy, driven by Flower's own loop and by hand."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import yaml
from flower_local import LocalGrid, set_task_identity
from flwr.app import ArrayRecord, ConfigRecord

from thinwire.config import Experiment, parse_config
from thinwire.learning import load_federation
from thinwire.server import Aggregator
from thinwire.server.flower_messages import IDENTIFY, TRAIN, read_instruction
from thinwire.server.flower_strategy import QuorumError, StarStrategy
from thinwire.simulate import simulate
from thinwire.wire import Kind, decode

TOPK_EF = {"scope": "model", "select": {"kind": "topk", "density": 0.05}, "error_feedback": True}


def experiment(**sections: Any) -> Experiment:
    runtime = {"kind": "flower", "round_timeout_s": 5.0, **sections.pop("runtime", {})}
    return parse_config(
        {
            "name": "strategy",
            "seed": 1,
            "data": {"clients": 3},
            "model": {"kind": "mlp", "hidden": [16]},
            "train": {"rounds": 3, "local_steps": 4, "lr": 0.1, "device": "cpu"},
            "codec": TOPK_EF,
            "runtime": runtime,
            **sections,
        }
    )


def strategy_and_grid(exp: Experiment) -> tuple[StarStrategy, LocalGrid]:
    workspace = load_federation(exp).workspace
    aggregator = Aggregator(experiment=exp, workspace=workspace, initial=workspace.tensors())
    run_config = {
        "experiment": yaml.safe_dump(exp.model_dump(mode="json")),
        "run-dir": "",
        "resume": "",
    }
    return StarStrategy(experiment=exp, aggregator=aggregator), LocalGrid(run_config, 3)


@pytest.fixture(autouse=True)
def task_identity() -> None:
    set_task_identity()


def test_flowers_own_loop_runs_it_to_the_simulators_model() -> None:
    exp = experiment(runtime={"client_eval": True})
    strategy, grid = strategy_and_grid(exp)
    initial = ArrayRecord(load_federation(exp).workspace.tensors())
    result = strategy.start(grid=grid, initial_arrays=initial, num_rounds=3, timeout=10)
    expected = simulate(exp).model
    final = result.arrays.to_torch_state_dict()
    assert set(final) == set(expected)
    for name, tensor in expected.items():
        assert torch.equal(final[name], tensor), name
    assert result.train_metrics_clientapp[3]["updates"] == 3
    assert 0.0 <= result.evaluate_metrics_clientapp[3]["accuracy"] <= 1.0
    assert len(grid.sent_of_type(IDENTIFY)) == 3  # identified once, before round 1


def test_missing_replies_are_dropouts_and_too_few_restore_the_server() -> None:
    exp = experiment(runtime={"min_replies": 2})
    strategy, grid = strategy_and_grid(exp)
    strategy.identify(grid)
    before = strategy.aggregator.state
    messages = list(strategy.configure_train(1, ArrayRecord(), ConfigRecord(), grid))
    replies = list(grid.send_and_receive(messages))
    with pytest.raises(QuorumError, match="round 1: 1 of 3 clients answered"):
        strategy.aggregate_train(1, replies[:1])
    assert strategy.aggregator.state is before
    assert strategy.roster.live() == [0]  # the two silent clients dropped out

    strategy.identify(grid)  # they answer again, and the round is retried
    messages = list(strategy.configure_train(1, ArrayRecord(), ConfigRecord(), grid))
    replies = list(grid.send_and_receive(messages))
    arrays, metrics = strategy.aggregate_train(1, replies[:2])
    assert arrays is not None and metrics is not None
    assert (metrics["updates"], metrics["dropouts"]) == (2, 1)
    assert strategy.last_round is not None and list(strategy.last_round.dropped) == [2]


def test_replies_to_other_messages_are_ignored() -> None:
    exp = experiment()
    strategy, grid = strategy_and_grid(exp)
    strategy.identify(grid)
    stale = list(
        grid.send_and_receive(strategy.configure_train(1, ArrayRecord(), ConfigRecord(), grid))
    )
    strategy.aggregate_train(1, stale)
    fresh = list(
        grid.send_and_receive(strategy.configure_train(2, ArrayRecord(), ConfigRecord(), grid))
    )
    _, metrics = strategy.aggregate_train(2, stale + fresh)
    assert metrics is not None and metrics["updates"] == 3 and metrics["dropouts"] == 0
    with pytest.raises(ValueError, match="without configure_train"):
        strategy.aggregate_train(3, fresh)


def test_a_client_on_a_new_node_gets_the_full_model_again() -> None:
    exp = experiment(downlink=TOPK_EF)
    strategy, grid = strategy_and_grid(exp)
    strategy.identify(grid)
    for round in (1, 2):
        messages = strategy.configure_train(round, ArrayRecord(), ConfigRecord(), grid)
        strategy.aggregate_train(round, grid.send_and_receive(messages))
    grid.restart(1, node=4242)  # client 1's host restarts under a new node id
    strategy.identify(grid)
    messages = list(strategy.configure_train(3, ArrayRecord(), ConfigRecord(), grid))
    kinds = {
        m.metadata.dst_node_id: decode(
            read_instruction(m.content).downlink,
            {
                Kind.MODEL: strategy.dense.wire_spec,
                Kind.MODEL_DELTA: strategy.aggregator.downlink.wire_spec,
            },
        ).kind
        for m in messages
    }
    assert kinds == {
        grid.node(0): Kind.MODEL_DELTA,
        4242: Kind.MODEL,
        grid.node(2): Kind.MODEL_DELTA,
    }
    _, metrics = strategy.aggregate_train(3, grid.send_and_receive(messages))
    assert metrics is not None and metrics["updates"] == 3


def test_train_messages_carry_the_round_and_the_previous_delivery() -> None:
    exp = experiment()
    strategy, grid = strategy_and_grid(exp)
    strategy.identify(grid)
    first = list(strategy.configure_train(1, ArrayRecord(), ConfigRecord(), grid))
    strategy.aggregate_train(1, grid.send_and_receive(first))
    second = list(strategy.configure_train(2, ArrayRecord(), ConfigRecord(), grid))
    assert all(m.metadata.message_type == TRAIN for m in first + second)
    assert [read_instruction(m.content).delivered for m in first] == [None] * 3
    assert [read_instruction(m.content).delivered for m in second] == [True] * 3
    assert {read_instruction(m.content).round for m in second} == {2}
