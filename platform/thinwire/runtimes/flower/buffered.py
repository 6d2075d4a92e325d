"""The asynchronous star on Flower: FedBuff's server over a grid, in real arrival order.

`FlowerBuffered` is the ServerApp's loop for an experiment with `server: {kind:
buffered_async}`. It keeps M train messages in flight (one per client, pushed one at a
time through `thinwire.runtimes.flower.exchange.Exchange`), hands each reply to
`thinwire.server.buffered.BufferedServer` the moment it is pulled, steps after every K
buffered updates (inside the reply's handler, so a pull that brings several replies
still steps after exactly K of them, in the order they came) and sends the freed clients
the new model, chosen as the simulator chooses them (`choose_idle`). Its messages and its
ClientApp are the synchronous star's: a train message names the task's round (the version
it starts from, plus one) and the round of the client's previous task, which its kept
state must be at (`thinwire.runtimes.flower.state`).

Nothing stalls the buffer:

- a task not answered within `runtime.round_timeout_s` (the first tasks,
  `runtime.first_round_timeout_s`) is given up: a dropout, its node asked to identify
  itself again before it gets another task; an error reply is a dropout too, and a
  `StateLost` one is counted and the client re-synchronized;
- a malformed reply or a refused update is counted in `rejected`;
- when no task is left in flight the server steps on what its buffer holds. If nothing at
  all came back since the last step (every task dropped), the run stops with a
  `QuorumError`, as a synchronous round with fewer than `runtime.min_replies` answers does.

Here arrival order is real, so a run equals the simulator's only where the order cannot
matter (M = 1, or K = M = `data.clients`; tests/runtimes/flower/test_buffered_rounds.py). Its
records have the simulator's keys but `sim_clock_s`; `sim_time_s` is the channel's time of
the step's transfers as a synchronous round counts it, `wall_s` the real time between
steps. `--resume` is refused (a step leaves tasks in flight).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import torch
from flwr.app import Message, RecordDict
from flwr.serverapp import Grid

from thinwire.channel import Channel
from thinwire.config import BufferedAsync, Experiment, FlowerRuntime
from thinwire.learning import Federation, simulation_threads, torch_threads
from thinwire.metrics import RoundCounts, RoundRecord, RunRecorder, round_record, schema
from thinwire.runtimes.asynchronous import choose_idle, step_counts
from thinwire.runtimes.flower.exchange import Exchange
from thinwire.runtimes.flower.messages import (
    IDENTIFY,
    TRAIN,
    TrainReply,
    instruction,
    is_state_lost,
    read_train_reply,
)
from thinwire.runtimes.flower.roster import Roster
from thinwire.runtimes.flower.strategy import QuorumError
from thinwire.server.buffered import BufferedServer
from thinwire.wire import WireError

__all__ = ["FlowerBuffered"]

logger = logging.getLogger(__name__)

_LIST_NODES_EVERY_S = 1.0
"""How often the SuperLink is asked for newly connected nodes while tasks run."""


class _Task(NamedTuple):
    client: int
    deadline: float  # time.monotonic() after which the task is given up


class _Interval:
    """What happened between two steps, for the step's record."""

    def __init__(self) -> None:
        self.started = 0
        self.down: dict[int, int] = {}  # client -> downlink bytes (one task per client)
        self.up: dict[int, int] = {}  # client -> update bytes received
        self.replies: dict[int, TrainReply] = {}
        self.dropped: dict[int, str] = {}
        self.state_lost: dict[int, str] = {}
        self.answers = 0  # replies that were not dropouts
        self.start = time.perf_counter()


