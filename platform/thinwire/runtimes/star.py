"""One star round, the same in every runtime: sample, broadcast, collect, finish, outcome.

`Star` is the server's side of a round without any transport: the simulator calls the
clients in-process, the Flower loop sends messages over a grid and the ddp runtime
all-gathers bytes, and all three drive this one sequence around the same `Aggregator`:

1. `sample(round)`: the round's clients (`sample_clients`, seeded by experiment and round);
2. `broadcast(round, clients)`: each recipient's downlink bytes, with whether its previous
   update counted (told once, with its next downlink) and the round its kept state must be
   at (the last round it was sent a downlink);
2b. with `votes_first` (majority vote, `vote.mask: two_phase`), `collect_vote(client,
   vote)` for each client's vote, then `close_vote()` for each recipient's mask message,
   whose answers (values on the mask) go to `collect`;
3. `collect(client, update)` for each answer (`None` for a client that stayed silent), and
   `refuse(client)` for an answer the runtime could not read;
4. `finish()` (or `abandon(reason)` when the server's own step fails, or `cancel()` to put
   the server back as it was before the round) returns the round's `StarOutcome`.

The delivery bookkeeping lives here once: `delivered` holds, for every client that sent
since it was last told, whether its update counted; a checkpoint saves it and a resumed
run hands it back. So does the server's checkpoint state (`star_state`, `read_star_state`),
which the Flower server saves alone (kind "star": its clients keep their own state on
their hosts) and the simulator together with every client's state (kind "simulation").
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import torch

from thinwire.checkpoint import (
    Saved,
    experiment_digest,
    find_checkpoint,
    load_checkpoint,
    save_checkpoint,
)
from thinwire.config import Experiment
from thinwire.server import (
    Aggregator,
    AggregatorState,
    Receipt,
    RoundResult,
    VoteAggregator,
    sample_clients,
)
from thinwire.statetree import flatten, unflatten

__all__ = [
    "Downlink",
    "Star",
    "StarCheckpoint",
    "StarOutcome",
    "load_star_checkpoint",
    "read_star_state",
    "save_star_checkpoint",
    "star_state",
]

logger = logging.getLogger(__name__)


class Downlink(NamedTuple):
    """What one recipient gets at the start of a round."""

    data: bytes  # the serialized downlink message
    delivered: bool | None  # did its previous update count (None: nothing to tell)
    state_round: int  # the round its kept state must be at (0: it keeps none)


class StarOutcome(NamedTuple):
    """What a finished round did."""

    round: int
    participants: list[int]  # clients sent a downlink, sorted
    bytes_down: dict[int, int]  # client -> downlink bytes sent to it
    bytes_up: dict[int, int]  # client -> update bytes received from it (refused ones too)
    result: RoundResult  # the Aggregator's account: accepted, rejected, silent, reused, slots


class _Open(NamedTuple):
    round: int
    before: AggregatorState  # the server before the round, restored by `cancel`
    told: dict[int, bool]  # `delivered` before the round, restored with it
    bytes_down: dict[int, int]


class Star:
    """The server's side of the star, round by round; see the module docstring.

    Args:
        experiment: the run's experiment (its sampling).
        aggregator: the server's round logic and global model.
        delivered: for each client told nothing yet, whether its last update counted (a
            resumed run's, from its checkpoint).
    """

    def __init__(
        self,
        *,
        experiment: Experiment,
        aggregator: Aggregator,
        delivered: Mapping[int, bool] | None = None,
    ) -> None:
        self.experiment = experiment
        self.aggregator = aggregator
        self.delivered: dict[int, bool] = dict(delivered or {})
        self._open: _Open | None = None
        self._up: dict[int, int] = {}
        self._refused: set[int] = set()

    def sample(self, round: int) -> list[int]:
        """The clients sampled for `round`, the same in every runtime."""
        return sample_clients(self.experiment, round)

    def broadcast(self, round: int, clients: Iterable[int]) -> dict[int, Downlink]:
        """Opens `round` and returns each recipient's downlink."""
        recipients = list(clients)
        before, told = self.aggregator.state, dict(self.delivered)
        data = self.aggregator.broadcast(round, recipients)
        self._open = _Open(round, before, told, {c: len(data[c]) for c in recipients})
        self._up, self._refused = {}, set()
        return {
            c: Downlink(data[c], self.delivered.pop(c, None), before.received.get(str(c), 0))
            for c in recipients
        }

    def collect(self, client: int, update: bytes | None) -> Receipt:
        """Hands one client's update (None: it stayed silent) to the Aggregator."""
        if update is None:
            return self.aggregator.silent(client)
        self._up[client] = self._up.get(client, 0) + len(update)
        return self.aggregator.receive(client, update)

    @property
    def votes_first(self) -> bool:
        """Whether a round collects votes before values (`vote.mask: two_phase`)."""
        return isinstance(self.aggregator, VoteAggregator) and self.aggregator.two_phase

    def collect_vote(self, client: int, vote: bytes) -> Receipt:
        """Two-phase vote: hands one client's vote to the server (its bytes count as uplink)."""
        self._up[client] = self._up.get(client, 0) + len(vote)
        return self._voter().receive_vote(client, vote)

    def close_vote(self) -> dict[int, bytes]:
        """Two-phase vote: the agreed mask's message for each recipient (counted as downlink)."""
        masks = self._voter().close_vote()
        bytes_down = self._opened().bytes_down
        for client, data in masks.items():
            bytes_down[client] += len(data)
        return masks

    def _voter(self) -> VoteAggregator:
        aggregator = self.aggregator
        if not isinstance(aggregator, VoteAggregator) or not aggregator.two_phase:
            raise ValueError("this star's rounds have no vote phase (vote.mask: two_phase)")
        return aggregator

    def refuse(self, client: int) -> None:
        """Counts an answer the runtime could not read: the client's update did not count."""
        self._refused.add(client)

    def finish(self) -> StarOutcome:
        """Aggregates the round (`Aggregator.finish_round`) and returns its outcome."""
        return self._close(self.aggregator.finish_round())

    def abandon(self, reason: str) -> StarOutcome:
        """Closes the round without a step (the server's own step failed)."""
        return self._close(self.aggregator.abandon_round(reason))

    def cancel(self) -> None:
        """Puts the server back as it was before the round's broadcast."""
        open = self._opened()
        self.aggregator.state, self.delivered = open.before, open.told
        self._open = None

    def resynchronize(self, clients: Iterable[int]) -> None:
        """Makes `clients` start afresh: the full model, state round 0 (no kept state)."""
        received = dict(self.aggregator.state.received)
        for client in clients:
            received.pop(str(client), None)
            self.delivered.pop(client, None)
        self.aggregator.state = self.aggregator.state._replace(received=received)

    def _opened(self) -> _Open:
        if self._open is None:
            raise ValueError("no round is open: broadcast first")
        return self._open

    def _close(self, result: RoundResult) -> StarOutcome:
        open = self._opened()
        self._open = None
        self.delivered.update(result.delivered)
        self.delivered.update({c: False for c in self._refused if c not in result.delivered})
        return StarOutcome(
            open.round, sorted(open.bytes_down), open.bytes_down, dict(self._up), result
        )


# ---------------------------------------------------------------------- checkpoints


class StarCheckpoint(NamedTuple):
    """The server's side of a star after a round, as a checkpoint holds it."""

    state: AggregatorState
    delivered: dict[int, bool]  # client -> did its last update count (for its next downlink)
    cum_bytes_up: int
    cum_bytes_down: int


def star_state(
    state: AggregatorState,
    delivered: Mapping[int, bool],
    cum_bytes_up: int,
    cum_bytes_down: int,
) -> dict[str, Any]:
    """The checkpoint state of a star's server (`thinwire.checkpoint`, kinds star, simulation).

    model      name -> float32 tensor, the global model
    momentum   name -> tensor, the server momentum buffer ({} without momentum)
    public     name -> tensor, the downlink public copy ({} without a downlink codec)
    downlink   the downlink codec state, flattened with `thinwire.statetree`
    received   client (as str) -> the last round it was sent a downlink
    stale, stale_examples   CSGD's last decoded update of each client and its weight
    delivered  client (as str) -> whether its last update counted (told with its next one)
    cum_bytes_up, cum_bytes_down   byte totals so far, so the run folder keeps counting
    """
    return {
        "model": _cpu(state.model),
        "momentum": _cpu(state.momentum),
        "public": _cpu(state.public),
        "downlink": {
            k: v.detach().cpu() if isinstance(v, torch.Tensor) else v
            for k, v in flatten(state.downlink).items()
        },
        "received": dict(state.received),
        "stale": {c: _cpu(update) for c, update in state.stale.items()},
        "stale_examples": dict(state.stale_examples),
        "delivered": {str(c): bool(d) for c, d in delivered.items()},
        "cum_bytes_up": cum_bytes_up,
        "cum_bytes_down": cum_bytes_down,
    }


def read_star_state(
    saved: Saved, contents: Mapping[str, Any], aggregator: Aggregator
) -> StarCheckpoint:
    """Rebuilds a star's server from `star_state` output, checked against `aggregator`.

    Raises:
        ValueError: the state does not fit this experiment (another model, another downlink
            codec, clients out of range, more rounds than the run has); the message names
            the file and the field.
    """
    experiment = aggregator.experiment
    if saved.name != experiment.name:
        logger.warning(
            "%s was written by experiment %r, resuming it as %r",
            saved.path,
            saved.name,
            experiment.name,
        )
    if saved.round >= experiment.train.rounds:
        raise ValueError(
            f"{saved.path}: round {saved.round} leaves nothing to run (train.rounds is "
            f"{experiment.train.rounds})"
        )
    try:
        return _star_checkpoint(saved.round, contents, aggregator)
    except ValueError as exc:
        raise ValueError(f"{saved.path}: does not fit this experiment: {exc}") from None


def _star_checkpoint(
    round: int, contents: Mapping[str, Any], aggregator: Aggregator
) -> StarCheckpoint:
    template = aggregator.state
    clients = aggregator.experiment.data.clients
    momentum = contents.get("momentum") or {}
    stale = contents.get("stale") or {}
    public = contents.get("public") or {}
    state = AggregatorState(
        round=round,
        model=_tensors("model", contents.get("model"), template.model),
        momentum=_tensors("momentum", momentum, template.model) if momentum else {},
        public=_tensors("public", public, template.public) if template.public else {},
        downlink=_downlink(contents.get("downlink"), template.downlink),
        received=_per_client("received", contents.get("received", {}), clients, int),
        stale={
            c: _tensors(f"stale[{c}]", update, template.model)
            for c, update in _per_client("stale", stale, clients, dict).items()
        },
        stale_examples=_per_client(
            "stale_examples", contents.get("stale_examples", {}), clients, float
        ),
    )
    if any(not 1 <= r <= round for r in state.received.values()):
        raise ValueError(f"received {state.received} names rounds after {round}")
    delivered = _per_client("delivered", contents.get("delivered", {}), clients, bool)
    up, down = (contents.get(key) for key in ("cum_bytes_up", "cum_bytes_down"))
    if not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in (up, down)):
        raise ValueError(f"byte totals {[up, down]} are not counts")
    return StarCheckpoint(
        state,
        {int(c): d for c, d in delivered.items()},
        int(up),  # type: ignore[arg-type]
        int(down),  # type: ignore[arg-type]
    )


