"""The messages of thinwire's Flower runtime: record keys, builders and one reader per type.

The ServerApp and the ClientApp speak through Flower `Message`s whose content is a
`RecordDict`. This module is the one place that knows its layout, so both apps build and read
messages only through it (and a key string appears nowhere else):

| message (type)          | records                                                      |
|-------------------------|--------------------------------------------------------------|
| identify (`query`)      | reply: `identity` ConfigRecord {partition-id, num-partitions} |
| train (`train`)         | `downlink` ArrayRecord {update}, `round` ConfigRecord         |
|                         | {round, state-round, delivered?}; reply: `update` ArrayRecord |
|                         | {update} (absent when the client stayed silent), `metrics`    |
|                         | MetricRecord; or an `Error` whose reason starts "StateLost: " |
| evaluate (`evaluate`)   | `downlink` ArrayRecord {update} (the full model), `round`;   |
|                         | reply: `metrics` MetricRecord {num-examples, loss, accuracy}  |

Every serialized `thinwire.wire.Update` travels as one
`Array(dtype="uint8", shape=(n,), stype="thinwire/update", data=<the n bytes>)`: Flower
chunks and streams it without copying it into NumPy, and the bytes counted are `n`.

`state-round` is the round the client's kept state must be at (the last round the server
sent it a train message; 0 asks for a fresh start). A client whose state is not at that round
answers with a `StateLost` error instead of training on a wrong base; the server counts it
and re-synchronizes that client.

Readers run on untrusted content and raise `WireError` (naming the record and key) for
anything missing or mistyped; what is inside the update bytes is checked later by
`thinwire.wire.decode`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple, TypeGuard

import yaml
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    ConfigRecordValues,
    MetricRecord,
    RecordDict,
)

from thinwire.config import ConfigError, Experiment, parse_config
from thinwire.runtimes.flower.run_config import apply_field_keys
from thinwire.wire import WireError

__all__ = [
    "EVALUATE",
    "IDENTIFY",
    "NODE_NUM_PARTITIONS",
    "NODE_PARTITION",
    "NODE_PLUGINS",
    "NODE_STATE_DIR",
    "RUN_DIR",
    "RUN_EXPERIMENT",
    "RUN_RESUME",
    "TRAIN",
    "UPDATE_STYPE",
    "ClientEvaluation",
    "Identity",
    "Instruction",
    "RunSettings",
    "StateLost",
    "TrainReply",
    "evaluation_reply",
    "identity_reply",
    "instruction",
    "is_state_lost",
    "default_state_dir",
    "node_identity",
    "node_plugins",
    "node_state_dir",
    "read_evaluation",
    "read_identity",
    "read_instruction",
    "read_run_config",
    "read_train_reply",
    "train_reply",
    "update_array",
    "update_bytes",
]

# Message types (Flower routes "<category>" to the ClientApp's handler of that category).
IDENTIFY = "query"
TRAIN = "train"
EVALUATE = "evaluate"

UPDATE_STYPE = "thinwire/update"
"""The `Array.stype` of a serialized `thinwire.wire.Update`."""

# Run config keys ([tool.flwr.app.config] of the generated app, or `flwr run -c`).
RUN_EXPERIMENT = "experiment"  # the experiment YAML, resolved
RUN_DIR = "run-dir"  # absolute run folder for the ServerApp to write; "" picks a new one
RUN_RESUME = "resume"  # checkpoint to continue from; "" starts afresh

# Node config keys (`flower-supernode --node-config "partition-id=0 num-partitions=3"`).
NODE_PARTITION = "partition-id"
NODE_NUM_PARTITIONS = "num-partitions"
NODE_STATE_DIR = "state-dir"  # the node's client-state folder (`thinwire client --state-dir`)
NODE_PLUGINS = "allow-plugins"  # comma-separated modules a run's `plugins:` may name here

_DOWNLINK = "downlink"
_UPDATE = "update"
_ROUND = "round"
_DELIVERED = "delivered"
_STATE_ROUND = "state-round"
_METRICS = "metrics"
_IDENTITY = "identity"
_NUM_EXAMPLES = "num-examples"
_TRAIN_LOSS = "train-loss"
_COMPUTE_S = "compute-s"
_EPSILON = "epsilon"
_LOSS = "loss"
_ACCURACY = "accuracy"


# --------------------------------------------------------------------------- update bytes


def update_array(data: bytes) -> Array:
    """Wraps serialized update bytes as a Flower `Array` (no copy into NumPy)."""
    return Array(dtype="uint8", shape=(len(data),), stype=UPDATE_STYPE, data=bytes(data))


def update_bytes(record: ArrayRecord, where: str) -> bytes:
    """The update bytes held by `record` (as `update_array` made it).

    Raises:
        WireError: if the record does not hold exactly that array.
    """
    if not isinstance(record, ArrayRecord) or set(record) != {_UPDATE}:
        keys = sorted(record) if isinstance(record, Mapping) else type(record).__name__
        raise WireError(f"{where}: expected an ArrayRecord holding only {_UPDATE!r}, got {keys}")
    array = record[_UPDATE]
    if array.stype != UPDATE_STYPE or array.dtype != "uint8":
        raise WireError(
            f"{where}: expected an array of stype {UPDATE_STYPE!r} and dtype uint8, "
            f"got {array.stype!r} {array.dtype!r}"
        )
    data = bytes(array.data)
    if tuple(array.shape) != (len(data),):
        raise WireError(f"{where}: shape {tuple(array.shape)} does not match {len(data)} bytes")
    return data


# --------------------------------------------------------------------------- run and node


class RunSettings(NamedTuple):
    """What a run config gives both apps."""

    experiment: Experiment
    run_dir: str  # absolute run folder, or "" for a new one under experiment.output
    resume: str  # checkpoint file or folder, or "" for a fresh start


def read_run_config(run_config: Mapping[str, Any]) -> RunSettings:
    """Parses a run config written by `thinwire server` (or edited for `flwr run`).

    Field keys (`train.rounds`, see `thinwire.runtimes.flower.run_config`) that differ from
    the experiment YAML override it.

    Raises:
        ValueError: if a key is missing or not a string (naming it).
        ConfigError: if the experiment YAML is invalid (naming each bad field).
    """
    values: dict[str, str] = {}
    for key in (RUN_EXPERIMENT, RUN_DIR, RUN_RESUME):
        value = run_config.get(key)
        if not isinstance(value, str):
            raise ValueError(
                f"run config key {key!r} must be a string, got {type(value).__name__}; "
                "write the app with `thinwire server EXP.yaml --write-app DIR`"
            )
        values[key] = value
    source = f"run config {RUN_EXPERIMENT!r}"
    try:
        raw = yaml.safe_load(values[RUN_EXPERIMENT])
    except yaml.YAMLError as exc:
        raise ConfigError(source, [f"not valid YAML ({exc})"]) from None
    if isinstance(raw, dict):
        try:
            apply_field_keys(raw, run_config, (RUN_EXPERIMENT, RUN_DIR, RUN_RESUME))
        except ValueError as exc:
            raise ConfigError("run config", [str(exc)]) from None
    experiment = parse_config(raw, source=source)
    return RunSettings(experiment, values[RUN_DIR], values[RUN_RESUME])


class Identity(NamedTuple):
    """Which client a SuperNode serves."""

    partition: int  # the client index, 0-based
    partitions: int | None  # how many clients the SuperNode was told there are, if it was


def node_identity(node_config: Mapping[str, Any]) -> Identity:
    """Reads the partition a SuperNode was started with (`num-partitions` is optional).

    Raises:
        ValueError: naming the missing or invalid `--node-config` key.
    """
    hint = (
        "start the SuperNode with `thinwire client --partition I [--num-partitions N]` or "
        f'`flower-supernode --node-config "{NODE_PARTITION}=I {NODE_NUM_PARTITIONS}=N"`'
    )
    partition = node_config.get(NODE_PARTITION)
    if not _is_int(partition) or partition < 0:
        raise ValueError(
            f"node config {NODE_PARTITION!r} must be an integer >= 0, got {partition!r}; {hint}"
        )
    partitions = node_config.get(NODE_NUM_PARTITIONS)
    if partitions is None:
        return Identity(partition, None)
    if not _is_int(partitions) or not 0 <= partition < partitions:
        raise ValueError(
            f"node config {NODE_NUM_PARTITIONS!r} must be an integer > {NODE_PARTITION} "
            f"({partition}), got {partitions!r}; {hint}"
        )
    return Identity(partition, partitions)


def default_state_dir() -> Path:
    """Where a SuperNode keeps client state when its node config names no folder.

    Under Flower's home (`$FLWR_HOME`, else `~/.flwr`), which a SuperNode and the ClientApp
    processes it starts share.
    """
    home = os.environ.get("FLWR_HOME") or "~/.flwr"
    return Path(home).expanduser() / "thinwire-state"


def node_state_dir(node_config: Mapping[str, Any]) -> Path:
    """The client-state folder a SuperNode was started with, or `default_state_dir()`.

    Raises:
        ValueError: if `state-dir` is given but not a non-empty string.
    """
    folder = node_config.get(NODE_STATE_DIR)
    if folder is None:
        return default_state_dir()
    if not isinstance(folder, str) or not folder:
        raise ValueError(
            f"node config {NODE_STATE_DIR!r} must be a folder path, got {folder!r}; start the "
            "SuperNode with `thinwire client --state-dir DIR`"
        )
    return Path(folder).expanduser()


def node_plugins(node_config: Mapping[str, Any]) -> frozenset[str]:
    """The plugin modules this SuperNode's operator allows a run config to import.

    Raises:
        ValueError: if `allow-plugins` is given but not a comma-separated string.
    """
    names = node_config.get(NODE_PLUGINS, "")
    if not isinstance(names, str):
        raise ValueError(
            f"node config {NODE_PLUGINS!r} must be comma-separated module names, got "
            f"{names!r}; start the SuperNode with `thinwire client --allow-plugin NAME`"
        )
    return frozenset(name.strip() for name in names.split(",") if name.strip())


def identity_reply(identity: Identity) -> RecordDict:
    """The content of a ClientApp's answer to an identify query."""
    config: dict[str, ConfigRecordValues] = {NODE_PARTITION: identity.partition}
    if identity.partitions is not None:
        config[NODE_NUM_PARTITIONS] = identity.partitions
    return RecordDict({_IDENTITY: ConfigRecord(config)})


