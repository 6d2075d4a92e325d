"""One star round, the same in every runtime: sample, broadcast, collect, finish, outcome.

`Star` is the server's side of a round without any transport: the simulator calls the
clients in-process, the Flower loop sends messages over a grid and the ddp runtime
all-gathers bytes, and all three drive this one sequence around the same `Aggregator`:

1. `sample(round)`: the round's clients (`sample_clients`, seeded by experiment and round);
2. `broadcast(round, clients)`: each recipient's downlink bytes, with whether its previous
   update counted (told once, with its next downlink) and the round its kept state must be
   at (the last round it was sent a downlink);
3. `collect(client, update)` for each answer (`None` for a client that stayed silent), and
   `refuse(client)` for an answer the runtime could not read;
4. `finish()` (or `abandon(reason)` when the server's own step fails, or `cancel()` to put
   the server back as it was before the round) returns the round's `StarOutcome`.

The delivery bookkeeping lives here once: `delivered` holds, for every client that sent
since it was last told, whether its update counted; a checkpoint saves it and a resumed
run hands it back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from thinwire.config import Experiment
from thinwire.server import Aggregator, AggregatorState, Receipt, RoundResult, sample_clients

__all__ = ["Downlink", "Star", "StarOutcome"]


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
        self._up[client] = len(update)
        return self.aggregator.receive(client, update)

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
