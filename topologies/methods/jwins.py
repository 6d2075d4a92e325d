"""JWINS: share the wavelet coefficients that changed most, with a random cut-off per round.

Dhasade, Kermarrec, Pires, Sharma, Vujasinovic, Wigger, "Get More for Less in Decentralized
Learning Systems" (ICDCS'23, arXiv 2306.04377). The mechanics follow the authors' code
(`sacs-epfl/decentralizepy`, `sharing/JWINS/`, with the paper configs' `accumulation` and
`accumulate_averaging_changes`). Per node i and round t, with T the multilevel wavelet
transform of the flattened model (`thinwire.codecs.wavelet`) and A the accumulator:

1. x^{t+1/2} = local SGD steps from x^t;
2. score = T(x^{t+1/2} - x_prev) + A, where x_prev is the model after the previous
   averaging and A the wavelet-domain change not shared yet;
3. draw alpha uniformly from `alphas` (seeded by run seed, node and round);
4. if alpha >= `metadata_cap`: send every coefficient of T(x^{t+1/2}) and zero A; else send
   the current *values* T(x^{t+1/2})[I] at the indices I of the ceil(alpha d') largest
   |score| (d' coefficients), and zero A[I];
5. every neighbour's message becomes a full coefficient vector by filling the coordinates
   it did not send with this node's own T(x^{t+1/2}) (a missing neighbour is all own), and
   z = sum_j w_ij y_j over the mixing row, this node included;
6. x^{t+1} = T^-1(z); A += T(x^{t+1} - x_prev); x_prev = x^{t+1}.

With alphas = [1.0] every round is a full share and JWINS is D-PSGD (up to the transform's
float rounding). Under the paper's set the mean shared fraction is 2.4 / 7, about 34%,
with a full model one round in seven.

Differences from the paper, all deliberate: the transform is the codec library's
periodization DWT (orthogonal, d' = d when 2^level divides d) instead of PyWavelets'
default symmetric mode; the cut-off count is ceil(alpha d') where the code rounds; and
coefficient values travel as plain fp32 in thinwire's wire format (indices delta-coded
or as a bitmap), where the paper compresses them losslessly with fpzip and its indices
with Elias-gamma codes, so our byte counts are a little higher than the paper's.

Tuning: `alphas` sets the budget (the mean of the set is the expected shared fraction,
and the entries at or above `metadata_cap` are full rounds, which keep the nodes from
drifting apart); the wavelet matters less than the budget (the paper uses sym2, level 4).

State: the model, x_prev and A (`JwinsState`); nothing per neighbour, so JWINS runs on
graphs redrawn every round.
"""

from __future__ import annotations

import math
import time
from typing import NamedTuple

import torch

from thinwire.codecs import wavelet
from thinwire.codecs.model import FLAT_NAME
from thinwire.codecs.receive import check_bounded
from thinwire.config import JwinsGossip
from thinwire.seeding import jwins_alpha_seed
from thinwire.topologies.methods.node import (
    Absorbed,
    Inbox,
    NodeCore,
    Prepared,
    Received,
    StateNode,
    elapsed,
)
from thinwire.wire import (
    DenseSupport,
    Kind,
    Payload,
    RawValues,
    SparseSupport,
    TensorSpec,
    WireError,
)

__all__ = ["JwinsNode", "JwinsState"]


class JwinsState(NamedTuple):
    """What a JWINS node keeps between rounds."""

    x: torch.Tensor  # (d,) float32: the model (x^{t+1/2} between prepare and absorb)
    anchor: torch.Tensor  # (d,) float32: x_prev, the model after the previous averaging
    pending: torch.Tensor  # (d',) float32: A, wavelet-domain change not shared yet


