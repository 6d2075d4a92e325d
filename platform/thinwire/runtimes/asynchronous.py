"""The asynchronous star in one process: FedBuff's server on a simulated clock.

`simulate_buffered` drives `thinwire.server.buffered.BufferedServer` with the same `Client`
objects and bytes as the synchronous simulator, in an event loop over simulated time
(deterministic for a seed):

- a task of client c sent at time t arrives at t + downlink(c, bytes down) + compute(c) +
  uplink(c, bytes up): link times from the experiment's `channel` (`thinwire.Channel`),
  compute time `server.speeds.compute_s` times c's speed factor (`client_speeds`: drawn
  once, lognormal with sigma `speeds.spread`, or listed in `speeds.factors`);
- the client trains when it is sent the model (its result depends only on that model and
  its own state, and it has no other task meanwhile), so its update and its size are known
  and the arrival goes into a queue ordered by (time, client);
- arrivals are taken in that order; the server steps after K buffered updates (or when no
  task is left in flight, see `thinwire.server.buffered`), and after each step the server
  starts M - (tasks in flight) clients on the new model: every idle client when M =
  `data.clients` (the ones whose updates the step used, and any refused), otherwise that
  many drawn from the idle clients (`seeding.dispatch_seed` of the new version). A client
  thus waits for the step its update went into before it trains again (FedBuff starts a
  new client at once on the current model; with K = 1 the two are the same).

`train.rounds` counts server steps: the run ends at the `train.rounds`-th step, and tasks
still in flight then are dropped (their downlinks are counted, their updates never arrive).
A round's record covers the time from the previous step to this one: `bytes_down` the
models sent right after the previous step (the initial ones for round 1), `bytes_up` and
`updates_sent` the updates that arrived since, `sim_time_s` the simulated time between the
two steps (so the summary's sum is the run's simulated duration) and `sim_clock_s` the
simulated time of the step, `participants` the tasks started, `buffered` the updates the
step used and `staleness_mean` / `staleness_max` their tau, `rejected` the refused ones.
Checkpoints and `--resume` are refused (validation): the state between steps includes
tasks in flight.
"""

from __future__ import annotations

import heapq
import logging
import math
import time
from collections.abc import Callable

import torch

from thinwire.channel import Channel
from thinwire.clients import Client, ClientResult, build_client
from thinwire.config import BufferedAsync, Experiment
from thinwire.learning import Federation
from thinwire.metrics import RoundCounts, RoundRecord, round_record
from thinwire.seeding import client_speed_seed, dispatch_seed
from thinwire.server.buffered import BufferedServer, Step

__all__ = ["choose_idle", "client_speeds", "simulate_buffered", "step_counts"]

logger = logging.getLogger(__name__)


def client_speeds(experiment: Experiment) -> list[float]:
    """Each client's simulated compute seconds per task: `compute_s` times its factor."""
    section = experiment.server
    if not isinstance(section, BufferedAsync):
        raise ValueError("client speeds belong to a `server: {kind: buffered_async}` section")
    speeds = section.speeds
    clients = experiment.data.clients
    if speeds.factors is not None:
        factors = list(speeds.factors)
    else:
        generator = torch.Generator().manual_seed(client_speed_seed(experiment.seed))
        normal = torch.randn(clients, generator=generator, dtype=torch.float64)
        factors = torch.exp(speeds.spread * normal).tolist()
    return [speeds.compute_s * f for f in factors]


def choose_idle(experiment: Experiment, idle: list[int], count: int, version: int) -> list[int]:
    """`count` of the `idle` clients to start on `version`'s model, sorted.

    All of them when there are no more than `count` (always, with M = clients); otherwise a
    draw without replacement seeded by (experiment seed, version), the same in every runtime.
    """
    pool = sorted(idle)
    if count >= len(pool):
        return pool
    generator = torch.Generator().manual_seed(dispatch_seed(experiment.seed, version))
    order = torch.randperm(len(pool), generator=generator)[:count].tolist()
    return sorted(pool[i] for i in order)


