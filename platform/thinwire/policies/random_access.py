"""Who contends for the slots of a random-access uplink, and in which slot.

The uplink is slotted ALOHA with M slots per round (`channel.slots`): a client that
transmits picks one slot; a slot with one sender delivers its update, a slot with two or
more loses all of them (`thinwire.channel.arbitrate`). A client whose update was lost, or
that kept silent, carries it forward (the client's undelivered-mass memory), and its
codec's error feedback keeps what top-K left out, so nothing is ever dropped for good.

Three factories decide per round whether a client transmits (`policy.rule` in the config):

- `age_of_gradient` (rule `aog`): the age-of-gradient policy of Wu, Asgari, Rini & Munari
  (arXiv 2410.11986, ICMLCN 2025; algorithms.md §6). No public code exists and the paper's
  exact mapping from memory to probability could not be checked, so the formula in its
  docstring is our documented choice.
- `aloha` (rules `uniform` and, with p = 1, `always`): every client with probability p.
- `round_robin` (rule `round_robin`): a collision-free oracle schedule that clients and
  server both derive from (round, client).

Randomness: a client's coin and slot in round k are mix(seed, k, ·) of its policy
seed, so runs replay exactly and no global generator is touched.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import NamedTuple

import torch

from thinwire.policies.base import Decision, Policy, PolicyInput, squared_norm
from thinwire.seeding import mix

__all__ = [
    "AccessState",
    "age_of_gradient",
    "aloha",
    "round_robin",
    "round_robin_slot",
    "staleness",
]

_COIN, _SLOT = 0, 1


class AccessState(NamedTuple):
    """State of the random-access rules."""

    delivered_once: bool  # whether any update of this client has got through yet


def _check_probability(name: str, p: float) -> None:
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {p}")


def _check_slots(slots: int) -> None:
    if slots < 1:
        raise ValueError(f"a random-access uplink needs at least one slot, got {slots}")


def _coin(seed: int, round: int) -> float:
    """A uniform draw in [0, 1) for the client's transmit decision in `round`."""
    return mix(seed, round, _COIN) / 2.0**64


def _slot(seed: int, round: int, slots: int) -> int:
    return mix(seed, round, _SLOT) % slots


def _delivered(ok: bool, state: AccessState) -> AccessState:
    return AccessState(state.delivered_once or ok)


def _contend(p: float, seed: int, round: int, slots: int) -> Decision:
    if _coin(seed, round) < p:
        return Decision(transmit=True, slot=_slot(seed, round, slots))
    return Decision(transmit=False, keep_unsent=True)


def aloha(p: float, *, slots: int, seed: int) -> Policy:
    """Slotted ALOHA: transmit with probability p, in a uniformly random one of M slots.

    With n contenders each slot is occupied by a given client with probability p/M, so a
    slot succeeds with probability n (p/M) (1 - p/M)^(n - 1), maximal (about 1/e) at
    p = M/n (`thinwire.channel.aloha_success_probability`). p = 1 is the always-transmit
    baseline (every client in every round, collisions included).

    State: whether the client has been delivered yet (kept for symmetry with AoG).

    Args:
        p: transmit probability per round, in [0, 1].
        slots: M, slots per round.
        seed: the client's policy seed.
    """
    _check_probability("p", p)
    _check_slots(slots)

    def init(template: Mapping[str, torch.Tensor]) -> AccessState:
        del template
        return AccessState(False)

    def decide(inputs: PolicyInput, state: AccessState) -> tuple[Decision, AccessState]:
        return _contend(p, seed, inputs.round, slots), state

    name = "always_transmit" if p == 1.0 else f"aloha({p:g})"
    return Policy(init, decide, _delivered, name=name)


def staleness(update: Mapping[str, torch.Tensor], fresh: Mapping[str, torch.Tensor]) -> float:
    """The staleness rho = ||m|| / ||g|| - 1: unsent memory m beyond the fresh update g.

    m = g + carried (everything the server has not received); rho = 0 when nothing is
    carried, and grows with each round the client fails to get through (to about k - 1 after
    k rounds of aligned updates, sqrt(k) - 1 for orthogonal ones). +inf when g = 0 but m is
    not, 0 when both are.
    """
    memory = math.sqrt(float(squared_norm(update)))
    own = math.sqrt(float(squared_norm(fresh)))
    if own == 0.0:
        return math.inf if memory > 0.0 else 0.0
    return memory / own - 1.0


