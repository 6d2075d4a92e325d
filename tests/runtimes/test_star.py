"""One star round: each client is told once whether its update counted; a round can be undone."""

from __future__ import annotations

from star_helpers import tiny_experiment

from thinwire.clients import Client
from thinwire.learning import load_federation
from thinwire.runtimes.star import Star
from thinwire.server import Aggregator


def test_each_client_learns_once_whether_its_update_counted_and_a_round_can_be_undone() -> None:
    exp = tiny_experiment()
    federation = load_federation(exp)
    workspace = federation.workspace
    clients = [
        Client(index=i, experiment=exp, x=x, y=y, workspace=workspace)
        for i, (x, y) in enumerate(federation.all_client_data())
    ]
    aggregator = Aggregator(experiment=exp, workspace=workspace, initial=workspace.tensors())
    star = Star(experiment=exp, aggregator=aggregator)
    participants = star.sample(1)
    downlink = star.broadcast(1, participants)
    assert {(d.delivered, d.state_round) for d in downlink.values()} == {(None, 0)}
    unreadable, *rest = participants
    for c in rest:
        result = clients[c].train_round(downlink[c].data, 1, delivered=downlink[c].delivered)
        star.collect(c, result.data)
    star.refuse(unreadable)  # a reply the runtime could not read
    outcome = star.finish()
    assert outcome.participants == sorted(participants) and set(outcome.bytes_up) == set(rest)
    told = {c: True for c in rest} | {unreadable: False}
    assert star.delivered == told

    before = aggregator.state
    downlink = star.broadcast(2, participants)
    assert {c: d.delivered for c, d in downlink.items()} == told
    assert {d.state_round for d in downlink.values()} == {1}
    assert star.delivered == {}  # told once
    star.cancel()
    assert aggregator.state is before and star.delivered == told
