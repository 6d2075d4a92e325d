"""Which node serves which client: identification, replacement, refusal, dropouts."""

from __future__ import annotations

import pytest

from thinwire.runtimes.flower.messages import Identity
from thinwire.runtimes.flower.roster import Roster


def test_new_nodes_are_asked_once_and_identified() -> None:
    roster = Roster(2)
    assert roster.to_ask([11, 10]) == [10, 11]
    assert roster.to_ask([10, 11]) == []  # queries in flight
    roster.identified(10, Identity(1, 2))
    roster.identified(11, Identity(0, None))
    assert roster.live() == [0, 1] and roster.complete()
    assert (roster.node(0), roster.node(1)) == (11, 10)
    assert roster.to_ask([10, 11]) == []


def test_a_node_for_another_experiment_is_never_asked_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    roster = Roster(3)
    roster.to_ask([10, 11])
    roster.identified(10, Identity(0, 4))
    roster.identified(11, Identity(3, None))
    assert roster.live() == []
    assert roster.to_ask([10, 11]) == []
    assert "node 10 serves partition 0 of 4, but this experiment has 3 clients" in caplog.text


def test_a_restarted_client_replaces_its_old_node() -> None:
    roster = Roster(1)
    roster.to_ask([10])
    roster.identified(10, Identity(0, 1))
    roster.to_ask([10, 20])
    roster.identified(20, Identity(0, 1))
    assert roster.node(0) == 20
    roster.drop(0)
    assert roster.to_ask([10, 20]) == [20]  # the replaced node 10 is not asked again


def test_a_dropped_client_rejoins_when_its_node_answers_again() -> None:
    roster = Roster(2)
    roster.to_ask([10, 11])
    roster.identified(10, Identity(0, 2))
    roster.identified(11, Identity(1, 2))
    roster.drop(1)
    assert roster.live() == [0]
    assert roster.to_ask([10, 11]) == [11]
    roster.identified(11, Identity(1, 2))
    assert roster.live() == [0, 1]


def test_a_node_that_leaves_the_federation_takes_its_client_out() -> None:
    roster = Roster(2)
    roster.to_ask([10, 11])
    roster.identified(10, Identity(0, 2))
    roster.identified(11, Identity(1, 2))
    assert roster.to_ask([10]) == []
    assert roster.live() == [0]


def test_unanswered_queries_are_asked_again_and_refused_nodes_are_not() -> None:
    roster = Roster(2)
    roster.to_ask([10, 11])
    roster.unanswered(10, "message expired")
    roster.refuse(11, "ClientApp failed to load")
    assert roster.to_ask([10, 11]) == [10]


def test_a_roster_needs_clients() -> None:
    with pytest.raises(ValueError, match="at least one client"):
        Roster(0)
