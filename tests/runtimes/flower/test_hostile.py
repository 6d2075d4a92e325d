"""A hostile client cannot abort a Flower run: its update is refused, counted, and the
round goes on (issue 11), with Flower `Message`s through Flower's own serialization."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import yaml
from flower_local import LocalGrid, set_task_identity
from flwr.app import ArrayRecord, Context, Message
from hostile_updates import CASES, hostile_bytes

from thinwire.config import Experiment, parse_config
from thinwire.learning import load_federation
from thinwire.runtimes.flower.client_app import app as thinwire_client_app
from thinwire.runtimes.flower.messages import TRAIN, TrainReply, read_instruction, train_reply
from thinwire.runtimes.flower.strategy import RoundOutcome, StarStrategy
from thinwire.server import Aggregator
from thinwire.wire import TensorSpec

HOSTILE = 2
ROUNDS = 2


def experiment(codec: dict[str, Any]) -> Experiment:
    return parse_config(
        {
            "name": "hostile",
            "seed": 1,
            "data": {"clients": 3},
            "model": {"kind": "mlp", "hidden": [16]},
            "train": {"rounds": ROUNDS, "local_steps": 3, "lr": 0.1, "device": "cpu"},
            "codec": codec,
            "runtime": {"kind": "flower", "round_timeout_s": 5.0},
        }
    )


def hostile_client(case: str, spec: tuple[TensorSpec, ...]):
    """A ClientApp that answers train messages with the hostile update of `case`."""

    def app(message: Message, context: Context) -> Message:
        if message.metadata.message_type != TRAIN:
            return thinwire_client_app(message, context)
        round = read_instruction(message.content).round
        data = hostile_bytes(case, spec, HOSTILE, round)
        reply = TrainReply(data, int(min(CASES[case].examples, 2**40)), 0.5, 0.01)
        return Message(train_reply(reply), reply_to=message)

    return app


@pytest.fixture(autouse=True)
def task_identity() -> None:
    set_task_identity()


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_hostile_clients_update_is_refused_and_the_run_finishes(case: str) -> None:
    exp = experiment(CASES[case].server_codec)
    workspace = load_federation(exp).workspace
    aggregator = Aggregator(experiment=exp, workspace=workspace, initial=workspace.tensors())
    strategy = StarStrategy(experiment=exp, aggregator=aggregator)
    run_config = {"experiment": yaml.safe_dump(exp.model_dump(mode="json")), "run-dir": ""}
    grid = LocalGrid({**run_config, "resume": ""}, 3)
    grid.client_apps[grid.node(HOSTILE)] = hostile_client(case, aggregator.uplink.wire_spec)

    outcomes: list[RoundOutcome] = []
    finish = strategy.finish_train

    def spy(server_round: int, replies: Any) -> RoundOutcome:
        outcomes.append(finish(server_round, replies))  # what Flower's loop does not keep
        return outcomes[-1]

    strategy.finish_train = spy
    initial = ArrayRecord(workspace.tensors())
    result = strategy.start(grid=grid, initial_arrays=initial, num_rounds=ROUNDS, timeout=10)

    for round in range(1, ROUNDS + 1):
        metrics = result.train_metrics_clientapp[round]
        assert (metrics["updates"], metrics["rejected"], metrics["dropouts"]) == (3, 1, 0)
    last = outcomes[-1]
    assert last.round == ROUNDS and set(last.rejected) == {HOSTILE}
    assert CASES[case].reason in last.rejected[HOSTILE]
    assert last.result.accepted == [0, 1]
    final = result.arrays.to_torch_state_dict()
    assert all(bool(torch.isfinite(v).all()) for v in final.values())
    assert any(not torch.equal(final[k], v) for k, v in workspace.tensors().items())


def test_a_failing_server_step_closes_the_round_without_ending_the_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    exp = experiment(CASES["dense_to_topk"].server_codec)
    workspace = load_federation(exp).workspace
    aggregator = Aggregator(experiment=exp, workspace=workspace, initial=workspace.tensors())
    strategy = StarStrategy(experiment=exp, aggregator=aggregator)
    run_config = {"experiment": yaml.safe_dump(exp.model_dump(mode="json")), "run-dir": ""}
    grid = LocalGrid({**run_config, "resume": ""}, 3)
    finish = Aggregator.finish_round

    def failing_in_round_1(self: Aggregator):
        if self._round == 1:
            raise RuntimeError("a bug in the server step")
        return finish(self)

    monkeypatch.setattr(Aggregator, "finish_round", failing_in_round_1)
    initial = ArrayRecord(workspace.tensors())
    result = strategy.start(grid=grid, initial_arrays=initial, num_rounds=ROUNDS, timeout=10)
    assert result.train_metrics_clientapp[1]["rejected"] == 3
    assert result.train_metrics_clientapp[2]["rejected"] == 0
    assert aggregator.state.round == ROUNDS
    final = result.arrays.to_torch_state_dict()
    assert any(not torch.equal(final[k], v) for k, v in workspace.tensors().items())
