"""What every gossip node shares: local training, its messages, and their validation.

A gossip node is round logic without transport (DESIGN "Roles"). Each round a runtime calls

1. `prepare(round) -> Prepared`: train locally, then build the bytes for each neighbour
   (`Prepared.messages`; an empty byte string is an explicit "nothing this round");
2. moves those bytes: the simulator hands them over in memory, a peer pushes them over gRPC;
3. `absorb(round, inbox) -> Absorbed`: validate what arrived and mix it into the model.

A runtime that validates messages on arrival (the peer does, so it can refuse a bad push)
calls `open(sender, round, data) -> Received` itself and passes `Received` values to
`absorb`; the simulator passes the raw bytes and `absorb` opens them. Either way the same
`open` runs, so both runtimes compute with the very same tensors.

The concrete methods (`DPSGDNode`, `ChocoNode` for CHOCO and SPARQ, `JwinsNode`) share the
`NodeCore` below by composition: the node's data and id, the workspace it trains in, the
graph schedule, the dense model codec, and the checks every message gets (sender, round,
spec, payload types, and values finite and within `aggregation.max_norm_ratio` of the
node's own model norm). Everything that changes between rounds lives in the node's `state`, a
NamedTuple, which `state_dict` / `load_state_dict` turn into a checkpoint and back.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

import torch

from thinwire import statetree
from thinwire.codecs.model import ModelCodec
from thinwire.codecs.receive import check_bounded, norm_bound
from thinwire.config import Experiment
from thinwire.learning import (
    TrainStats,
    Workspace,
    flatten,
    learning_rate,
    local_steps_for,
    train_local,
    unflatten,
)
from thinwire.seeding import peer_train_seed
from thinwire.statetree import Leaf
from thinwire.topologies.graph.schedule import GraphSchedule
from thinwire.topologies.naming import node_common_name
from thinwire.wire import (
    DenseSupport,
    Kind,
    Payload,
    RawValues,
    TensorSpec,
    Update,
    WireError,
    decode,
    encode,
)

__all__ = [
    "StateNode",
    "ASK",
    "Absorbed",
    "GossipNode",
    "Inbox",
    "NodeCore",
    "Prepared",
    "Received",
    "Specs",
    "asks",
    "elapsed",
]

logger = logging.getLogger(__name__)

ASK = "ask"
"""Metric key of a message whose sender holds no valid copy of the receiver's estimate."""

Specs = Mapping[Kind, Sequence[TensorSpec]]


class Received(NamedTuple):
    """One neighbour's message for a round, validated and decoded."""

    sender: int  # node id
    round: int
    kind: Kind | None  # None: the sender stayed silent (an empty message)
    values: torch.Tensor  # float32: a full (d,) vector, or (k,) values at `indices`
    indices: torch.Tensor | None  # (k,) int64 coordinates of `values`; None when full
    ask: bool  # the sender asks for this node's full estimate (CHOCO resynchronization)
    size: int  # bytes of the message as it arrived


Inbox = Mapping[int, bytes | Received]
"""Neighbour -> its message: raw bytes (opened by `absorb`) or an already opened `Received`."""


class Prepared(NamedTuple):
    """A node's side of a round before anything arrives."""

    messages: dict[int, bytes]  # neighbour -> bytes to send (b"": silent); {} if no exchange
    fired: bool  # whether the node sent news this round (SPARQ's trigger; True otherwise)
    train_loss: float  # mean local training loss
    refreshed: tuple[int, ...]  # neighbours sent a full estimate instead of a correction
    compute_s: float  # training and encoding time


class Absorbed(NamedTuple):
    """What a node took in at the end of a round."""

    received: dict[int, int]  # neighbour -> bytes of its accepted message
    missing: tuple[int, ...]  # neighbours whose message did not arrive
    rejected: tuple[int, ...]  # neighbours whose message failed validation
    compute_s: float  # decoding and mixing time


class GossipNode(Protocol):
    """The round logic of one gossip peer (see the module docstring)."""

    core: NodeCore

    def communicates(self, round: int) -> bool:
        """Whether `round` exchanges messages (False: train only, for every node alike)."""
        ...

    def prepare(self, round: int) -> Prepared:
        """Trains, then returns the bytes for each neighbour of `round`."""
        ...

    def open(self, sender: int, round: int, data: bytes) -> Received:
        """Validates and decodes one message; raises `WireError` for a bad one."""
        ...

    def absorb(self, round: int, inbox: Inbox) -> Absorbed:
        """Mixes the round's messages into the model; absent neighbours count as missing."""
        ...

    def vector(self) -> torch.Tensor:
        """The node's model as one flat float32 vector."""
        ...

    def state_dict(self) -> dict[str, Leaf]:
        """The node's state, flattened for a checkpoint."""
        ...

    def load_state_dict(self, flat: Mapping[str, Leaf]) -> None:
        """Restores `state_dict` output."""
        ...

    def desynchronized(self) -> None:
        """The node missed rounds (a restart, or catching up): resynchronize what it must."""
        ...


