"""The federated server's round logic: broadcast, validate and decode updates, average, step.

Like `Client`, the `Aggregator` only sees bytes: `broadcast` returns the downlink message for
each recipient, `receive` takes an update exactly as it arrived (untrusted), and
`finish_round` applies the server step. The simulator and the Flower ServerApp drive it the
same way, so both produce the same model.

Downlink: without a downlink codec every recipient gets the full model (fp32). With one, the
server keeps a *public copy* x_pub of the model that clients also hold; each round it sends
C(x - x_pub) and both ends add its decoded value to x_pub (what C dropped stays in
x - x_pub, so nothing is lost: this is error feedback on the downlink). A client that missed
a round no longer holds x_pub and gets the full public copy instead, counted in bytes.

The policy's server half (`thinwire.server.halves`, named by the policy kind): the
aggregator runs its pieces at fixed points of the round and branches on no policy.
- Silent clients (CSGD censoring): the runtime reports a selected client that replied
  without an update with `silent(client)`; the `stale_reuse` half averages a silent client's
  last delivered update in place of the one it did not send (the server keeps each client's
  last decoded update and its example count in `AggregatorState.stale`).
- Random-access uplink (`channel.slots`): the `slotted` half checks that every update names
  a slot in range (metric `slot`), arbitrates the frame like the channel would (a slot with
  two or more updates loses all of them; lost updates are reported as not delivered, which
  reaches their senders next round) and sums the delivered updates over the number of
  selected clients instead of averaging them.

The server step is `thinwire.server.steps`' piece for `train.server`: SGD at the server's
learning rate, wrapped by momentum when it is set.

Untrusted updates (DESIGN principle 3): `receive` decodes the bytes against the uplink's
spec and checks sender, round, the claimed example count (at most the client's true count
when the runtime knows it, `aggregation.max_examples` otherwise) and every payload's form
against the uplink codec (`thinwire.codecs.forms`). `finish_round` decodes each update
through `thinwire.codecs.receive.open_payloads`, which refuses non-finite results and norms
above `aggregation.max_norm_ratio` times the model's; a refusal at either step drops that
update alone (counted in `RoundResult.rejected`, logged with its reason) and the round goes
on. The aggregate comes from the `aggregation` section's rule (`thinwire.server.rules`),
summed in float64, and a step that would leave the model non-finite is not taken.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import torch

from thinwire.channel import SlotStats
from thinwire.codecs.forms import check_forms
from thinwire.codecs.model import ModelCodec
from thinwire.codecs.receive import norm_bound, open_payloads
from thinwire.config import Experiment
from thinwire.learning import Evaluation, Workspace, evaluate
from thinwire.seeding import downlink_codec_seed
from thinwire.server.halves import Frame, Memory, build_server_half
from thinwire.server.rules import Contribution, build_rule
from thinwire.server.steps import build_step
from thinwire.wire import Kind, Update, WireError, client_id, decode, encode

__all__ = ["Aggregator", "AggregatorState", "Receipt", "RoundResult", "check_update"]

logger = logging.getLogger(__name__)


class Receipt(NamedTuple):
    """The server's verdict on one arriving update."""

    accepted: bool
    error: str | None = None


class RoundResult(NamedTuple):
    """What a round did at the server."""

    round: int
    accepted: list[int]  # clients whose update went into the average
    rejected: dict[int, str]  # client -> why its update was refused
    delivered: dict[int, bool]  # for every client that sent: did its update count
    silent: tuple[int, ...] = ()  # selected clients that replied without an update
    reused: tuple[int, ...] = ()  # silent clients whose last update went into the average
    collided: tuple[int, ...] = ()  # clients whose update was lost in a slot collision
    slots: SlotStats | None = None  # use of the random-access frame; None without slots


class AggregatorState(NamedTuple):
    """Everything the server needs to resume a run (checkpoints)."""

    round: int  # last finished round
    model: dict[str, torch.Tensor]  # the global model, float32
    momentum: dict[str, torch.Tensor]  # server momentum buffer ({} without momentum)
    public: dict[str, torch.Tensor]  # downlink public copy ({} without a downlink codec)
    downlink: dict[str, Any]  # downlink codec state ({} without a downlink codec)
    received: dict[str, int]  # client index (as str) -> last round it got the downlink
    # CSGD stale reuse ({} unless the policy reuses silent clients' updates). The defaults
    # let states built from the fields above (checkpoints) stay valid; they are replaced,
    # never mutated, like every field here.
    stale: dict[str, dict[str, torch.Tensor]] = {}  # client (as str) -> last decoded update
    stale_examples: dict[str, float] = {}  # client (as str) -> example count of that update


