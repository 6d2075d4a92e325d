"""The gossip runtime of one peer process (`thinwire peer exp.yaml --node i`).

`run_peer` builds node i exactly as the simulator does (`build_node`), so both runtimes run
the very same round logic on the very same bytes, and plays the rounds over a
`PeerExchange` (push, wait for the neighbours, collect, absorb: see
`thinwire.topologies.runtime.exchange`). After every round it appends the node's report to
`node-<i>.jsonl` and checkpoints the node's state (atomically).

**Start.** A fresh peer first waits (up to `startup_timeout_s`) until every peer of the run
accepts connections, so that nobody misses round 1 while the others are still starting.

**Restart.** A peer that finds its checkpoint loads it and rejoins at the round its
neighbours are at. It learns that round from their pushes: the receiver looks up the
neighbours of every push's round, and `RoundWatch` notes the highest. The restarted peer
waits up to two deadlines for one (a neighbour pushes at the start of every round, and its
rounds last at most a few deadlines while this peer is down), then continues from there, or
from the round after its checkpoint if nobody pushed. Rounds it missed are not trained;
CHOCO-style nodes resynchronize their estimates (see `thinwire.topologies.methods.choco`).

**Stop.** `stop` (set by the CLI on SIGTERM or SIGINT) ends the run after the current
round, checkpointed; a `PeerAbandoned` raised from a second signal ends it at once, leaving
the previous round's checkpoint. Either way the endpoint is closed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

import grpc
import torch

from thinwire.checkpoint import (
    NodeCheckpoint,
    experiment_digest,
    load_node_checkpoint,
    node_checkpoint_path,
    save_node_checkpoint,
)
from thinwire.config import Experiment, GossipRuntime
from thinwire.learning import Evaluation, evaluate, flatten, load_federation, unflatten
from thinwire.topologies.graph.schedule import GraphSchedule
from thinwire.topologies.methods.node import GossipNode
from thinwire.topologies.methods.registry import build_node
from thinwire.topologies.runtime.exchange import PeerExchange, RoundWatch, exchanges_between
from thinwire.topologies.runtime.reports import NodeLog, NodeReport, read_node_log
from thinwire.topologies.runtime.simulation import average_model, consensus_distance
from thinwire.topologies.transport.peers import peer_addresses
from thinwire.topologies.transport.security import TLSIdentity

__all__ = [
    "PeerAbandoned",
    "PeerResult",
    "PeerRunSummary",
    "node_log_path",
    "run_peer",
    "summarize_peers",
    "wait_for_peers",
]

logger = logging.getLogger(__name__)


class PeerAbandoned(Exception):
    """Raised (by a signal handler) to end a peer's run in the middle of a round.

    Args:
        signal: the number of the signal that abandoned the round.
    """

    def __init__(self, signal: int) -> None:
        super().__init__(f"abandoned on signal {signal}")
        self.signal = signal


class PeerResult(NamedTuple):
    """How a peer's run ended."""

    node: int
    first_round: int  # the round it started (or rejoined) at
    last_round: int  # the last round it finished; 0 if none
    completed: bool  # whether it finished the run's last round
    resumed_from: int | None  # the checkpoint's round when it restarted, else None


def wait_for_peers(
    addresses: Mapping[int, str],
    *,
    tls: TLSIdentity | None,
    insecure: bool,
    timeout: float,
) -> list[int]:
    """Waits until every peer in `addresses` accepts a connection, for `timeout` at most.

    Returns:
        The peers that were still unreachable at the deadline (empty when all are up).
    """
    deadline = time.monotonic() + timeout
    unreachable = []
    for peer, address in sorted(addresses.items()):
        options = [("grpc.enable_retries", 0)]
        if tls is not None:
            channel = grpc.secure_channel(address, tls.channel_credentials(), options=options)
        else:
            channel = grpc.insecure_channel(address, options=options)
        with channel:
            ready = grpc.channel_ready_future(channel)
            try:
                ready.result(timeout=max(0.0, deadline - time.monotonic()))
            except grpc.FutureTimeoutError:
                unreachable.append(peer)
            finally:
                ready.cancel()  # stop watching the channel before it closes
    return unreachable