class FlowerBuffered:
    """Runs an asynchronous star experiment over a Flower grid; see the module docstring."""

    def __init__(
        self,
        *,
        grid: Grid,
        experiment: Experiment,
        federation: Federation,
        recorder: RunRecorder,
        resume: Path | None = None,
    ) -> None:
        section = experiment.server
        if not isinstance(section, BufferedAsync):
            raise ValueError("FlowerBuffered runs an experiment with server.kind buffered_async")
        if resume is not None:
            raise ValueError(
                "--resume continues a synchronous star; an asynchronous server's run "
                "(server.kind buffered_async) has tasks in flight at every step: run it again"
            )
        self.grid = grid
        self.experiment = experiment
        self.federation = federation
        self.recorder = recorder
        runtime = experiment.runtime
        self.settings = runtime if isinstance(runtime, FlowerRuntime) else FlowerRuntime()
        workspace = federation.workspace
        self.server = BufferedServer(
            experiment=experiment, workspace=workspace, initial=workspace.tensors()
        )
        self.concurrency = section.in_flight(experiment.data.clients)
        self.roster = Roster(experiment.data.clients)
        self.channel = Channel(experiment.channel, experiment.data.clients)
        self.exchange = Exchange(grid, poll_interval_s=self.settings.poll_interval_s)
        self._tasks: dict[str, _Task] = {}  # train message id -> its task
        self._identifying: dict[str, int] = {}  # identify message id -> node
        self._interval = _Interval()
        self._cum_up = self._cum_down = 0
        self._listed_at = -_LIST_NODES_EVERY_S

    def run(self) -> dict[str, torch.Tensor]:
        """Runs `train.rounds` server steps and returns the final global model."""
        with torch_threads(simulation_threads(self.experiment)):
            return self._run()

    # ------------------------------------------------------------------ the loop

    def _run(self) -> dict[str, torch.Tensor]:
        settings = self.settings
        self._await(self.roster.complete, settings.connect_timeout_s, "to connect")
        if not self.roster.live():
            raise QuorumError(f"no client connected within {settings.connect_timeout_s:g} s")
        rounds = self.experiment.train.rounds
        self._start()
        while self.server.version < rounds:
            if not self._tasks:  # every live client is busy elsewhere or none is live
                if not self._await(self._idle_live, settings.round_timeout_s, "to train"):
                    raise QuorumError(
                        f"version {self.server.version}: no client to train within "
                        f"{settings.round_timeout_s:g} s"
                    )
                self._start()
                continue
            self._list_nodes()
            deadline = min(task.deadline for task in self._tasks.values())
            self.exchange.wait(
                self._stepped(self.server.version),
                min(deadline, time.monotonic() + _LIST_NODES_EVERY_S),
            )
            self._expire()
        self.exchange.forget(list(self._tasks))
        if self._tasks:
            logger.info("%d task(s) still in flight after the last step", len(self._tasks))
        return self.server.model

    def _stepped(self, version: int) -> Callable[[], bool]:
        """Whether the server moved past `version`, or has no task left to wait for."""
        return lambda: self.server.version != version or not self._tasks

    def _idle_live(self) -> bool:
        return any(self._can_start(c) for c in self.roster.live())

    def _can_start(self, client: int) -> bool:
        """Idle, and not yet sent the current version (one task per client and version)."""
        server = self.server
        return client not in server.in_flight and server.last_round.get(client) != (
            server.version + 1
        )

    def _start(self) -> None:
        """Starts tasks on the current model, up to M, at live idle clients."""
        server = self.server
        idle = [c for c in self.roster.live() if self._can_start(c)]
        chosen = choose_idle(
            self.experiment, idle, self.concurrency - len(server.in_flight), server.version
        )
        if not chosen:
            return
        first = self.settings.first_round_timeout_s
        timeout = self.settings.round_timeout_s
        if server.version == 0:
            timeout = first if first is not None else 2 * timeout
        messages = []
        for c in chosen:
            sent = server.dispatch(c)
            self._interval.down[c] = len(sent.data)
            content = instruction(
                sent.data, sent.round, sent.delivered, state_round=sent.state_round
            )
            messages.append(
                Message(content, self.roster.node(c), TRAIN, ttl=timeout, group_id=str(sent.round))
            )
        self._interval.started += len(chosen)
        ids = self.exchange.push(messages, self._on_reply)
        deadline = time.monotonic() + timeout
        for c, message_id in zip(chosen, ids, strict=True):
            if message_id:
                self._tasks[message_id] = _Task(c, deadline)
            else:
                self._drop(c, "the SuperLink refused the train message")
        self._settle()

    def _on_reply(self, reply: Message) -> None:
        task = self._tasks.pop(reply.metadata.reply_to_message_id, None)
        if task is None:
            return  # a task given up already
        client, server, interval = task.client, self.server, self._interval
        interval.answers += int(not reply.has_error() or is_state_lost(reply.error.reason or ""))
        if reply.has_error() and is_state_lost(reply.error.reason or ""):
            interval.state_lost[client] = reply.error.reason or ""
            logger.warning("client %d lost its state, re-synchronizing it", client)
            server.drop(client)
            server.resynchronize(client)
        elif reply.has_error():
            self._drop(client, f"error {reply.error.code}: {reply.error.reason}")
        else:
            try:
                answer = read_train_reply(reply.content)
            except WireError as exc:
                server.refuse(client, f"malformed reply: {exc}")
            else:
                interval.replies[client] = answer
                if answer.update is None:
                    server.refuse(client, "a train reply without an update")
                else:
                    interval.up[client] = len(answer.update)
                    server.receive(client, answer.update)
        self._settle()

    def _expire(self) -> None:
        now = time.monotonic()
        late = [i for i, task in self._tasks.items() if task.deadline <= now]
        self.exchange.forget(late)
        for message_id in late:
            self._drop(self._tasks.pop(message_id).client, "no reply by the deadline")
        if late:
            self._settle()

    def _drop(self, client: int, reason: str) -> None:
        logger.warning("client %d dropped out: %s", client, reason)
        self._interval.dropped[client] = reason
        self.server.drop(client)
        self.roster.drop(client)

    def _settle(self) -> None:
        """Steps when the buffer is full (or nothing is in flight), then starts tasks."""
        server, interval = self.server, self._interval
        if server.version >= self.experiment.train.rounds or not (server.full or server.idle):
            return
        if not server.full and not interval.answers:
            if not interval.dropped:
                return  # nothing has been started since the last step
            raise QuorumError(
                f"version {server.version}: none of the {len(interval.dropped)} tasks since "
                "the last step came back"
            )
        self.recorder.add(self._record())
        if server.version < self.experiment.train.rounds:
            self._start()

    def _record(self) -> RoundRecord:
        step = self.server.step()
        interval, self._interval = self._interval, _Interval()
        up, down = sum(interval.up.values()), sum(interval.down.values())
        self._cum_up += up
        self._cum_down += down
        rounds = self.experiment.train.rounds
        evaluated = step.version % self.experiment.train.eval_every == 0 or step.version == rounds
        evaluation = self.server.evaluate(*self.federation.test_data()) if evaluated else None
        replies = interval.replies
        record = round_record(
            round=step.version,
            evaluation=evaluation,
            train_losses=[replies[c].train_loss for c in sorted(replies)],
            bytes_up=up,
            bytes_down=down,
            cum_bytes_up=self._cum_up,
            cum_bytes_down=self._cum_down,
            updates_sent=len(interval.up),
            sim_time_s=self.channel.round_s(interval.down, interval.up),
            compute_s=max((r.compute_s for r in replies.values()), default=0.0),
            wall_s=time.perf_counter() - interval.start,
            **step_counts(step, interval.started),
        )
        record.update(
            RoundCounts(dropouts=len(interval.dropped), state_lost=len(interval.state_lost))
        )
        logger.info(
            "step %d/%d: accuracy %.4f, %d buffered (staleness max %d), %d B up, %d B down",
            step.version,
            rounds,
            record[schema.ACCURACY],
            len(step.arrivals),
            record.get(schema.STALENESS_MAX, 0),
            up,
            down,
        )
        return record

    # ------------------------------------------------------------------ who is there

    def _await(self, done: Callable[[], bool], timeout_s: float, purpose: str) -> bool:
        """Identifies newly connected nodes until `done()` or `timeout_s` passed."""
        deadline = time.monotonic() + timeout_s
        while True:
            self._list_nodes(force=True)
            if done():
                return True
            if self.exchange.wait(done, min(deadline, time.monotonic() + _LIST_NODES_EVERY_S)):
                return True
            if time.monotonic() >= deadline:
                logger.warning("waited %g s for clients %s", timeout_s, purpose)
                return False

    def _list_nodes(self, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._listed_at < _LIST_NODES_EVERY_S:
            return
        self._listed_at = now
        nodes = self.roster.to_ask(self.grid.get_node_ids())
        if not nodes:
            return
        ttl = self.settings.round_timeout_s
        messages = [Message(RecordDict(), node, IDENTIFY, ttl=ttl) for node in nodes]
        for node, message_id in zip(
            nodes, self.exchange.push(messages, self._on_identity), strict=True
        ):
            if message_id:
                self._identifying[message_id] = node
            else:
                self.roster.unanswered(node, "the SuperLink refused the query")

    def _on_identity(self, reply: Message) -> None:
        self.roster.answer(self._identifying.pop(reply.metadata.reply_to_message_id), reply)
