"""thinwire's Flower ClientApp: the star's client on a SuperNode.

Flower runs `app` in a fresh `flwr-clientapp` process for every message, so each handler
rebuilds the client from scratch: the experiment from the run config (the YAML that travels
with the run), the client index from the node config (`partition-id`, below `data.clients`,
which `num-partitions` must equal when it is given), its data from
`load_federation(...).client_data(index)`, and its `ClientState` from `context.state` (see
`thinwire.clients.flower_state`). Training is `thinwire.clients.Client.train_round`, the very
method the simulator calls. The device follows `train.device`: `auto` trains on CUDA when
the host has a GPU, on the CPU otherwise.

Handlers (message types, see `thinwire.server.flower_messages`):

- `query`: answers which partition this SuperNode serves;
- `train`: trains one round and replies with the update bytes (none when the policy kept
  silent) and the round's metrics; the new state is saved into `context.state`;
- `evaluate`: measures the global model on this client's data (with `client_eval`).

A client that cannot serve (a SuperNode started for another experiment, an invalid
downlink) answers with an `Error` whose reason says what is wrong, as Flower's mods do.
"""

from __future__ import annotations

import logging

from flwr.app import Context, Error, Message
from flwr.clientapp import ClientApp
from flwr.common.constant import ErrorCode

from thinwire.clients.client import Client
from thinwire.clients.flower_state import load_state, save_state
from thinwire.codecs.model import ModelCodec
from thinwire.config import ConfigError
from thinwire.learning import evaluate as evaluate_model
from thinwire.learning import load_federation
from thinwire.server.flower_messages import (
    ClientEvaluation,
    TrainReply,
    evaluation_reply,
    identity_reply,
    node_identity,
    read_instruction,
    read_run_config,
    train_reply,
)
from thinwire.wire import Kind, WireError, decode

__all__ = ["app"]

logger = logging.getLogger(__name__)

app = ClientApp()

_CANNOT_SERVE = ValueError
"""What a client answers with an error reply instead of raising: a run config, node config
or stored state that does not fit (`ConfigError`, `ValueError`), or a malformed downlink
(`WireError`); all are `ValueError`s."""


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
        result = client.train_round(order.downlink, order.round, delivered=order.delivered)
    except _CANNOT_SERVE as exc:
        return _refuse(message, exc)
    save_state(client.state, context.state, with_view=client.experiment.downlink is not None)
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
    result = evaluate_model(workspace.model, client.x, client.y)
    return Message(
        evaluation_reply(ClientEvaluation(result.examples, result.loss, result.accuracy)),
        reply_to=message,
    )


def _client(context: Context) -> Client:
    """This node's client, with the state it kept from its previous rounds."""
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
    federation = load_federation(experiment)
    x, y = federation.client_data(identity.partition)
    client = Client(
        index=identity.partition,
        experiment=experiment,
        x=x,
        y=y,
        workspace=federation.workspace,
    )
    restored = load_state(context.state, client.state, federation.workspace.tensors())
    if restored is not None:
        client.state = restored
    return client


def _refuse(message: Message, exc: ValueError) -> Message:
    expected = isinstance(exc, ConfigError | WireError)
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