def node_log_path(directory: str | Path, node: int) -> Path:
    """Where node `node` writes its round reports: `node-<i>.jsonl` in `directory`."""
    return Path(directory) / f"node-{node}.jsonl"


def run_peer(
    experiment: Experiment,
    node: int,
    *,
    out_dir: str | Path,
    checkpoint_dir: str | Path | None = None,
    stop: threading.Event | None = None,
    startup_timeout_s: float = 300.0,
) -> PeerResult:
    """Runs gossip node `node` of `experiment` until the last round (see the module doc).

    Args:
        experiment: a validated experiment with `runtime.kind: gossip`.
        node: this peer's node id, 0..data.clients-1.
        out_dir: where `node-<i>.jsonl` goes (appended to across restarts).
        checkpoint_dir: where `node-<i>.pt` goes; defaults to `out_dir/checkpoints`.
        stop: when set, the run ends after the current round.
        startup_timeout_s: how long a fresh peer waits for the others to come up.

    Raises:
        ValueError: for a runtime other than gossip, a node outside the graph, or a
            checkpoint of another experiment or node.
        PeerAbandoned: if a signal handler abandons the round.
    """
    runtime = experiment.runtime
    if not isinstance(runtime, GossipRuntime):
        raise ValueError(f"a peer needs runtime.kind: gossip, not {runtime.kind!r}")
    count = experiment.data.clients
    if not 0 <= node < count:
        raise ValueError(f"--node {node} is not in 0..{count - 1} (data.clients nodes)")
    federation = load_federation(experiment)
    workspace = federation.workspace
    schedule = GraphSchedule(experiment.topology, count, seed=experiment.seed)
    x, y = federation.client_data(node)
    gossip_node = build_node(
        experiment,
        node,
        x=x,
        y=y,
        workspace=workspace,
        schedule=schedule,
        initial=flatten(workspace.tensors()),
    )
    digest = experiment_digest(experiment)
    saved = node_checkpoint_path(checkpoint_dir or Path(out_dir) / "checkpoints", node)
    resumed_from = None
    if saved.exists():
        checkpoint = load_node_checkpoint(saved, digest=digest, map_location=workspace.device)
        if checkpoint.node != node:
            raise ValueError(f"{saved} holds node {checkpoint.node}'s state, not node {node}'s")
        gossip_node.load_state_dict(checkpoint.state)
        resumed_from = checkpoint.round
    last = resumed_from or 0
    rounds = experiment.train.rounds
    if last >= rounds:
        logger.info("node %d finished all %d rounds already (%s)", node, rounds, saved)
        return PeerResult(node, last, last, True, resumed_from)
    watch = RoundWatch(schedule, node, horizon=rounds)
    peer = PeerExchange(experiment, gossip_node, watch, start_round=last + 1)
    try:
        if resumed_from is None:
            others = {j: a for j, a in peer_addresses(runtime, count).items() if j != node}
            tls = TLSIdentity.from_config(runtime.tls) if runtime.tls is not None else None
            late = wait_for_peers(
                others, tls=tls, insecure=runtime.insecure, timeout=startup_timeout_s
            )
            if late:
                logger.warning("node %d: starting without peers %s (unreachable)", node, late)
            first = 1
        else:
            seen = watch.wait(after=last, timeout=2 * runtime.deadline_s)
            first = max(last + 1, seen or 0)
            logger.info("node %d resumes from round %d at round %d", node, last, first)
        loop = _RoundLoop(experiment, gossip_node, peer, watch, saved, digest)
        with NodeLog(node_log_path(out_dir, node)) as log:
            last = loop.run(first, log, rejoining=resumed_from is not None, stop=stop)
    finally:
        peer.close()
    return PeerResult(node, first, last, last == rounds, resumed_from)


