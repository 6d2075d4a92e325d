"""One gossip peer's round over the network: push, wait for the neighbours, absorb.

`PeerExchange` owns a node's `PeerEndpoint` and runs one round at a time:

    node.prepare -> push each neighbour its bytes -> wait -> collect -> node.absorb

Messages are validated on arrival (`node.open` is the receiver's handler), so a bad push is
refused with INVALID_ARGUMENT, counted per sender and logged; the round then treats that
neighbour as missing.

**How long a round waits.** All neighbours' messages usually arrive at once. When one does
not, the node waits `deadline_s` for a neighbour that is down or unreachable, but keeps
waiting (up to `PATIENCE` deadlines) for one that accepted this node's push of the same
round and still accepts connections (its server is probed every deadline): such a
neighbour has not finished the round, so its message is on its way, perhaps after a
deadline of its own spent on a dead node. A flat deadline for everybody would make a node
one round ahead give up just before its late neighbour's push arrives, and from then on
the two would keep missing each other, round after round.

The mailbox window is counted in exchanges, not rounds: with `spacing` rounds between two
exchanges (SPARQ's `sync_every`), a node about to collect exchange round r still holds the
window from the previous exchange on (r - spacing + 1), while a neighbour that finished r
may already push r + spacing; `window` exchanges therefore span window * spacing rounds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

import grpc

from thinwire.config import Experiment, GossipRuntime
from thinwire.topologies.graph.schedule import GraphSchedule
from thinwire.topologies.methods.node import GossipNode, Received
from thinwire.topologies.runtime.reports import NodeReport
from thinwire.topologies.transport.endpoint import PeerEndpoint
from thinwire.topologies.transport.options import TransportSettings
from thinwire.topologies.transport.peers import listen_address, peer_addresses
from thinwire.topologies.transport.receiver import Delivery
from thinwire.topologies.transport.security import TLSIdentity

__all__ = ["PATIENCE", "PeerExchange", "RoundWatch", "exchange_spacing", "exchanges_between"]

PATIENCE = 3
"""Deadlines a node waits at most for a neighbour that is up and owes it a message."""

_DELIVERED = ("DELIVERED", "DUPLICATE")
_GRACE_S = 0.1
"""Time a message the handler accepted may take to reach the mailbox, in seconds."""


class RoundWatch:
    """The neighbour lookup handed to the receiver, noting the rounds that pushes are for.

    The receiver asks for the neighbours of a push's round after checking its run id and
    certificate, so every round seen here is one a member of the run is pushing: a
    restarted peer learns from it where the run is. Rounds beyond `horizon` (the run's
    last round) are ignored.
    """

    def __init__(self, schedule: GraphSchedule, node: int, *, horizon: int) -> None:
        self.schedule = schedule
        self.node = node
        self.horizon = horizon
        self._highest = 0
        self._seen = threading.Condition()

    def neighbours(self, round: int) -> frozenset[int]:
        """The node's neighbours in `round` (the schedule's answer), noting the round."""
        if round <= self.horizon:
            with self._seen:
                if round > self._highest:
                    self._highest = round
                    self._seen.notify_all()
        return self.schedule.neighbours(round, self.node)

    @property
    def highest(self) -> int:
        """The highest round a push was seen for (0 before any)."""
        with self._seen:
            return self._highest

    def wait(self, *, after: int, timeout: float) -> int | None:
        """The highest round seen once one above `after` is; None if none within `timeout`."""
        with self._seen:
            self._seen.wait_for(lambda: self._highest > after, timeout=timeout)
            return self._highest if self._highest > after else None


def exchange_spacing(node: GossipNode, rounds: int) -> int:
    """The most rounds between two exchanges (SPARQ's sync_every; 1 for the others)."""
    spacing, last = 1, 0
    for round in range(1, rounds + 1):
        if node.communicates(round):
            spacing, last = max(spacing, round - last), round
    return spacing


def exchanges_between(node: GossipNode, start: int, end: int) -> int:
    """How many exchange rounds lie in (start, end]."""
    return sum(1 for round in range(start + 1, end + 1) if node.communicates(round))


def _groups(messages: Mapping[int, bytes]) -> list[tuple[bytes, list[int]]]:
    # Neighbours that get the same bytes share one push call.
    groups: dict[bytes, list[int]] = {}
    for neighbour, message in sorted(messages.items()):
        groups.setdefault(message, []).append(neighbour)
    return list(groups.items())


class PeerExchange:
    """A node's endpoint and its rounds over it (see the module docstring).

    Args:
        experiment: the run; its runtime section must be `gossip`.
        node: the node whose rounds these are.
        watch: the neighbour lookup the receiver uses (it notes pushed rounds).
        start_round: the first round the node will collect.
    """

    def __init__(
        self, experiment: Experiment, node: GossipNode, watch: RoundWatch, start_round: int
    ) -> None:
        runtime = experiment.runtime
        if not isinstance(runtime, GossipRuntime):
            raise ValueError(f"a peer needs runtime.kind: gossip, not {runtime.kind!r}")
        self.node = node
        self.deadline_s = runtime.deadline_s
        count, index = experiment.data.clients, node.core.index
        self._addresses = peer_addresses(runtime, count)
        self._tls = TLSIdentity.from_config(runtime.tls) if runtime.tls is not None else None
        self._probes: dict[int, grpc.Channel] = {}
        self._arrived: dict[int, set[int]] = {}  # round -> neighbours whose message came
        self._changed = threading.Condition()
        self._invalid_seen: dict[int, int] = {}
        spacing = exchange_spacing(node, experiment.train.rounds)
        self.endpoint: PeerEndpoint[Received] = PeerEndpoint(
            node=index,
            run_id=runtime.run_id,
            neighbours=watch.neighbours,
            handler=self._receive,
            resolve=self._addresses.__getitem__,
            listen=listen_address(runtime, index, count),
            settings=TransportSettings.from_runtime(
                runtime, [spec.numel for spec in node.core.workspace.spec]
            ),
            window=runtime.window * spacing,
            tls=self._tls,
            insecure=runtime.insecure,
            start_round=start_round,
        )

    def _receive(self, delivery: Delivery) -> Received:
        # The receiver's handler (a server thread): validate and decode, note who sent what.
        message = self.node.open(delivery.sender, delivery.round, bytes(delivery.payload))
        with self._changed:
            self._arrived.setdefault(delivery.round, set()).add(delivery.sender)
            self._changed.notify_all()
        return message

    def _refused(self) -> set[int]:
        # Senders whose pushes the receiver refused as invalid since the previous round.
        counts = self.endpoint.receiver.counters.invalid
        return {j for j, n in counts.items() if n > self._invalid_seen.get(j, 0)}

    def _reachable(self, peer: int, timeout: float) -> bool:
        # Whether `peer`'s server accepts a connection (a handshake, no call).
        if peer not in self._probes:
            address = self._addresses[peer]
            options = [("grpc.enable_retries", 0)]
            self._probes[peer] = (
                grpc.secure_channel(address, self._tls.channel_credentials(), options=options)
                if self._tls is not None
                else grpc.insecure_channel(address, options=options)
            )
        ready = grpc.channel_ready_future(self._probes[peer])
        try:
            ready.result(timeout=timeout)
        except grpc.FutureTimeoutError:
            return False
        finally:
            ready.cancel()
        return True

    def _wait(self, round: int, neighbours: list[int], owed: set[int]) -> None:
        # Returns once every neighbour's message came, or the deadline passed and no
        # neighbour in `owed` (up, and owing this round's message) is still up, or PATIENCE
        # deadlines passed. Neighbours that go quiet are probed once per deadline.
        start = time.monotonic()
        probed = start
        while True:
            with self._changed:
                waiting = set(neighbours) - self._arrived.get(round, set())
                owed = (owed & waiting) - self._refused()
                now = time.monotonic()
                if not waiting or now - start >= PATIENCE * self.deadline_s:
                    return
                if not owed and now - start >= self.deadline_s:
                    return
                until = start + self.deadline_s if not owed else probed + self.deadline_s
                self._changed.wait(timeout=max(0.0, until - now))
            if owed and time.monotonic() - probed >= self.deadline_s:
                probe_s = min(1.0, self.deadline_s / 4)
                owed = {j for j in owed if self._reachable(j, probe_s)}
                probed = time.monotonic()

    def round(self, round: int, *, rejoining: bool = False) -> tuple[NodeReport, dict[str, Any]]:
        """Runs `round` of the node; returns its report and the transport's extras.

        Args:
            round: the round.
            rejoining: the first round after a restart: the neighbours' pushes of this
                round may have been refused while the node caught up, so wait one
                deadline, no more.
        """
        start = time.perf_counter()
        node, endpoint = self.node, self.endpoint
        prepared = node.prepare(round)
        failures: dict[str, str] = {}
        if node.communicates(round):
            if rejoining and round - 1 >= endpoint.mailbox.current_round:
                # Move the window to this round before pushing, so that neighbours' pushes
                # of it are kept: collect the skipped rounds expecting nobody (whatever
                # was buffered for them is dropped unused).
                endpoint.mailbox.collect(round - 1, (), timeout=0)
            accepted = set()
            for message, to in _groups(prepared.messages):
                for peer, result in endpoint.client.push(round, message, to).items():
                    if result.ok and result.outcome in _DELIVERED:
                        accepted.add(peer)
                    else:
                        failures[str(peer)] = result.outcome or result.code.name
            neighbours = node.core.neighbours(round)
            self._wait(round, neighbours, set() if rejoining else accepted)
            inbox = endpoint.mailbox.collect(round, neighbours, timeout=_GRACE_S)
            with self._changed:
                for old in [r for r in self._arrived if r <= round]:
                    del self._arrived[old]
            absorbed = node.absorb(round, inbox.messages)
            refused = self._refused()
            self._invalid_seen = dict(endpoint.receiver.counters.invalid)
            absorbed = absorbed._replace(
                missing=tuple(j for j in absorbed.missing if j not in refused),
                rejected=tuple(sorted(set(absorbed.rejected) | refused)),
            )
        else:
            absorbed = node.absorb(round, {})
        report = NodeReport.of(
            round=round,
            node=node.core.index,
            lr=node.core.learning_rate(round),
            prepared=prepared,
            absorbed=absorbed,
        )
        extra = {
            "push_failures": failures,
            "transport": asdict(endpoint.traffic.total()),  # cumulative, metadata apart
            "wall_s": time.perf_counter() - start,
        }
        return report, extra

    def close(self) -> None:
        """Stops serving (pushes in flight get a moment) and closes every channel."""
        try:
            self.endpoint.close(grace_s=min(5.0, self.deadline_s))
        finally:
            for channel in self._probes.values():
                channel.close()
