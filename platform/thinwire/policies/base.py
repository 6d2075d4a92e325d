"""The send-policy interface: what a policy sees, what it decides, and `always`.

A policy sits between local training and the codec. Each round it sees the update the client
would send and decides whether it goes out, and in which random-access slot (`Decision`);
after the channel has spoken, it learns whether the update was delivered. Like codec stages,
a policy is a NamedTuple of pure functions over an explicit state that the client threads
through and persists (STYLE rules 1 and 4): a policy object holds no mutable data.

A further field lets a method reach beyond the send decision without flags on the client:
`batch_size` sets the local batch per round (CSGD grows it so that sampling noise shrinks as
fast as the censoring threshold). What the server does with a policy's replies (CSGD's reuse
of a silent client's last update, random access's slot arbitration) is the policy kind's
*server half*, named when the kind is registered (`POLICIES.register(..., server=...)`) and
run by the star's server (`thinwire.server.halves`), never asked of a client policy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import torch

__all__ = [
    "AlwaysState",
    "Decision",
    "Policy",
    "PolicyContext",
    "PolicyInput",
    "always",
    "fixed_batch",
    "squared_norm",
]


class PolicyInput(NamedTuple):
    """What a policy may look at when deciding."""

    round: int  # 1-based round number
    update: Mapping[str, torch.Tensor]  # what the client would send: fresh change + carry
    fresh: Mapping[str, torch.Tensor] | None = None
    """This round's own change, without carried mass; None when it equals `update`."""


class Decision(NamedTuple):
    """A policy's verdict for one round."""

    transmit: bool
    keep_unsent: bool = True
    """When not transmitting: carry the update into the next round (error memory) or drop it."""
    slot: int | None = None
    """Random-access slot the update is sent in, when the uplink has slots."""


class PolicyContext(NamedTuple):
    """Who the policy runs for: fixed facts of the run that some policies need."""

    seed: int  # the client's policy seed, 64-bit (all draws derive from it)
    client: int  # the client's index, 0-based
    clients: int  # number of clients in the run
    slots: int | None = None  # random-access slots per round (channel.slots), None without


def fixed_batch(round: int, base: int) -> int:
    """The batch-size schedule of every policy but CSGD's: `train.batch_size` each round."""
    del round
    return base


class Policy(NamedTuple):
    """A send policy.

    - `init(template) -> state`: `template` holds zeros shaped like the model's tensors, so
      a state that keeps tensors has the same shape from the start (a runtime that saves
      states, such as Flower's `context.state`, restores them against `init`'s output);
    - `decide(input, state) -> (Decision, state)`, once per round the client takes part in;
    - `delivered(ok, state) -> state`, with the outcome of the last transmitted update;
    - `batch_size(round, base) -> int`: the local batch size for `round` (`base` is
      `train.batch_size`).
    """

    init: Callable[[Mapping[str, torch.Tensor]], Any]
    decide: Callable[[PolicyInput, Any], tuple[Decision, Any]]
    delivered: Callable[[bool, Any], Any]
    name: str = "policy"
    batch_size: Callable[[int, int], int] = fixed_batch


class AlwaysState(NamedTuple):
    """State of `always`: none."""


def always() -> Policy:
    """Every client sends every round it is selected (plain federated averaging)."""

    def init(template: Mapping[str, torch.Tensor]) -> AlwaysState:
        del template
        return AlwaysState()

    def decide(inputs: PolicyInput, state: AlwaysState) -> tuple[Decision, AlwaysState]:
        del inputs
        return Decision(transmit=True), state

    def delivered(ok: bool, state: AlwaysState) -> AlwaysState:
        del ok
        return state

    return Policy(init, decide, delivered, name="always")


def squared_norm(tensors: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """sum_k ||t_k||^2 over named tensors, as a 0-d float32 tensor on their device."""
    values = list(tensors.values())
    if not values:
        return torch.zeros(())
    return torch.stack([t.float().square().sum() for t in values]).sum()