def read_identity(content: RecordDict) -> Identity:
    """Reads an identify reply.

    Raises:
        WireError: if it is not one `identity_reply` made.
    """
    record = _record(content, _IDENTITY, ConfigRecord)
    partition = _int(record, NODE_PARTITION, _IDENTITY)
    partitions = (
        _int(record, NODE_NUM_PARTITIONS, _IDENTITY) if NODE_NUM_PARTITIONS in record else None
    )
    if partition < 0 or (partitions is not None and partition >= partitions):
        raise WireError(f"{_IDENTITY}: partition {partition} is not in [0, {partitions})")
    return Identity(partition, partitions)


# --------------------------------------------------------------------------- train / evaluate


class StateLost(ValueError):
    """A client's kept state is missing, stale or damaged, so it cannot train this round.

    The ClientApp answers with an `Error` whose reason is `"StateLost: <what>"`; the server
    counts it (`state_lost` in the run records) and sends that client the full model and a
    fresh start next time, rather than averaging a delta computed against the wrong base.
    """


def is_state_lost(reason: str) -> bool:
    """Whether an error reply's reason is a client's `StateLost`."""
    return reason.startswith(f"{StateLost.__name__}: ")


class Instruction(NamedTuple):
    """A train or evaluate instruction, as the ClientApp reads it."""

    downlink: bytes  # the serialized model (or model delta) message
    round: int  # 1-based
    delivered: bool | None  # did this client's previous update count; None if unknown
    state_round: int = 0  # the round the client's kept state must be at; 0: start afresh