def step_counts(step: Step, started: int) -> RoundCounts:
    """The record keys of a server step besides the core ones."""
    taus = [a.staleness for a in step.arrivals]
    return RoundCounts(
        participants=started,
        rejected=len(step.rejected),
        buffered=len(step.arrivals),
        staleness_mean=sum(taus) / len(taus) if taus else math.nan,
        staleness_max=max(taus, default=0),
    )


def simulate_buffered(
    experiment: Experiment,
    federation: Federation,
    on_round: Callable[[RoundRecord], None] | None = None,
) -> tuple[list[RoundRecord], BufferedServer, list[Client]]:
    """Runs an asynchronous star experiment; returns its records, server and clients."""
    section = experiment.server
    if not isinstance(section, BufferedAsync):
        raise ValueError("simulate_buffered needs a `server: {kind: buffered_async}` section")
    workspace = federation.workspace
    clients = [
        build_client(index=i, experiment=experiment, x=x, y=y, workspace=workspace)
        for i, (x, y) in enumerate(federation.all_client_data())
    ]
    server = BufferedServer(
        experiment=experiment,
        workspace=workspace,
        initial=workspace.tensors(),
        examples={c.index: int(c.x.shape[0]) for c in clients},
    )
    channel = Channel(experiment.channel, len(clients))
    compute = client_speeds(experiment)
    concurrency = section.in_flight(len(clients))
    x_test, y_test = federation.test_data()
    rounds = experiment.train.rounds

    queue: list[tuple[float, int, bytes | None]] = []  # (arrival time, client, update)
    results: dict[int, ClientResult] = {}
    clock = last_step = 0.0
    cum_up = cum_down = 0

    def start(now: float) -> tuple[int, int]:
        """Starts tasks up to M; returns (tasks started, bytes sent down)."""
        busy = set(server.in_flight)
        idle = [c for c in range(len(clients)) if c not in busy]
        chosen = choose_idle(experiment, idle, concurrency - len(busy), server.version)
        down = 0
        for c in chosen:
            sent = server.dispatch(c)
            result = clients[c].train_round(sent.data, sent.round, delivered=sent.delivered)
            results[c] = result
            up = len(result.data) if result.data is not None else 0
            arrive = (
                now
                + channel.downlink_s(c, len(sent.data))
                + compute[c]
                + (channel.uplink_s(c, up) if result.data is not None else 0.0)
            )
            heapq.heappush(queue, (arrive, c, result.data))
            down += len(sent.data)
        return len(chosen), down

    started, down = start(0.0)
    wall = time.perf_counter()
    up = sent_updates = 0
    losses: dict[int, float] = {}
    compute_s = 0.0
    records: list[RoundRecord] = []
    while server.version < rounds:
        if not (server.full or server.idle):
            clock, c, data = heapq.heappop(queue)
            result = results.pop(c)
            losses[c] = result.train_loss
            compute_s = max(compute_s, result.compute_s)
            if data is None:
                server.drop(c)  # cannot happen with policy 'always'; counted as a dropout
                continue
            up += len(data)
            sent_updates += 1
            server.receive(c, data)
            continue
        step = server.step()
        cum_up += up
        cum_down += down
        round = step.version
        evaluated = round % experiment.train.eval_every == 0 or round == rounds
        record = round_record(
            round=round,
            evaluation=server.evaluate(x_test, y_test) if evaluated else None,
            train_losses=[losses[c] for c in sorted(losses)],
            bytes_up=up,
            bytes_down=down,
            cum_bytes_up=cum_up,
            cum_bytes_down=cum_down,
            updates_sent=sent_updates,
            sim_time_s=clock - last_step,
            compute_s=compute_s,
            wall_s=time.perf_counter() - wall,
            **step_counts(step, started),
        )
        record.update(RoundCounts(sim_clock_s=clock))
        records.append(record)
        if on_round is not None:
            on_round(record)
        wall, last_step = time.perf_counter(), clock
        up = sent_updates = 0
        losses, compute_s = {}, 0.0
        started, down = start(clock) if round < rounds else (0, 0)
    if queue:
        logger.info("%d task(s) still in flight when the last step was taken", len(queue))
    return records, server, clients
