"""Mailbox: rounds buffered within a window, deadlines, duplicates, late messages."""

from __future__ import annotations

import threading

import pytest

from thinwire.topologies.transport import Admission, Mailbox


def test_collect_returns_every_expected_message():
    box: Mailbox[str] = Mailbox(window=2)
    assert box.put(1, 0, "from 1") is Admission.OPEN
    assert box.put(2, 0, "from 2") is Admission.OPEN
    inbox = box.collect(0, {1, 2}, timeout=5)
    assert inbox.round == 0 and inbox.messages == {1: "from 1", 2: "from 2"}
    assert inbox.missing == frozenset()
    assert box.current_round == 1
    assert box.counters.delivered == 2


def test_deadline_with_a_missing_neighbour():
    box: Mailbox[str] = Mailbox(window=2)
    box.put(1, 0, "from 1")
    inbox = box.collect(0, {1, 2, 3}, timeout=0.05)
    assert inbox.messages == {1: "from 1"}
    assert inbox.missing == frozenset({2, 3})
    box.collect(1, {2}, timeout=0)
    assert box.counters.missing == {2: 2, 3: 1}


def test_collect_wakes_up_when_the_last_message_arrives():
    box: Mailbox[str] = Mailbox(window=2)
    timer = threading.Timer(0.05, box.put, args=(2, 0, "late but in time"))
    timer.start()
    try:
        inbox = box.collect(0, {2}, timeout=30)
    finally:
        timer.cancel()
    assert inbox.messages == {2: "late but in time"} and not inbox.missing


def test_out_of_order_rounds_are_buffered_within_the_window():
    box: Mailbox[str] = Mailbox(window=3)
    assert box.put(1, 2, "round 2") is Admission.OPEN
    assert box.put(1, 1, "round 1") is Admission.OPEN
    assert box.put(1, 0, "round 0") is Admission.OPEN
    assert box.put(1, 3, "round 3") is Admission.TOO_EARLY
    assert [box.collect(r, {1}, timeout=0).messages[1] for r in range(3)] == [
        "round 0",
        "round 1",
        "round 2",
    ]
    assert box.counters.too_early == 1


def test_late_messages_are_dropped_and_counted():
    box: Mailbox[str] = Mailbox(window=2)
    box.collect(0, {1}, timeout=0)
    box.collect(1, {1}, timeout=0)
    assert box.screen(1, 0) is Admission.STALE
    assert box.put(1, 0, "too late") is Admission.STALE
    assert box.counters.stale == 2
    assert box.screen(1, 2) is Admission.OPEN
    assert box.counters.stale == 2


def test_duplicates_are_idempotent_before_and_after_collection():
    box: Mailbox[str] = Mailbox(window=2)
    assert box.put(1, 0, "first") is Admission.OPEN
    assert box.put(1, 0, "second") is Admission.DUPLICATE
    assert box.collect(0, {1}, timeout=0).messages == {1: "first"}
    assert box.put(1, 0, "retry after collection") is Admission.DUPLICATE
    assert box.counters.duplicates == 2


def test_skipping_rounds_drops_what_they_held():
    box: Mailbox[str] = Mailbox(window=3)
    box.put(1, 0, "a")
    box.put(1, 1, "b")
    box.put(1, 2, "c")
    assert box.collect(2, {1}, timeout=0).messages == {1: "c"}
    assert box.counters.stale == 2
    assert box.current_round == 3


def test_collecting_a_past_round_is_an_error():
    box: Mailbox[str] = Mailbox(window=2)
    box.collect(0, set(), timeout=0)
    with pytest.raises(ValueError, match="round 0 was collected already"):
        box.collect(0, set(), timeout=0)
    with pytest.raises(ValueError, match="timeout must be >= 0"):
        box.collect(1, set(), timeout=-1)


def test_constructor_validates():
    with pytest.raises(ValueError, match="window must be >= 1"):
        Mailbox(window=0)
    with pytest.raises(ValueError, match="start_round"):
        Mailbox(window=1, start_round=-1)


def test_state_round_trip_restores_round_and_counters():
    box: Mailbox[str] = Mailbox(window=2)
    box.put(1, 0, "x")
    box.put(1, 0, "dup")
    box.collect(0, {1, 2}, timeout=0)
    restored: Mailbox[str] = Mailbox(window=2)
    restored.load_state_dict(box.state_dict())
    assert restored.current_round == box.current_round == 1
    assert restored.counters == box.counters
    # Same behaviour afterwards: round 0 is closed, round 1 open.
    assert restored.put(3, 0, "late") is box.put(3, 0, "late") is Admission.STALE
    assert restored.put(3, 1, "ok") is box.put(3, 1, "ok") is Admission.OPEN
    with pytest.raises(ValueError, match="window 2, this mailbox 3"):
        Mailbox(window=3).load_state_dict(box.state_dict())