class _RoundLoop:
    """The rounds of a peer: run, report, checkpoint; skip ahead when left behind."""

    def __init__(
        self,
        experiment: Experiment,
        node: GossipNode,
        peer: PeerExchange,
        watch: RoundWatch,
        saved: Path,
        digest: str,
    ) -> None:
        self.experiment = experiment
        self.node = node
        self.peer = peer
        self.watch = watch
        self.saved = saved
        self.digest = digest

    def run(
        self, first: int, log: NodeLog, *, rejoining: bool, stop: threading.Event | None
    ) -> int:
        """Runs rounds `first`.. until the last or `stop`; returns the last one finished."""
        index, rounds = self.node.core.index, self.experiment.train.rounds
        last, round = first - 1, first
        while round <= rounds:
            if stop is not None and stop.is_set():
                logger.info("node %d stops after round %d of %d", index, last, rounds)
                break
            ahead = self.watch.highest
            if exchanges_between(self.node, round, ahead) >= 2:
                # Neighbours finished a round this node has not started: it fell behind.
                logger.warning("node %d is behind: skips from round %d to %d", index, round, ahead)
                round, rejoining = ahead, True
            if rejoining:
                self.node.desynchronized()
            report, extra = self.peer.round(round, rejoining=rejoining)
            if rejoining:
                extra["rejoined"] = True
            log.write(report, **extra)
            state = self.node.state_dict()
            save_node_checkpoint(
                self.saved, NodeCheckpoint(index, round, state), digest=self.digest
            )
            self._log(report)
            last, round, rejoining = round, round + 1, False
        return last

    def _log(self, report: NodeReport) -> None:
        # One line a round, as the star's server prints: a peer under nohup or a batch
        # system shows its progress and its neighbours' health as it goes.
        logger.info(
            "node %d round %d/%d: loss %.4f, sent %d B, received %d B, missing %s, "
            "rejected %s, %.2f s",
            report.node,
            report.round,
            self.experiment.train.rounds,
            report.train_loss,
            report.bytes_sent,
            report.bytes_received,
            list(report.missing),
            list(report.rejected),
            report.compute_s,
        )


class PeerRunSummary(NamedTuple):
    """A multi-process run judged from its final checkpoints and node logs."""

    rounds: dict[int, int]  # node -> last round in its checkpoint
    evaluation: Evaluation  # of the average model x_bar
    consensus_distance: float  # mean_i ||x_i - x_bar||^2
    bytes_sent: dict[int, int]  # node -> payload bytes it sent over the run
    missing: dict[int, int]  # node -> neighbour-rounds it went without a message
    model: dict[str, torch.Tensor]  # the average model x_bar, named
    input_shape: tuple[int, ...]  # one example's shape: with `num_classes`, rebuilds the model
    num_classes: int


def summarize_peers(
    experiment: Experiment, out_dir: str | Path, checkpoint_dir: str | Path | None = None
) -> PeerRunSummary:
    """Evaluates the average of the peers' final models and totals their logs.

    Raises:
        ValueError: if a node's checkpoint is missing or belongs to another experiment.
    """
    federation = load_federation(experiment)
    workspace = federation.workspace
    digest = experiment_digest(experiment)
    directory = Path(checkpoint_dir or Path(out_dir) / "checkpoints")
    vectors, rounds, sent, missing = [], {}, {}, {}
    for node in range(experiment.data.clients):
        path = node_checkpoint_path(directory, node)
        if not path.exists():
            raise ValueError(f"node {node} has no checkpoint at {path}")
        checkpoint = load_node_checkpoint(path, digest=digest, map_location=workspace.device)
        vectors.append(checkpoint.state["x"])
        rounds[node] = checkpoint.round
        log = node_log_path(out_dir, node)
        lines = read_node_log(log) if log.exists() else []
        reports = [NodeReport.from_json(line) for line in lines]
        sent[node] = sum(r.bytes_sent for r in reports)
        missing[node] = sum(len(r.missing) for r in reports)
    mean = average_model(vectors)
    model = unflatten(mean, workspace.zeros())
    workspace.load(model)
    x_test, y_test = federation.test_data()
    evaluation = evaluate(workspace.model, x_test, y_test)
    dataset = federation.dataset
    return PeerRunSummary(
        rounds,
        evaluation,
        consensus_distance(vectors),
        sent,
        missing,
        model,
        dataset.input_shape,
        dataset.num_classes,
    )
