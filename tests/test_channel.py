"""The channel model: transfer time from measured bytes, and random-access slots."""

import math

import pytest

from thinwire.channel import Channel, SlotStats, aloha_success_probability, arbitrate
from thinwire.config import ChannelConfig
from thinwire.policies import PolicyInput, aloha
from thinwire.seeding import mix


def test_transfer_time_is_latency_plus_bits_over_rate():
    channel = Channel(ChannelConfig(uplink_mbps=8.0, downlink_mbps=80.0, latency_ms=10.0), 2)
    assert channel.uplink_s(0, 1_000_000) == pytest.approx(0.01 + 1.0)
    assert channel.downlink_s(1, 1_000_000) == pytest.approx(0.01 + 0.1)


def test_a_round_lasts_as_long_as_its_slowest_client():
    channel = Channel(ChannelConfig(uplink_mbps=[1.0, 10.0], latency_ms=0.0), 2)
    down = {0: 0, 1: 0}
    assert channel.round_s(down, {0: 125_000, 1: 125_000}) == pytest.approx(1.0)
    # a client that stayed silent only pays for its downlink
    assert channel.round_s(down, {1: 125_000}) == pytest.approx(0.1)


def test_a_lone_sender_succeeds_and_a_shared_slot_loses_everyone():
    outcome = arbitrate({0: 2, 1: 0, 2: 2, 3: 3}, slots=5)
    assert outcome.delivered == {0: False, 1: True, 2: False, 3: True}
    assert outcome.stats == SlotStats(successes=2, collisions=1, idle=2)
    assert arbitrate({}, slots=3).stats == SlotStats(0, 0, 3)


def test_a_slot_outside_the_frame_is_an_error():
    with pytest.raises(ValueError, match="outside"):
        arbitrate({0: 3}, slots=3)
    with pytest.raises(ValueError, match="at least one slot"):
        arbitrate({}, slots=0)


@pytest.mark.parametrize(("clients", "slots", "p"), [(10, 5, 0.5), (6, 2, 1.0), (20, 4, 0.2)])
def test_success_rate_per_slot_matches_slotted_aloha(clients, slots, p):
    policies = [aloha(p, slots=slots, seed=mix(7, c)) for c in range(clients)]
    states = [policy.init({}) for policy in policies]
    frames = 2000
    successes = 0
    for k in range(1, frames + 1):
        choices = {}
        for c, (policy, state) in enumerate(zip(policies, states, strict=True)):
            decision, _ = policy.decide(PolicyInput(k, {}), state)
            if decision.transmit:
                choices[c] = decision.slot
        successes += arbitrate(choices, slots).stats.successes
    expected = aloha_success_probability(clients, p, slots)
    assert successes / (frames * slots) == pytest.approx(expected, abs=0.02)


def test_throughput_peaks_near_one_over_e_at_the_fair_share():
    assert aloha_success_probability(100, 1.0, 100) == pytest.approx(math.exp(-1), abs=0.01)
    assert aloha_success_probability(10, 0.5, 5) > aloha_success_probability(10, 1.0, 5)
    assert aloha_success_probability(0, 0.5, 5) == 0.0


def test_a_random_access_round_lasts_the_downlink_plus_the_whole_frame():
    channel = Channel(ChannelConfig(downlink_mbps=8.0, latency_ms=0.0, slots=4, slot_ms=5.0), 2)
    assert channel.frame_s() == pytest.approx(0.02)
    # uplink bytes do not matter: the frame is fixed in time
    assert channel.round_s({0: 1_000_000, 1: 0}, {0: 10, 1: 10**6}) == pytest.approx(1.0 + 0.02)
    assert channel.fits_slot(0, 100) and not channel.fits_slot(0, 1_000_000)
