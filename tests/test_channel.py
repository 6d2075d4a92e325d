"""The channel model turns measured bytes into simulated transfer time."""

import pytest

from thinwire.channel import Channel
from thinwire.config import ChannelConfig


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
