"""The star's round loop on a Flower grid: the simulator's loop, with real messages.

`FlowerStar.run` drives the same `Aggregator` as `thinwire.simulate`, in the same order, so
a seeded experiment gives the same model and the same byte counts in both runtimes. Per round:

1. Sample the round's clients (`sample_clients`, seeded as in the simulator) and keep those
   whose SuperNode is live (`Roster`).
2. `Aggregator.broadcast` gives each participant its downlink bytes; they go down in a train
   message with the round number and whether that client's previous update counted.
3. Replies are pulled every `poll_interval_s` until every participant has answered or
   `round_timeout_s` has passed. Update bytes go to `Aggregator.receive`, which validates
   them (a `WireError` drops that update, is counted and logged, and the run goes on). A
   reply without update bytes means the client's policy kept silent. An error reply, or
   none by the deadline, is a dropout: that client is left out until it answers again.
4. With at least `min_replies` answers the round is averaged (`finish_round`, in client
   order, so arrival order does not matter); with fewer, the run stops after writing a
   checkpoint it can resume from.
5. The global model is evaluated on the held-out set (and, with `client_eval`, on every
   live client's own data), the round record goes to the run folder, and every
   `checkpoint_every` rounds a checkpoint is written.

Bytes in the records are `len()` of the update and downlink bytes that travelled.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from pathlib import Path

import torch
from flwr.app import Message, RecordDict
from flwr.common.constant import ErrorCode
from flwr.serverapp import Grid

from thinwire.channel import Channel
from thinwire.codecs.model import ModelCodec
from thinwire.config import Experiment, FlowerRuntime
from thinwire.learning import Federation
from thinwire.metrics import Record, RunRecorder
from thinwire.server.aggregator import Aggregator
from thinwire.server.checkpoint import checkpoint_path, load_checkpoint, save_checkpoint
from thinwire.server.flower_exchange import Exchange
from thinwire.server.flower_messages import (
    EVALUATE,
    IDENTIFY,
    TRAIN,
    ClientEvaluation,
    TrainReply,
    instruction,
    read_evaluation,
    read_identity,
    read_train_reply,
)
from thinwire.server.flower_roster import Roster
from thinwire.server.sampling import sample_clients
from thinwire.wire import Kind, Update, WireError, encode

__all__ = ["FlowerStar", "QuorumError"]

logger = logging.getLogger(__name__)

_LIST_NODES_EVERY_S = 1.0
"""While waiting for clients, how often the SuperLink is asked for newly connected nodes."""

_TRANSIENT = frozenset(
    {ErrorCode.MESSAGE_UNAVAILABLE, ErrorCode.REPLY_MESSAGE_UNAVAILABLE, ErrorCode.NODE_UNAVAILABLE}
)
"""Error codes the SuperLink gives for lost messages, as opposed to a ClientApp's failure."""


class QuorumError(RuntimeError):
    """Fewer clients answered than `runtime.min_replies` asks for; the run cannot go on."""


class _Replies:
    """One message fan-out: which client each message went to and what came back."""

    def __init__(self, on_answer: Callable[[int, Message], None]) -> None:
        self.pending: dict[str, int] = {}  # message id -> client
        self.dropped: dict[int, str] = {}  # client -> why it did not answer
        self.on_answer = on_answer

    def on_reply(self, reply: Message) -> None:
        client = self.pending.pop(reply.metadata.reply_to_message_id)
        if reply.has_error():
            self.dropped[client] = f"error {reply.error.code}: {reply.error.reason}"
        else:
            self.on_answer(client, reply)

    def done(self) -> bool:
        return not self.pending