def instruction(
    downlink: bytes, round: int, delivered: bool | None = None, state_round: int = 0
) -> RecordDict:
    """The content of a train or evaluate message.

    Args:
        downlink: the serialized model or model delta.
        round: the round, 1-based.
        delivered: whether the client's previous update counted; None if unknown.
        state_round: the round the client's kept state must be at, below `round`; 0 tells
            it to start from its initial state (first contact, or a re-synchronization).
    """
    if not 0 <= state_round < round:
        raise ValueError(f"state_round must be in [0, {round}), got {state_round}")
    config: dict[str, ConfigRecordValues] = {_ROUND: round, _STATE_ROUND: state_round}
    if delivered is not None:
        config[_DELIVERED] = delivered
    return RecordDict(
        {_DOWNLINK: ArrayRecord({_UPDATE: update_array(downlink)}), _ROUND: ConfigRecord(config)}
    )


def read_instruction(content: RecordDict) -> Instruction:
    """Reads a train or evaluate message.

    Raises:
        WireError: if it is not one `instruction` made.
    """
    downlink = update_bytes(_record(content, _DOWNLINK, ArrayRecord), _DOWNLINK)
    config = _record(content, _ROUND, ConfigRecord)
    round = _int(config, _ROUND, _ROUND)
    state_round = _int(config, _STATE_ROUND, _ROUND)
    if round < 1 or not 0 <= state_round < round:
        raise WireError(
            f"{_ROUND}: round {round} with {_STATE_ROUND!r} {state_round} (must be in [0, round))"
        )
    delivered = config.get(_DELIVERED)
    if delivered is not None and not isinstance(delivered, bool):
        raise WireError(f"{_ROUND}: {_DELIVERED!r} must be a bool, got {delivered!r}")
    return Instruction(downlink, round, delivered, state_round)


