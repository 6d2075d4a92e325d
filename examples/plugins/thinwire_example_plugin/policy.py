"""Norm-threshold skipping: a client sends only once its update has grown long enough.

In the spirit of dynamic averaging (Kamp et al., ECML PKDD 2018): a client whose model has
drifted little from the one it last synchronised with has little to tell the server. Each
round the client compares the l2 norm of what it would send (this round's change plus what
it kept from silent rounds) with `threshold`; below it, it stays silent and keeps the update,
so the mass is sent later rather than lost. `max_silent` bounds the wait: after that many
silent rounds in a row the client sends whatever it has.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Literal, NamedTuple

import torch
from pydantic import Field

from thinwire.config import PositiveFloat, Section
from thinwire.policies import Decision, Policy, PolicyInput

__all__ = ["NormSkip", "NormSkipState", "norm_skip"]


class NormSkip(Section):
    """Send only when the update's l2 norm reaches `threshold` (or after `max_silent` rounds)."""

    kind: Literal["norm_skip"] = "norm_skip"
    threshold: PositiveFloat
    """l2 norm below which a client keeps its update instead of sending it."""
    max_silent: Annotated[int, Field(ge=0)] = 3
    """Most silent rounds in a row; the next round sends whatever the client holds."""


class NormSkipState(NamedTuple):
    """State of `norm_skip`."""

    silent: int  # consecutive rounds the client kept its update, Python int


def norm_skip(threshold: float, *, max_silent: int = 3) -> Policy:
    """The policy: transmit iff ||update||_2 >= threshold or `max_silent` rounds were silent.

    Args:
        threshold: l2 norm a client's update must reach, > 0.
        max_silent: consecutive silent rounds after which the client sends anyway, >= 0.

    Returns:
        A `Policy` whose silent rounds keep the update (error memory).
    """
    if not threshold > 0:
        raise ValueError(f"norm_skip threshold must be > 0, got {threshold}")
    if max_silent < 0:
        raise ValueError(f"norm_skip max_silent must be >= 0, got {max_silent}")

    def init(template: Mapping[str, torch.Tensor]) -> NormSkipState:
        del template
        return NormSkipState(0)

    def decide(inputs: PolicyInput, state: NormSkipState) -> tuple[Decision, NormSkipState]:
        squares = [t.float().square().sum() for t in inputs.update.values()]
        norm = float(torch.stack(squares).sum().sqrt()) if squares else 0.0
        if norm >= threshold or state.silent >= max_silent:
            return Decision(transmit=True), NormSkipState(0)
        return Decision(transmit=False, keep_unsent=True), NormSkipState(state.silent + 1)

    def delivered(ok: bool, state: NormSkipState) -> NormSkipState:
        del ok  # an update lost on the channel is the codec's and the server's concern
        return state

    return Policy(init, decide, delivered, name=f"norm_skip({threshold:g})")