class FlowerStar:
    """Runs an experiment's rounds over a Flower grid; see the module docstring."""

    def __init__(
        self,
        *,
        grid: Grid,
        experiment: Experiment,
        federation: Federation,
        recorder: RunRecorder,
        resume: Path | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        runtime = experiment.runtime
        self.settings = runtime if isinstance(runtime, FlowerRuntime) else FlowerRuntime()
        self.experiment = experiment
        self.federation = federation
        self.recorder = recorder
        self.checkpoints = recorder.dir / "checkpoints"
        self.grid = grid
        self.clock = clock
        workspace = federation.workspace
        self.aggregator = Aggregator(
            experiment=experiment, workspace=workspace, initial=workspace.tensors()
        )
        self.cum_up = self.cum_down = 0
        if resume is not None:
            checkpoint = load_checkpoint(resume, self.aggregator)
            self.aggregator.state = checkpoint.state
            self.cum_up, self.cum_down = checkpoint.cum_bytes_up, checkpoint.cum_bytes_down
        self.dense = ModelCodec.dense(workspace.spec)
        self.channel = Channel(experiment.channel, experiment.data.clients)
        self.exchange = Exchange(grid, poll_interval_s=self.settings.poll_interval_s, clock=clock)
        self.roster = Roster(experiment.data.clients)
        self.outcomes: dict[int, bool] = {}  # client -> did its last update count
        self._identifying: dict[str, int] = {}  # identify message id -> node

    # ------------------------------------------------------------------ the run

    def run(self) -> dict[str, torch.Tensor]:
        """Runs the remaining rounds and returns the final global model."""
        settings = self.settings
        self._await_clients(
            self.roster.complete, self.clock() + settings.connect_timeout_s, "to connect"
        )
        live = self.roster.live()
        if len(live) < settings.min_replies:
            raise QuorumError(
                f"{len(live)} of {self.roster.clients} clients connected within "
                f"{settings.connect_timeout_s:g} s; runtime.min_replies is {settings.min_replies}"
            )
        if not self.roster.complete():
            missing = sorted(set(range(self.roster.clients)) - set(live))
            logger.warning("starting without clients %s (not connected)", missing)
        rounds = self.experiment.train.rounds
        for round in range(self.aggregator.state.round + 1, rounds + 1):
            record = self._round(round)
            self.recorder.add(record)
            logger.info(
                "round %d/%d: accuracy %.4f, %d updates, %d B up, %d B down, %.2f s",
                round,
                rounds,
                record["accuracy"],
                record["updates_sent"],
                record["bytes_up"],
                record["bytes_down"],
                record["wall_s"],
            )
            every = settings.checkpoint_every
            if every and (round % every == 0 or round == rounds):
                self._checkpoint()
        return self.aggregator.model

    def _checkpoint(self) -> Path:
        state = self.aggregator.state
        path = checkpoint_path(self.checkpoints, state.round)
        save_checkpoint(
            path,
            name=self.experiment.name,
            state=state,
            cum_bytes_up=self.cum_up,
            cum_bytes_down=self.cum_down,
        )
        return path

    # ------------------------------------------------------------------ one round

    def _round(self, round: int) -> Record:
        start = time.perf_counter()
        settings = self.settings
        deadline = self.clock() + settings.round_timeout_s
        sampled = sample_clients(self.experiment, round)
        needed = min(settings.min_replies, len(sampled))

        def enough_live() -> bool:
            return len(set(sampled) & set(self.roster.live())) >= needed

        self._await_clients(enough_live, deadline, f"for round {round}")
        live = set(self.roster.live())
        participants = [c for c in sampled if c in live]
        if len(participants) < len(sampled):
            absent = sorted(set(sampled) - live)
            logger.warning("round %d: sampled clients %s are not connected", round, absent)
        before = self.aggregator.state
        downlink = self.aggregator.broadcast(round, participants)

        trained: dict[int, TrainReply] = {}
        malformed: dict[int, str] = {}

        def on_answer(client: int, reply: Message) -> None:
            try:
                answer = read_train_reply(reply.content)
            except WireError as exc:
                malformed[client] = str(exc)
                logger.warning(
                    "round %d: client %d: malformed reply: WireError: %s", round, client, exc
                )
                return
            trained[client] = answer
            if answer.update is not None:
                receipt = self.aggregator.receive(client, answer.update)
                if not receipt.accepted:
                    logger.warning(
                        "round %d: client %d: update dropped: WireError: %s",
                        round,
                        client,
                        receipt.error,
                    )

        messages = {
            c: Message(
                instruction(downlink[c], round, self.outcomes.pop(c, None)),
                self.roster.node(c),
                TRAIN,
                ttl=settings.round_timeout_s,
                group_id=str(round),
            )
            for c in participants
        }
        replies = self._fan_out(messages, on_answer, deadline)
        for client in replies.dropped:
            self.roster.drop(client)
        answered = len(trained) + len(malformed)
        if answered < settings.min_replies:
            self.aggregator.state = before
            path = self._checkpoint()
            raise QuorumError(
                f"round {round}: {answered} of {len(participants)} clients answered within "
                f"{settings.round_timeout_s:g} s; runtime.min_replies is {settings.min_replies}. "
                f"Resume with --resume {path}"
            )
        result = self.aggregator.finish_round()
        self.outcomes.update(result.delivered)
        self.outcomes.update(dict.fromkeys(malformed, False))

        up = {c: len(r.update) for c, r in trained.items() if r.update is not None}
        down = {c: len(downlink[c]) for c in participants}
        self.cum_up += sum(up.values())
        self.cum_down += sum(down.values())
        rounds = self.experiment.train.rounds
        evaluated = round % self.experiment.train.eval_every == 0 or round == rounds
        evaluation = self.aggregator.evaluate(*self.federation.test_data()) if evaluated else None
        losses = [r.train_loss for r in trained.values()]
        record: Record = {
            "round": round,
            "accuracy": evaluation.accuracy if evaluation else math.nan,
            "loss": evaluation.loss if evaluation else math.nan,
            "train_loss": sum(losses) / len(losses) if losses else math.nan,
            "bytes_up": sum(up.values()),
            "bytes_down": sum(down.values()),
            "cum_bytes_up": self.cum_up,
            "cum_bytes_down": self.cum_down,
            "updates_sent": len(up),
            "sim_time_s": self.channel.round_s(down, up),
            "compute_s": max((r.compute_s for r in trained.values()), default=0.0),
            "wall_s": 0.0,
            "participants": len(participants),
            "rejected": len(result.rejected) + len(malformed),
            "dropouts": len(replies.dropped),
        }
        if evaluated and settings.client_eval:
            record.update(self._evaluate_on_clients(round))
        record["wall_s"] = time.perf_counter() - start
        return record

    def _fan_out(
        self,
        messages: dict[int, Message],
        on_answer: Callable[[int, Message], None],
        deadline: float,
    ) -> _Replies:
        """Pushes one message per client and collects the answers until `deadline`."""
        replies = _Replies(on_answer)
        clients = list(messages)
        ids = self.exchange.push([messages[c] for c in clients], replies.on_reply)
        for client, message_id in zip(clients, ids, strict=True):
            if message_id:
                replies.pending[message_id] = client
            else:
                replies.dropped[client] = "the SuperLink refused the message"
        self.exchange.wait(replies.done, deadline)
        self.exchange.forget(list(replies.pending))
        for client in replies.pending.values():
            replies.dropped[client] = "no reply by the deadline"
        for client, reason in sorted(replies.dropped.items()):
            logger.warning("client %d dropped out: %s", client, reason)
        return replies

    def _evaluate_on_clients(self, round: int) -> dict[str, float]:
        """Sends the global model to every live client and averages what they measure."""
        model = self.aggregator.model
        payloads, _ = self.dense.encode(model, self.dense.init(model))
        data = encode(Update("server", round, Kind.MODEL, payloads))
        clients = self.roster.live()
        results: dict[int, ClientEvaluation] = {}

        def on_answer(client: int, reply: Message) -> None:
            try:
                results[client] = read_evaluation(reply.content)
            except WireError as exc:
                logger.warning("round %d: client %d: malformed evaluation: %s", round, client, exc)

        messages = {
            c: Message(
                instruction(data, round),
                self.roster.node(c),
                EVALUATE,
                ttl=self.settings.round_timeout_s,
                group_id=str(round),
            )
            for c in clients
        }
        replies = self._fan_out(messages, on_answer, self.clock() + self.settings.round_timeout_s)
        for client in replies.dropped:
            self.roster.drop(client)
        examples = sum(r.num_examples for r in results.values())
        if not examples:
            return {"client_accuracy": math.nan, "client_loss": math.nan, "eval_bytes_down": 0}
        return {
            "client_accuracy": sum(r.accuracy * r.num_examples for r in results.values())
            / examples,
            "client_loss": sum(r.loss * r.num_examples for r in results.values()) / examples,
            "eval_bytes_down": len(data) * len(clients),
        }

    # ------------------------------------------------------------------ who is there

    def _await_clients(self, done: Callable[[], bool], deadline: float, purpose: str) -> bool:
        """Identifies newly connected nodes until `done()` or `deadline`."""
        waited = False
        while True:
            self._identify_new_nodes()
            if done():
                return True
            if not waited:
                logger.info("waiting up to %.0f s for clients %s", deadline - self.clock(), purpose)
                waited = True
            step = min(deadline, self.clock() + _LIST_NODES_EVERY_S)
            if self.exchange.wait(done, step):
                return True
            if self.clock() >= deadline:
                return False

    def _identify_new_nodes(self) -> None:
        nodes = self.roster.to_ask(self.grid.get_node_ids())
        if not nodes:
            return
        messages = [
            Message(RecordDict(), node, IDENTIFY, ttl=self.settings.round_timeout_s)
            for node in nodes
        ]
        ids = self.exchange.push(messages, self._on_identity)
        for node, message_id in zip(nodes, ids, strict=True):
            if message_id:
                self._identifying[message_id] = node
            else:
                self.roster.unanswered(node, "the SuperLink refused the query")

    def _on_identity(self, reply: Message) -> None:
        node = self._identifying.pop(reply.metadata.reply_to_message_id)
        if reply.has_error():
            reason = f"error {reply.error.code}: {reply.error.reason}"
            if reply.error.code in _TRANSIENT:
                self.roster.unanswered(node, reason)
            else:
                self.roster.refuse(node, reason)
            return
        try:
            self.roster.identified(node, read_identity(reply.content))
        except WireError as exc:
            self.roster.refuse(node, f"malformed identity: {exc}")
