"""Decentralized SGD with exact averaging (D-PSGD), the baseline every gossip method is held to.

Lian et al., "Can Decentralized Algorithms Outperform Centralized Algorithms?" (NeurIPS'17).
Per node i and round t:

1. x_i^{t+1/2} = local SGD steps from x_i^t;
2. send x_i^{t+1/2} (dense, fp32) to every neighbour;
3. x_i^{t+1} = sum_j w_ij x_j^{t+1/2} over j in N_i and i itself (the mixing matrix row).

A neighbour whose model did not arrive (dead, late, or rejected) counts with this node's own
model in its place, so the row still sums to one and nothing is extrapolated.

State: the model only (`DPSGDState`). Cost per round and neighbour: d fp32 values.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import torch

from thinwire.topologies.methods.node import (
    Absorbed,
    Inbox,
    NodeCore,
    Prepared,
    Received,
    StateNode,
    elapsed,
)
from thinwire.wire import Kind

__all__ = ["DPSGDNode", "DPSGDState"]


class DPSGDState(NamedTuple):
    """What a D-PSGD node keeps between rounds."""

    x: torch.Tensor  # (d,) float32: the model (x^{t+1/2} between prepare and absorb)


class DPSGDNode(StateNode):
    """A D-PSGD peer (see the module docstring)."""

    def __init__(self, core: NodeCore) -> None:
        self.core = core
        self._specs = {Kind.MODEL: core.dense.wire_spec}
        self.state = DPSGDState(x=core.initial.clone())

    def communicates(self, round: int) -> bool:
        """Every round exchanges models."""
        del round
        return True

    def prepare(self, round: int) -> Prepared:
        """Trains, then sends the trained model to every neighbour."""
        start = time.perf_counter()
        x, stats = self.core.train(self.state.x, round)
        self.state = DPSGDState(x=x)
        message = self.core.encode_dense(round, x)
        messages = dict.fromkeys(self.core.neighbours(round), message)
        return Prepared(messages, True, stats.loss, (), elapsed(start))

    def open(self, sender: int, round: int, data: bytes) -> Received:
        """Validates a neighbour's model message."""
        update = self.core.read(sender, round, data, self._specs, silence=False)
        return self.core.received(sender, round, update, len(data), reference=self.state.x)

    def absorb(self, round: int, inbox: Inbox) -> Absorbed:
        """x_i = sum_j w_ij x_j, with this node's model standing in for missing ones."""
        start = time.perf_counter()
        accepted, absorbed = self.core.unpack(round, inbox, self.open)
        own = self.state.x
        weights = self.core.weights(round)
        mixed = own * weights[self.core.index]
        for j in self.core.neighbours(round):
            mixed += weights[j] * (accepted[j].values if j in accepted else own)
        self.state = DPSGDState(x=mixed)
        return absorbed._replace(compute_s=elapsed(start))

    def desynchronized(self) -> None:
        """Nothing to do after missed rounds: models are whole."""
