"""The server of sparse SGD with majority voting (`thinwire.voting`; config section `vote`).

A `VoteAggregator` is an `Aggregator` whose messages are the vote protocol's; sampling, the
reply bookkeeping, example-count checks, the aggregation rule (applied to the K-vectors of
values) and the server step are the Aggregator's own.

- `broadcast`: a client that got the previous round's downlink gets the server's change on
  the support of that round's values (K fp32 values, no indices: the client sent on that
  support); any other gets the full model. With `mask: previous` every downlink of round
  t > 1 also carries S_{t-1}, the support round t's values go on.
- two-phase only: `receive_vote` takes each vote, `close_vote` tallies S and returns the
  mask message for every recipient (a client whose vote was refused gets it too and sends
  values like the others; they do not count, so it adds them back to its residual);
- `receive`: values on S (and, with `mask: previous`, the vote for the next round);
- `finish_round`: aggregates the values with the run's rule, takes the step on S only
  (the step from a zero model on the K coordinates is exactly the change the clients add,
  so the server's model and every client's copy stay equal bit for bit) and, with
  `mask: previous`, tallies the round's votes into the next mask.

State: `AggregatorState.downlink` holds `mask` (bool (d,): the agreed support; with
`mask: previous`, the one the next round sends on), `applied` (bool (d,): the support of
the last change) and `change` (float32 (K,): its values), so checkpoints keep the vote as
they keep a downlink codec's state. The step must be plain SGD (the config refuses server
momentum: a momentum step is dense).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import torch

from thinwire.codecs.receive import check_bounded, norm_bound
from thinwire.learning import Workspace
from thinwire.server.aggregator import Aggregator, Receipt, RoundResult
from thinwire.server.rules import Contribution
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
    tally,
    unflatten_model,
    values_payload,
    values_spec,
)
from thinwire.wire import Kind, TensorSpec, Update, WireError, decode, encode

__all__ = ["VoteAggregator"]

logger = logging.getLogger(__name__)


class VoteAggregator(Aggregator):
    """The vote protocol's server; see the module docstring. Arguments as `Aggregator`'s."""

    def __init__(self, *, workspace: Workspace, **kwargs: Any) -> None:
        super().__init__(workspace=workspace, **kwargs)
        vote = self.experiment.vote
        if vote is None:
            raise ValueError("a VoteAggregator needs the experiment's vote section")
        self.spec: tuple[TensorSpec, ...] = tuple(workspace.spec)
        self.d = sum(s.numel for s in self.spec)
        self.k = support_size(vote.density, self.d)
        self.two_phase = vote.mask == "two_phase"
        self.state = self.state._replace(
            downlink={
                "mask": torch.zeros(self.d, dtype=torch.bool),
                "applied": torch.zeros(self.d, dtype=torch.bool),
                "change": torch.zeros(self.k),
            }
        )
        self._votes: dict[int, torch.Tensor] = {}
        self._mask: torch.Tensor | None = None  # this round's support, once known
        self._voting = False

    # ------------------------------------------------------------------ downlink

    def broadcast(self, round: int, recipients: Iterable[int]) -> dict[int, bytes]:
        """Opens `round`: the change (or the full model), with S_{t-1} for `mask: previous`."""
        if round != self.state.round + 1:
            raise ValueError(f"round {round} cannot follow round {self.state.round}")
        self._round = round
        self._recipients = set(recipients)
        self._updates, self._accepted, self._rejected, self._silent = {}, [], {}, []
        self._votes, self._voting = {}, self.two_phase
        state = self.state
        self._mask = None
        extra: dict[str, Any] = {}
        if not self.two_phase and round > 1:
            mask = state.downlink["mask"]
            if not bool(mask.any()):  # round 1 closed without its tally (abandoned)
                mask = self._tally(round - 1)
            self._mask = mask
            extra[MASK] = index_payload(mask.nonzero().flatten(), self.d)
        applied, change = state.downlink["applied"], state.downlink["change"]
        sent = change if bool(applied.any()) else change[:0]
        delta = encode(
            Update("server", round, Kind.MODEL_DELTA, {CHANGE: values_payload(sent), **extra})
        )
        model, _ = self.dense.encode(state.model, self.dense.init(state.model))
        full = encode(Update("server", round, Kind.MODEL, {**model, **extra}))
        received = dict(state.received)
        out = {c: delta if received.get(str(c)) == round - 1 else full for c in self._recipients}
        for c in self._recipients:
            received[str(c)] = round
        self.state = state._replace(received=received)
        return out

    # ------------------------------------------------------------------ two-phase vote

    def receive_vote(self, client: int, data: bytes) -> Receipt:
        """Two-phase: validates one client's vote; a refused one refuses its round (counted)."""
        try:
            if not self._voting:
                raise WireError("no vote is open in this round")
            self._check_reply(client)
            if client in self._votes:
                raise WireError(f"client {client} already voted this round")
            update = decode(data, [index_spec(VOTE, self.d)], kind=Kind.MODEL_DELTA)
            self._check_update(client, update)
            self._votes[client] = read_index_set(
                update.tensors[VOTE], k=self.k, exact=False, what="vote"
            )
        except WireError as exc:
            self._rejected[client] = str(exc)
            logger.warning("round %d: rejected vote from %s: %s", self._round, client, exc)
            return Receipt(False, str(exc))
        return Receipt(True)

    def close_vote(self) -> dict[int, bytes]:
        """Two-phase: tallies the accepted votes into S; the mask message for each recipient."""
        if not self._voting:
            raise ValueError("no vote is open: broadcast a two-phase round first")
        self._voting = False
        self._mask = self._tally(self._round)
        indices = self._mask.nonzero().flatten()
        data = encode(
            Update("server", self._round, Kind.MODEL_DELTA, {MASK: index_payload(indices, self.d)})
        )
        return dict.fromkeys(sorted(self._recipients), data)

    def _tally(self, round: int) -> torch.Tensor:
        votes = [self._votes[c] for c in sorted(self._votes)]
        chosen = tally(votes, self.d, self.k, seed=self.experiment.seed, round=round)
        mask = torch.zeros(self.d, dtype=torch.bool)
        mask[chosen] = True
        return mask

    # ------------------------------------------------------------------ values

    def receive(self, client: int, data: bytes) -> Receipt:
        """Validates one client's values (and vote); never raises on bad input."""
        if self.two_phase and client in self._rejected and client not in self._votes:
            return Receipt(False, self._rejected[client])  # its vote was refused
        return super().receive(client, data)

    def _accumulate(self, client: int, data: bytes) -> None:
        if self._voting:
            raise WireError("values arrived before the vote closed")
        self._check_reply(client)
        spec = []
        if self._mask is not None:
            spec.append(values_spec(VALUES, self.k))
        if not self.two_phase:
            spec.append(index_spec(VOTE, self.d))
        update = decode(data, spec, kind=Kind.MODEL_DELTA)
        self._check_update(client, update)
        if VALUES in update.tensors:
            read_values(update.tensors[VALUES], k=self.k, what="values")
        if VOTE in update.tensors:
            vote = read_index_set(update.tensors[VOTE], k=self.k, exact=False, what="vote")
            self._votes[client] = vote
        self._updates[client] = update

    def _contributions(self) -> dict[int, Contribution]:
        """Each accepted update's values on S, bounded; a refused one moves to `_rejected`."""
        bound = norm_bound(self.state.model, self.experiment.aggregation.max_norm_ratio)
        out: dict[int, Contribution] = {}
        for client, update in sorted(self._updates.items()):
            if VALUES not in update.tensors:
                continue
            values = {VALUES: read_values(update.tensors[VALUES], k=self.k, what="values")}
            try:
                check_bounded(values, bound, what="values")
            except WireError as exc:
                self._refuse(client, str(exc))
                self._votes.pop(client, None)
                continue
            out[client] = (values, update.metrics["num_examples"])
        return out

    def finish_round(self) -> RoundResult:
        """Aggregates the values with the rule, steps on S, tallies the next mask (previous)."""
        contributions = self._contributions()
        state = self.state
        model = state.model
        zero = {VALUES: torch.zeros(self.k)}
        change = zero[VALUES]
        if contributions:
            ordered = [contributions[c] for c in sorted(contributions)]
            average = self.half.combine(self.rule, len(self._recipients))(ordered)
            step, _ = self.step(zero, {VALUES: average[VALUES].cpu().float()}, {})
            change = step[VALUES]
        if self._mask is not None:
            flat = flatten_model(model, self.spec).cpu()
            flat[self._mask] = flat[self._mask] + change
            if bool(torch.isfinite(flat).all()):
                device = self.workspace.device
                model = {k: v.to(device) for k, v in unflatten_model(flat, self.spec).items()}
            else:
                logger.error(
                    "round %d: the aggregate would make the model non-finite; it stays",
                    self._round,
                )
                change = zero[VALUES]
        self._close(change)
        self.state = self.state._replace(round=self._round, model=model)
        accepted = list(self._accepted)  # a refused update left it in `_contributions`
        result = RoundResult(
            self._round,
            accepted,
            dict(self._rejected),
            {c: c in accepted for c in self._accepted} | dict.fromkeys(self._rejected, False),
        )
        self._updates, self._votes = {}, {}
        return result

    def abandon_round(self, reason: str) -> RoundResult:
        """Closes the round without a step; the next downlink's change on S is zero."""
        self._close(torch.zeros(self.k))
        self._votes = {}
        return super().abandon_round(reason)

    def _close(self, change: torch.Tensor) -> None:
        """The round's change on its support, and (previous) the next round's mask."""
        downlink = dict(self.state.downlink)
        if self._mask is not None:
            downlink["applied"], downlink["change"] = self._mask, change.float()
        else:
            downlink["applied"] = torch.zeros(self.d, dtype=torch.bool)
            downlink["change"] = torch.zeros(self.k)
        if not self.two_phase:
            downlink["mask"] = self._tally(self._round)
        elif self._mask is not None:
            downlink["mask"] = self._mask
        self.state = self.state._replace(downlink=downlink)
