"""The round record and the run summary: one definition of every key a run folder holds.

Every runtime reports one `RoundRecord` per round, a flat mapping of key to number, built
by `round_record` so the core keys are always there and every other key is one this module
defines. `KEYS` gives each key's unit and meaning; the module-level constants (`ACCURACY`,
`CUM_BYTES_UP`, ...) are the names readers index records with. The `TypedDict` fields repeat
the names for the type checker (tests/metrics/test_schema.py holds the two equal).
The keys are the column names of `metrics.jsonl` and `metrics.csv`: renaming one makes
older run folders unreadable, so a key is added, never renamed.

A record is a plain dict (a `TypedDict`), so it goes to JSON, through process queues and
to callbacks as it is, and records read back from a run folder have the same type.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Final, NamedTuple, Protocol, TypedDict, Unpack

__all__ = [
    "CORE_KEYS",
    "KEYS",
    "SUMMARY_KEYS",
    "Evaluated",
    "Key",
    "RoundCounts",
    "RoundRecord",
    "round_record",
    "summary_key",
    "undefined_keys",
]


class Key(NamedTuple):
    """One key of a record: its name, unit and meaning."""

    name: str
    unit: str  # "count", "bytes", "s", "fraction", ...
    meaning: str


# Core keys: every runtime writes them in every round, in this order.
ROUND: Final = "round"
ACCURACY: Final = "accuracy"
LOSS: Final = "loss"
TRAIN_LOSS: Final = "train_loss"
BYTES_UP: Final = "bytes_up"
BYTES_DOWN: Final = "bytes_down"
CUM_BYTES_UP: Final = "cum_bytes_up"
CUM_BYTES_DOWN: Final = "cum_bytes_down"
UPDATES_SENT: Final = "updates_sent"
SIM_TIME_S: Final = "sim_time_s"
COMPUTE_S: Final = "compute_s"
WALL_S: Final = "wall_s"

# Keys a runtime adds where they mean something for it (see `KEYS` for who writes which).
COMM_S: Final = "comm_s"
OVERHEAD_BYTES: Final = "overhead_bytes"
NODES: Final = "nodes"
CONSENSUS_DISTANCE: Final = "consensus_distance"
FIRED: Final = "fired"
MISSING: Final = "missing"
PARTICIPANTS: Final = "participants"
REJECTED: Final = "rejected"
REFRESHED: Final = "refreshed"
DROPOUTS: Final = "dropouts"
STATE_LOST: Final = "state_lost"
CENSORED: Final = "censored"
REUSED: Final = "reused"
SLOT_SUCCESSES: Final = "slot_successes"
SLOT_COLLISIONS: Final = "slot_collisions"
SLOT_IDLE: Final = "slot_idle"
EPSILON: Final = "epsilon"
CLIENT_ACCURACY: Final = "client_accuracy"
CLIENT_LOSS: Final = "client_loss"
EVAL_BYTES_DOWN: Final = "eval_bytes_down"
BUFFERED: Final = "buffered"
STALENESS_MEAN: Final = "staleness_mean"
STALENESS_MAX: Final = "staleness_max"
SIM_CLOCK_S: Final = "sim_clock_s"

_KEYS = (
    Key(ROUND, "count", "1-based round number"),
    Key(ACCURACY, "fraction", "test accuracy of the global (or average) model; NaN: not evaluated"),
    Key(LOSS, "nats", "test cross-entropy per example; NaN if not evaluated"),
    Key(TRAIN_LOSS, "nats", "mean local training loss of the round's trainers (NaN: none)"),
    Key(BYTES_UP, "bytes", "serialized update bytes that crossed the uplink this round"),
    Key(BYTES_DOWN, "bytes", "serialized bytes sent down this round, all recipients"),
    Key(CUM_BYTES_UP, "bytes", "bytes_up summed over the rounds so far"),
    Key(CUM_BYTES_DOWN, "bytes", "bytes_down summed over the rounds so far"),
    Key(UPDATES_SENT, "count", "updates (gossip: messages) sent, not censored or silent"),
    Key(SIM_TIME_S, "s", "simulated network time of the round (the channel model)"),
    Key(COMPUTE_S, "s", "measured compute time of the round's slowest participant"),
    Key(WALL_S, "s", "measured wall-clock time of the round"),
    Key(COMM_S, "s", "ddp: measured time of the update all-gather"),
    Key(OVERHEAD_BYTES, "bytes", "ddp: sizes, padding and statistics the all-gather adds"),
    Key(NODES, "count", "peer runs: nodes that reported the round"),
    Key(CONSENSUS_DISTANCE, "squared L2", "gossip: mean_i ||x_i - x_bar||^2 over the nodes"),
    Key(FIRED, "count", "gossip: nodes that sent news this round"),
    Key(MISSING, "count", "gossip: neighbour messages that did not arrive"),
    Key(PARTICIPANTS, "count", "star, ddp: clients sampled for the round"),
    Key(REJECTED, "count", "updates (gossip: messages) refused by validation"),
    Key(REFRESHED, "count", "gossip: full estimates sent to resynchronize a neighbour"),
    Key(DROPOUTS, "count", "flower: sampled clients that did not answer in time"),
    Key(STATE_LOST, "count", "flower: clients whose kept state was unusable (re-synced)"),
    Key(CENSORED, "count", "star, ddp: sampled clients that stayed silent"),
    Key(REUSED, "count", "star, ddp: silent clients whose last update the server averaged"),
    Key(SLOT_SUCCESSES, "count", "random-access uplink: slots with exactly one update"),
    Key(SLOT_COLLISIONS, "count", "random-access uplink: slots two or more updates collided in"),
    Key(SLOT_IDLE, "count", "random-access uplink: slots nobody sent in"),
    Key(EPSILON, "epsilon", "with a privacy section: the largest privacy spent by any client"),
    Key(CLIENT_ACCURACY, "fraction", "flower client_eval: example-weighted client accuracy"),
    Key(CLIENT_LOSS, "nats", "flower client_eval: example-weighted client test loss"),
    Key(EVAL_BYTES_DOWN, "bytes", "flower client_eval: bytes sent down for the evaluation"),
    Key(BUFFERED, "count", "asynchronous star: updates the server step aggregated"),
    Key(STALENESS_MEAN, "steps", "asynchronous star: mean staleness tau of those updates"),
    Key(STALENESS_MAX, "steps", "asynchronous star: largest staleness tau of those updates"),
    Key(SIM_CLOCK_S, "s", "asynchronous star: simulated time of the server step"),
)

KEYS: Final[Mapping[str, Key]] = {k.name: k for k in _KEYS}
"""Every key a round record may hold: the core keys, then `RoundCounts` in its order."""

CORE_KEYS: Final = (
    ROUND,
    ACCURACY,
    LOSS,
    TRAIN_LOSS,
    BYTES_UP,
    BYTES_DOWN,
    CUM_BYTES_UP,
    CUM_BYTES_DOWN,
    UPDATES_SENT,
    SIM_TIME_S,
    COMPUTE_S,
    WALL_S,
)
"""The keys every record holds: the first columns of `metrics.csv`."""


class RoundCounts(TypedDict, total=False):
    """The keys a runtime adds to the core ones where they mean something for it."""

    comm_s: float
    overhead_bytes: int
    nodes: int
    consensus_distance: float
    fired: int
    missing: int
    participants: int
    rejected: int
    refreshed: int
    dropouts: int
    state_lost: int
    censored: int
    reused: int
    slot_successes: int
    slot_collisions: int
    slot_idle: int
    epsilon: float
    client_accuracy: float
    client_loss: float
    eval_bytes_down: int
    buffered: int
    staleness_mean: float
    staleness_max: int
    sim_clock_s: float


class RoundRecord(RoundCounts):
    """One round of a run: the core keys (units and meanings in `KEYS`) and its counts."""

    round: int
    accuracy: float
    loss: float
    train_loss: float
    bytes_up: int
    bytes_down: int
    cum_bytes_up: int
    cum_bytes_down: int
    updates_sent: int
    sim_time_s: float
    compute_s: float
    wall_s: float


class Evaluated(Protocol):
    """A model's test result (`thinwire.learning.Evaluation`)."""

    @property
    def accuracy(self) -> float:
        """Fraction of the test examples classified right."""
        ...

    @property
    def loss(self) -> float:
        """Mean cross-entropy per test example."""
        ...


