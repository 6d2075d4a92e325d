"""From config to policy: thinwire's send policies on the registry, and `build_policy`.

`build_policy(config, context)` looks the section's `kind` up in
`thinwire.registry.POLICIES`. Importing this module registers each policy kind that
`thinwire.config` declares with its section, its client factory and the name of its server
half, in one call; a plugin does the same:

    POLICIES.register("censor", section=CensorPolicy, factory=_censor, server="stale_reuse")

(replacing needs `force=True`; an unknown kind raises `ValueError` naming the registered
ones, STYLE rule 12). A factory takes the config section and the client's `PolicyContext`;
the server half (`thinwire.server.halves`: "plain", "stale_reuse", "slotted") is what the
star's server does with the kind's replies.

The random_access policy's `rule` is a family of its own, `thinwire.registry.ACCESS_RULES`:
a rule's factory takes its section, the client's `PolicyContext` and the slots per round,
and returns the policy (`ACCESS_RULES.register(kind, section=..., factory=...)` adds one).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from thinwire.config import (
    AgeOfGradientRule,
    AlwaysAccessRule,
    AlwaysSend,
    CensorPolicy,
    RandomAccessPolicy,
    RoundRobinAccessRule,
    UniformAccessRule,
)
from thinwire.policies.base import Policy, PolicyContext, always
from thinwire.policies.censoring import batch_size_at, censor, threshold_at
from thinwire.policies.random_access import age_of_gradient, aloha, round_robin
from thinwire.registry import ACCESS_RULES, POLICIES

__all__ = ["PolicyFactory", "build_policy"]

PolicyFactory = Callable[[Any, PolicyContext], Policy]


def _censor(config: CensorPolicy, context: PolicyContext) -> Policy:
    del context
    return censor(
        partial(threshold_at, config.threshold), batch_size=partial(batch_size_at, config.batch)
    )


def _fair_share(context: PolicyContext, slots: int) -> float:
    """min(1, M / N): the ALOHA probability that maximizes throughput when all N contend."""
    return min(1.0, slots / context.clients)


def _random_access(config: RandomAccessPolicy, context: PolicyContext) -> Policy:
    slots = context.slots
    if slots is None:
        raise ValueError("policy random_access needs channel.slots (slots per round)")
    policy: Policy = ACCESS_RULES.factory(config.rule.kind)(config.rule, context, slots)
    return policy


def _age_of_gradient(rule: AgeOfGradientRule, context: PolicyContext, slots: int) -> Policy:
    p_on = rule.p_on if rule.p_on is not None else _fair_share(context, slots)
    return age_of_gradient(
        rule.threshold, p_on=p_on, p_off=rule.p_off, slots=slots, seed=context.seed
    )


def _uniform(rule: UniformAccessRule, context: PolicyContext, slots: int) -> Policy:
    p = rule.p if rule.p is not None else _fair_share(context, slots)
    return aloha(p, slots=slots, seed=context.seed)


def _always_access(rule: Any, context: PolicyContext, slots: int) -> Policy:
    del rule
    return aloha(1.0, slots=slots, seed=context.seed)


def _round_robin(rule: Any, context: PolicyContext, slots: int) -> Policy:
    del rule
    return round_robin(client=context.client, clients=context.clients, slots=slots)


ACCESS_RULES.register("aog", section=AgeOfGradientRule, factory=_age_of_gradient)
ACCESS_RULES.register("uniform", section=UniformAccessRule, factory=_uniform)
ACCESS_RULES.register("always", section=AlwaysAccessRule, factory=_always_access)
ACCESS_RULES.register("round_robin", section=RoundRobinAccessRule, factory=_round_robin)


POLICIES.register("always", section=AlwaysSend, factory=lambda config, context: always())
POLICIES.register("censor", section=CensorPolicy, factory=_censor, server="stale_reuse")
POLICIES.register(
    "random_access", section=RandomAccessPolicy, factory=_random_access, server="slotted"
)


def build_policy(config: Any, context: PolicyContext) -> Policy:
    """The policy an experiment's `policy` section describes, for one client.

    Args:
        config: the `policy` section (any registered kind).
        context: the client's seed, index, the number of clients and the slots per round.

    Raises:
        ValueError: for an unregistered kind, or a section its factory rejects.
    """
    policy: Policy = POLICIES.factory(config.kind)(config, context)
    return policy
