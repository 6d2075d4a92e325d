"""The server halves of send policies: small pieces the `Aggregator` runs, chosen by name.

A send policy decides on the client whether, and in which random-access slot, an update goes
out; some methods need the server to play its part too. That part is a `ServerHalf`, a
NamedTuple of pure pieces the `Aggregator` calls at fixed points of a round (STYLE rule 3:
cross-cutting server behaviour is a piece, not a branch in the aggregator):

- `check(update)` on receipt: refuse an update whose policy metrics are not usable
  (a random-access update must name a slot in range);
- `admit(updates) -> Frame` before decoding: which updates the uplink delivered (slot
  arbitration: a slot with two or more updates loses all of them);
- `contribute(delivered, silent, memory) -> (contributions, memory)` after decoding: what
  goes into the aggregate besides the delivered updates (CSGD reuses a silent client's
  last update);
- `combine(rule, recipients) -> rule`: the aggregation rule of the round, given the
  configured one and the number of selected clients (random access sums with equal
  weights over all selected clients).

Each field defaults to the plain behaviour, so a half names only what it changes, and pieces
mix: `ServerHalf(contribute=reuse_stale)` is CSGD's half. A policy kind names its half when it
is registered (`POLICIES.register(kind, ..., server="stale_reuse")`, `thinwire.registry`);
this module maps the name to a factory of the experiment (`register_server_half` adds one).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

import torch

import thinwire.policies  # noqa: F401  (registers the policy kinds looked up below)
from thinwire.channel import SLOT_METRIC, SlotStats, arbitrate
from thinwire.config import Experiment
from thinwire.registry import PLAIN_SERVER_HALF, POLICIES
from thinwire.server.rules import Contribution, Rule, clipped, weighted_sum
from thinwire.wire import Update, WireError

__all__ = [
    "Frame",
    "Memory",
    "ServerHalf",
    "ServerHalfFactory",
    "build_server_half",
    "check_slot",
    "deliver_all",
    "equal_share",
    "keep_rule",
    "no_reuse",
    "register_server_half",
    "reuse_stale",
    "slot_frame",
    "slotted",
]


class Frame(NamedTuple):
    """What the uplink delivered of a round's updates."""

    through: dict[int, Update]  # client -> its update, for the updates that got through
    collided: list[int]  # sorted clients whose update was lost in a slot collision
    stats: SlotStats | None  # use of the random-access frame; None without slots


class Memory(NamedTuple):
    """What the server remembers of earlier rounds' updates (CSGD's stale reuse)."""

    updates: dict[str, dict[str, torch.Tensor]]  # client (as str) -> last decoded update
    examples: dict[str, float]  # client (as str) -> the example count of that update


def accept_any(update: Update) -> None:
    """`ServerHalf.check` of a policy that sends no metrics of its own: accepts every update."""
    del update


def deliver_all(updates: Mapping[int, Update]) -> Frame:
    """`ServerHalf.admit` of a dedicated uplink: every update gets through."""
    return Frame(dict(updates), [], None)


def no_reuse(
    delivered: dict[int, Contribution], silent: Sequence[int], memory: Memory
) -> tuple[dict[int, Contribution], Memory]:
    """`ServerHalf.contribute` that adds nothing and remembers nothing."""
    del silent
    return delivered, memory


def keep_rule(rule: Rule, recipients: int) -> Rule:
    """`ServerHalf.combine` that keeps the configured rule."""
    del recipients
    return rule


class ServerHalf(NamedTuple):
    """A send policy's server side; see the module docstring for when each piece runs."""

    check: Callable[[Update], None] = accept_any
    admit: Callable[[Mapping[int, Update]], Frame] = deliver_all
    contribute: Callable[
        [dict[int, Contribution], Sequence[int], Memory], tuple[dict[int, Contribution], Memory]
    ] = no_reuse
    combine: Callable[[Rule, int], Rule] = keep_rule
    name: str = PLAIN_SERVER_HALF


def reuse_stale(
    delivered: dict[int, Contribution], silent: Sequence[int], memory: Memory
) -> tuple[dict[int, Contribution], Memory]:
    """CSGD's stale reuse (Li et al.): a silent client's last delivered update stands in.

    The delivered updates replace the remembered ones; each silent client that has
    delivered before contributes its last update with that update's example count, and one
    that never has is left out. Memory: one model-sized float32 copy per client that has
    delivered.
    """
    updates = memory.updates | {str(c): d for c, (d, _) in delivered.items()}
    examples = memory.examples | {str(c): e for c, (_, e) in delivered.items()}
    reused = {c: (updates[str(c)], examples[str(c)]) for c in silent if str(c) in updates}
    return delivered | reused, Memory(updates, examples)


