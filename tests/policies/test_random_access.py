"""Random-access rules: ALOHA, age of gradient, the round-robin oracle."""

import math

import pytest
import torch

from thinwire.channel import arbitrate
from thinwire.policies import (
    PolicyInput,
    age_of_gradient,
    aloha,
    round_robin,
    round_robin_slot,
    staleness,
)

G = {"w": torch.tensor([3.0, 4.0])}  # ||G|| = 5


def test_staleness_is_memory_beyond_the_fresh_update_relative_to_it():
    assert staleness(G, G) == 0.0
    assert staleness({"w": 2 * G["w"]}, G) == pytest.approx(1.0)  # one aligned round behind
    orthogonal = {"w": torch.tensor([3.0 + 4.0, 4.0 - 3.0])}  # G + G rotated 90 degrees
    assert staleness(orthogonal, G) == pytest.approx(math.sqrt(2) - 1)
    zero = {"w": torch.zeros(2)}
    assert staleness(G, zero) == math.inf and staleness(zero, zero) == 0.0


def decisions(policy, rounds, state=None, update=G, fresh=None):
    state = policy.init(G) if state is None else state
    return [policy.decide(PolicyInput(k, update, fresh), state)[0] for k in range(1, rounds + 1)]


def test_aloha_transmits_with_probability_p_in_uniform_slots():
    made = decisions(aloha(0.3, slots=4, seed=11), 4000)
    sent = [d for d in made if d.transmit]
    assert len(sent) / len(made) == pytest.approx(0.3, abs=0.03)
    counts = [sum(d.slot == s for d in sent) for s in range(4)]
    assert min(counts) > 0.8 * len(sent) / 4
    assert all(d.keep_unsent for d in made if not d.transmit)


def test_draws_replay_from_the_seed_and_differ_between_seeds():
    assert decisions(aloha(0.5, slots=3, seed=1), 50) == decisions(aloha(0.5, slots=3, seed=1), 50)
    assert decisions(aloha(0.5, slots=3, seed=1), 50) != decisions(aloha(0.5, slots=3, seed=2), 50)


def test_probability_one_is_the_always_transmit_baseline():
    policy = aloha(1.0, slots=2, seed=3)
    assert all(d.transmit for d in decisions(policy, 100))
    assert policy.name == "always_transmit"


def test_aog_contends_before_its_first_delivery_and_sits_out_right_after_one():
    policy = age_of_gradient(0.5, p_on=1.0, p_off=0.0, slots=4, seed=5)
    fresh_start = policy.init(G)
    assert all(d.transmit for d in decisions(policy, 20, fresh_start))  # rho = +inf
    delivered = policy.delivered(True, fresh_start)
    assert not any(d.transmit for d in decisions(policy, 20, delivered))  # rho = 0 < 0.5
    # one undelivered aligned round behind: rho = 1 >= 0.5
    behind = decisions(policy, 20, delivered, update={"w": 2 * G["w"]}, fresh=G)
    assert all(d.transmit for d in behind)


def test_aog_below_the_threshold_uses_p_off():
    policy = age_of_gradient(2.0, p_on=1.0, p_off=0.25, slots=4, seed=5)
    state = policy.delivered(True, policy.init(G))
    made = decisions(policy, 4000, state, update={"w": 2 * G["w"]}, fresh=G)  # rho = 1 < 2
    assert sum(d.transmit for d in made) / len(made) == pytest.approx(0.25, abs=0.03)


def test_a_failed_delivery_does_not_count_as_a_first_one():
    policy = age_of_gradient(0.5, p_on=1.0, p_off=0.0, slots=2, seed=0)
    state = policy.delivered(False, policy.init(G))
    assert state.delivered_once is False
    assert policy.delivered(False, policy.delivered(True, state)).delivered_once is True


def test_round_robin_never_collides_and_serves_everyone_in_turn():
    clients, slots = 7, 3
    policies = [round_robin(client=c, clients=clients, slots=slots) for c in range(clients)]
    served = {c: [] for c in range(clients)}
    for k in range(1, 22):
        choices = {}
        for c, policy in enumerate(policies):
            decision, _ = policy.decide(PolicyInput(k, G), policy.init(G))
            if decision.transmit:
                choices[c] = decision.slot
                served[c].append(k)
        outcome = arbitrate(choices, slots)
        assert outcome.stats.collisions == 0
        assert len(choices) == slots  # every slot used
    # ceil(7 / 3) = 3: nobody waits longer than 3 rounds between turns
    assert all(max(b - a for a, b in zip(ks, ks[1:], strict=False)) <= 3 for ks in served.values())


def test_round_robin_gives_every_client_a_slot_when_slots_suffice():
    slots = [round_robin_slot(5, c, 4, 6) for c in range(4)]
    assert None not in slots and len(set(slots)) == 4


@pytest.mark.parametrize(
    "build",
    [
        lambda: aloha(1.5, slots=2, seed=0),
        lambda: aloha(0.5, slots=0, seed=0),
        lambda: age_of_gradient(-1.0, p_on=0.5, p_off=0.0, slots=2, seed=0),
        lambda: age_of_gradient(0.5, p_on=0.5, p_off=2.0, slots=2, seed=0),
        lambda: round_robin(client=4, clients=4, slots=2),
    ],
)
def test_bad_parameters_are_refused(build):
    with pytest.raises(ValueError):
        build()
