"""The client of sparse SGD with majority voting (`thinwire.voting`; config section `vote`).

A `VoteClient` trains like every `Client` (same trainer, seeds and downlink checks); what it
sends is the vote protocol's instead of a codec's:

- `train_round` applies the downlink (a full model, or the server's change on the support
  of the values this client last sent), trains, forms a = update + residual and votes
  top-K(|a|). With `mask: previous` the reply carries a on the downlink's mask S_{t-1}
  (K values, no indices) and the vote; the residual keeps a with S_{t-1} zeroed. Round 1
  has no mask yet: the reply is the vote and a stays whole in the residual. With
  `mask: two_phase` the reply is the vote alone and a waits in the residual;
- `send_values(mask message, round)` (two-phase only) sends a on the voted S and zeroes it
  in the residual.

State (a `ClientState`, so checkpoints and the Flower state folder keep it as they keep any
client's): `codec` holds `residual` (the flattened model's error feedback, float32 (d,))
and `sent` (bool (d,): the support of the values last sent, which the next downlink's
change lies on); `view` is the client's copy of the global model; `pending` the last values
message, added back to the residual when the server reports it did not count.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from thinwire.clients.client import Client, ClientResult, ClientState
from thinwire.codecs.receive import check_bounded, open_payloads
from thinwire.policies import Decision
from thinwire.voting import (
    CHANGE,
    MASK,
    VALUES,
    VOTE,
    flatten_model,
    index_payload,
    index_spec,
    read_index_set,
    read_values,
    support_size,
    top_k_vote,
    unflatten_model,
    values_payload,
    values_spec,
)
from thinwire.wire import Kind, Update, WireError, decode, encode

__all__ = ["VoteClient"]

_NO_BYTES = torch.empty(0, dtype=torch.uint8)


class VoteClient(Client):
    """One client of the vote protocol; see the module docstring. Arguments as `Client`'s."""

    def __init__(self, **kwargs: Any) -> None:
        experiment = kwargs["experiment"]
        if experiment.vote is None:
            raise ValueError("a VoteClient needs the experiment's vote section")
        spec = kwargs["workspace"].spec
        self.d = sum(s.numel for s in spec)
        self.k = support_size(experiment.vote.density, self.d)
        self.two_phase = experiment.vote.mask == "two_phase"
        super().__init__(**kwargs)

    def initial_state(self) -> ClientState:
        """No residual, nothing sent, a zero model copy (the first downlink is a full model)."""
        zeros = self.workspace.zeros()
        device = self.workspace.device
        return ClientState(
            codec={
                "residual": torch.zeros(self.d, device=device),
                "sent": torch.zeros(self.d, dtype=torch.bool, device=device),
            },
            policy=self.policy.init(zeros),
            view=zeros,
            carry={},
            pending=_NO_BYTES,
            privacy=self.trainer.init(),
        )

    def _open_downlink(
        self, data: bytes, round: int
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor | None]:
        """The model after the downlink, and the mask it brings (`mask: previous`, round > 1)."""
        sent = self.state.codec["sent"]
        mask_spec = [index_spec(MASK, self.d)] if not self.two_phase and round > 1 else []
        specs = {
            Kind.MODEL: [*self.dense.wire_spec, *mask_spec],
            Kind.MODEL_DELTA: [values_spec(CHANGE, int(sent.sum())), *mask_spec],
        }
        message = decode(data, specs)
        if message.round != round:
            raise WireError(f"downlink is for round {message.round}, expected round {round}")
        device = self.workspace.device
        if message.kind == Kind.MODEL:
            model = {s.name: message.tensors[s.name] for s in self.dense.wire_spec}
            view = open_payloads(self.dense, model, device, max_norm=None, what="downlink model")
        else:
            change = read_values(message.tensors[CHANGE], k=int(sent.sum()), what="downlink change")
            flat = flatten_model(self.state.view, self.workspace.spec)
            flat[sent] = flat[sent] + change.to(device)
            view = unflatten_model(flat, self.workspace.spec)
            check_bounded(view, None, what="model after the downlink change")
        mask = None
        if mask_spec:
            mask = read_index_set(message.tensors[MASK], k=self.k, exact=True, what="mask")
        return view, mask

    def _residual(self, delivered: bool | None) -> torch.Tensor:
        """The residual, with the last values added back if the server did not count them."""
        residual = self.state.codec["residual"]
        pending = self.state.pending
        if delivered is False and pending.numel():
            sent = self.state.codec["sent"]
            spec = [values_spec(VALUES, int(sent.sum()))]
            own = decode(pending.numpy().tobytes(), spec)
            residual = residual.clone()
            residual[sent] = residual[sent] + own.tensors[VALUES].values.data.to(residual.device)
        return residual

    def train_round(self, downlink: bytes, round: int, *, delivered: bool | None) -> ClientResult:
        """Applies the downlink, trains and votes; see the module docstring for the reply.

        Raises:
            WireError: the downlink is malformed, of another form, for another round, or
                would give a model that is not finite.
        """
        start = time.perf_counter()
        state = self.state
        residual = self._residual(delivered)
        view, mask = self._open_downlink(downlink, round)
        stats, ledger = self._train(view, round, state.privacy)
        spec = self.workspace.spec
        a = flatten_model(self.workspace.delta(view), spec) + residual
        metrics = {"num_examples": float(self.x.shape[0]), "train_loss": stats.loss}
        tensors = {}
        sent = torch.zeros(self.d, dtype=torch.bool, device=a.device)
        pending = _NO_BYTES
        if mask is not None:
            sent[mask.to(a.device)] = True
            values = values_payload(a[sent])
            tensors[VALUES] = values
            pending = _bytes(Update(self.name, round, Kind.MODEL_DELTA, {VALUES: values}))
        tensors[VOTE] = index_payload(top_k_vote(a, self.k), self.d)
        residual = a.masked_fill(sent, 0.0)
        data = encode(Update(self.name, round, Kind.MODEL_DELTA, tensors, metrics))
        self.state = ClientState(
            {"residual": residual, "sent": sent}, state.policy, view, {}, pending, ledger
        )
        return ClientResult(
            data, Decision(transmit=True), stats.loss, stats.examples, time.perf_counter() - start
        )

    def send_values(self, data: bytes, round: int) -> bytes:
        """Two-phase only: a on the mask the server voted, K values; the residual keeps the rest.

        Raises:
            WireError: the mask message is malformed, for another round, or not K sorted
                indices in range.
        """
        if not self.two_phase:
            raise ValueError("send_values is the second exchange of mask 'two_phase'")
        message = decode(data, [index_spec(MASK, self.d)], kind=Kind.MODEL_DELTA)
        if message.round != round:
            raise WireError(f"mask is for round {message.round}, expected round {round}")
        mask = read_index_set(message.tensors[MASK], k=self.k, exact=True, what="mask")
        state = self.state
        a = state.codec["residual"]
        sent = torch.zeros(self.d, dtype=torch.bool, device=a.device)
        sent[mask.to(a.device)] = True
        values = values_payload(a[sent])
        metrics = {"num_examples": float(self.x.shape[0])}
        reply = encode(Update(self.name, round, Kind.MODEL_DELTA, {VALUES: values}, metrics))
        self.state = state._replace(
            codec={"residual": a.masked_fill(sent, 0.0), "sent": sent},
            pending=torch.frombuffer(bytearray(reply), dtype=torch.uint8),
        )
        return reply


def _bytes(update: Update) -> torch.Tensor:
    return torch.frombuffer(bytearray(encode(update)), dtype=torch.uint8)
