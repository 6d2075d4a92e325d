"""CSGD censoring: the threshold and batch schedules and the upload rule."""

import math

import pytest
import torch

from thinwire import statetree
from thinwire.config import (
    ConstantTau,
    FixedBatch,
    GeometricBatch,
    GeometricTau,
    InverseTau,
    LinearBatch,
)
from thinwire.policies import CensorState, PolicyInput, batch_size_at, censor, threshold_at


def test_thresholds_follow_their_schedules():
    assert threshold_at(ConstantTau(tau=0.3), 9) == 0.3
    geometric = GeometricTau(tau=2.0, ratio=0.5)
    assert [threshold_at(geometric, k) for k in (1, 2, 3)] == [2.0, 1.0, 0.5]
    inverse = InverseTau(tau=1.0, a=4.0)
    assert [threshold_at(inverse, k) for k in (1, 5)] == [1.0, 0.5]
    with pytest.raises(ValueError, match="from 1"):
        threshold_at(geometric, 0)


def test_batches_grow_as_the_threshold_shrinks_and_stop_at_the_cap():
    assert [batch_size_at(FixedBatch(), k, 32) for k in (1, 9)] == [32, 32]
    assert [batch_size_at(GeometricBatch(ratio=0.5), k, 8) for k in (1, 2, 3, 4)] == [8, 16, 32, 64]
    # ceil(10 / 0.9) = 12, ceil(10 / 0.81) = 13
    assert [batch_size_at(GeometricBatch(ratio=0.9), k, 10) for k in (1, 2, 3)] == [10, 12, 13]
    assert batch_size_at(GeometricBatch(ratio=0.9, max_batch=100), 200, 10) == 100
    assert [batch_size_at(LinearBatch(), k, 8) for k in (1, 2, 5)] == [8, 16, 40]
    assert batch_size_at(LinearBatch(max_batch=20), 5, 8) == 20


def test_a_long_geometric_run_saturates_instead_of_overflowing():
    assert batch_size_at(GeometricBatch(ratio=0.5), 100_000, 8) == 2**31


def test_geometric_growth_and_threshold_decay_share_one_rate():
    # tau_k * B_k stays constant: censoring error and sampling variance shrink together.
    products = [
        threshold_at(GeometricTau(tau=1.0, ratio=0.8), k)
        * batch_size_at(GeometricBatch(ratio=0.8, max_batch=10**9), k, 1000)
        for k in range(1, 8)
    ]
    assert max(products) / min(products) < 1.01


PAIR = {"w": torch.zeros(2)}
ONE = {"w": torch.zeros(1)}


def update(*values):
    return {"w": torch.tensor(values, dtype=torch.float32)}


def decide(policy, state, round, values):
    return policy.decide(PolicyInput(round, update(*values)), state)


def test_uploads_only_updates_at_least_tau_away_from_the_last_transmitted_one():
    policy = censor(lambda k: 1.0)
    state = policy.init(PAIR)
    sent, state = decide(policy, state, 1, [2.0, 0.0])  # ||g - 0||^2 = 4 >= 1
    assert sent.transmit and not sent.keep_unsent
    state = policy.delivered(True, state)
    quiet, state = decide(policy, state, 2, [2.5, 0.5])  # ||(0.5, 0.5)||^2 = 0.5 < 1
    assert not quiet.transmit and not quiet.keep_unsent  # the server stands in with g_last
    # The reference stays the last *transmitted* update, not the censored one.
    again, state = decide(policy, state, 3, [2.9, 0.0])  # 0.81 from g_last, < 1
    assert not again.transmit
    loud, state = decide(policy, state, 4, [3.0, 0.0])  # exactly tau: sends
    assert loud.transmit


def test_the_rule_is_on_the_squared_distance_summed_over_tensors():
    policy = censor(lambda k: 2.0)
    both = {"a": torch.tensor([1.0]), "b": torch.tensor([1.0])}  # 1 + 1 = 2
    decision, _ = policy.decide(PolicyInput(1, both), policy.init(both))
    assert decision.transmit


def test_threshold_is_read_at_the_round_being_decided():
    taus = {1: 10.0, 2: 0.1}
    policy = censor(taus.__getitem__)
    first, state = decide(policy, policy.init(ONE), 1, [1.0])
    second, _ = decide(policy, state, 2, [1.0])
    assert (first.transmit, second.transmit) == (False, True)


def test_a_lost_upload_leaves_the_server_copy_and_the_reference_unchanged():
    policy = censor(lambda k: 1.0)
    _, state = decide(policy, policy.init(ONE), 1, [2.0])
    state = policy.delivered(True, state)
    _, state = decide(policy, state, 2, [5.0])
    state = policy.delivered(False, state)
    assert torch.equal(state.last["w"], torch.tensor([2.0])) and not state.awaiting
    # 2.5 is within 1 of the still-held 2.0: censored.
    decision, _ = decide(policy, state, 3, [2.5])
    assert not decision.transmit


def test_without_an_outcome_a_pending_upload_counts_as_delivered():
    policy = censor(lambda k: 1.0)
    _, state = decide(policy, policy.init(ONE), 1, [2.0])
    decision, state = decide(policy, state, 2, [2.5])  # compared with 2.0, not with 0
    assert not decision.transmit
    assert torch.equal(state.last["w"], torch.tensor([2.0]))


def test_tau_zero_sends_every_round_and_the_server_reuses_silence():
    policy = censor(lambda k: 0.0)
    state = policy.init(ONE)
    for round in range(1, 4):
        decision, state = decide(policy, state, round, [0.0])
        assert decision.transmit
        state = policy.delivered(True, state)
    assert policy.name == "censor"


def test_the_policy_carries_its_batch_schedule():
    policy = censor(lambda k: 1.0, batch_size=lambda k, base: base * k)
    assert policy.batch_size(3, 8) == 24
    assert censor(lambda k: 1.0).batch_size(3, 8) == 8


def test_state_is_never_mutated_in_place():
    policy = censor(lambda k: 0.5)
    start = policy.init(ONE)
    _, after = decide(policy, start, 1, [1.0])
    assert not start.awaiting and float(start.last["w"]) == 0.0 and float(start.pending["w"]) == 0
    assert after.awaiting and math.isclose(float(after.pending["w"]), 1.0)


def test_the_state_keeps_one_shape_so_it_can_be_saved_and_restored():
    policy = censor(lambda k: 1.0)
    initial = policy.init(PAIR)
    _, state = decide(policy, initial, 1, [3.0, 4.0])
    restored = statetree.unflatten(initial, statetree.flatten(state))
    assert isinstance(restored, CensorState) and restored.awaiting
    assert torch.equal(restored.pending["w"], torch.tensor([3.0, 4.0]))
