"""The gossip runtime in one process: every peer of a decentralized run, every byte serialized.

`simulate_gossip(experiment)` builds one node per graph node (`build_node`, the very objects
a `thinwire peer` process runs) and plays the rounds: all nodes prepare (train, encode),
each node's messages are handed to its neighbours as the exact bytes a peer would push, and
all nodes absorb (validate, decode, mix). Byte counts are `len()` of those messages, so they
equal the peers' counts for the same seeded config; a `Channel` turns them into simulated
network time (a node's pushes share its uplink, what it receives shares its downlink, and
both directions run at once).

All nodes share one model workspace (as the star's clients do) and keep only their state.
Each round's record holds the core metrics for the *average model* x_bar (its test accuracy
and loss), the `consensus_distance` mean_i ||x_i - x_bar||^2, and counts of nodes that
fired and of missing, rejected and refreshed messages; per-node reports go to `on_node`.

Example (CHOCO-SGD with top-10% corrections, 4 nodes on a ring):
    >>> from thinwire.config import parse_config
    >>> config = parse_config({
    ...     "name": "demo", "data": {"clients": 4}, "model": {"kind": "logreg"},
    ...     "train": {"rounds": 2, "local_steps": 1, "device": "cpu"},
    ...     "topology": {"kind": "ring"}, "gossip": {"kind": "choco", "gamma": 0.5},
    ...     "codec": {"select": {"kind": "topk", "density": 0.1}}})
    >>> run = simulate_gossip(config)
    >>> [r["round"] for r in run.records], len(run.models), run.records[0]["updates_sent"]
    ([1, 2], 4, 8)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch

from thinwire.channel import Channel
from thinwire.config import Experiment
from thinwire.learning import evaluate, flatten, load_federation, unflatten
from thinwire.metrics import RoundRecord, round_record
from thinwire.topologies.graph.schedule import GraphSchedule
from thinwire.topologies.methods.node import GossipNode
from thinwire.topologies.methods.registry import build_node
from thinwire.topologies.runtime.reports import NodeReport

__all__ = [
    "GossipSimulation",
    "average_model",
    "consensus_distance",
    "network_s",
    "simulate_gossip",
]


class GossipSimulation(NamedTuple):
    """A finished simulated gossip run."""

    records: list[RoundRecord]  # one per round
    model: dict[str, torch.Tensor]  # the final average model x_bar, named
    models: list[torch.Tensor]  # each node's final model, flat (d,) float32
    reports: list[list[NodeReport]]  # per round, per node
    input_shape: tuple[int, ...]  # one example's shape: with `num_classes`, rebuilds the model
    num_classes: int


def average_model(vectors: Sequence[torch.Tensor]) -> torch.Tensor:
    """x_bar, the mean of the nodes' flat models (summed in node order)."""
    if not vectors:
        raise ValueError("no models to average")
    return torch.stack(list(vectors)).mean(dim=0)


def consensus_distance(vectors: Sequence[torch.Tensor]) -> float:
    """mean_i ||x_i - x_bar||^2: how far the nodes are from agreeing."""
    stacked = torch.stack(list(vectors))
    return float((stacked - stacked.mean(dim=0)).square().sum(dim=1).mean())


def network_s(channel: Channel, reports: Sequence[NodeReport]) -> float:
    """Simulated network time of a round: the slowest node's pushes or receipts."""
    times = [0.0]
    for report in reports:
        sent, received = report.bytes_sent, report.bytes_received
        up = channel.uplink_s(report.node, sent) if sent else 0.0
        down = channel.downlink_s(report.node, received) if received else 0.0
        times.append(max(up, down))
    return max(times)


def _exchange(nodes: Sequence[GossipNode], round: int) -> list[NodeReport]:
    prepared = [node.prepare(round) for node in nodes]
    reports = []
    for i, node in enumerate(nodes):
        inbox = {
            j: prepared[j].messages[i]
            for j in node.core.neighbours(round)
            if i in prepared[j].messages
        }
        absorbed = node.absorb(round, inbox)
        lr = node.core.learning_rate(round)
        reports.append(
            NodeReport.of(round=round, node=i, lr=lr, prepared=prepared[i], absorbed=absorbed)
        )
    return reports


def simulate_gossip(
    experiment: Experiment,
    *,
    on_round: Callable[[RoundRecord], None] | None = None,
    on_node: Callable[[NodeReport], None] | None = None,
) -> GossipSimulation:
    """Runs a decentralized experiment in this process.

    Args:
        experiment: a validated experiment; `data.clients` is the number of nodes.
        on_round: called with each round's record as soon as the round ends.
        on_node: called with every node's report of the round, in node order.

    Raises:
        ValueError: if the graph or the gossip method cannot be built for this run.
    """
    federation = load_federation(experiment)
    workspace = federation.workspace
    count = experiment.data.clients
    schedule = GraphSchedule(experiment.topology, count, seed=experiment.seed)
    initial = flatten(workspace.tensors())
    nodes = [
        build_node(experiment, i, x=x, y=y, workspace=workspace, schedule=schedule, initial=initial)
        for i, (x, y) in enumerate(federation.all_client_data())
    ]
    channel = Channel(experiment.channel, count)
    x_test, y_test = federation.test_data()
    records: list[RoundRecord] = []
    history: list[list[NodeReport]] = []
    cum_up = cum_down = 0
    rounds = experiment.train.rounds
    for round in range(1, rounds + 1):
        start = time.perf_counter()
        reports = _exchange(nodes, round)
        vectors = [node.vector() for node in nodes]
        mean = average_model(vectors)
        evaluation = None
        if round % experiment.train.eval_every == 0 or round == rounds:
            workspace.load(unflatten(mean, workspace.zeros()))
            evaluation = evaluate(workspace.model, x_test, y_test)
        up = sum(r.bytes_sent for r in reports)
        down = sum(r.bytes_received for r in reports)
        cum_up, cum_down = cum_up + up, cum_down + down
        record = round_record(
            round=round,
            evaluation=evaluation,
            train_losses=[r.train_loss for r in reports],  # one per node
            bytes_up=up,
            bytes_down=down,
            cum_bytes_up=cum_up,
            cum_bytes_down=cum_down,
            updates_sent=sum(1 for r in reports for n in r.sent.values() if n),
            sim_time_s=network_s(channel, reports),
            compute_s=max(r.compute_s for r in reports),
            wall_s=time.perf_counter() - start,
            consensus_distance=consensus_distance(vectors),
            fired=sum(r.fired for r in reports),
            missing=sum(len(r.missing) for r in reports),
            rejected=sum(len(r.rejected) for r in reports),
            refreshed=sum(len(r.refreshed) for r in reports),
        )
        records.append(record)
        history.append(reports)
        if on_node is not None:
            for report in reports:
                on_node(report)
        if on_round is not None:
            on_round(record)
    final = [node.vector().clone() for node in nodes]
    model = unflatten(average_model(final), workspace.zeros())
    dataset = federation.dataset
    return GossipSimulation(
        records, model, final, history, dataset.input_shape, dataset.num_classes
    )
