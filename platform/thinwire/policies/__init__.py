"""When a client sends: the send policies of the star.

- `always`: every selected client sends every round.
- `censor`: CSGD communication censoring (send only informative updates; the server reuses
  a silent client's last one), with its threshold and growing-batch schedules.
- `age_of_gradient`, `aloha`, `round_robin`: who contends for the slots of a random-access
  uplink (`thinwire.channel` arbitrates the slots).

Policies are NamedTuples of pure functions over explicit state, chosen from the
experiment's `policy` section through a registry (`build_policy`).

Example:
    >>> import torch
    >>> from thinwire.config import CensorPolicy
    >>> section = CensorPolicy.model_validate({"threshold": {"kind": "constant", "tau": 1.0}})
    >>> policy = build_policy(section, PolicyContext(seed=0, client=0, clients=10))
    >>> state = policy.init({"w": torch.zeros(1)})
    >>> decision, _ = policy.decide(PolicyInput(1, {"w": torch.tensor([0.5])}), state)
    >>> decision.transmit  # ||0.5 - 0||^2 < 1: censored
    False
"""

from thinwire.policies.base import (
    AlwaysState,
    Decision,
    Policy,
    PolicyContext,
    PolicyInput,
    always,
    fixed_batch,
)
from thinwire.policies.censoring import CensorState, batch_size_at, censor, threshold_at
from thinwire.policies.random_access import (
    AccessState,
    age_of_gradient,
    aloha,
    round_robin,
    round_robin_slot,
    staleness,
)
from thinwire.policies.registry import PolicyFactory, build_policy

__all__ = [
    "AccessState",
    "AlwaysState",
    "CensorState",
    "Decision",
    "Policy",
    "PolicyContext",
    "PolicyFactory",
    "PolicyInput",
    "age_of_gradient",
    "aloha",
    "always",
    "batch_size_at",
    "build_policy",
    "censor",
    "fixed_batch",
    "round_robin",
    "round_robin_slot",
    "staleness",
    "threshold_at",
]
