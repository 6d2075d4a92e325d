"""Policies from config: the registry and the policy section's validation."""

import pytest
import torch

from thinwire.config import AlwaysSend, ConfigError, parse_config
from thinwire.policies import PolicyContext, PolicyInput, build_policy
from thinwire.registry import POLICIES

CONTEXT = PolicyContext(seed=1, client=0, clients=10, slots=5)
ONE = {"w": torch.zeros(1)}


def section(policy, **extra):
    raw = {"name": "t", "policy": policy, **extra}
    return parse_config(raw).policy


def test_every_kind_builds_from_its_section():
    assert set(POLICIES.kinds()) >= {"always", "censor", "random_access"}
    censor = build_policy(
        section({"kind": "censor", "threshold": {"kind": "geometric", "tau": 1.0}}), CONTEXT
    )
    assert censor.name == "censor"
    assert POLICIES.server_half("censor") == "stale_reuse"
    assert POLICIES.server_half("random_access") == "slotted"
    assert POLICIES.server_half("always") == "plain"
    channel = {"channel": {"slots": 5}}
    names = {
        rule: build_policy(
            section({"kind": "random_access", "rule": {"kind": rule}}, **channel), CONTEXT
        ).name
        for rule in ("aog", "uniform", "always", "round_robin")
    }
    assert names == {
        "aog": "aog(0.5)",
        "uniform": "aloha(0.5)",  # default p = min(1, slots / clients)
        "always": "always_transmit",
        "round_robin": "round_robin",
    }


def test_the_censor_section_sets_threshold_and_batch_schedules():
    policy = build_policy(
        section(
            {
                "kind": "censor",
                "threshold": {"kind": "constant", "tau": 1.0},
                "batch": {"kind": "linear", "max_batch": 64},
            }
        ),
        CONTEXT,
    )
    assert [policy.batch_size(k, 16) for k in (1, 2, 8)] == [16, 32, 64]
    quiet, _ = policy.decide(PolicyInput(1, {"w": torch.tensor([0.5])}), policy.init(ONE))
    assert not quiet.transmit


def test_default_aog_probability_is_the_fair_share_of_slots():
    # 20 slots for 10 clients: p_on = min(1, 20 / 10) = 1
    config = section({"kind": "random_access"}, channel={"slots": 20})
    policy = build_policy(config, CONTEXT._replace(slots=20))
    state = policy.init(ONE)
    made = [policy.decide(PolicyInput(k, {"w": torch.ones(1)}), state)[0] for k in range(1, 30)]
    assert all(d.transmit for d in made)


def test_random_access_without_slots_in_the_context_is_refused():
    config = section({"kind": "random_access"}, channel={"slots": 2})
    with pytest.raises(ValueError, match="channel.slots"):
        build_policy(config, CONTEXT._replace(slots=None))


def test_unknown_kinds_and_silent_replacement_are_refused():
    class Fake:
        kind = "nope"

    with pytest.raises(ValueError, match="unknown policy kind 'nope'"):
        build_policy(Fake(), CONTEXT)
    with pytest.raises(ValueError, match="already registered"):
        POLICIES.register("always", section=AlwaysSend, factory=lambda c, ctx: None)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"policy": {"kind": "random_access"}}, "needs channel.slots"),
        ({"channel": {"slots": 4}}, "applies only to policy kind 'random_access'"),
        (
            {
                "policy": {"kind": "censor", "threshold": {"kind": "constant", "tau": 1.0}},
                "topology": {"kind": "ring"},
            },
            "policy applies to the star's clients",
        ),
        ({"policy": {"kind": "censor"}}, "policy.threshold: required field is missing"),
        (
            {
                "policy": {
                    "kind": "censor",
                    "threshold": {"kind": "geometric", "tau": 1, "ratio": 2},
                }
            },
            "policy.threshold.ratio",
        ),
        (
            {"policy": {"kind": "random_access", "rule": {"kind": "aog", "p_on": 1.5}}},
            "policy.rule.p_on",
        ),
    ],
)
def test_the_policy_section_is_validated(raw, message):
    with pytest.raises(ConfigError) as info:
        parse_config({"name": "t", **raw})
    assert message in str(info.value)


def test_every_declared_access_rule_has_a_factory():
    from thinwire.registry import ACCESS_RULES

    assert ACCESS_RULES.kinds() == ("always", "aog", "round_robin", "uniform")
    for kind in ACCESS_RULES.kinds():
        assert callable(ACCESS_RULES.factory(kind)), kind