class StateNode:
    """What every gossip node shares: a NamedTuple `state` whose `x` is the flat model.

    The methods of `GossipNode` that only read or replace that state live here once.
    """

    state: Any

    def vector(self) -> torch.Tensor:
        """The node's model, flat."""
        x: torch.Tensor = self.state.x
        return x

    def state_dict(self) -> dict[str, Leaf]:
        """The state, flattened for a checkpoint."""
        return statetree.flatten(self.state)

    def load_state_dict(self, flat: Mapping[str, Leaf]) -> None:
        """Restores `state_dict` output (checked against the current state's structure)."""
        self.state = statetree.unflatten(self.state, flat)


class NodeCore:
    """The parts every gossip node has; see the module docstring.

    Args:
        index: the node's id in the graph, 0..n-1.
        experiment: the run's configuration.
        x: the node's training features, on the workspace's device.
        y: its int64 labels.
        workspace: the model the node trains in (the simulator shares one among all nodes).
        schedule: the graph and mixing weights of every round.
        initial: the common initial model as a flat vector (every node derives the same
            one from the run seed).
    """

    def __init__(
        self,
        *,
        index: int,
        experiment: Experiment,
        x: torch.Tensor,
        y: torch.Tensor,
        workspace: Workspace,
        schedule: GraphSchedule,
        initial: torch.Tensor,
    ) -> None:
        if not 0 <= index < schedule.nodes:
            raise ValueError(f"node {index} is not in the graph's nodes 0..{schedule.nodes - 1}")
        if x.shape[0] != y.shape[0] or x.shape[0] == 0:
            raise ValueError(f"node {index}: needs matching, non-empty data, got {x.shape[0]}")
        self.index = index
        self.name = node_common_name(index)
        self.experiment = experiment
        self.x, self.y = x, y
        self.workspace = workspace
        self.schedule = schedule
        self.template = workspace.zeros()
        self.size = sum(s.numel for s in workspace.spec)
        if initial.shape != (self.size,):
            raise ValueError(f"initial model has shape {tuple(initial.shape)}, not ({self.size},)")
        self.initial = initial.detach().to(workspace.device, torch.float32).clone()
        self.dense = ModelCodec.dense(workspace.spec)
        self._dense_state = self.dense.init(self.template)

    # ----------------------------------------------------------------- rounds and graph

    def neighbours(self, round: int) -> list[int]:
        """This node's neighbours in `round`, in ascending order."""
        return sorted(self.schedule.neighbours(round, self.index))

    def weights(self, round: int) -> dict[int, float]:
        """Row of the round's mixing matrix: w_ij for this node and each neighbour."""
        return self.schedule.weights(round, self.index)

    def learning_rate(self, round: int) -> float:
        """The local learning rate of `round`."""
        return learning_rate(self.experiment.train, round)

    def train(self, vector: torch.Tensor, round: int) -> tuple[torch.Tensor, TrainStats]:
        """Trains from `vector` for the round's local steps; returns the new flat model.

        The batch order comes from a generator seeded by (run seed, node, round), so a
        node's training is reproducible in any process.
        """
        train = self.experiment.train
        self.workspace.load(unflatten(vector, self.template))
        generator = torch.Generator(device="cpu").manual_seed(
            peer_train_seed(self.experiment.seed, self.index, round)
        )
        stats = train_local(
            self.workspace.model,
            self.x,
            self.y,
            steps=local_steps_for(train, int(self.x.shape[0])),
            batch_size=train.batch_size,
            lr=self.learning_rate(round),
            optimizer=train.optimizer,
            generator=generator,
        )
        return flatten(self.workspace.tensors()), stats

    def named(self, vector: torch.Tensor) -> dict[str, torch.Tensor]:
        """A flat vector as the model's named tensors (views)."""
        return unflatten(vector, self.template)

    # ----------------------------------------------------------------- messages out

    def encode(
        self, round: int, kind: Kind, payloads: Mapping[str, Payload], *, ask: bool = False
    ) -> bytes:
        """Serializes one message of this node."""
        metrics = {ASK: 1.0} if ask else {}
        return encode(Update(self.name, round, kind, dict(payloads), metrics))

    def encode_dense(self, round: int, vector: torch.Tensor, *, ask: bool = False) -> bytes:
        """A full model (or estimate) as a MODEL message: every tensor dense, fp32."""
        payloads, _ = self.dense.encode(self.named(vector), self._dense_state)
        return self.encode(round, Kind.MODEL, payloads, ask=ask)

    # ----------------------------------------------------------------- messages in

    def read(
        self, sender: int, round: int, data: bytes, specs: Specs, *, silence: bool
    ) -> Update | None:
        """Decodes one message against `specs` and checks who sent it and for which round.

        Args:
            sender: the neighbour the message came from.
            round: the round it was sent for.
            data: its bytes; empty means "silent this round".
            specs: the tensors expected for each kind this method sends.
            silence: whether this method ever stays silent.

        Returns:
            The update, or None for silence.

        Raises:
            WireError: for anything malformed, a silence the method never sends, or a
                message that names another sender or round than the one it came with.
        """
        if not data:
            if silence:
                return None
            raise WireError(f"empty message, but gossip.kind {self.kind} never stays silent")
        update = decode(data, specs)
        if update.sender != node_common_name(sender):
            raise WireError(f"message names sender {update.sender!r}, but came from node {sender}")
        if update.round != round:
            raise WireError(f"message is for round {update.round}, but came for round {round}")
        ask = update.metrics.get(ASK, 0.0)
        if ask not in (0.0, 1.0) or set(update.metrics) - {ASK}:
            raise WireError(f"unexpected metrics {dict(update.metrics)}; gossip sends only {ASK!r}")
        return update

    @property
    def kind(self) -> str:
        """The gossip method's name."""
        return self.experiment.gossip.kind

    def dense_values(self, update: Update) -> torch.Tensor:
        """The flat float32 vector of a MODEL message whose tensors are all dense fp32.

        Raises:
            WireError: if a tensor is sparse, seeded, quantized or not float32.
        """
        parts = []
        for name, payload in update.tensors.items():
            values = payload.values
            if not isinstance(payload.support, DenseSupport) or not isinstance(values, RawValues):
                raise WireError(f"tensor {name!r}: a model travels dense and unquantized")
            if values.data.dtype != torch.float32:
                raise WireError(f"tensor {name!r}: a model travels as float32")
            parts.append(values.data.reshape(-1))
        return torch.cat(parts).to(self.workspace.device)

    def max_norm(self, reference: torch.Tensor) -> float:
        """The largest l2 norm this node accepts in a message, given its model `reference`.

        `aggregation.max_norm_ratio * max(||reference||, 1)`; see `thinwire.codecs.receive`.
        """
        return norm_bound(reference, self.experiment.aggregation.max_norm_ratio)

    def received(
        self,
        sender: int,
        round: int,
        update: Update | None,
        size: int,
        *,
        reference: torch.Tensor,
    ) -> Received:
        """A `Received` for a full-vector message (or silence, when `update` is None).

        The vector must be finite and within `max_norm(reference)`, `reference` being this
        node's model.

        Raises:
            WireError: for a model that is not dense fp32, or out of bounds (`BoundError`).
        """
        if update is None:
            return Received(sender, round, None, _EMPTY, None, False, size)
        values = self.dense_values(update)
        check_bounded({"model": values}, self.max_norm(reference), what="model")
        return Received(sender, round, update.kind, values, None, asks(update), size)

    def unpack(
        self, round: int, inbox: Inbox, open: Callable[[int, int, bytes], Received]
    ) -> tuple[dict[int, Received], Absorbed]:
        """Opens the raw messages of `inbox` and sorts out who was missing or rejected.

        Returns:
            The accepted messages by neighbour (ascending), and an `Absorbed` without its
            compute time.

        Raises:
            ValueError: if `inbox` holds a message from a node that is not a neighbour in
                `round`, or a `Received` filed under another sender or round (a runtime's
                mistake; the transport refuses such pushes before they get here).
        """
        neighbours = self.neighbours(round)
        strangers = sorted(set(inbox) - set(neighbours))
        if strangers:
            raise ValueError(f"round {round}: nodes {strangers} are not neighbours of {self.index}")
        accepted: dict[int, Received] = {}
        rejected: list[int] = []
        for j in neighbours:
            if j not in inbox:
                continue
            item = inbox[j]
            if isinstance(item, Received):
                if (item.sender, item.round) != (j, round):
                    raise ValueError(
                        f"a message of node {item.sender} for round {item.round} was filed "
                        f"under node {j}, round {round}"
                    )
                accepted[j] = item
                continue
            try:
                accepted[j] = open(j, round, item)
            except WireError as exc:
                rejected.append(j)
                logger.warning(
                    "node %d, round %d: rejected the message from node %d: %s",
                    self.index,
                    round,
                    j,
                    exc,
                )
        missing = tuple(j for j in neighbours if j not in accepted and j not in rejected)
        sizes = {j: message.size for j, message in accepted.items()}
        return accepted, Absorbed(sizes, missing, tuple(rejected), math.nan)


_EMPTY = torch.empty(0)


def asks(update: Update) -> bool:
    """Whether a message carries the `ASK` flag."""
    return update.metrics.get(ASK, 0.0) == 1.0


def elapsed(start: float) -> float:
    """Seconds since `start` (a `time.perf_counter()` reading)."""
    return time.perf_counter() - start
