"""From config to policy: an explicit registry mapping each `policy.kind` to its factory.

`build_policy(config, context)` looks the section's `kind` up; `register_policy(kind,
factory)` adds one (replacing needs `force=True`), and an unknown kind raises `ValueError`
naming the registered ones (STYLE rule 12). A factory takes the config section and the
client's `PolicyContext`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, assert_never

from thinwire.config import (
    AgeOfGradientRule,
    AlwaysAccessRule,
    CensorPolicy,
    RandomAccessPolicy,
    RoundRobinAccessRule,
    UniformAccessRule,
)
from thinwire.policies.base import Policy, PolicyContext, always
from thinwire.policies.censoring import batch_size_at, censor, threshold_at
from thinwire.policies.random_access import age_of_gradient, aloha, round_robin

__all__ = ["PolicyFactory", "build_policy", "kinds", "register_policy"]

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
    rule = config.rule
    if isinstance(rule, AgeOfGradientRule):
        p_on = rule.p_on if rule.p_on is not None else _fair_share(context, slots)
        return age_of_gradient(
            rule.threshold, p_on=p_on, p_off=rule.p_off, slots=slots, seed=context.seed
        )
    if isinstance(rule, UniformAccessRule):
        p = rule.p if rule.p is not None else _fair_share(context, slots)
        return aloha(p, slots=slots, seed=context.seed)
    if isinstance(rule, AlwaysAccessRule):
        return aloha(1.0, slots=slots, seed=context.seed)
    if isinstance(rule, RoundRobinAccessRule):
        return round_robin(client=context.client, clients=context.clients, slots=slots)
    assert_never(rule)


_REGISTRY: dict[str, PolicyFactory] = {
    "always": lambda config, context: always(),
    "censor": _censor,
    "random_access": _random_access,
}


def register_policy(kind: str, factory: PolicyFactory, *, force: bool = False) -> None:
    """Makes `policy: {kind: <kind>}` build `factory(config_section, context)`.

    Raises:
        ValueError: if `kind` is taken and `force` is not set.
    """
    if kind in _REGISTRY and not force:
        raise ValueError(f"policy kind {kind!r} is already registered; pass force=True to replace")
    _REGISTRY[kind] = factory


def kinds() -> tuple[str, ...]:
    """The registered policy kinds, sorted."""
    return tuple(sorted(_REGISTRY))


def build_policy(config: Any, context: PolicyContext) -> Policy:
    """The policy an experiment's `policy` section describes, for one client.

    Args:
        config: the `policy` section (any registered kind).
        context: the client's seed, index, the number of clients and the slots per round.

    Raises:
        ValueError: for an unregistered kind, or a section its factory rejects.
    """
    try:
        factory = _REGISTRY[config.kind]
    except KeyError:
        raise ValueError(
            f"unknown policy kind {config.kind!r}; registered: {sorted(_REGISTRY)}"
        ) from None
    return factory(config, context)
