"""Byte accounting of the collectives (no processes needed)."""

from thinwire.ddp import Traffic
from thinwire.ddp.collectives import gathered_overhead


def test_all_gather_overhead_is_the_sizes_and_the_padding_to_the_largest_payload():
    assert gathered_overhead([10, 4, 0]) == 3 * 8 + (0 + 6 + 10)
    assert gathered_overhead([0, 0]) == 16  # sizes only: nothing to pad
    assert gathered_overhead([]) == 0


def test_traffic_starts_empty_and_names_its_parts():
    traffic = Traffic()
    assert (traffic.payload, traffic.overhead) == (0, 0)
    traffic.payload += 5
    assert repr(traffic) == "Traffic(payload=5, overhead=0)"
