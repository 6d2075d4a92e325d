"""thinwire's star as a Flower `Strategy`: the Aggregator decides what travels and how it adds up.

`StarStrategy` implements Flower's strategy interface around one `thinwire.runtimes.star.Star`
(the round every runtime drives) and its `thinwire.server.Aggregator`:

- `configure_train` samples the round's clients (`Star.sample`, seeded as in the
  simulator), keeps those whose SuperNode is live, and builds one train message per client
  from its `Star.broadcast` downlink: its downlink bytes, the round, whether its previous
  update counted, and the round its kept state must be at (the last round it was sent a
  train message, `AggregatorState.received`).
- `finish_train` (behind Flower's `aggregate_train`) hands each reply's update bytes to
  `Star.collect` (the Aggregator validates them; a `WireError` drops that update and is
  logged; a reply without update bytes is a censored client, whose last update CSGD reuses,
  or one that kept its update back on a random-access uplink), counts error replies or
  missing ones as dropouts, counts `StateLost` errors (a client whose kept state is missing,
  stale or damaged) and re-synchronizes those clients (the full model and a fresh state when
  next sampled: the server forgets they hold anything), and finishes with `Star.finish`:
  slot arbitration on a random-access uplink, each update decoded and bounded (a refused
  one is counted in `rejected` and the round goes on), then the aggregate in client order
  (arrival order does not matter). It returns the round's `RoundOutcome`. Each client
  learns whether its update counted (its slot outcome) with its next train message. With
  fewer answers than `runtime.min_replies` it restores the server and raises `QuorumError`.
- `configure_evaluate` / `aggregate_evaluate` measure the global model on the clients' own
  data when `runtime.client_eval` is on.

The model lives in the Aggregator, not in the `ArrayRecord`s Flower's loop threads through
(those are ignored on the way in and are a copy of the global model on the way out), so the
strategy runs both under `Strategy.start` (through `aggregate_train`) and under
`thinwire.runtimes.flower.rounds`, the ServerApp's faster loop, which calls `finish_train`
and writes the outcome it returns to the run folder.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from thinwire.codecs.model import ModelCodec
from thinwire.config import Experiment, FlowerRuntime
from thinwire.runtimes.flower.messages import (
    EVALUATE,
    IDENTIFY,
    TRAIN,
    ClientEvaluation,
    TrainReply,
    instruction,
    is_state_lost,
    read_evaluation,
    read_train_reply,
)
from thinwire.runtimes.flower.roster import Roster
from thinwire.runtimes.star import Star, StarOutcome
from thinwire.server import Aggregator, RoundResult
from thinwire.wire import Kind, Update, WireError, encode

__all__ = ["EvaluationOutcome", "QuorumError", "RoundOutcome", "StarStrategy"]

logger = logging.getLogger(__name__)


class QuorumError(RuntimeError):
    """Fewer clients answered than `runtime.min_replies` asks for; the run cannot go on."""


class RoundOutcome(NamedTuple):
    """What one training round did, for the run folder."""

    round: int
    participants: list[int]  # clients sent a train message, sorted
    bytes_down: dict[int, int]  # client -> downlink bytes sent to it
    bytes_up: dict[int, int]  # client -> update bytes received from it
    replies: dict[int, TrainReply]  # clients that answered in good form
    rejected: dict[int, str]  # client -> why its update (or whole reply) was refused
    dropped: dict[int, str]  # client -> why it did not answer
    result: RoundResult  # the Aggregator's account: silent, reused, collided, slot use
    state_lost: dict[int, str] = {}  # client -> why its kept state was unusable (re-synced)


class EvaluationOutcome(NamedTuple):
    """What one round's evaluation on the clients' own data found."""

    accuracy: float  # weighted by the clients' examples; NaN if none answered
    loss: float
    clients: int  # clients that answered
    bytes_down: int  # model bytes sent to evaluate


class _OpenRound(NamedTuple):
    round: int
    messages: dict[int, Message]  # client -> its message (ids are set once pushed)


class StarStrategy(Strategy):
    """thinwire's star as a Flower Strategy; see the module docstring.

    Args:
        experiment: the run's experiment (its `runtime`, if `flower`, sets quorum and TTLs).
        aggregator: the server's round logic and global model.
        roster: which node serves which client; shared with the loop that identifies them.
        delivered: for each client told nothing yet, whether its last update counted (a
            resumed run's, from its checkpoint).
    """

    def __init__(
        self,
        *,
        experiment: Experiment,
        aggregator: Aggregator,
        roster: Roster | None = None,
        delivered: Mapping[int, bool] | None = None,
    ) -> None:
        runtime = experiment.runtime
        self.settings = runtime if isinstance(runtime, FlowerRuntime) else FlowerRuntime()
        self.experiment = experiment
        self.star = Star(experiment=experiment, aggregator=aggregator, delivered=delivered)
        self.roster = roster if roster is not None else Roster(experiment.data.clients)
        self.dense = ModelCodec.dense(aggregator.workspace.spec)
        self.first_round = aggregator.state.round + 1  # the round whose clients start cold
        self._open: _OpenRound | None = None
        self._evaluating: dict[int, Message] = {}
        self._evaluation_bytes = 0

    @property
    def aggregator(self) -> Aggregator:
        """The server's round logic and global model."""
        return self.star.aggregator

    def deadline_s(self, server_round: int) -> float:
        """How long `server_round` waits for its replies (the first round, longer)."""
        settings = self.settings
        if server_round != self.first_round:
            return settings.round_timeout_s
        first = settings.first_round_timeout_s
        return first if first is not None else 2 * settings.round_timeout_s

    # ------------------------------------------------------------------ training

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """One train message per sampled, live client (`arrays` and `config` are unused)."""
        del arrays, config  # the model is the Aggregator's; thinwire sends its own bytes
        if not self.roster.live():
            self.identify(grid)
        sampled = self.star.sample(server_round)
        live = set(self.roster.live())
        participants = [c for c in sampled if c in live]
        if len(participants) < len(sampled):
            absent = sorted(set(sampled) - live)
            logger.warning("round %d: sampled clients %s are not connected", server_round, absent)
        downlink = self.star.broadcast(server_round, participants)
        messages = {
            c: Message(
                instruction(d.data, server_round, d.delivered, state_round=d.state_round),
                self.roster.node(c),
                TRAIN,
                ttl=self.deadline_s(server_round),
                group_id=str(server_round),
            )
            for c, d in downlink.items()
        }
        self._open = _OpenRound(server_round, messages)
        return list(messages.values())

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Flower's interface to `finish_train`: the new global model and the round's metrics.

        Raises:
            QuorumError: fewer than `runtime.min_replies` clients answered; the server is
                left as it was before the round.
        """
        outcome = self.finish_train(server_round, replies)
        losses = [r.train_loss for r in outcome.replies.values()]
        metrics = MetricRecord(
            {
                "train-loss": sum(losses) / len(losses) if losses else math.nan,
                "bytes-up": sum(outcome.bytes_up.values()),
                "bytes-down": sum(outcome.bytes_down.values()),
                "updates": len(outcome.bytes_up),
                "censored": len(outcome.result.silent),
                "rejected": len(outcome.rejected),
                "dropouts": len(outcome.dropped),
                "state-lost": len(outcome.state_lost),
            }
        )
        return ArrayRecord({k: v.detach().cpu() for k, v in self.aggregator.model.items()}), metrics

    def finish_train(self, server_round: int, replies: Iterable[Message]) -> RoundOutcome:
        """Validates and averages the round's updates; returns what the round did.

        Raises:
            QuorumError: fewer than `runtime.min_replies` clients answered; the server is
                left as it was before the round.
        """
        open = self._open
        if open is None or open.round != server_round:
            raise ValueError(f"finish_train({server_round}) without configure_train first")
        self._open = None
        clients = {m.metadata.message_id: c for c, m in open.messages.items()}
        trained: dict[int, TrainReply] = {}
        rejected: dict[int, str] = {}
        dropped: dict[int, str] = {}
        lost: dict[int, str] = {}
        for reply in replies:
            client = clients.get(reply.metadata.reply_to_message_id)
            if client is None or any(client in seen for seen in (trained, rejected, dropped, lost)):
                continue  # not an answer to this round's messages (or a second one)
            if reply.has_error() and is_state_lost(reply.error.reason or ""):
                lost[client] = reply.error.reason or ""
                logger.warning(
                    "round %d: client %d lost its state, re-synchronizing it: %s",
                    server_round,
                    client,
                    lost[client],
                )
                continue
            if reply.has_error():
                dropped[client] = f"error {reply.error.code}: {reply.error.reason}"
                continue
            try:
                answer = read_train_reply(reply.content)
            except WireError as exc:
                rejected[client] = str(exc)
                self.star.refuse(client)
                logger.warning(
                    "round %d: client %d: malformed reply: WireError: %s", server_round, client, exc
                )
                continue
            trained[client] = answer
            # No update: censored, or no slot (CSGD may reuse its last).
            receipt = self.star.collect(client, answer.update)
            if answer.update is not None and not receipt.accepted:
                rejected[client] = str(receipt.error)
                logger.warning(
                    "round %d: client %d: update dropped: WireError: %s",
                    server_round,
                    client,
                    receipt.error,
                )
        for client in open.messages:
            if not any(client in seen for seen in (trained, rejected, dropped, lost)):
                dropped[client] = "no reply by the deadline"
        for client, reason in sorted(dropped.items()):
            logger.warning("client %d dropped out: %s", client, reason)
            self.roster.drop(client)
        answered = len(set(trained) | set(rejected) | set(lost))
        if answered < self.settings.min_replies:
            self.star.cancel()
            raise QuorumError(
                f"round {server_round}: {answered} of {len(open.messages)} clients answered "
                f"within {self.deadline_s(server_round):g} s; runtime.min_replies is "
                f"{self.settings.min_replies}"
            )
        finished = self._finish(server_round)
        rejected.update(finished.result.rejected)  # refused on arrival, or decoded and bounded
        self.star.resynchronize(lost)
        return RoundOutcome(
            server_round,
            finished.participants,
            finished.bytes_down,
            finished.bytes_up,
            trained,
            rejected,
            dropped,
            finished.result,
            lost,
        )

    def _finish(self, server_round: int) -> StarOutcome:
        """`Star.finish` (`Aggregator.finish_round`, which confines each update to itself).

        Should the server's own step fail, the round closes with the model unchanged
        instead of ending the run.
        """
        try:
            return self.star.finish()
        except Exception as exc:
            logger.exception(
                "round %d: the server step failed; the model is unchanged", server_round
            )
            return self.star.abandon(f"server step failed: {exc!r}")

    # ------------------------------------------------------------------ evaluation

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """With `runtime.client_eval`: the global model to every live client, on eval rounds."""
        del arrays, config, grid
        rounds, every = self.experiment.train.rounds, self.experiment.train.eval_every
        if not self.settings.client_eval or not (
            server_round % every == 0 or server_round == rounds
        ):
            self._evaluating = {}
            return []
        model = self.aggregator.model
        payloads, _ = self.dense.encode(model, self.dense.init(model))
        data = encode(Update("server", server_round, Kind.MODEL, payloads))
        self._evaluation_bytes = len(data) * len(self.roster.live())
        self._evaluating = {
            c: Message(
                instruction(data, server_round),
                self.roster.node(c),
                EVALUATE,
                ttl=self.settings.round_timeout_s,
                group_id=str(server_round),
            )
            for c in self.roster.live()
        }
        return list(self._evaluating.values())

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> MetricRecord | None:
        """Flower's interface to `finish_evaluate`, as a metric record."""
        summary = self.finish_evaluate(server_round, replies)
        return MetricRecord(
            {
                "accuracy": summary.accuracy,
                "loss": summary.loss,
                "clients": summary.clients,
                "bytes-down": summary.bytes_down,
            }
        )

    def finish_evaluate(self, server_round: int, replies: Iterable[Message]) -> EvaluationOutcome:
        """Accuracy and loss on the clients' data, how many answered, the bytes sent.

        Accuracy and loss are weighted by the clients' examples, NaN if none answered.
        """
        clients = {m.metadata.message_id: c for c, m in self._evaluating.items()}
        results: dict[int, ClientEvaluation] = {}
        for reply in replies:
            client = clients.get(reply.metadata.reply_to_message_id)
            if client is None or reply.has_error():
                continue
            try:
                results[client] = read_evaluation(reply.content)
            except WireError as exc:
                logger.warning(
                    "round %d: client %d: malformed evaluation: %s", server_round, client, exc
                )
        examples = sum(r.num_examples for r in results.values())

        def mean(values: Iterable[float]) -> float:
            return sum(values) / examples if examples else math.nan

        return EvaluationOutcome(
            mean(r.accuracy * r.num_examples for r in results.values()),
            mean(r.loss * r.num_examples for r in results.values()),
            len(results),
            self._evaluation_bytes,
        )

    # ------------------------------------------------------------------ who is there

    def identify(self, grid: Grid) -> None:
        """Asks every connected node which client it serves (waits up to connect_timeout_s).

        Used when Flower's own loop (`Strategy.start`) drives the strategy; thinwire's
        ServerApp identifies nodes while rounds run instead.
        """
        nodes = self.roster.to_ask(grid.get_node_ids())
        ttl = self.settings.round_timeout_s
        messages = [Message(RecordDict(), node, IDENTIFY, ttl=ttl) for node in nodes]
        replies = list(grid.send_and_receive(messages, timeout=self.settings.connect_timeout_s))
        asked = {m.metadata.message_id: n for m, n in zip(messages, nodes, strict=True)}
        answered = set()
        for reply in replies:
            node = asked.get(reply.metadata.reply_to_message_id)
            if node is not None:
                self.on_identity(node, reply)
                answered.add(node)
        for node in set(nodes) - answered:
            self.roster.unanswered(node, "no answer within runtime.connect_timeout_s")

    def on_identity(self, node: int, reply: Message) -> None:
        """Records a node's answer (or error) to an identify query (`Roster.answer`)."""
        self.roster.answer(node, reply)

    def summary(self) -> None:
        """Logs the strategy's settings (Flower calls this when a run starts)."""
        s = self.settings
        logger.info(
            "StarStrategy: %d clients, participation %.2f, min_replies %d, round timeout %g s, "
            "uplink %s, downlink %s",
            self.experiment.data.clients,
            self.experiment.train.participation,
            s.min_replies,
            s.round_timeout_s,
            self.experiment.codec.select.kind,
            self.experiment.downlink.select.kind if self.experiment.downlink else "dense",
        )
