"""The buffered asynchronous server (FedBuff, Nguyen et al., AISTATS 2022), transport-free.

Clients train concurrently, each from the model version it was sent. When a client's
update arrives the server validates it (the star's receive path: wire form, sender, round,
example count, payload forms, then decoding with the norm bound and finiteness checks) and
adds it to a buffer weighted by a staleness function s(tau), where

    tau = (server version now) - (the version the client started from).

Once K updates are buffered (`server.buffer`) the server takes its step: the experiment's
aggregation rule over the buffered contributions (s(tau) * delta_i, n_i), in client order,
then `train.server`'s step (`thinwire.server.steps`: lr, momentum), and the version goes up
by one. With the default mean rule the aggregate is

    sum_i n_i s(tau_i) delta_i / sum_i n_i,

FedBuff's "sum of discounted updates over K" with each update weighted by its example
count (with equal counts it is FedBuff's rule exactly; with s = 1 it is FedAvg's mean, so
K = M = clients is the synchronous star bit for bit). Dividing by sum n_i rather than
sum n_i s(tau_i) is what makes a stale update shrink the step, not only its share of it.

Staleness functions are a registry family (`thinwire.registry.STALENESS`): `constant`,
`polynomial` 1 / (1 + tau)^a (FedBuff's default a = 0.5) and FedAsync's `hinge` (Xie et al.
2019) are registered here; a plugin registers its own section and factory the same way.

The server never waits for anyone: a runtime tells it when a client's task ended without
an update (`drop`), and steps early, on what the buffer holds, when no client is left
training (`idle`): every other task was refused or dropped, as a synchronous round ends
with the replies it got. Each downlink is the full model of the current version (dense,
`Kind.MODEL`, round = version + 1), so a client needs no public copy in step with others.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import torch

from thinwire.codecs.forms import check_forms
from thinwire.codecs.model import ModelCodec
from thinwire.codecs.receive import norm_bound, open_payloads
from thinwire.config import (
    BufferedAsync,
    ConstantStaleness,
    Experiment,
    HingeStaleness,
    PolynomialStaleness,
)
from thinwire.learning import Evaluation, Workspace, evaluate
from thinwire.registry import STALENESS
from thinwire.server.aggregator import Receipt, check_update
from thinwire.server.rules import build_rule
from thinwire.server.steps import build_step
from thinwire.wire import Kind, Update, WireError, client_id, decode, encode

__all__ = [
    "Arrival",
    "BufferedServer",
    "Dispatch",
    "StalenessFn",
    "Step",
    "build_staleness",
    "constant",
    "hinge",
    "polynomial",
]

logger = logging.getLogger(__name__)

StalenessFn = Callable[[int], float]
"""tau (server steps an update missed, >= 0) -> its weight in the buffer."""


def constant() -> StalenessFn:
    """s(tau) = 1."""
    return lambda tau: 1.0


def polynomial(a: float) -> StalenessFn:
    """s(tau) = (1 + tau)^-a."""
    if not a >= 0:
        raise ValueError(f"polynomial staleness needs a >= 0, got {a}")
    return lambda tau: 1.0 if tau == 0 else float((1.0 + tau) ** -a)


def hinge(a: float, b: int) -> StalenessFn:
    """s(tau) = 1 for tau <= b, else 1 / (a (tau - b) + 1)."""
    if not (a >= 0 and b >= 0):
        raise ValueError(f"hinge staleness needs a >= 0 and b >= 0, got {a}, {b}")
    return lambda tau: 1.0 if tau <= b else 1.0 / (a * (tau - b) + 1.0)


STALENESS.register("constant", section=ConstantStaleness, factory=lambda section: constant())
STALENESS.register(
    "polynomial", section=PolynomialStaleness, factory=lambda section: polynomial(section.a)
)
STALENESS.register("hinge", section=HingeStaleness, factory=lambda s: hinge(s.a, s.b))


def build_staleness(section: Any) -> StalenessFn:
    """The staleness function a `server.staleness` section names."""
    fn: StalenessFn = STALENESS.factory(section.kind)(section)
    return fn


class Dispatch(NamedTuple):
    """What a client is sent when it starts a task."""

    data: bytes  # the serialized model of the current version
    round: int  # the task's round: the version it starts from, plus one
    delivered: bool | None  # did its previous update count (None: nothing to tell)
    state_round: int  # the round of its previous task, which its kept state is at (0: none)


class Arrival(NamedTuple):
    """One update the buffer took."""

    client: int
    version: int  # the server version the client started from
    staleness: int  # tau: server steps taken since
    weight: float  # s(tau)


class Step(NamedTuple):
    """What one server step did."""

    version: int  # the version it made (the round of the records)
    arrivals: list[Arrival]  # the buffered updates, in client order
    rejected: dict[int, str]  # client -> why its update was refused, since the last step
    dropped: list[int]  # clients whose task ended without an update, since the last step


class _Buffered(NamedTuple):
    arrival: Arrival
    delta: dict[str, torch.Tensor]  # s(tau) * the decoded update
    examples: float


class BufferedServer:
    """The asynchronous star's server; see the module docstring.

    Args:
        experiment: the run's configuration; its `server` section must be set.
        workspace: the model's workspace (spec and device).
        initial: the initial global model; every value must be finite.
        examples: each client's true example count, where the runtime knows it (the
            simulator); a client's claim may not exceed it. None: `aggregation.max_examples`.
    """

    def __init__(
        self,
        *,
        experiment: Experiment,
        workspace: Workspace,
        initial: Mapping[str, torch.Tensor],
        examples: Mapping[int, int] | None = None,
    ) -> None:
        if not isinstance(experiment.server, BufferedAsync):
            raise ValueError("a BufferedServer needs a `server: {kind: buffered_async}` section")
        if not all(bool(torch.isfinite(v).all()) for v in initial.values()):
            raise ValueError("the initial model holds NaN or infinite values")
        self.experiment = experiment
        self.config = experiment.server
        self.examples = dict(examples) if examples is not None else None
        self.workspace = workspace
        self.staleness = build_staleness(self.config.staleness)
        self.rule = build_rule(experiment.aggregation)
        self.step_fn = build_step(experiment.train.server)
        self.uplink = ModelCodec(experiment.codec, workspace.spec, seed=0)
        self.dense = ModelCodec.dense(workspace.spec)
        self.version = 0
        self.model = {k: v.detach().clone().float() for k, v in initial.items()}
        self.momentum: dict[str, torch.Tensor] = {}
        self.in_flight: dict[int, int] = {}  # client -> the version it started from
        self.told: dict[int, bool] = {}  # client -> did its last update count (to tell)
        self.last_round: dict[int, int] = {}  # client -> the round of its last task
        self._buffer: list[_Buffered] = []
        self._rejected: dict[int, str] = {}
        self._dropped: list[int] = []
        self._downlink: tuple[int, bytes] | None = None

    # ------------------------------------------------------------------ tasks

    def dispatch(self, client: int) -> Dispatch:
        """Starts a task at `client` on the current model; returns what it is sent.

        Raises:
            ValueError: `client` already has a task in flight.
        """
        if client in self.in_flight:
            raise ValueError(
                f"client {client} is already training (version {self.in_flight[client]})"
            )
        round = self.version + 1
        if self.last_round.get(client) == round:
            raise ValueError(f"client {client} already had a task on version {self.version}")
        if self._downlink is None or self._downlink[0] != self.version:
            payloads, _ = self.dense.encode(self.model, self.dense.init(self.model))
            self._downlink = (self.version, encode(Update("server", round, Kind.MODEL, payloads)))
        self.in_flight[client] = self.version
        state_round = self.last_round.get(client, 0)
        self.last_round[client] = round
        return Dispatch(self._downlink[1], round, self.told.pop(client, None), state_round)

    def receive(self, client: int, data: bytes) -> Receipt:
        """Validates, decodes and buffers one client's update; never raises on bad input.

        The task ends either way; a refused update is counted with the next step and the
        client is told it did not count.
        """
        version = self.in_flight.get(client)
        if version is None:
            reason = f"{client_id(client)} has no task in flight"
            logger.warning("version %d: ignored an update: %s", self.version, reason)
            return Receipt(False, reason)
        del self.in_flight[client]
        try:
            self._buffer.append(self._open(client, version, data))
        except WireError as exc:
            return self._refuse(client, str(exc))
        except Exception as exc:  # a decoder bug must not take down the server either
            logger.exception("version %d: decoding the update of %s failed", self.version, client)
            return self._refuse(client, f"internal error while decoding: {exc!r}")
        return Receipt(True)

    def refuse(self, client: int, reason: str) -> Receipt:
        """Ends `client`'s task with a reply the runtime could not read: a refused update."""
        if self.in_flight.pop(client, None) is None:
            return Receipt(False, f"{client_id(client)} has no task in flight")
        return self._refuse(client, reason)

    def drop(self, client: int) -> None:
        """Ends `client`'s task without an update (it timed out, failed or lost its state)."""
        if self.in_flight.pop(client, None) is not None:
            self._dropped.append(client)

    def resynchronize(self, client: int) -> None:
        """Makes `client` start afresh with its next task (state round 0, nothing told)."""
        self.last_round.pop(client, None)
        self.told.pop(client, None)

    @property
    def full(self) -> bool:
        """Whether the buffer holds K updates: time for a step."""
        return len(self._buffer) >= self.config.buffer

    @property
    def idle(self) -> bool:
        """Whether no client is training: the buffer cannot fill, so step on what it holds."""
        return not self.in_flight

    @property
    def buffered(self) -> int:
        """Updates in the buffer now."""
        return len(self._buffer)

    def _open(self, client: int, version: int, data: bytes) -> _Buffered:
        update = decode(data, self.uplink.wire_spec, kind=Kind.MODEL_DELTA)
        check_update(
            update,
            client,
            version + 1,  # the round of its task
            self.examples,
            max_examples=self.experiment.aggregation.max_examples,
        )
        check_forms(update.tensors, self.uplink.forms)
        bound = norm_bound(self.model, self.experiment.aggregation.max_norm_ratio)
        delta = open_payloads(self.uplink, update.tensors, self.workspace.device, max_norm=bound)
        tau = self.version - version
        weight = float(self.staleness(tau))
        if not (math.isfinite(weight) and weight >= 0):
            raise ValueError(f"staleness function gave {weight} for tau {tau}")
        if weight != 1.0:
            delta = {k: v * weight for k, v in delta.items()}
        return _Buffered(
            Arrival(client, version, tau, weight), delta, update.metrics["num_examples"]
        )

    def _refuse(self, client: int, reason: str) -> Receipt:
        self._rejected[client] = reason
        self.told[client] = False
        logger.warning("version %d: rejected update from %s: %s", self.version, client, reason)
        return Receipt(False, reason)

    # ------------------------------------------------------------------ the step

    def step(self) -> Step:
        """Aggregates the buffer (in client order), takes the server step, version + 1.

        An empty buffer (every update since the last step refused) leaves the model as it
        is, as does an aggregate that would make it non-finite; the version goes up anyway.
        """
        buffered = sorted(self._buffer, key=lambda b: b.arrival.client)
        if buffered:
            aggregate = self.rule([(b.delta, b.examples) for b in buffered])
            model, momentum = self.step_fn(self.model, aggregate, self.momentum)
            if all(bool(torch.isfinite(v).all()) for v in model.values()):
                self.model, self.momentum = model, momentum
            else:
                logger.error(
                    "version %d: the aggregate would make the model non-finite; the model "
                    "and the server momentum stay as they were",
                    self.version + 1,
                )
        self.version += 1
        for b in buffered:
            self.told[b.arrival.client] = True
        step = Step(
            self.version, [b.arrival for b in buffered], dict(self._rejected), list(self._dropped)
        )
        self._buffer, self._rejected, self._dropped = [], {}, []
        return step

    def evaluate(self, x: torch.Tensor, y: torch.Tensor) -> Evaluation:
        """Test loss and accuracy of the global model."""
        self.workspace.load(self.model)
        return evaluate(self.workspace.model, x, y)