def check_update(
    update: Update,
    client: int,
    round: int,
    examples: Mapping[int, int] | None,
    *,
    max_examples: int,
) -> None:
    """Sender, round and claimed example count of a decoded update from `client`.

    The claim may not exceed the client's true count where the runtime knows it
    (`examples`, the simulator's), else `max_examples` (`aggregation.max_examples`).

    Raises:
        WireError: naming what does not match.
    """
    if update.sender != client_id(client):
        raise WireError(f"sender {update.sender!r} does not match {client_id(client)!r}")
    if update.round != round:
        raise WireError(f"update is for round {update.round}, expected {round}")
    claimed = update.metrics.get("num_examples", math.nan)
    cap = examples[client] if examples is not None and client in examples else max_examples
    if not 1 <= claimed <= cap:
        raise WireError(f"metric num_examples must be in [1, {cap}], got {claimed}")


class Aggregator:
    """The server of the star; see the module docstring.

    Args:
        experiment: the run's configuration.
        workspace: the model's workspace (spec and device).
        initial: the initial global model; every value must be finite.
        examples: each client's true example count, where the runtime knows it (the
            simulator); a client's claim may not exceed it. None: claims are capped by
            `aggregation.max_examples`.

    Raises:
        ValueError: if the initial model is not finite.
    """

    def __init__(
        self,
        *,
        experiment: Experiment,
        workspace: Workspace,
        initial: Mapping[str, torch.Tensor],
        examples: Mapping[int, int] | None = None,
    ) -> None:
        if not all(bool(torch.isfinite(v).all()) for v in initial.values()):
            raise ValueError("the initial model holds NaN or infinite values")
        self.experiment = experiment
        self.examples = dict(examples) if examples is not None else None
        self.rule = build_rule(experiment.aggregation)
        self.half = build_server_half(experiment)
        """The policy's server half: slot checks and arbitration, stale reuse, the shares."""
        self.step = build_step(experiment.train.server)
        self.workspace = workspace
        self.uplink = ModelCodec(experiment.codec, workspace.spec, seed=0)
        self.dense = ModelCodec.dense(workspace.spec)
        self.downlink = (
            ModelCodec(
                experiment.downlink, workspace.spec, seed=downlink_codec_seed(experiment.seed)
            )
            if experiment.downlink is not None
            else None
        )
        model = {k: v.detach().clone().float() for k, v in initial.items()}
        self.state = AggregatorState(
            round=0,
            model=model,
            momentum={},
            public={k: v.clone() for k, v in model.items()} if self.downlink else {},
            downlink=self.downlink.init(model) if self.downlink else {},
            received={},
            stale={},
            stale_examples={},
        )
        self._round = 0
        self._recipients: set[int] = set()
        self._updates: dict[int, Update] = {}
        self._accepted: list[int] = []
        self._rejected: dict[int, str] = {}
        self._silent: list[int] = []

    @property
    def model(self) -> dict[str, torch.Tensor]:
        """The current global model."""
        return self.state.model

    def broadcast(self, round: int, recipients: Iterable[int]) -> dict[int, bytes]:
        """Opens `round` and returns the serialized downlink message for each recipient."""
        if round != self.state.round + 1:
            raise ValueError(f"round {round} cannot follow round {self.state.round}")
        self._round = round
        self._recipients = set(recipients)
        self._updates, self._accepted, self._rejected, self._silent = {}, [], {}, []
        state = self.state
        received = dict(state.received)
        if self.downlink is None:
            full = self._full_model(round, state.model)
            out = dict.fromkeys(self._recipients, full)
        else:
            # Advance the public copy by the compressed difference; stale clients get it whole.
            payloads, codec_state = self.downlink.encode(
                {k: state.model[k] - state.public[k] for k in state.model}, state.downlink
            )
            step = self.downlink.decode(payloads, self.workspace.device)
            public = {k: state.public[k] + step[k] for k in state.public}
            delta = encode(Update("server", round, Kind.MODEL_DELTA, payloads))
            full = self._full_model(round, public)
            out = {
                c: delta if received.get(str(c)) == round - 1 else full for c in self._recipients
            }
            self.state = state._replace(public=public, downlink=codec_state)
        for c in self._recipients:
            received[str(c)] = round
        self.state = self.state._replace(received=received)
        return out

    def _full_model(self, round: int, model: Mapping[str, torch.Tensor]) -> bytes:
        payloads, _ = self.dense.encode(model, self.dense.init(model))
        return encode(Update("server", round, Kind.MODEL, payloads))

    def receive(self, client: int, data: bytes) -> Receipt:
        """Validates one client's update and keeps it for the round; never raises on bad input.

        Only the compact payloads are kept; they are decoded when the round finishes.
        """
        try:
            self._accumulate(client, data)
        except WireError as exc:
            self._rejected[client] = str(exc)
            logger.warning("round %d: rejected update from %s: %s", self._round, client, exc)
            return Receipt(False, str(exc))
        self._accepted.append(client)
        return Receipt(True)

    def silent(self, client: int) -> Receipt:
        """Notes that `client` was selected but replied without an update; never raises.

        The client censored itself, or kept its update back for lack of a slot. The policy's
        server half decides what stands in for it (CSGD: its last delivered update).
        """
        try:
            self._check_reply(client)
        except WireError as exc:
            logger.warning("round %d: ignored silence of %s: %s", self._round, client, exc)
            return Receipt(False, str(exc))
        self._silent.append(client)
        return Receipt(True)

    def _check_reply(self, client: int) -> None:
        if client not in self._recipients:
            raise WireError(f"{client_id(client)} was not asked for an update in this round")
        if client in self._accepted or client in self._rejected:
            raise WireError(f"{client_id(client)} already sent an update this round")
        if client in self._silent:
            raise WireError(f"{client_id(client)} already replied without an update this round")

    def _accumulate(self, client: int, data: bytes) -> None:
        self._check_reply(client)
        update = decode(data, self.uplink.wire_spec, kind=Kind.MODEL_DELTA)
        self._check_update(client, update)
        self.half.check(update)
        check_forms(update.tensors, self.uplink.forms)
        self._updates[client] = update

    def _check_update(self, client: int, update: Update) -> None:
        check_update(
            update,
            client,
            self._round,
            self.examples,
            max_examples=self.experiment.aggregation.max_examples,
        )

    def _decode(self, updates: Mapping[int, Update]) -> dict[int, Contribution]:
        """Each update decoded and bounded; a refused one is moved to `_rejected`."""
        bound = norm_bound(self.state.model, self.experiment.aggregation.max_norm_ratio)
        decoded: dict[int, Contribution] = {}
        for client, update in sorted(updates.items()):
            try:
                delta = open_payloads(
                    self.uplink, update.tensors, self.workspace.device, max_norm=bound
                )
            except WireError as exc:
                self._refuse(client, str(exc))
                continue
            except Exception as exc:  # a decoder bug must not take down the round either
                logger.exception("round %d: decoding the update of %s failed", self._round, client)
                self._refuse(client, f"internal error while decoding: {exc!r}")
                continue
            decoded[client] = (delta, update.metrics["num_examples"])
        return decoded

    def _refuse(self, client: int, reason: str) -> None:
        self._accepted.remove(client)
        self._rejected[client] = reason
        logger.warning("round %d: rejected update from %s: %s", self._round, client, reason)

    def _contribute(
        self, delivered: dict[int, Contribution]
    ) -> tuple[dict[int, Contribution], AggregatorState]:
        """The server half's contributions (delivered, plus any stand-ins) and memory."""
        state = self.state
        contributions, memory = self.half.contribute(
            delivered, self._silent, Memory(state.stale, state.stale_examples)
        )
        return contributions, state._replace(stale=memory.updates, stale_examples=memory.examples)

    def _average(self, contributions: Mapping[int, Contribution]) -> dict[str, torch.Tensor]:
        """The round's rule's aggregate of the contributions ({} when there are none)."""
        if not contributions:
            return {}
        ordered = [contributions[c] for c in sorted(contributions)]
        return self.half.combine(self.rule, len(self._recipients))(ordered)

    def finish_round(self) -> RoundResult:
        """Arbitrates slots, averages the delivered (and reused) updates, applies the step.

        Each update is decoded and bounded first (a refused one is dropped and counted);
        the aggregate is the `aggregation` rule's (by default the mean weighted by each
        update's `num_examples`), taken in client order (not arrival order) so every
        runtime gets the same bits. The policy's server half may change the rule (on a
        random-access uplink the delivered updates are summed with equal weights and divided
        by the number of selected clients instead).
        """
        frame: Frame = self.half.admit(self._updates)
        through, collided = frame.through, frame.collided
        contributions, state = self._contribute(self._decode(through))
        average = self._average(contributions)
        model, momentum = state.model, state.momentum
        if average:
            model, momentum = self.step(model, average, momentum)
            if not all(bool(torch.isfinite(v).all()) for v in model.values()):
                logger.error(
                    "round %d: the aggregate would make the model non-finite; the model and "
                    "the server momentum stay as they were",
                    self._round,
                )
                model, momentum = state.model, state.momentum
        self.state = state._replace(round=self._round, model=model, momentum=momentum)
        result = RoundResult(
            self._round,
            [c for c in self._accepted if c in through],
            dict(self._rejected),
            {c: c in through for c in self._accepted} | dict.fromkeys(self._rejected, False),
            silent=tuple(self._silent),
            reused=tuple(sorted(c for c in contributions if c not in through)),
            collided=tuple(collided),
            slots=frame.stats,
        )
        self._updates = {}
        return result

    def abandon_round(self, reason: str) -> RoundResult:
        """Closes the round without a step: the model stays, every update counts as refused.

        For a runtime whose `finish_round` failed on the server's side; the downlink state
        of the round's broadcast is kept, as clients have it.
        """
        refused = dict.fromkeys(self._accepted, reason) | self._rejected
        self.state = self.state._replace(round=self._round)
        self._updates, self._accepted, self._rejected = {}, [], {}
        return RoundResult(
            self._round,
            [],
            refused,
            dict.fromkeys(refused, False),
            silent=tuple(self._silent),
        )

    def evaluate(self, x: torch.Tensor, y: torch.Tensor) -> Evaluation:
        """Test loss and accuracy of the global model."""
        self.workspace.load(self.state.model)
        return evaluate(self.workspace.model, x, y)