def check_slot(slots: int) -> Callable[[Update], None]:
    """`ServerHalf.check` of a random-access uplink: the update names a slot in [0, slots)."""

    def check(update: Update) -> None:
        slot = update.metrics.get(SLOT_METRIC, math.nan)
        if not (math.isfinite(slot) and slot == int(slot) and 0 <= slot < slots):
            raise WireError(f"metric slot must be an integer in [0, {slots}), got {slot}")

    return check


def slot_frame(slots: int) -> Callable[[Mapping[int, Update]], Frame]:
    """`ServerHalf.admit` of slotted ALOHA: a slot with exactly one update delivers it.

    The frame is arbitrated as the channel would (`thinwire.channel.arbitrate`): a slot with
    two or more updates loses all of them, and their senders learn it next round.
    """

    def admit(updates: Mapping[int, Update]) -> Frame:
        choices = {c: int(u.metrics[SLOT_METRIC]) for c, u in updates.items()}
        outcome = arbitrate(choices, slots)
        through = {c: u for c, u in updates.items() if outcome.delivered[c]}
        collided = sorted(c for c, ok in outcome.delivered.items() if not ok)
        return Frame(through, collided, outcome.stats)

    return admit


def equal_share(recipients: int) -> Rule:
    """AoG's x <- x + G / N: the delivered updates summed with equal weights over N selected.

    A lost or withheld update counts as zero now and arrives later as carried mass, so over
    time each client enters with weight 1/N; the example counts of clients not heard from
    are unknown, so weights are equal.
    """
    weight = float(recipients)

    def rule(contributions: Sequence[Contribution]) -> dict[str, torch.Tensor]:
        equal = [(d, 1.0) for d, _ in contributions]
        return {k: (v / weight).float() for k, v in weighted_sum(equal).items()}

    return rule


def slotted(slots: int, clip_norm: float | None) -> ServerHalf:
    """The half of a random-access uplink: slot check, arbitration, equal shares.

    Args:
        slots: random-access slots per round (`channel.slots`).
        clip_norm: `aggregation.clip_norm`, applied to each update before its share.
    """

    def combine(rule: Rule, recipients: int) -> Rule:
        del rule  # validation allows only the mean with random access; the share replaces it
        share = equal_share(recipients)
        return clipped(share, clip_norm) if clip_norm else share

    return ServerHalf(check_slot(slots), slot_frame(slots), combine=combine, name="slotted")


ServerHalfFactory = Callable[[Experiment], ServerHalf]
"""Builds a server half for an experiment (it may read any of its sections)."""


def _slotted(experiment: Experiment) -> ServerHalf:
    slots = experiment.channel.slots
    if slots is None:
        raise ValueError("the slotted server half needs channel.slots (slots per round)")
    return slotted(slots, experiment.aggregation.clip_norm)


_HALVES: dict[str, ServerHalfFactory] = {
    PLAIN_SERVER_HALF: lambda experiment: ServerHalf(),
    "stale_reuse": lambda experiment: ServerHalf(contribute=reuse_stale, name="stale_reuse"),
    "slotted": _slotted,
}


def register_server_half(name: str, factory: ServerHalfFactory, *, force: bool = False) -> None:
    """Makes a policy registered with `server=name` run `factory(experiment)` on the server.

    Raises:
        ValueError: if `name` is taken and `force` is not set.
    """
    if name in _HALVES and not force:
        raise ValueError(f"server half {name!r} is already registered; pass force=True to replace")
    _HALVES[name] = factory


def build_server_half(experiment: Experiment) -> ServerHalf:
    """The server half that the experiment's policy kind names.

    Raises:
        ValueError: for a half name nobody registered.
    """
    name = POLICIES.server_half(experiment.policy.kind)
    try:
        factory = _HALVES[name]
    except KeyError:
        raise ValueError(
            f"policy kind {experiment.policy.kind!r} names server half {name!r}, which is not "
            f"registered; expected one of {', '.join(sorted(_HALVES))} "
            "(thinwire.server.register_server_half)"
        ) from None
    return factory(experiment)
