"""The pieces of a peer's round over the network that need no network to test."""

from __future__ import annotations

import threading

from thinwire.config import RingTopology
from thinwire.topologies.graph import GraphSchedule
from thinwire.topologies.runtime.exchange import RoundWatch, exchange_spacing, exchanges_between

from ..gossip_support import experiment, make_nodes

SPARQ = {
    "kind": "sparq",
    "gamma": 0.5,
    "sync_every": 3,
    "threshold": {"kind": "constant", "c": 0.0},
}


def test_exchange_spacing_is_the_gap_between_synchronization_rounds():
    (sparq, *_) = make_nodes(experiment(SPARQ, rounds=7))
    (plain, *_) = make_nodes(experiment(rounds=7))
    assert exchange_spacing(sparq, 7) == 3
    assert exchange_spacing(plain, 7) == 1
    assert exchanges_between(sparq, 3, 9) == 2  # rounds 6 and 9
    assert exchanges_between(plain, 3, 5) == 2


def test_the_watch_answers_with_the_schedule_and_remembers_the_highest_round():
    schedule = GraphSchedule(RingTopology(), 5, seed=0)
    watch = RoundWatch(schedule, 0, horizon=10)
    assert watch.neighbours(4) == frozenset({1, 4})
    watch.neighbours(2)
    watch.neighbours(99)  # beyond the run: answered, not believed
    assert watch.highest == 4
    assert watch.wait(after=4, timeout=0.01) is None
    assert watch.wait(after=3, timeout=0.0) == 4


def test_a_waiting_watch_wakes_on_the_first_push_beyond_its_round():
    watch = RoundWatch(GraphSchedule(RingTopology(), 5, seed=0), 0, horizon=10)
    timer = threading.Timer(0.05, watch.neighbours, args=(7,))
    timer.start()
    try:
        assert watch.wait(after=5, timeout=10.0) == 7
    finally:
        timer.cancel()