def round_record(
    *,
    round: int,
    evaluation: Evaluated | None,
    train_losses: Sequence[float],
    bytes_up: int,
    bytes_down: int,
    cum_bytes_up: int,
    cum_bytes_down: int,
    updates_sent: int,
    sim_time_s: float,
    compute_s: float,
    wall_s: float,
    **counts: Unpack[RoundCounts],
) -> RoundRecord:
    """The record of a finished round, as every runtime reports it.

    Args:
        round: the 1-based round number.
        evaluation: the global (or average) model's test result; None for a round that
            was not evaluated (its accuracy and loss are NaN).
        train_losses: the local training losses of the round's trainers; their mean is
            the record's `train_loss` (NaN when there are none).
        bytes_up: see `KEYS` for this and the other core keys.
        bytes_down: see `KEYS`.
        cum_bytes_up: see `KEYS`.
        cum_bytes_down: see `KEYS`.
        updates_sent: see `KEYS`.
        sim_time_s: see `KEYS`.
        compute_s: see `KEYS`.
        wall_s: see `KEYS`.
        **counts: the runtime's own keys (`RoundCounts`), kept in the order given.
    """
    record: RoundRecord = {
        ROUND: round,
        ACCURACY: evaluation.accuracy if evaluation else math.nan,
        LOSS: evaluation.loss if evaluation else math.nan,
        TRAIN_LOSS: sum(train_losses) / len(train_losses) if train_losses else math.nan,
        BYTES_UP: bytes_up,
        BYTES_DOWN: bytes_down,
        CUM_BYTES_UP: cum_bytes_up,
        CUM_BYTES_DOWN: cum_bytes_down,
        UPDATES_SENT: updates_sent,
        SIM_TIME_S: sim_time_s,
        COMPUTE_S: compute_s,
        WALL_S: wall_s,
    }
    record.update(counts)
    return record


