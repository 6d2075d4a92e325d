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
3. Train `local_steps` from that copy, with the batch size the policy sets for the round
   (CSGD grows it); the update is local model minus copy, plus carry. The client trains
   with the run's `Trainer`; with a `privacy` section that is local SGD wrapped by
   `thinwire.learning.private` (DP-SGD: the round's shared random-sparsification mask
   confines it to the kept coordinates, the trainer's state is the privacy ledger, and
   epsilon is reported with the result).
4. The send policy decides: transmit (encode with the uplink codec, error feedback inside
   the codec, in the random-access slot the policy picked) or stay silent (keep the update
   as carry, or drop it).

Everything after step 3 (policy, codec, carry) only post-processes the DP-SGD output, so it
costs no privacy; a `shared_mask` uplink codec sends just the mask's coordinates and seed.
"""

from __future__ import annotations

import time
import warnings
from typing import Any, NamedTuple

import torch

from thinwire.channel import SLOT_METRIC
from thinwire.codecs import EncodeArgs
from thinwire.codecs.model import ModelCodec
from thinwire.codecs.receive import check_bounded, open_payloads
from thinwire.config import Experiment
from thinwire.learning import (
    PrivacyPlan,
    TrainCall,
    TrainStats,
    Workspace,
    learning_rate,
    local_sgd,
    private,
)
from thinwire.policies import Decision, PolicyContext, PolicyInput, build_policy
from thinwire.privacy import EPSILON_METRIC, PrivacyLedger, drop_rate, round_mask
from thinwire.seeding import (
    downlink_codec_seed,
    dp_noise_seed,
    policy_seed,
    train_seed,
    uplink_codec_seed,
)
from thinwire.wire import Kind, Update, WireError, client_id, decode, encode
from thinwire.wire.payload import SeededSupport

__all__ = ["Client", "ClientResult", "ClientState"]


class ClientState(NamedTuple):
    """What a client keeps between rounds."""

    codec: dict[str, Any]  # uplink codec state per payload (residuals: model-sized float32)
    policy: Any  # the send policy's state
    view: dict[str, torch.Tensor]  # the server's public model copy (compressed downlink only)
    carry: dict[str, torch.Tensor]  # undelivered update mass for the next round; {} if none
    pending: torch.Tensor  # (bytes,) uint8: last sent update until its outcome is known
    privacy: PrivacyLedger | None = None  # the trainer's state: DP-SGD's ledger; None if plain


class ClientResult(NamedTuple):
    """One round's outcome at the client."""

    data: bytes | None  # the serialized update, None when the policy kept silent
    decision: Decision
    train_loss: float
    num_examples: int
    compute_s: float  # local training + encoding time
    epsilon: float | None = None  # privacy spent after this round; None without privacy


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
            experiment.codec, workspace.spec, seed=uplink_codec_seed(seed, index)
        )
        self.downlink = (
            ModelCodec(experiment.downlink, workspace.spec, seed=downlink_codec_seed(seed))
            if experiment.downlink is not None
            else None
        )
        self.dense = ModelCodec.dense(workspace.spec)
        self.policy = build_policy(
            experiment.policy,
            PolicyContext(
                seed=policy_seed(seed, index),
                client=index,
                clients=experiment.data.clients,
                slots=experiment.channel.slots,
            ),
        )
        self.trainer = local_sgd(experiment.train)
        if experiment.privacy is not None:
            plan = PrivacyPlan.for_client(experiment, experiment.privacy, int(x.shape[0]))
            self.trainer = private(
                self.trainer,
                plan=plan,
                noise_seed=lambda round: dp_noise_seed(seed, index, round),
                mask=self._mask,
            )
            warnings.warn(
                "DP noise is drawn from seeds derived from the experiment seed: runs replay "
                "exactly, but anyone who knows the seed can regenerate and remove the noise. "
                "Keep the seed secret (or unique per deployment) outside research runs.",
                stacklevel=2,
            )
        self.state = state if state is not None else self.initial_state()

    def initial_state(self) -> ClientState:
        """The state of a client that has not taken part yet."""
        zeros = self.workspace.zeros()
        return ClientState(
            codec=self.uplink.init(zeros),
            policy=self.policy.init(zeros),
            view=zeros if self.downlink is not None else {},
            carry={},
            pending=torch.empty(0, dtype=torch.uint8),
            privacy=self.trainer.init(),
        )

    def _apply_downlink(self, data: bytes, round: int) -> dict[str, torch.Tensor]:
        device = self.workspace.device
        specs = {Kind.MODEL: self.dense.wire_spec}
        if self.downlink is not None:
            specs[Kind.MODEL_DELTA] = self.downlink.wire_spec
        message = decode(data, specs)
        if message.round != round:
            raise WireError(f"downlink is for round {message.round}, expected round {round}")
        if message.kind == Kind.MODEL or self.downlink is None:
            # (decode accepts a MODEL_DELTA only when there is a downlink codec)
            return open_payloads(
                self.dense, message.tensors, device, max_norm=None, what="downlink model"
            )
        delta = open_payloads(
            self.downlink, message.tensors, device, max_norm=None, what="downlink delta"
        )
        view = {k: self.state.view[k] + delta[k] for k in self.state.view}
        check_bounded(view, None, what="model after the downlink delta")
        return view

    def _reclaim_pending(self, delivered: bool | None) -> dict[str, torch.Tensor]:
        carry = dict(self.state.carry)
        if delivered is False and self.state.pending.numel():
            own = decode(self.state.pending.numpy().tobytes(), self.uplink.wire_spec)
            lost = self.uplink.decode(own.tensors, self.workspace.device)
            carry = {k: carry[k] + lost[k] if k in carry else lost[k] for k in lost}
        return carry

    def _mask(self, round: int) -> SeededSupport | None:
        """This round's random-sparsification mask over the flattened model (shared)."""
        privacy = self.experiment.privacy
        if privacy is None or privacy.sparsity is None:
            return None
        rate = drop_rate(privacy.sparsity, round, self.experiment.train.rounds)
        n = sum(s.numel for s in self.workspace.spec)
        return round_mask(self.experiment.seed, round, n, rate)

    def _train(
        self, view: dict[str, torch.Tensor], round: int, state: Any
    ) -> tuple[TrainStats, Any]:
        """Local training from `view` with the run's trainer (plain, or wrapped for DP)."""
        train = self.experiment.train
        generator = torch.Generator(device="cpu").manual_seed(
            train_seed(self.experiment.seed, self.index, round)
        )
        self.workspace.load(view)
        call = TrainCall(
            self.workspace.model,
            view,
            self.x,
            self.y,
            round,
            self.policy.batch_size(round, train.batch_size),
            learning_rate(train, round),
            generator,
        )
        return self.trainer.train(call, state)

    def train_round(self, downlink: bytes, round: int, *, delivered: bool | None) -> ClientResult:
        """Runs one round (see the module docstring) and advances `self.state`.

        Args:
            downlink: the server's serialized model (or model delta) message for this round.
            round: 1-based round number.
            delivered: whether this client's previous update reached the server; None when
                unknown or when it has not sent one.

        Raises:
            WireError: if the downlink message is malformed, not of the downlink codec's
                form, or would give a model that is not finite (the client never trains
                on one).
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

        stats, ledger = self._train(view, round, state.privacy)
        spent = self.trainer.spent(ledger)
        fresh = self.workspace.delta(view)
        update = {k: fresh[k] + carry[k] if k in carry else fresh[k] for k in fresh}

        decision, policy_state = self.policy.decide(
            PolicyInput(round, update, fresh if carry else None), policy_state
        )
        if not decision.transmit:
            self.state = ClientState(
                state.codec,
                policy_state,
                kept_view,
                update if decision.keep_unsent else {},
                _NO_BYTES,
                ledger,
            )
            return ClientResult(None, decision, stats.loss, stats.examples, _since(start), spent)

        # The round's DP mask goes to a shared_mask selector; other selectors ignore it.
        payloads, codec_state = self.uplink.encode(
            update, state.codec, EncodeArgs(mask=self._mask(round))
        )
        metrics = {"num_examples": float(self.x.shape[0]), "train_loss": stats.loss}
        if decision.slot is not None:
            metrics[SLOT_METRIC] = float(decision.slot)
        if spent is not None:
            metrics[EPSILON_METRIC] = spent
        data = encode(Update(self.name, round, Kind.MODEL_DELTA, payloads, metrics))
        pending = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        self.state = ClientState(codec_state, policy_state, kept_view, {}, pending, ledger)
        return ClientResult(data, decision, stats.loss, stats.examples, _since(start), spent)


_NO_BYTES = torch.empty(0, dtype=torch.uint8)


def _since(start: float) -> float:
    return time.perf_counter() - start
