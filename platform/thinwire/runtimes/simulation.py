"""The in-process runtime: every role in one process, every byte really serialized.

`simulate(experiment)` runs the star (a `thinwire.server.Aggregator` and one
`thinwire.clients.Client` per client) round by round. Messages between them are the exact
bytes the network runtimes send: the server's downlink is encoded and each client decodes it
with validation, each update is encoded and the server decodes it with validation. Byte
counts are therefore `len()` of real messages, and a `Channel` turns them into simulated
network time.

All clients share one model workspace (one `nn.Module` on the run's device); a client keeps
only its data indices and its `ClientState`, so memory grows with the state each method
needs (a residual per client for error feedback) and not with model copies.

Besides the core keys (`thinwire.metrics.CORE_KEYS`), a round's record holds `censored`
(selected clients that stayed silent) and `reused` (silent clients whose last update the
server averaged) for every policy, and `rejected` (updates the server refused: malformed,
of the wrong form, claiming more examples than the client holds, or out of bounds);
`slot_successes`, `slot_collisions` and `slot_idle` on a random-access uplink; and
`epsilon` (the largest privacy spent by any client so far) with a `privacy` section.

With `runtime.checkpoint_every` set and a `checkpoints` folder given, the whole state of a
star run is saved every that many rounds (`save_simulation_checkpoint`: a
`thinwire.checkpoint` of kind "simulation"), and `resume` continues from such a file to the
very records and model an uninterrupted run would give.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import torch

from thinwire.channel import Channel
from thinwire.checkpoint import (
    experiment_digest,
    load_checkpoint,
    round_checkpoint_path,
    save_checkpoint,
)
from thinwire.clients import Client, ClientState, VoteClient, build_client
from thinwire.config import Experiment, SimulationRuntime
from thinwire.learning import Federation, load_federation, simulation_threads, torch_threads
from thinwire.metrics import RoundCounts, RoundRecord, round_record
from thinwire.runtimes.star import Star, StarCheckpoint, read_star_state, star_state
from thinwire.server import Aggregator, build_aggregator
from thinwire.statetree import Leaf, flatten, unflatten

if TYPE_CHECKING:  # gossip's modules load only for a decentralized run
    from thinwire.topologies.runtime.reports import NodeReport

__all__ = [
    "SimulationCheckpoint",
    "SimulationResult",
    "load_simulation_checkpoint",
    "save_simulation_checkpoint",
    "simulate",
]

logger = logging.getLogger(__name__)


class SimulationResult(NamedTuple):
    """A finished simulated run."""

    records: list[RoundRecord]
    model: dict[str, torch.Tensor]  # the final global model (gossip: the nodes' average)
    client_states: list[ClientState]  # the star's clients after the last round (gossip: [])
    input_shape: tuple[int, ...]  # one example's shape: with `num_classes`, rebuilds the model
    num_classes: int


def simulate(
    experiment: Experiment,
    *,
    on_round: Callable[[RoundRecord], None] | None = None,
    on_node: Callable[[NodeReport], None] | None = None,
    checkpoints: Path | None = None,
    resume: Path | None = None,
) -> SimulationResult:
    """Runs `experiment` in this process and returns its round records and final model.

    A decentralized experiment (`experiment.decentralized`: a topology other than star)
    runs as gossip (`thinwire.topologies.runtime.simulation.simulate_gossip`); its final model is
    the average of the nodes' models.

    Args:
        experiment: a validated experiment (see `thinwire.config.load_config`).
        on_round: called with each round's record as soon as the round ends.
        on_node: gossip only: called with every node's report of each round.
        checkpoints: folder for a checkpoint every `runtime.checkpoint_every` rounds.
        resume: a checkpoint file to continue from; the records returned are the rounds
            after it.

    Raises:
        ValueError: `resume` does not fit the experiment, or checkpoints of a gossip run
            are asked for (gossip peers checkpoint on their own: `thinwire peer`).
    """
    threads = simulation_threads(experiment)
    logger.info("%s: %d torch thread(s)", experiment.name, threads)
    with torch_threads(threads):
        return _simulate(experiment, on_round, on_node, checkpoints, resume)


def _simulate(
    experiment: Experiment,
    on_round: Callable[[RoundRecord], None] | None,
    on_node: Callable[[NodeReport], None] | None,
    checkpoints: Path | None,
    resume: Path | None,
) -> SimulationResult:
    if experiment.decentralized:
        if resume is not None or (checkpoints is not None and _every(experiment)):
            raise ValueError(
                "checkpoints and --resume cover the simulated star; a gossip run restarts "
                "(real peers checkpoint and rejoin: thinwire peer)"
            )
        from thinwire.topologies.runtime.simulation import simulate_gossip

        gossip = simulate_gossip(experiment, on_round=on_round, on_node=on_node)
        return SimulationResult(
            gossip.records, gossip.model, [], gossip.input_shape, gossip.num_classes
        )
    federation = load_federation(experiment)
    if experiment.server is not None:
        return _run_buffered(experiment, federation, on_round, resume)
    return _run_star(experiment, federation, on_round, checkpoints, resume)


def _run_buffered(
    experiment: Experiment,
    federation: Federation,
    on_round: Callable[[RoundRecord], None] | None,
    resume: Path | None,
) -> SimulationResult:
    if resume is not None:
        raise ValueError(
            "--resume continues a synchronous star; an asynchronous server's run "
            "(server.kind buffered_async) has tasks in flight at every step: run it again"
        )
    from thinwire.runtimes.asynchronous import simulate_buffered

    records, server, clients = simulate_buffered(experiment, federation, on_round)
    dataset = federation.dataset
    return SimulationResult(
        records, server.model, [c.state for c in clients], dataset.input_shape, dataset.num_classes
    )


def _every(experiment: Experiment) -> int:
    runtime = experiment.runtime
    return runtime.checkpoint_every if isinstance(runtime, SimulationRuntime) else 0


def _run_star(
    experiment: Experiment,
    federation: Federation,
    on_round: Callable[[RoundRecord], None] | None,
    checkpoints: Path | None,
    resume: Path | None,
) -> SimulationResult:
    workspace = federation.workspace
    clients = [
        build_client(index=i, experiment=experiment, x=x, y=y, workspace=workspace)
        for i, (x, y) in enumerate(federation.all_client_data())
    ]
    aggregator = build_aggregator(
        experiment=experiment,
        workspace=workspace,
        initial=workspace.tensors(),
        examples={c.index: int(c.x.shape[0]) for c in clients},
    )
    channel = Channel(experiment.channel, len(clients))
    x_test, y_test = federation.test_data()
    delivered: dict[int, bool] = {}
    spent: dict[int, float] = {}
    records: list[RoundRecord] = []
    cum_up = cum_down = 0
    first = 1
    if resume is not None:
        saved = load_simulation_checkpoint(
            resume, aggregator=aggregator, clients=[c.state for c in clients]
        )
        server = saved.server
        aggregator.state = server.state
        for client, state in zip(clients, saved.clients, strict=True):
            client.state = state
        delivered, spent = dict(server.delivered), dict(saved.spent)
        cum_up, cum_down = server.cum_bytes_up, server.cum_bytes_down
        first = server.state.round + 1
        logger.info("resuming %s after round %d (%s)", experiment.name, first - 1, resume)
    star = Star(experiment=experiment, aggregator=aggregator, delivered=delivered)
    every = _every(experiment) if checkpoints is not None else 0
    warned_slot = False
    rounds = experiment.train.rounds
    for round in range(first, rounds + 1):
        start = time.perf_counter()
        participants = star.sample(round)
        downlink = star.broadcast(round, participants)
        losses: list[float] = []
        compute = 0.0
        for c in participants:
            sent = downlink[c]
            result = clients[c].train_round(sent.data, round, delivered=sent.delivered)
            compute = max(compute, result.compute_s)
            losses.append(result.train_loss)
            if result.epsilon is not None:
                spent[c] = result.epsilon
            if star.votes_first:
                star.collect_vote(c, result.data or b"")
                continue
            star.collect(c, result.data)
            data = result.data
            if data is not None and not warned_slot and not channel.fits_slot(c, len(data)):
                warned_slot = True
                logger.warning(
                    "round %d: a %d-byte update needs longer than a %.1f ms slot at client "
                    "%d's uplink rate; the frame time understates the transfer",
                    round,
                    len(data),
                    experiment.channel.slot_ms,
                    c,
                )
        if star.votes_first:
            _send_values(star, clients, round)
        finished = star.finish()
        outcome, up, down = finished.result, finished.bytes_up, finished.bytes_down

        cum_up += sum(up.values())
        cum_down += sum(down.values())
        evaluated = round % experiment.train.eval_every == 0 or round == rounds
        evaluation = aggregator.evaluate(x_test, y_test) if evaluated else None
        record = round_record(
            round=round,
            evaluation=evaluation,
            train_losses=losses,
            bytes_up=sum(up.values()),
            bytes_down=sum(down.values()),
            cum_bytes_up=cum_up,
            cum_bytes_down=cum_down,
            updates_sent=len(up),
            sim_time_s=channel.round_s(down, up),
            compute_s=compute,
            wall_s=time.perf_counter() - start,
            participants=len(participants),
            rejected=len(outcome.rejected),
            censored=len(outcome.silent),
            reused=len(outcome.reused),
        )
        if outcome.slots is not None:
            record.update(
                RoundCounts(
                    slot_successes=outcome.slots.successes,
                    slot_collisions=outcome.slots.collisions,
                    slot_idle=outcome.slots.idle,
                )
            )
        if experiment.privacy is not None:
            record.update(RoundCounts(epsilon=max(spent.values(), default=0.0)))
        records.append(record)
        if on_round is not None:
            on_round(record)  # first: a checkpoint never runs ahead of the recorded rounds
        if every and round % every == 0 and round < rounds and checkpoints is not None:
            save_simulation_checkpoint(
                round_checkpoint_path(checkpoints, round),
                experiment,
                SimulationCheckpoint(
                    StarCheckpoint(aggregator.state, star.delivered, cum_up, cum_down),
                    [c.state for c in clients],
                    spent,
                ),
            )
    dataset = federation.dataset
    return SimulationResult(
        records,
        aggregator.model,
        [c.state for c in clients],
        dataset.input_shape,
        dataset.num_classes,
    )


def _send_values(star: Star, clients: Sequence[Client], round: int) -> None:
    """The second exchange of a two-phase vote: the agreed mask out, values on it back."""
    for c, mask in star.close_vote().items():
        client = clients[c]
        if isinstance(client, VoteClient):
            star.collect(c, client.send_values(mask, round))


# ---------------------------------------------------------------------- checkpoints


class SimulationCheckpoint(NamedTuple):
    """The state of a simulated star after a round: the server's and every client's."""

    server: StarCheckpoint
    clients: list[ClientState]
    spent: dict[int, float]  # client -> privacy spent so far (epsilon)


def save_simulation_checkpoint(
    path: Path, experiment: Experiment, checkpoint: SimulationCheckpoint
) -> None:
    """Writes a checkpoint (kind "simulation") atomically, then removes the older ones.

    A run continued from one of these ends bit for bit where the uninterrupted run would,
    on the CPU: nothing outside it carries over between rounds (every random draw is seeded
    from experiment seed, round and client or counted in a codec state, each round builds
    its local optimizer afresh, and the channel model keeps no state). Its state is the
    server's (`thinwire.runtimes.star.star_state`), one `ClientState` per client flattened
    with `thinwire.statetree` (codec residuals, policy state, model view, carried mass, the
    pending update's bytes, privacy ledger), and each client's privacy spent.
    """
    server = checkpoint.server
    save_checkpoint(
        path,
        kind="simulation",
        name=experiment.name,
        digest=experiment_digest(experiment),
        round=server.state.round,
        state={
            "server": star_state(
                server.state, server.delivered, server.cum_bytes_up, server.cum_bytes_down
            ),
            "clients": [_cpu(flatten(state)) for state in checkpoint.clients],
            "spent": {str(c): float(v) for c, v in checkpoint.spent.items()},
        },
    )
    for older in path.parent.glob("round-*.pt"):  # a resume needs the newest one only
        if older != path:
            older.unlink()


def load_simulation_checkpoint(
    path: Path, *, aggregator: Aggregator, clients: Sequence[ClientState]
) -> SimulationCheckpoint:
    """Reads a checkpoint and rebuilds it against a fresh run's server and client states.

    Raises:
        ValueError: the file is unreadable, not a simulation checkpoint, or does not fit
            this run (the message names the file and the part that differs).
    """
    saved = load_checkpoint(path, kind="simulation")
    contents = saved.state
    server, flat_clients, spent = (contents.get(k) for k in ("server", "clients", "spent"))
    if not isinstance(server, dict) or not isinstance(spent, dict):
        raise ValueError(f"{path}: the server's state or the privacy spent is missing")
    if not isinstance(flat_clients, list) or len(flat_clients) != len(clients):
        count = len(flat_clients) if isinstance(flat_clients, list) else "no"
        raise ValueError(f"{path}: holds {count} client states, this run has {len(clients)}")
    star = read_star_state(saved, server, aggregator)  # its errors say "does not fit", too
    try:
        states = [
            _rebuild_client(flat, initial, aggregator.state.model)
            for flat, initial in zip(flat_clients, clients, strict=True)
        ]
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{path}: does not fit this experiment: {exc}") from None
    return SimulationCheckpoint(star, states, {int(c): float(v) for c, v in spent.items()})


def _cpu(flat: Mapping[str, Leaf]) -> dict[str, Leaf]:
    return {k: v.detach().cpu() if isinstance(v, torch.Tensor) else v for k, v in flat.items()}


def _keys(flat: Mapping[str, Leaf], field: str) -> list[str]:
    """The keys of the dict at `field` (a state field whose entries vary between rounds)."""
    prefix = f"{field}/"
    return sorted({k[len(prefix) :].split("/")[0] for k in flat if k.startswith(prefix)} - {""})


def _rebuild_client(
    flat: Any, initial: ClientState, model: Mapping[str, torch.Tensor]
) -> ClientState:
    if not isinstance(flat, dict):
        raise ValueError("a client state is not a mapping")
    pending = flat.get("pending")
    if not isinstance(pending, torch.Tensor) or pending.dtype != torch.uint8 or pending.ndim != 1:
        raise ValueError("a client state has no 'pending' byte tensor")
    template = initial._replace(
        carry={k: torch.zeros_like(v) for k, v in model.items()} if _keys(flat, "carry") else {},
        pending=torch.empty_like(pending),
    )
    state: ClientState = unflatten(template, flat)
    return state