def save_star_checkpoint(path: Path, *, experiment: Experiment, checkpoint: StarCheckpoint) -> None:
    """Writes a Flower server's checkpoint (kind "star"), atomically."""
    state = checkpoint.state
    save_checkpoint(
        path,
        kind="star",
        name=experiment.name,
        digest=experiment_digest(experiment),
        round=state.round,
        state=star_state(
            state, checkpoint.delivered, checkpoint.cum_bytes_up, checkpoint.cum_bytes_down
        ),
    )
    logger.info("round %d: checkpoint written to %s", state.round, path)


def load_star_checkpoint(path: Path, aggregator: Aggregator) -> StarCheckpoint:
    """Reads a Flower server's checkpoint (a file, checkpoints folder or run folder).

    Client state (error-feedback residuals, model copies, policy memories) is not in it:
    it lives on the SuperNodes' disks (`thinwire.runtimes.flower.state`), and `received`
    tells each client which round's state to continue from, so a resumed run continues
    bit for bit where the checkpoint left it.

    Raises:
        FileNotFoundError: there is no checkpoint at `path`.
        ValueError: the file is not a star checkpoint or does not fit this experiment.
    """
    saved = load_checkpoint(find_checkpoint(path), kind="star")
    checkpoint = read_star_state(saved, saved.state, aggregator)
    logger.info("resuming from %s (round %d)", saved.path, saved.round)
    return checkpoint


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


