"""When a client sends: the send policies of the star.

A policy sits between local training and the codec. Each round it sees the update the client
would send and decides whether it goes out (`Decision`); after the channel has spoken, it
learns whether the update was delivered. Like codec stages, a policy is a NamedTuple of pure
functions over an explicit state that the client threads through and persists.

Policies are chosen from the experiment's `policy` section through a registry.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import torch

from thinwire.config import AlwaysSend

__all__ = [
    "Decision",
    "Policy",
    "PolicyInput",
    "always",
    "build_policy",
    "register_policy",
]


class PolicyInput(NamedTuple):
    """What a policy may look at when deciding."""

    round: int  # 1-based round number
    update: Mapping[str, torch.Tensor]  # the update the client would send this round


class Decision(NamedTuple):
    """A policy's verdict for one round."""

    transmit: bool
    keep_unsent: bool = True
    """When not transmitting: carry the update into the next round (error memory) or drop it."""
    slot: int | None = None
    """Random-access slot the update is sent in, when the uplink has slots."""


class Policy(NamedTuple):
    """A send policy: `init() -> state`, `decide(input, state)`, `delivered(ok, state)`."""

    init: Callable[[], Any]
    decide: Callable[[PolicyInput, Any], tuple[Decision, Any]]
    delivered: Callable[[bool, Any], Any]
    name: str = "policy"


class AlwaysState(NamedTuple):
    """State of `always`: none."""


def always() -> Policy:
    """Every client sends every round it is selected (plain federated averaging)."""

    def init() -> AlwaysState:
        return AlwaysState()

    def decide(inputs: PolicyInput, state: AlwaysState) -> tuple[Decision, AlwaysState]:
        del inputs
        return Decision(transmit=True), state

    def delivered(ok: bool, state: AlwaysState) -> AlwaysState:
        del ok
        return state

    return Policy(init, decide, delivered, name="always")


_REGISTRY: dict[str, Callable[[Any, int], Policy]] = {
    "always": lambda config, seed: always(),
}


def register_policy(
    kind: str, factory: Callable[[Any, int], Policy], *, force: bool = False
) -> None:
    """Makes `policy: {kind: <kind>}` build `factory(config_section, seed)`.

    Raises:
        ValueError: if `kind` is taken and `force` is not set.
    """
    if kind in _REGISTRY and not force:
        raise ValueError(f"policy kind {kind!r} is already registered; pass force=True to replace")
    _REGISTRY[kind] = factory


def build_policy(config: AlwaysSend, *, seed: int) -> Policy:
    """The policy an experiment's `policy` section describes."""
    try:
        factory = _REGISTRY[config.kind]
    except KeyError:
        raise ValueError(
            f"unknown policy kind {config.kind!r}; registered: {sorted(_REGISTRY)}"
        ) from None
    return factory(config, seed)
