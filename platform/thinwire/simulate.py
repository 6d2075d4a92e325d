"""The in-process runtime: every role in one process, every byte really serialized.

`simulate(experiment)` runs the star (a `thinwire.server.Aggregator` and one
`thinwire.clients.Client` per client) round by round. Messages between them are the exact
bytes the network runtimes send: the server's downlink is encoded and each client decodes it
with validation, each update is encoded and the server decodes it with validation. Byte
counts are therefore `len()` of real messages, and a `Channel` turns them into simulated
network time.

All clients share one model workspace (one `nn.Module` on the run's device); a client keeps
only its data indices and its `ClientState`, so memory grows with the state each method
needs (a residual per client for error feedback) and not with model copies.

Besides the core keys (`thinwire.metrics.CORE_KEYS`), a round's record holds `censored`
(selected clients that stayed silent) and `reused` (silent clients whose last update the
server averaged) for every policy, and `rejected` (updates the server refused: malformed,
of the wrong form, claiming more examples than the client holds, or out of bounds);
`slot_successes`, `slot_collisions` and `slot_idle` on a random-access uplink; and
`epsilon` (the largest privacy spent by any client so far) with a `privacy` section.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import NamedTuple

import torch

from thinwire.channel import Channel
from thinwire.clients import Client, ClientState
from thinwire.config import Experiment
from thinwire.learning import Federation, load_federation
from thinwire.metrics import Record
from thinwire.privacy import EPSILON_METRIC
from thinwire.server import Aggregator, sample_clients

__all__ = ["SimulationResult", "simulate"]

logger = logging.getLogger(__name__)


class SimulationResult(NamedTuple):
    """A finished simulated run."""

    records: list[Record]
    model: dict[str, torch.Tensor]  # the final global model (gossip: the nodes' average)
    client_states: list[ClientState]  # the star's clients after the last round (gossip: [])


def simulate(
    experiment: Experiment, *, on_round: Callable[[Record], None] | None = None
) -> SimulationResult:
    """Runs `experiment` in this process and returns its round records and final model.

    A decentralized experiment (`experiment.decentralized`: a topology other than star)
    runs as gossip (`thinwire.topologies.simulation.simulate_gossip`); its final model is
    the average of the nodes' models.

    Args:
        experiment: a validated experiment (see `thinwire.config.load_config`).
        on_round: called with each round's record as soon as the round ends.
    """
    if experiment.decentralized:
        from thinwire.topologies.simulation import simulate_gossip

        gossip = simulate_gossip(experiment, on_round=on_round)
        return SimulationResult(gossip.records, gossip.model, [])
    federation = load_federation(experiment)
    return _run_star(experiment, federation, on_round)


def _run_star(
    experiment: Experiment,
    federation: Federation,
    on_round: Callable[[Record], None] | None,
) -> SimulationResult:
    workspace = federation.workspace
    clients = [
        Client(index=i, experiment=experiment, x=x, y=y, workspace=workspace)
        for i, (x, y) in enumerate(federation.all_client_data())
    ]
    aggregator = Aggregator(
        experiment=experiment,
        workspace=workspace,
        initial=workspace.tensors(),
        examples={c.index: int(c.x.shape[0]) for c in clients},
    )
    channel = Channel(experiment.channel, len(clients))
    x_test, y_test = federation.test_data()
    outcomes: dict[int, bool] = {}
    spent: dict[int, float] = {}
    records: list[Record] = []
    cum_up = cum_down = 0
    warned_slot = False
    rounds = experiment.train.rounds
    for round in range(1, rounds + 1):
        start = time.perf_counter()
        participants = sample_clients(experiment, round)
        downlink = aggregator.broadcast(round, participants)
        up: dict[int, int] = {}
        losses: list[float] = []
        compute = 0.0
        for c in participants:
            result = clients[c].train_round(downlink[c], round, delivered=outcomes.pop(c, None))
            compute = max(compute, result.compute_s)
            losses.append(result.train_loss)
            if result.epsilon is not None:
                spent[c] = result.epsilon
            if result.data is None:
                aggregator.silent(c)
                continue
            up[c] = len(result.data)
            aggregator.receive(c, result.data)
            if not warned_slot and not channel.fits_slot(c, up[c]):
                warned_slot = True
                logger.warning(
                    "round %d: a %d-byte update needs longer than a %.1f ms slot at client "
                    "%d's uplink rate; the frame time understates the transfer",
                    round,
                    up[c],
                    experiment.channel.slot_ms,
                    c,
                )
        outcome = aggregator.finish_round()
        outcomes.update(outcome.delivered)

        down = {c: len(downlink[c]) for c in participants}
        cum_up += sum(up.values())
        cum_down += sum(down.values())
        evaluated = round % experiment.train.eval_every == 0 or round == rounds
        evaluation = aggregator.evaluate(x_test, y_test) if evaluated else None
        record: Record = {
            "round": round,
            "accuracy": evaluation.accuracy if evaluation else math.nan,
            "loss": evaluation.loss if evaluation else math.nan,
            "train_loss": sum(losses) / len(losses),
            "bytes_up": sum(up.values()),
            "bytes_down": sum(down.values()),
            "cum_bytes_up": cum_up,
            "cum_bytes_down": cum_down,
            "updates_sent": len(up),
            "sim_time_s": channel.round_s(down, up),
            "compute_s": compute,
            "wall_s": time.perf_counter() - start,
            "participants": len(participants),
            "rejected": len(outcome.rejected),
            "censored": len(outcome.silent),
            "reused": len(outcome.reused),
        }
        if outcome.slots is not None:
            record["slot_successes"] = outcome.slots.successes
            record["slot_collisions"] = outcome.slots.collisions
            record["slot_idle"] = outcome.slots.idle
        if experiment.privacy is not None:
            record[EPSILON_METRIC] = max(spent.values(), default=0.0)
        records.append(record)
        if on_round is not None:
            on_round(record)
    return SimulationResult(records, aggregator.model, [c.state for c in clients])