_KINDS: dict[type, Callable[[Any], bool]] = {
    bool: lambda v: isinstance(v, bool),
    int: lambda v: isinstance(v, int) and not isinstance(v, bool),
    float: _is_number,
    dict: lambda v: isinstance(v, dict),
}


def _per_client(field: str, value: Any, clients: int, kind: type) -> dict[str, Any]:
    """A `client (as str) -> value` mapping, checked: clients in range, values of `kind`."""
    if not isinstance(value, dict):
        raise ValueError(f"{field} must be a mapping, got {type(value).__name__}")
    out = {}
    for client, item in value.items():
        number = int(client) if isinstance(client, str) and client.isdigit() else -1
        if not 0 <= number < clients:
            raise ValueError(f"{field} names client {client!r} (0..{clients - 1})")
        if not _KINDS[kind](item):
            raise ValueError(f"{field}[{client!r}] must be a {kind.__name__}: {item!r}")
        out[client] = float(item) if kind is float else item
    return out


def _cpu(tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.detach().cpu() for k, v in tensors.items()}


def _tensors(
    field: str, value: Any, template: Mapping[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    if not isinstance(value, dict) or set(value) != set(template):
        found = sorted(value) if isinstance(value, dict) else type(value).__name__
        raise ValueError(f"{field} has tensors {found}, this model has {sorted(template)}")
    out = {}
    for name, like in template.items():
        tensor = value[name]
        if not isinstance(tensor, torch.Tensor) or tensor.shape != like.shape:
            raise ValueError(f"{field}[{name!r}] does not match {tuple(like.shape)}")
        out[name] = tensor.to(device=like.device, dtype=like.dtype)
    return out


def _downlink(value: Any, template: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError("downlink state is missing")
    try:
        state: dict[str, Any] = unflatten(template, value)
    except ValueError as exc:
        raise ValueError(f"downlink codec state does not fit: {exc}") from None
    return state