def undefined_keys(record: Mapping[str, object]) -> list[str]:
    """The keys of `record` this schema does not define, sorted."""
    return sorted(k for k in record if k not in KEYS)


# The run summary (`summary.json`, `thinwire.metrics.summarize`).
STATUS: Final = "status"
ROUNDS_PLANNED: Final = "rounds_planned"
ERROR: Final = "error"
ROUNDS: Final = "rounds"
FINAL_ACCURACY: Final = "final_accuracy"
BEST_ACCURACY: Final = "best_accuracy"
FINAL_LOSS: Final = "final_loss"
TOTAL_BYTES_UP: Final = "total_bytes_up"
TOTAL_BYTES_DOWN: Final = "total_bytes_down"

SUMMARY_KEYS: Final[Mapping[str, Key]] = {
    k.name: k
    for k in (
        Key(STATUS, "text", "running, finished, failed or interrupted"),
        Key(ROUNDS_PLANNED, "count", "the experiment's train.rounds"),
        Key(ROUNDS, "count", "the last recorded round"),
        Key(FINAL_ACCURACY, "fraction", "accuracy of the last evaluated round"),
        Key(BEST_ACCURACY, "fraction", "the best accuracy of any evaluated round"),
        Key(FINAL_LOSS, "nats", "loss of the last evaluated round"),
        Key(TOTAL_BYTES_UP, "bytes", "cum_bytes_up of the last round"),
        Key(TOTAL_BYTES_DOWN, "bytes", "cum_bytes_down of the last round"),
        Key(UPDATES_SENT, "count", "updates_sent summed over the rounds"),
        Key(SIM_TIME_S, "s", "sim_time_s summed over the rounds"),
        Key(WALL_S, "s", "wall_s summed over the rounds"),
        Key(ERROR, "text", "failed or interrupted runs: what stopped the run"),
    )
}
"""The fixed keys of a run summary; it also holds `last_<key>` for every non-core key."""


def summary_key(key: str) -> str:
    """The summary key of a non-core record key's last value (`epsilon` -> `last_epsilon`)."""
    return f"last_{key}"
