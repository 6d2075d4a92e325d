"""The federated client: train on local data, decide whether to send, encode the update.

A `Client` is transport-free: it takes the server's downlink message as bytes and returns
its update as bytes, so the simulator and the Flower ClientApp drive the very same object.
Everything that must survive between rounds is in a `ClientState` (codec residuals, policy
state, the client's copy of the global model, undelivered mass), which the simulator keeps in
memory and the Flower ClientApp persists in `context.state`.

Round, from the client's side:
1. If the server reported that the previous update was *not* delivered (a random-access
   collision, a rejected message), its decoded content is carried into this round.
2. Apply the downlink: a full model replaces the client's copy; a compressed model delta is
   added to it (the server's public copy, kept identical on both ends).
3. Train `local_steps` from that copy; the update is local model minus copy, plus carry.
4. The send policy decides: transmit (encode with the uplink codec, error feedback inside
   the codec) or stay silent (keep the update as carry, or drop it).
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple

import torch

from thinwire.codecs.model import ModelCodec
from thinwire.codecs.support import derive_seed
from thinwire.config import Experiment
from thinwire.learning import Workspace, learning_rate, local_steps_for, train_local
from thinwire.policies import Decision, PolicyInput, build_policy
from thinwire.wire import Kind, Update, WireError, client_id, decode, encode

__all__ = ["Client", "ClientResult", "ClientState"]

_CODEC_SEED, _TRAIN_SEED, _POLICY_SEED = 1, 2, 3


class ClientState(NamedTuple):
    """What a client keeps between rounds."""

    codec: dict[str, Any]  # uplink codec state per payload (residuals: model-sized float32)
    policy: Any  # the send policy's state
    view: dict[str, torch.Tensor]  # the server's public model copy (compressed downlink only)
    carry: dict[str, torch.Tensor]  # undelivered update mass for the next round; {} if none
    pending: torch.Tensor  # (bytes,) uint8: last sent update until its outcome is known


class ClientResult(NamedTuple):
    """One round's outcome at the client."""

    data: bytes | None  # the serialized update, None when the policy kept silent
    decision: Decision
    train_loss: float
    num_examples: int
    compute_s: float  # local training + encoding time


class Client:
    """One federated client; see the module docstring for the round it runs."""

    def __init__(
        self,
        *,
        index: int,
        experiment: Experiment,
        x: torch.Tensor,
        y: torch.Tensor,
        workspace: Workspace,
        state: ClientState | None = None,
    ) -> None:
        if x.shape[0] != y.shape[0] or x.shape[0] == 0:
            raise ValueError(f"client {index}: needs matching, non-empty data, got {x.shape[0]}")
        self.index = index
        self.name = client_id(index)
        self.experiment = experiment
        self.x, self.y = x, y
        self.workspace = workspace
        seed = experiment.seed
        self.uplink = ModelCodec(
            experiment.codec, workspace.spec, seed=derive_seed(seed, _CODEC_SEED, index)
        )
        self.downlink = (
            ModelCodec(experiment.downlink, workspace.spec, seed=derive_seed(seed, 0))
            if experiment.downlink is not None
            else None
        )
        self.dense = ModelCodec.dense(workspace.spec)
        self.policy = build_policy(experiment.policy, seed=derive_seed(seed, _POLICY_SEED, index))
        self.state = state if state is not None else self.initial_state()

    def initial_state(self) -> ClientState:
        """The state of a client that has not taken part yet."""
        zeros = self.workspace.zeros()
        return ClientState(
            codec=self.uplink.init(zeros),
            policy=self.policy.init(),
            view=zeros if self.downlink is not None else {},
            carry={},
            pending=torch.empty(0, dtype=torch.uint8),
        )

    def _apply_downlink(self, data: bytes, round: int) -> dict[str, torch.Tensor]:
        device = self.workspace.device
        specs = {Kind.MODEL: self.dense.wire_spec}
        if self.downlink is not None:
            specs[Kind.MODEL_DELTA] = self.downlink.wire_spec
        message = decode(data, specs)
        if message.round != round:
            raise WireError(f"downlink is for round {message.round}, expected round {round}")
        if message.kind == Kind.MODEL:
            return self.dense.decode(message.tensors, device)
        assert self.downlink is not None
        delta = self.downlink.decode(message.tensors, device)
        return {k: self.state.view[k] + delta[k] for k in self.state.view}

    def _reclaim_pending(self, delivered: bool | None) -> dict[str, torch.Tensor]:
        carry = dict(self.state.carry)
        if delivered is False and self.state.pending.numel():
            own = decode(self.state.pending.numpy().tobytes(), self.uplink.wire_spec)
            lost = self.uplink.decode(own.tensors, self.workspace.device)
            carry = {k: carry[k] + lost[k] if k in carry else lost[k] for k in lost}
        return carry

    def train_round(self, downlink: bytes, round: int, *, delivered: bool | None) -> ClientResult:
        """Runs one round (see the module docstring) and advances `self.state`.

        Args:
            downlink: the server's serialized model (or model delta) message for this round.
            round: 1-based round number.
            delivered: whether this client's previous update reached the server; None when
                unknown or when it has not sent one.

        Raises:
            WireError: if the downlink message is malformed.
        """
        start = time.perf_counter()
        state = self.state
        policy_state = (
            self.policy.delivered(delivered, state.policy)
            if delivered is not None
            else state.policy
        )
        carry = self._reclaim_pending(delivered)
        view = self._apply_downlink(downlink, round)
        # Only a compressed downlink needs the model copy between rounds; a full model
        # arrives every round otherwise, and 1000 clients should not hold 1000 copies.
        kept_view = view if self.downlink is not None else {}

        self.workspace.load(view)
        steps = local_steps_for(self.experiment.train, int(self.x.shape[0]))
        generator = torch.Generator(device="cpu").manual_seed(
            derive_seed(self.experiment.seed, _TRAIN_SEED, self.index, round)
        )
        stats = train_local(
            self.workspace.model,
            self.x,
            self.y,
            steps=steps,
            batch_size=self.experiment.train.batch_size,
            lr=learning_rate(self.experiment.train, round),
            optimizer=self.experiment.train.optimizer,
            generator=generator,
        )
        local = self.workspace.tensors()
        update = {
            k: local[k] - view[k] + carry[k] if k in carry else local[k] - view[k] for k in view
        }

        decision, policy_state = self.policy.decide(PolicyInput(round, update), policy_state)
        if not decision.transmit:
            self.state = ClientState(
                state.codec,
                policy_state,
                kept_view,
                update if decision.keep_unsent else {},
                _NO_BYTES,
            )
            return ClientResult(None, decision, stats.loss, stats.examples, _since(start))

        payloads, codec_state = self.uplink.encode(update, state.codec)
        metrics = {"num_examples": float(self.x.shape[0]), "train_loss": stats.loss}
        if decision.slot is not None:
            metrics["slot"] = float(decision.slot)
        data = encode(Update(self.name, round, Kind.MODEL_DELTA, payloads, metrics))
        pending = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        self.state = ClientState(codec_state, policy_state, kept_view, {}, pending)
        return ClientResult(data, decision, stats.loss, stats.examples, _since(start))


_NO_BYTES = torch.empty(0, dtype=torch.uint8)


def _since(start: float) -> float:
    return time.perf_counter() - start
