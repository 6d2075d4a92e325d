"""Traffic ledger: payload and metadata per neighbour, both directions."""

from __future__ import annotations

from thinwire.topologies.transport import LinkTraffic, Traffic


def test_counts_accumulate_per_neighbour_and_direction():
    traffic = Traffic()
    traffic.sent(2, payload=100, metadata=10)
    traffic.sent(2, payload=50, metadata=5)
    traffic.received(1, payload=7, metadata=3)
    assert traffic.links() == {
        1: LinkTraffic(payload_received=7, metadata_received=3),
        2: LinkTraffic(payload_sent=150, metadata_sent=15),
    }
    assert traffic.total() == LinkTraffic(150, 15, 7, 3)


def test_state_round_trip():
    traffic = Traffic()
    traffic.sent(4, payload=9, metadata=1)
    restored = Traffic()
    restored.load_state_dict(traffic.state_dict())
    assert restored.links() == traffic.links()
