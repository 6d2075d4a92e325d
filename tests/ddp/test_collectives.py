"""Byte accounting of the collectives, and leaving the group (no processes needed)."""

import gc
import weakref

import torch.distributed as dist

from thinwire.ddp import Traffic, leave_process_group
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


class _Cycle:
    """An object kept alive by a reference cycle only, as a DDP module's reducer can be."""

    def __init__(self) -> None:
        self.me = self


def test_leaving_the_group_collects_what_still_holds_it_first(tmp_path):
    # Left to the process's exit, gloo's threads abort a rank that succeeded.
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    held = weakref.ref(_Cycle())
    gc.disable()  # only the leave may collect the cycle
    try:
        assert held() is not None
        leave_process_group()
    finally:
        gc.enable()
    assert held() is None
    assert not dist.is_initialized()
