"""`StarStrategy` as a Flower Strategy, driven by Flower's own loop and by hand."""

from __future__ import annotations

import shutil
from typing import Any

import pytest
import torch
import yaml
from flower_local import LocalGrid, set_task_identity
from flwr.app import ArrayRecord, ConfigRecord, Message

from thinwire.config import Experiment, parse_config
from thinwire.learning import load_federation
from thinwire.runtimes.flower.messages import (
    IDENTIFY,
    TRAIN,
    default_state_dir,
    read_instruction,
)
from thinwire.runtimes.flower.state import StateStore, state_key
from thinwire.runtimes.flower.strategy import QuorumError, StarStrategy
from thinwire.runtimes.simulation import simulate
from thinwire.server import Aggregator
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
    outcome = strategy.finish_train(1, replies[:2])
    assert (len(outcome.bytes_up), list(outcome.dropped)) == (2, [2])


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


def kinds_sent(strategy: StarStrategy, messages: list[Message]) -> dict[int, tuple[Kind, int]]:
    """Node -> (the downlink's kind, the state round named) of each train message."""
    specs = {
        Kind.MODEL: strategy.dense.wire_spec,
        Kind.MODEL_DELTA: strategy.aggregator.downlink.wire_spec,
    }
    out = {}
    for m in messages:
        order = read_instruction(m.content)
        out[m.metadata.dst_node_id] = (decode(order.downlink, specs).kind, order.state_round)
    return out


def test_a_client_on_a_new_node_continues_from_the_state_on_its_disk() -> None:
    exp = experiment(downlink=TOPK_EF)
    strategy, grid = strategy_and_grid(exp)
    strategy.identify(grid)
    for round in (1, 2):
        messages = strategy.configure_train(round, ArrayRecord(), ConfigRecord(), grid)
        strategy.aggregate_train(round, grid.send_and_receive(messages))
    grid.restart(1, node=4242)  # client 1's host restarts under a new node id, same disk
    strategy.identify(grid)
    messages = list(strategy.configure_train(3, ArrayRecord(), ConfigRecord(), grid))
    assert kinds_sent(strategy, messages) == {
        grid.node(0): (Kind.MODEL_DELTA, 2),
        4242: (Kind.MODEL_DELTA, 2),
        grid.node(2): (Kind.MODEL_DELTA, 2),
    }
    _, metrics = strategy.aggregate_train(3, grid.send_and_receive(messages))
    assert metrics is not None and (metrics["updates"], metrics["state-lost"]) == (3, 0)
    expected = simulate(exp).model
    for name, tensor in expected.items():
        assert torch.equal(strategy.aggregator.model[name], tensor), name


def test_a_client_whose_state_is_gone_is_counted_and_resynchronized(
    caplog: pytest.LogCaptureFixture,
) -> None:
    exp = experiment(downlink=TOPK_EF, train={"rounds": 4, "local_steps": 4, "lr": 0.1})
    strategy, grid = strategy_and_grid(exp)
    strategy.identify(grid)
    for round in (1, 2):
        messages = strategy.configure_train(round, ArrayRecord(), ConfigRecord(), grid)
        strategy.aggregate_train(round, grid.send_and_receive(messages))
    store = StateStore(default_state_dir(), experiment=state_key(exp), partition=1, keep=1)
    shutil.rmtree(store.folder)  # client 1's host lost its disk
    messages = list(strategy.configure_train(3, ArrayRecord(), ConfigRecord(), grid))
    outcome = strategy.finish_train(3, grid.send_and_receive(messages))
    assert (len(outcome.bytes_up), list(outcome.state_lost), outcome.dropped) == (2, [1], {})
    assert "round 3: client 1 lost its state, re-synchronizing it: StateLost: " in caplog.text
    assert outcome.result.accepted == [0, 2]  # nothing of client 1 was averaged
    messages = list(strategy.configure_train(4, ArrayRecord(), ConfigRecord(), grid))
    assert kinds_sent(strategy, messages) == {
        grid.node(0): (Kind.MODEL_DELTA, 3),
        grid.node(1): (Kind.MODEL, 0),  # the full model and a fresh start
        grid.node(2): (Kind.MODEL_DELTA, 3),
    }
    assert read_instruction(messages[1].content).delivered is None
    _, metrics = strategy.aggregate_train(4, grid.send_and_receive(messages))
    assert metrics is not None and (metrics["updates"], metrics["state-lost"]) == (3, 0)


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


def test_the_first_round_after_a_start_waits_longer_for_its_cold_clients() -> None:
    exp = experiment(runtime={"round_timeout_s": 5.0, "first_round_timeout_s": 42.0})
    strategy, grid = strategy_and_grid(exp)
    strategy.identify(grid)
    ttls = []
    for round in (1, 2):
        messages = list(strategy.configure_train(round, ArrayRecord(), ConfigRecord(), grid))
        ttls.append({m.metadata.ttl for m in messages})
        strategy.aggregate_train(round, grid.send_and_receive(messages))
    assert ttls == [{42.0}, {5.0}]
    assert [strategy.deadline_s(r) for r in (1, 2, 3)] == [42.0, 5.0, 5.0]
    default = StarStrategy(experiment=experiment(), aggregator=strategy.aggregator)
    assert default.first_round == 3  # a resumed server's first round is the next one
    assert default.deadline_s(3) == 10.0  # twice round_timeout_s