def age_of_gradient(
    threshold: float, *, p_on: float, p_off: float, slots: int, seed: int
) -> Policy:
    """Age-of-gradient random access: contend harder the staler the client's memory is.

    Per round k, client n (our formula; see the module docstring):

    1. m_n = g_n + carried: its fresh update plus every update that has not got through
       (collided or withheld); the codec applies top-K with error memory to m_n.
    2. rho_n = ||m_n|| / ||g_n|| - 1 (`staleness`): how much unsent information it holds
       beyond this round's, which grows with the rounds since it last got through. Before
       its first delivery rho_n = +inf (the server holds nothing from it).
    3. p_n = p_on if rho_n >= threshold else p_off; with probability p_n it transmits m_n in
       a uniformly random slot, otherwise it keeps m_n for the next round.

    A client that just got through has rho = 0 and (with p_off = 0) sits out a round,
    leaving its slot chances to clients whose information is older: fewer contenders
    collide less, and each success delivers more accumulated mass.

    State: whether the client has been delivered yet.

    Tuning: `threshold` around 0.5 holds back exactly the clients delivered last round;
    `p_on` near M / (number of contenders), i.e. about M / N; `p_off` = 0 unless clients
    must keep a trickle of fresh updates going.

    Args:
        threshold: rho above which the client contends with p_on, >= 0.
        p_on: transmit probability of a stale client.
        p_off: transmit probability of a fresh one.
        slots: M, slots per round.
        seed: the client's policy seed.

    Example:
        >>> import torch
        >>> policy = age_of_gradient(0.5, p_on=1.0, p_off=0.0, slots=4, seed=1)
        >>> g = {"w": torch.ones(3)}
        >>> state = policy.delivered(True, policy.init(g))
        >>> policy.decide(PolicyInput(2, g, g), state)[0].transmit  # rho = 0: sits out
        False
        >>> policy.decide(PolicyInput(3, {"w": 2 * g["w"]}, g), state)[0].transmit
        True
    """
    if not threshold >= 0.0:
        raise ValueError(f"threshold must be >= 0, got {threshold}")
    _check_probability("p_on", p_on)
    _check_probability("p_off", p_off)
    _check_slots(slots)

    def init(template: Mapping[str, torch.Tensor]) -> AccessState:
        del template
        return AccessState(False)

    def decide(inputs: PolicyInput, state: AccessState) -> tuple[Decision, AccessState]:
        fresh = inputs.fresh if inputs.fresh is not None else inputs.update
        rho = staleness(inputs.update, fresh) if state.delivered_once else math.inf
        p = p_on if rho >= threshold else p_off
        return _contend(p, seed, inputs.round, slots), state

    return Policy(init, decide, _delivered, name=f"aog({threshold:g})")


def round_robin_slot(round: int, client: int, clients: int, slots: int) -> int | None:
    """The oracle's slot for `client` in `round`, or None when it is not scheduled.

    Round k gives the M slots to the clients at positions (k - 1) M, ..., k M - 1
    (mod N) of the cyclic client order: client c's position in round k is
    p = (c - (k - 1) M) mod N, and it sends in slot p when p < M. Distinct clients have
    distinct positions, so no two share a slot; every client is scheduled once every
    ceil(N / M) rounds (every round when M >= N).
    """
    if not 0 <= client < clients:
        raise ValueError(f"client {client} is outside [0, {clients})")
    _check_slots(slots)
    position = (client - (round - 1) * slots) % clients
    return position if position < slots else None


def round_robin(*, client: int, clients: int, slots: int) -> Policy:
    """Oracle baseline: a TDMA schedule with no collisions (`round_robin_slot`).

    It needs no messages: client and server both derive the schedule from (round, client).
    A client off schedule keeps its update for its next turn.

    Args:
        client: this client's index.
        clients: N, the number of clients.
        slots: M, slots per round.
    """
    round_robin_slot(1, client, clients, slots)  # validates the arguments

    def init(template: Mapping[str, torch.Tensor]) -> AccessState:
        del template
        return AccessState(False)

    def decide(inputs: PolicyInput, state: AccessState) -> tuple[Decision, AccessState]:
        slot = round_robin_slot(inputs.round, client, clients, slots)
        if slot is None:
            return Decision(transmit=False, keep_unsent=True), state
        return Decision(transmit=True, slot=slot), state

    return Policy(init, decide, _delivered, name="round_robin")