class JwinsNode(StateNode):
    """A JWINS peer (see the module docstring).

    Raises:
        ValueError: for an unknown wavelet.
    """

    def __init__(self, core: NodeCore, config: JwinsGossip) -> None:
        self.core = core
        self.config = config
        self.transform = wavelet(config.wavelet, config.level)
        self.coefficients = self.transform.size(core.size)
        self._specs = {Kind.MODEL: [TensorSpec(FLAT_NAME, (self.coefficients,))]}
        device = core.workspace.device
        self.state = JwinsState(
            x=core.initial.clone(),
            anchor=core.initial.clone(),
            pending=torch.zeros(self.coefficients, device=device),
        )

    def communicates(self, round: int) -> bool:
        """Every round exchanges coefficients."""
        del round
        return True

    def alpha(self, round: int) -> float:
        """The fraction of coefficients this node may share in `round`."""
        seed = jwins_alpha_seed(self.core.experiment.seed, self.core.index, round)
        return self.config.alphas[seed % len(self.config.alphas)]

    def prepare(self, round: int) -> Prepared:
        """Trains, then sends the most-changed coefficients' values (or all of them)."""
        start = time.perf_counter()
        state = self.state
        x, stats = self.core.train(state.x, round)
        coefficients = self.transform.forward(x)
        alpha = self.alpha(round)
        if alpha >= self.config.metadata_cap:
            payload = Payload((self.coefficients,), DenseSupport(), RawValues(coefficients))
            pending = torch.zeros_like(state.pending)
        else:
            score = self.transform.forward(x - state.anchor) + state.pending
            k = math.ceil(alpha * self.coefficients)
            chosen = torch.topk(score.abs(), k, sorted=False).indices.sort().values
            pending = state.pending.clone()
            pending[chosen] = 0.0
            payload = Payload(
                (self.coefficients,), SparseSupport(chosen), RawValues(coefficients[chosen])
            )
        message = self.core.encode(round, Kind.MODEL, {FLAT_NAME: payload})
        self.state = JwinsState(x, state.anchor, pending)
        messages = dict.fromkeys(self.core.neighbours(round), message)
        return Prepared(messages, True, stats.loss, (), elapsed(start))

    def open(self, sender: int, round: int, data: bytes) -> Received:
        """Validates a neighbour's coefficients: fp32 values, all or at explicit indices."""
        update = self.core.read(sender, round, data, self._specs, silence=False)
        if update is None:  # read returns None only where silence is allowed
            raise WireError("empty message, but JWINS never stays silent")
        payload = update.tensors[FLAT_NAME]
        values = payload.values
        if not isinstance(values, RawValues) or values.data.dtype != torch.float32:
            raise WireError("JWINS coefficients travel as unquantized float32 values")
        if isinstance(payload.support, DenseSupport):
            indices = None
        elif isinstance(payload.support, SparseSupport):
            indices = payload.support.indices.to(self.core.workspace.device)
        else:
            raise WireError("JWINS coefficients travel at explicit indices, not seeded ones")
        data_values = values.data.to(self.core.workspace.device)
        check_bounded(
            {FLAT_NAME: data_values},
            self.core.max_norm(self.state.x),
            what="wavelet coefficients",
        )
        return Received(sender, round, Kind.MODEL, data_values, indices, False, len(data))

    def absorb(self, round: int, inbox: Inbox) -> Absorbed:
        """Fills each neighbour's gaps with own coefficients, averages, transforms back."""
        start = time.perf_counter()
        accepted, absorbed = self.core.unpack(round, inbox, self.open)
        state = self.state
        own = self.transform.forward(state.x)
        weights = self.core.weights(round)
        mixed = weights[self.core.index] * own
        for j in self.core.neighbours(round):
            message = accepted.get(j)
            if message is None:
                filled = own
            elif message.indices is None:
                filled = message.values
            else:
                filled = own.clone()
                filled[message.indices] = message.values
            mixed += weights[j] * filled
        x = self.transform.inverse(mixed, self.core.size)
        pending = state.pending + self.transform.forward(x - state.anchor)
        self.state = JwinsState(x, x, pending)
        return absorbed._replace(compute_s=elapsed(start))

    def desynchronized(self) -> None:
        """Nothing to do after missed rounds: nothing is kept per neighbour."""
