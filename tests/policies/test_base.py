"""The policy interface: `always`, the decision defaults, the fixed batch schedule."""

import torch

from thinwire.policies import Decision, PolicyInput, always, fixed_batch

ONE = {"w": torch.zeros(1)}


def test_always_transmits_every_round_and_keeps_no_state():
    policy = always()
    state = policy.init(ONE)
    for round in range(1, 4):
        decision, state = policy.decide(PolicyInput(round, {"w": torch.zeros(2)}), state)
        assert decision == Decision(transmit=True)
        state = policy.delivered(round % 2 == 0, state)
    assert state == policy.init(ONE)


def test_a_decision_without_a_slot_keeps_unsent_mass_by_default():
    decision = Decision(transmit=False)
    assert decision.keep_unsent and decision.slot is None


def test_every_policy_but_csgd_trains_with_the_configured_batch():
    assert [fixed_batch(k, 32) for k in (1, 2, 50)] == [32, 32, 32]
    assert always().batch_size(7, 16) == 16
