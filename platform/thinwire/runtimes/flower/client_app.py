"""thinwire's Flower ClientApp: the star's client on a SuperNode.

Flower runs `app` in a fresh `flwr-clientapp` process for every message, so each handler
rebuilds the client from scratch: the experiment from the run config (the YAML that travels
with the run), the client index from the node config (`partition-id`, below `data.clients`,
which `num-partitions` must equal when it is given), its data from the node's cache of its
partition (`thinwire.runtimes.flower.partition`; the data set is loaded and split only when the
cache is missing or damaged), and its `ClientState` from the node's state folder
(`thinwire.runtimes.flower.state`: node config `state-dir`, keyed by experiment and partition),
at the round the server's train message names; `context.state` keeps only a small record of
the last save (run, round, digest). Training is `thinwire.clients.Client.train_round`, the
very method the simulator calls. The device follows `train.device`: `auto` trains on CUDA when
the host has a GPU, on the CPU otherwise.

Handlers (message types, see `thinwire.runtimes.flower.messages`):

- `query`: answers which partition this SuperNode serves;
- `train`: trains one round and replies with the update bytes (none when the policy kept
  silent) and the round's metrics; the new state is saved in the node's state folder. A
  state that is missing, stale or damaged is answered with a `StateLost` error: the server
  re-synchronizes the client rather than have it train on the wrong base;
- `evaluate`: measures the global model on this client's data (with `client_eval`).

Under a `ClientAppExecutor` (`thinwire client`: every message of the node in one long-lived
process, `thinwire.runtimes.flower.clientapp_executor`) the app keeps the client it built, and
its state after the last round, for the next message: a train message at the round the kept
state is at uses it, provided the node's state folder still holds, unchanged, the files this
process wrote for that round (a `stat` of each, no read); otherwise the state is read from the
folder and verified as above. Saving the new state is deferred until the reply is pushed. A
save that fails there drops the kept state, so the next message finds the folder short and
answers `StateLost`.

A client that cannot serve (a SuperNode started for another experiment, an invalid
downlink, a run config whose `plugins:` names a module this node does not allow: node config
`allow-plugins`, `thinwire client --allow-plugin NAME`) answers with an `Error` whose reason
says what is wrong, as Flower's mods do.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import NamedTuple

from flwr.app import ConfigRecord, Context, Error, Message
from flwr.clientapp import ClientApp
from flwr.common.constant import ErrorCode

from thinwire.clients import build_client
from thinwire.clients.client import Client, ClientState
from thinwire.codecs.model import ModelCodec
from thinwire.config import ConfigError, FlowerRuntime
from thinwire.learning import (
    Workspace,
    build_model,
    resolve_device,
    simulation_threads,
    torch_threads,
)
from thinwire.learning import evaluate as evaluate_model
from thinwire.plugins import allowing
from thinwire.runtimes.flower.clientapp_executor import defer, in_task
from thinwire.runtimes.flower.messages import (
    ClientEvaluation,
    StateLost,
    TrainReply,
    evaluation_reply,
    identity_reply,
    node_identity,
    node_plugins,
    node_state_dir,
    read_instruction,
    read_run_config,
    train_reply,
)
from thinwire.runtimes.flower.partition import load_partition
from thinwire.runtimes.flower.state import Fingerprint, StateStore, state_key
from thinwire.wire import Kind, WireError, decode

__all__ = ["app"]

logger = logging.getLogger(__name__)

app = ClientApp()

_CANNOT_SERVE = ValueError
"""What a client answers with an error reply instead of raising: a run config or node config
that does not fit (`ConfigError`, `ValueError`), a kept state that is not at the round the
server names (`StateLost`), or a malformed downlink (`WireError`); all are `ValueError`s."""

_SAVED = "thinwire.state"
"""`context.state` record of the last state this node saved: run id, round, digest."""


class _Kept(NamedTuple):
    """The client an executor's process built, and which saved round its state is."""

    key: tuple[str, int, str]  # the experiment (JSON), the partition, the state folder
    client: Client
    round: int | None = None  # None: the initial state; 0: a state no round saved
    digest: str = ""
    files: Fingerprint | None = None


_kept: _Kept | None = None
"""What this process keeps between messages (only under a `ClientAppExecutor`)."""


@app.query()
def identify(message: Message, context: Context) -> Message:
    """Tells the server which partition (client index) this SuperNode serves."""
    try:
        identity = node_identity(context.node_config)
    except ValueError as exc:
        return _refuse(message, exc)
    return Message(identity_reply(identity), reply_to=message)


@app.train()
def train(message: Message, context: Context) -> Message:
    """Runs one round of `Client.train_round` and replies with its update bytes."""
    try:
        client = _client(context)
        order = read_instruction(message.content)
        store = _store(context, client)
        if order.state_round:
            client.state = _restore(store, order.state_round, client, context)
        elif _kept_round(client) is not None:  # a re-synchronized kept client starts afresh
            client.state = client.initial_state()
        _keep_round(client, 0)  # until it is saved, the state is no round's
        with torch_threads(simulation_threads(client.experiment)):  # the simulator's, bit for bit
            result = client.train_round(order.downlink, order.round, delivered=order.delivered)
    except _CANNOT_SERVE as exc:
        return _refuse(message, exc)
    save = partial(_save, store, client, order.round, context)
    if not defer(partial(_save_after_reply, save)):
        try:
            save()
        except OSError as exc:  # a full or read-only disk: the update must not count either
            return _refuse(message, StateLost(f"cannot save client {client.index}'s state: {exc}"))
    reply = TrainReply(
        result.data, result.num_examples, result.train_loss, result.compute_s, result.epsilon
    )
    return Message(train_reply(reply), reply_to=message)