class TrainReply(NamedTuple):
    """A ClientApp's answer to a train message."""

    update: bytes | None  # the serialized update; None when the policy kept silent
    num_examples: int
    train_loss: float
    compute_s: float  # local training and encoding time at the client
    epsilon: float | None = None  # privacy spent so far; None without privacy


def train_reply(reply: TrainReply) -> RecordDict:
    """The content of a train reply."""
    metrics = MetricRecord(
        {
            _NUM_EXAMPLES: reply.num_examples,
            _TRAIN_LOSS: reply.train_loss,
            _COMPUTE_S: reply.compute_s,
        }
    )
    if reply.epsilon is not None:
        metrics[_EPSILON] = reply.epsilon
    content = RecordDict({_METRICS: metrics})
    if reply.update is not None:
        content[_UPDATE] = ArrayRecord({_UPDATE: update_array(reply.update)})
    return content


def read_train_reply(content: RecordDict) -> TrainReply:
    """Reads a train reply (the update bytes inside are validated later, by the Aggregator).

    Raises:
        WireError: if it is not one `train_reply` made.
    """
    metrics = _record(content, _METRICS, MetricRecord)
    update = (
        update_bytes(_record(content, _UPDATE, ArrayRecord), _UPDATE)
        if _UPDATE in content
        else None
    )
    reply = TrainReply(
        update,
        _int(metrics, _NUM_EXAMPLES, _METRICS),
        _float(metrics, _TRAIN_LOSS, _METRICS),
        _float(metrics, _COMPUTE_S, _METRICS),
        _float(metrics, _EPSILON, _METRICS) if _EPSILON in metrics else None,
    )
    if not reply.compute_s >= 0.0:
        raise WireError(f"{_METRICS}: {_COMPUTE_S!r} must be >= 0, got {reply.compute_s}")
    if reply.epsilon is not None and not reply.epsilon >= 0.0:
        raise WireError(f"{_METRICS}: {_EPSILON!r} must be >= 0, got {reply.epsilon}")
    return reply


class ClientEvaluation(NamedTuple):
    """The global model measured on one client's own data."""

    num_examples: int
    loss: float
    accuracy: float


def evaluation_reply(evaluation: ClientEvaluation) -> RecordDict:
    """The content of an evaluate reply."""
    return RecordDict(
        {
            _METRICS: MetricRecord(
                {
                    _NUM_EXAMPLES: evaluation.num_examples,
                    _LOSS: evaluation.loss,
                    _ACCURACY: evaluation.accuracy,
                }
            )
        }
    )


def read_evaluation(content: RecordDict) -> ClientEvaluation:
    """Reads an evaluate reply.

    Raises:
        WireError: if it is not one `evaluation_reply` made, or its numbers are out of range.
    """
    metrics = _record(content, _METRICS, MetricRecord)
    evaluation = ClientEvaluation(
        _int(metrics, _NUM_EXAMPLES, _METRICS),
        _float(metrics, _LOSS, _METRICS),
        _float(metrics, _ACCURACY, _METRICS),
    )
    if evaluation.num_examples < 1 or not 0.0 <= evaluation.accuracy <= 1.0:
        raise WireError(f"{_METRICS}: implausible evaluation {tuple(evaluation)}")
    return evaluation


# --------------------------------------------------------------------------- field readers


def _record(content: RecordDict, key: str, kind: type) -> Any:
    if key not in content:
        raise WireError(f"the message has no {key!r} record (it has {sorted(content)})")
    record = content[key]
    if not isinstance(record, kind):
        raise WireError(f"record {key!r} must be a {kind.__name__}, got {type(record).__name__}")
    return record


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _int(record: Mapping[str, Any], key: str, where: str) -> int:
    value = record.get(key)
    if not _is_int(value):
        raise WireError(f"{where}: {key!r} must be an integer, got {value!r}")
    return value


def _float(record: Mapping[str, Any], key: str, where: str) -> float:
    # NaN is allowed: a diverged client reports its loss as it is.
    value = record.get(key)
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise WireError(f"{where}: {key!r} must be a number, got {value!r}")
    return float(value)
