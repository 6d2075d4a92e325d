"""The ServerApp's round loop: `StarStrategy` driven over the grid with a short poll.

`FlowerStar.run` mirrors `thinwire.runtimes.simulation` round for round: both drive the same
`thinwire.runtimes.star.Star` (here inside a `StarStrategy`), so a seeded experiment gives the
same model and the same byte counts in both runtimes. It does what Flower's `Strategy.start`
does, with three differences that matter for a deployment:

- replies are pulled every `runtime.poll_interval_s` (Flower's loop pulls every 3 s, which
  sets the pace of a round on a fast network), and identify queries to nodes that connect
  later are answered while rounds run;
- a round waits until every participant has answered or `runtime.round_timeout_s` passed
  (the first round, whose ClientApps all start cold, `runtime.first_round_timeout_s`);
  a client that has not answered by then drops out (the strategy counts it), and the run
  stops with a checkpoint when fewer than `runtime.min_replies` answered;
- each round's record (bytes: `len()` of the update and downlink bytes that travelled,
  server-side evaluation on the held-out set, client evaluation with `runtime.client_eval`)
  goes to the run folder, and every `runtime.checkpoint_every` rounds a checkpoint.

A client whose reply comes late loses that round's update: the server tells it nothing
about its delivery (rather than risk counting an update twice), as for any dropped update.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict
from flwr.serverapp import Grid

from thinwire.channel import Channel
from thinwire.checkpoint import round_checkpoint_path
from thinwire.config import Experiment
from thinwire.learning import Federation, simulation_threads, torch_threads
from thinwire.metrics import RoundCounts, RoundRecord, RunRecorder, round_record, schema
from thinwire.runtimes.flower.exchange import Exchange
from thinwire.runtimes.flower.messages import IDENTIFY
from thinwire.runtimes.flower.strategy import QuorumError, StarStrategy
from thinwire.runtimes.star import StarCheckpoint, load_star_checkpoint, save_star_checkpoint
from thinwire.server import build_aggregator
from thinwire.server.aggregator import Aggregator

__all__ = ["FlowerStar", "QuorumError"]

logger = logging.getLogger(__name__)

_LIST_NODES_EVERY_S = 1.0
"""While waiting for clients, how often the SuperLink is asked for newly connected nodes."""


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
    ) -> None:
        self.grid = grid
        self.experiment = experiment
        self.federation = federation
        self.recorder = recorder
        self.checkpoints = recorder.dir / "checkpoints"
        workspace = federation.workspace
        aggregator = build_aggregator(
            experiment=experiment, workspace=workspace, initial=workspace.tensors()
        )
        self.cum_up = self.cum_down = 0
        delivered: dict[int, bool] = {}
        if resume is not None:
            checkpoint = load_star_checkpoint(resume, aggregator)
            aggregator.state = checkpoint.state
            self.cum_up, self.cum_down = checkpoint.cum_bytes_up, checkpoint.cum_bytes_down
            delivered = checkpoint.delivered
        self.strategy = StarStrategy(
            experiment=experiment, aggregator=aggregator, delivered=delivered
        )
        self.settings = self.strategy.settings
        self.roster = self.strategy.roster
        self.channel = Channel(experiment.channel, experiment.data.clients)
        self.exchange = Exchange(grid, poll_interval_s=self.settings.poll_interval_s)
        self._identifying: dict[str, int] = {}  # identify message id -> node
        self.spent: dict[int, float] = {}  # client -> privacy spent (epsilon), as reported

    @property
    def aggregator(self) -> Aggregator:
        """The server's round logic and global model."""
        return self.strategy.aggregator

    # ------------------------------------------------------------------ the run

    def run(self) -> dict[str, torch.Tensor]:
        """Runs the remaining rounds and returns the final global model.

        On the simulator's torch thread count (`simulation_threads`): a reduction split over
        another thread count rounds differently, and the run would not equal the simulated one.
        """
        with torch_threads(simulation_threads(self.experiment)):
            return self._run()

    def _run(self) -> dict[str, torch.Tensor]:
        settings = self.settings
        self.strategy.summary()
        self._await_clients(
            self.roster.complete, time.monotonic() + settings.connect_timeout_s, "to connect"
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
                record[schema.ACCURACY],
                record[schema.UPDATES_SENT],
                record[schema.BYTES_UP],
                record[schema.BYTES_DOWN],
                record[schema.WALL_S],
            )
            every = settings.checkpoint_every
            if every and (round % every == 0 or round == rounds):
                self._checkpoint()
        return self.aggregator.model

    def _checkpoint(self) -> Path:
        state = self.aggregator.state
        path = round_checkpoint_path(self.checkpoints, state.round)
        save_star_checkpoint(
            path,
            experiment=self.experiment,
            checkpoint=StarCheckpoint(
                state, self.strategy.star.delivered, self.cum_up, self.cum_down
            ),
        )
        return path

    # ------------------------------------------------------------------ one round

    def _round(self, round: int) -> RoundRecord:
        start = time.perf_counter()
        settings = self.settings
        sampled = set(self.strategy.star.sample(round))
        needed = min(settings.min_replies, len(sampled))
        if not self._await_clients(
            lambda: len(sampled & set(self.roster.live())) >= needed,
            time.monotonic() + settings.round_timeout_s,
            f"for round {round}",
        ):
            path = self._checkpoint()
            live = len(sampled & set(self.roster.live()))
            raise QuorumError(
                f"round {round}: {live} of its {len(sampled)} sampled clients are connected "
                f"after {settings.round_timeout_s:g} s; runtime.min_replies is "
                f"{settings.min_replies}. Resume with --resume {path}"
            )
        messages = self.strategy.configure_train(round, ArrayRecord(), ConfigRecord(), self.grid)
        deadline_s = self.strategy.deadline_s(round)
        try:
            outcome = self.strategy.finish_train(round, self._exchange(list(messages), deadline_s))
        except QuorumError as exc:
            path = self._checkpoint()
            raise QuorumError(f"{exc}. Resume with --resume {path}") from None
        self.cum_up += sum(outcome.bytes_up.values())
        self.cum_down += sum(outcome.bytes_down.values())
        rounds = self.experiment.train.rounds
        evaluated = round % self.experiment.train.eval_every == 0 or round == rounds
        evaluation = self.aggregator.evaluate(*self.federation.test_data()) if evaluated else None
        losses = [r.train_loss for r in outcome.replies.values()]
        record = round_record(
            round=round,
            evaluation=evaluation,
            train_losses=losses,
            bytes_up=sum(outcome.bytes_up.values()),
            bytes_down=sum(outcome.bytes_down.values()),
            cum_bytes_up=self.cum_up,
            cum_bytes_down=self.cum_down,
            updates_sent=len(outcome.bytes_up),
            sim_time_s=self.channel.round_s(outcome.bytes_down, outcome.bytes_up),
            compute_s=max((r.compute_s for r in outcome.replies.values()), default=0.0),
            wall_s=0.0,  # set when the round's evaluation is done too
            participants=len(outcome.participants),
            rejected=len(outcome.rejected),
            dropouts=len(outcome.dropped),
            state_lost=len(outcome.state_lost),
            censored=len(outcome.result.silent),
            reused=len(outcome.result.reused),
        )
        slots = outcome.result.slots
        if slots is not None:
            record.update(
                RoundCounts(
                    slot_successes=slots.successes,
                    slot_collisions=slots.collisions,
                    slot_idle=slots.idle,
                )
            )
        if self.experiment.privacy is not None:
            for client, reply in outcome.replies.items():
                if reply.epsilon is not None:
                    self.spent[client] = reply.epsilon
            record.update(RoundCounts(epsilon=max(self.spent.values(), default=0.0)))
        evaluate = list(
            self.strategy.configure_evaluate(round, ArrayRecord(), ConfigRecord(), self.grid)
        )
        if evaluate:
            found = self.strategy.finish_evaluate(
                round, self._exchange(evaluate, settings.round_timeout_s)
            )
            record.update(
                RoundCounts(
                    client_accuracy=found.accuracy,
                    client_loss=found.loss,
                    eval_bytes_down=found.bytes_down,
                )
            )
        record[schema.WALL_S] = time.perf_counter() - start
        return record

    def _exchange(self, messages: list[Message], deadline_s: float) -> list[Message]:
        """Pushes `messages`; returns the replies that came within `deadline_s`."""
        replies: list[Message] = []
        ids = self.exchange.push(messages, replies.append)
        refused = sum(1 for i in ids if not i)
        if refused:
            logger.warning("the SuperLink refused %d of %d messages", refused, len(ids))
        expected = len(ids) - refused
        deadline = time.monotonic() + deadline_s
        self.exchange.wait(lambda: len(replies) >= expected, deadline)
        self.exchange.forget(ids)
        return replies

    # ------------------------------------------------------------------ who is there

    def _await_clients(self, done: Callable[[], bool], deadline: float, purpose: str) -> bool:
        """Identifies newly connected nodes until `done()` or `deadline`."""
        waited = False
        while True:
            self._identify_new_nodes()
            if done():
                return True
            if not waited:
                logger.info(
                    "waiting up to %.0f s for clients %s", deadline - time.monotonic(), purpose
                )
                waited = True
            if self.exchange.wait(done, min(deadline, time.monotonic() + _LIST_NODES_EVERY_S)):
                return True
            if time.monotonic() >= deadline:
                return False

    def _identify_new_nodes(self) -> None:
        nodes = self.roster.to_ask(self.grid.get_node_ids())
        if not nodes:
            return
        ttl = self.settings.round_timeout_s
        messages = [Message(RecordDict(), node, IDENTIFY, ttl=ttl) for node in nodes]
        ids = self.exchange.push(messages, self._on_identity)
        for node, message_id in zip(nodes, ids, strict=True):
            if message_id:
                self._identifying[message_id] = node
            else:
                self.roster.unanswered(node, "the SuperLink refused the query")

    def _on_identity(self, reply: Message) -> None:
        node = self._identifying.pop(reply.metadata.reply_to_message_id)
        self.strategy.on_identity(node, reply)