@app.evaluate()
def evaluate(message: Message, context: Context) -> Message:
    """Measures the global model sent in `message` on this client's own data."""
    try:
        client = _client(context)
        order = read_instruction(message.content)
        workspace = client.workspace
        dense = ModelCodec.dense(workspace.spec)
        model = decode(order.downlink, dense.wire_spec, kind=Kind.MODEL)
        workspace.load(dense.decode(model.tensors, workspace.device))
    except _CANNOT_SERVE as exc:
        return _refuse(message, exc)
    with torch_threads(simulation_threads(client.experiment)):
        result = evaluate_model(workspace.model, client.x, client.y)
    return Message(
        evaluation_reply(ClientEvaluation(result.examples, result.loss, result.accuracy)),
        reply_to=message,
    )


def _save(store: StateStore, client: Client, round: int, context: Context) -> None:
    """Saves the client's state after `round`, and records it for this process and the node."""
    digest = store.save(client.state, round)
    context.state[_SAVED] = ConfigRecord({"run": context.run_id, "round": round, "digest": digest})
    _keep_round(client, round, digest, store.fingerprint(round))


def _kept_round(client: Client) -> int | None:
    """The round whose saved state `client` holds, if this process keeps it (see `_Kept`)."""
    return _kept.round if _kept is not None and _kept.client is client else None


def _keep_round(
    client: Client, round: int, digest: str = "", files: Fingerprint | None = None
) -> None:
    global _kept
    if _kept is not None and _kept.client is client:
        _kept = _kept._replace(round=round, digest=digest, files=files)


def _save_after_reply(save: partial[None]) -> None:
    global _kept
    try:
        save()
    except OSError as exc:  # the update is counted; the next message reports the loss
        _kept = None
        logger.error("cannot save the client's state after replying: %s", exc)


def _client(context: Context) -> Client:
    """This node's client: the one this process kept, or one built in its initial state."""
    global _kept
    with allowing(node_plugins(context.node_config)):  # the run config is the server's word
        experiment = read_run_config(context.run_config).experiment
    identity = node_identity(context.node_config)
    clients = experiment.data.clients
    if identity.partitions not in (None, clients) or identity.partition >= clients:
        of = f" of {identity.partitions}" if identity.partitions is not None else ""
        raise ConfigError(
            "node config",
            [
                f"this SuperNode serves partition {identity.partition}{of}, but the "
                f"experiment has {clients} clients (data.clients)"
            ],
        )
    folder = node_state_dir(context.node_config)
    key = (experiment.model_dump_json(), identity.partition, str(folder))
    if _kept is not None and _kept.key == key and in_task():
        return _kept.client
    _kept = None  # what another experiment kept is freed before this one is built
    data = load_partition(folder, experiment, identity.partition)
    device = resolve_device(experiment.train.device)
    # Blank: every round's weights come from the downlink (the full model, or the client's
    # copy plus a delta), so drawing initial ones would be wasted work.
    model = build_model(
        experiment.model, data.input_shape, data.num_classes, seed=None, device=device
    )
    client = build_client(
        index=identity.partition,
        experiment=experiment,
        x=data.x.to(device),
        y=data.y.to(device),
        workspace=Workspace(model, device),
    )
    if in_task():
        _kept = _Kept(key, client)
    return client


def _store(context: Context, client: Client) -> StateStore:
    """The node's store of this client's states.

    It keeps one round more than `runtime.checkpoint_every` (and at least two), so a server
    resumed from its latest checkpoint, or from the one it writes when a round fails, finds
    every client's state at the checkpoint's round even if the client trained the next.
    """
    runtime = client.experiment.runtime
    every = runtime.checkpoint_every if isinstance(runtime, FlowerRuntime) else 0
    return StateStore(
        node_state_dir(context.node_config),
        experiment=state_key(client.experiment),
        partition=client.index,
        keep=max(2, every + 1),
    )


def _restore(store: StateStore, round: int, client: Client, context: Context) -> ClientState:
    """The client's state at `round`, checked against what this node last saved.

    Raises:
        StateLost: if the store does not hold that state intact, or holds another state
            than the one this SuperNode saved for that round in this run.
    """
    saved = context.state.config_records.get(_SAVED)
    kept = _kept
    if (
        kept is not None
        and kept.client is client
        and kept.round == round
        and kept.files is not None
        and kept.files == store.fingerprint(round)
        and (saved is None or saved.get("round") != round or saved.get("digest") == kept.digest)
    ):
        return client.state
    template = client.state if _kept_round(client) is None else client.initial_state()
    state, digest = store.load(round, template, client.workspace.tensors())
    if saved is not None and saved.get("round") == round and saved.get("digest") != digest:
        raise StateLost(
            f"client {client.index}'s state of round {round} in {store.folder} is not the "
            "one this SuperNode saved (the folder was changed)"
        )
    return state


def _refuse(message: Message, exc: ValueError) -> Message:
    expected = isinstance(exc, ConfigError | WireError | StateLost)
    kind = type(exc).__name__
    logger.error(
        "cannot serve a %s message: %s: %s",
        message.metadata.message_type,
        kind,
        exc,
        exc_info=None if expected else exc,
    )
    return Message(
        Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=f"{kind}: {exc}"),
        reply_to=message,
    )
