"""The FedAvg experiment of `simulation.py --vs-flower` as a Flower app, for Flower's
simulation engine (Ray): the same data split, model, local training and server average as
thinwire's simulator runs, so the two engines do the same work.

Ray workers import this module by name, so `simulation.py` puts its folder on PYTHONPATH.
Settings come from the environment (`TW_BENCH_CLIENTS`, `TW_BENCH_ROUNDS`, `TW_BENCH_OUT`).
"""

from __future__ import annotations

import functools
import json
import os
import time

import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from thinwire.config import Experiment, parse_config
from thinwire.learning import Federation, evaluate, load_federation, train_local
from thinwire.seeding import train_seed


def experiment(clients: int, rounds: int) -> Experiment:
    """Digits, MLP (64 hidden), IID, 10 local SGD steps of 32, dense FedAvg, on the CPU."""
    return parse_config(
        {
            "name": f"fedavg-{clients}",
            "data": {"dataset": "digits", "clients": clients, "partition": {"kind": "iid"}},
            "model": {"kind": "mlp", "hidden": [64]},
            "train": {
                "rounds": rounds,
                "local_steps": 10,
                "batch_size": 32,
                "lr": 0.05,
                "device": "cpu",
            },
        }
    )


def _settings() -> tuple[int, int]:
    return int(os.environ["TW_BENCH_CLIENTS"]), int(os.environ["TW_BENCH_ROUNDS"])


@functools.cache
def _federation() -> Federation:
    return load_federation(experiment(*_settings()))


client_app = ClientApp()


@client_app.train()
def train(message: Message, context: Context) -> Message:
    federation = _federation()
    index = int(context.node_config["partition-id"])
    x, y = federation.client_data(index)
    model = federation.workspace.model
    model.load_state_dict(message.content["arrays"].to_torch_state_dict())
    round = int(message.content["config"]["server-round"])
    config = experiment(*_settings())
    stats = train_local(
        model,
        x,
        y,
        steps=10,
        batch_size=min(32, len(y)),
        lr=0.05,
        optimizer=config.train.optimizer,
        generator=torch.Generator().manual_seed(train_seed(0, index, round)),
    )
    content = RecordDict(
        {
            "arrays": ArrayRecord(model.state_dict()),
            "metrics": MetricRecord({"num-examples": len(y), "train_loss": stats.loss}),
        }
    )
    return Message(content=content, reply_to=message)


server_app = ServerApp()


@server_app.main()
def main(grid: Grid, context: Context) -> None:
    clients, rounds = _settings()
    federation = _federation()
    model = federation.workspace.model
    x_test, y_test = federation.test_data()
    stamps: list[float] = []
    accuracy: list[float] = []

    def evaluate_fn(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        model.load_state_dict(arrays.to_torch_state_dict())
        accuracy.append(evaluate(model, x_test, y_test).accuracy)
        stamps.append(time.perf_counter())
        return MetricRecord({"accuracy": accuracy[-1]})

    strategy = FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_available_nodes=clients)
    strategy.start(
        grid=grid,
        initial_arrays=ArrayRecord(model.state_dict()),
        num_rounds=rounds,
        evaluate_fn=evaluate_fn,
    )
    rounds_s = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
    with open(os.environ["TW_BENCH_OUT"], "w") as f:
        json.dump({"round_s": rounds_s, "final_accuracy": accuracy[-1]}, f)
