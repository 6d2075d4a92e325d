"""Majority-vote sparse SGD at the server and its clients: the protocol, byte for byte."""

from __future__ import annotations

import pytest
import torch
from star_helpers import tiny_experiment

from thinwire.clients import VoteClient, build_client
from thinwire.config import ConfigError, parse_config
from thinwire.learning import load_federation
from thinwire.runtimes.simulation import simulate
from thinwire.server import VoteAggregator, build_aggregator
from thinwire.voting import (
    CHANGE,
    MASK,
    VALUES,
    VOTE,
    flatten_model,
    index_payload,
    index_spec,
    read_index_set,
    tally,
    values_payload,
    values_spec,
)
from thinwire.wire import Kind, Update, WireError, decode, encode
from thinwire.wire import update_pb2 as pb

DENSITY = 0.004  # K = 5 of the tiny MLP's d = 1210


def setup(mask: str, **sections):
    experiment = tiny_experiment(vote={"density": DENSITY, "mask": mask}, **sections)
    federation = load_federation(experiment)
    workspace = federation.workspace
    server = build_aggregator(
        experiment=experiment, workspace=workspace, initial=workspace.tensors()
    )
    assert isinstance(server, VoteAggregator)
    return experiment, federation, server


def vote(client: int, round: int, indices: list[int], d: int) -> bytes:
    payload = index_payload(torch.tensor(indices), d)
    metrics = {"num_examples": 1.0}
    return encode(Update(f"client-{client}", round, Kind.MODEL_DELTA, {VOTE: payload}, metrics))


def values(client: int, round: int, data: torch.Tensor, examples: float = 1.0) -> bytes:
    metrics = {"num_examples": examples}
    tensors = {VALUES: values_payload(data)}
    return encode(Update(f"client-{client}", round, Kind.MODEL_DELTA, tensors, metrics))


def test_three_clients_vote_then_send_values_on_the_agreed_support():
    _, _, server = setup("two_phase")
    d, k = server.d, server.k
    assert k == 5
    before = flatten_model(server.model, server.spec)
    server.broadcast(1, [0, 1, 2])
    # counts: 0 -> 1, 1 -> 2, 2..4 -> 3, 5 -> 2, 6 -> 1: the five most voted are 1..5
    for c, first in enumerate((0, 1, 2)):
        assert server.receive_vote(c, vote(c, 1, list(range(first, first + k)), d)).accepted
    masks = server.close_vote()
    assert set(masks) == {0, 1, 2} and len(set(masks.values())) == 1
    mask = decode(masks[0], [index_spec(MASK, d)]).tensors[MASK]
    assert read_index_set(mask, k=k, exact=True, what="mask").tolist() == [1, 2, 3, 4, 5]
    sent = [torch.arange(1.0, 6.0) * (c + 1) for c in range(3)]
    for c in range(3):
        assert server.receive(c, values(c, 1, sent[c], examples=[1, 1, 2][c])).accepted
    result = server.finish_round()
    assert result.accepted == [0, 1, 2] and result.rejected == {}
    mean = (sent[0] + sent[1] + 2 * sent[2]) / 4
    after = flatten_model(server.model, server.spec)
    torch.testing.assert_close(after[1:6], before[1:6] + mean)
    others = torch.ones(d, dtype=torch.bool)
    others[1:6] = False
    assert torch.equal(after[others], before[others])  # the step is sparse on S
    # The next downlink is that change, on S: K values and no index.
    downlink = server.broadcast(2, [0, 1, 2])
    message = decode(downlink[0], {Kind.MODEL_DELTA: [values_spec(CHANGE, k)]})
    torch.testing.assert_close(message.tensors[CHANGE].values.data, mean)
    empty = encode(Update("server", 2, Kind.MODEL_DELTA, {CHANGE: values_payload(torch.zeros(0))}))
    assert len(downlink[0]) <= len(empty) + 4 * k + 2


def test_the_values_phase_carries_no_indices_header_plus_k_values():
    _, federation, server = setup("two_phase")
    exp = server.experiment
    (x, y), *_ = federation.all_client_data()
    client = build_client(index=0, experiment=exp, x=x, y=y, workspace=federation.workspace)
    assert isinstance(client, VoteClient)
    downlink = server.broadcast(1, [0])
    result = client.train_round(downlink[0], 1, delivered=None)
    server.receive_vote(0, result.data)
    reply = client.send_values(server.close_vote()[0], 1)
    header = values(0, 1, torch.zeros(0), examples=float(x.shape[0]))
    assert len(header) + 4 * server.k <= len(reply) <= len(header) + 4 * server.k + 2
    assert set(decode(reply, [values_spec(VALUES, server.k)]).tensors) == {VALUES}


def test_error_feedback_keeps_what_the_support_left_out():
    _, federation, server = setup("two_phase")
    exp = server.experiment
    (x, y), *_ = federation.all_client_data()
    client = build_client(index=0, experiment=exp, x=x, y=y, workspace=federation.workspace)
    for round in (1, 2):
        downlink = server.broadcast(round, [0])
        before = client.state.codec["residual"].clone()
        result = client.train_round(downlink[0], round, delivered=True if round > 1 else None)
        a = client.state.codec["residual"].clone()  # update + residual, waiting for the mask
        local = flatten_model(client.workspace.tensors(), server.spec)
        view = flatten_model(client.state.view, server.spec)
        torch.testing.assert_close(a, local - view + before)
        server.receive_vote(0, result.data)
        reply = client.send_values(server.close_vote()[0], round)
        sent = client.state.codec["sent"]
        residual = client.state.codec["residual"]
        got = decode(reply, [values_spec(VALUES, server.k)]).tensors[VALUES].values.data
        assert torch.equal(got, a[sent])  # a on S is sent ...
        assert bool((residual[sent] == 0).all())  # ... and leaves the residual
        assert torch.equal(residual[~sent], a[~sent])  # the rest stays for later rounds
        server.receive(0, reply)
        server.finish_round()


def test_the_previous_round_variant_sends_on_the_mask_voted_a_round_before():
    _, federation, server = setup("previous")
    exp = server.experiment
    clients = [
        build_client(index=i, experiment=exp, x=x, y=y, workspace=federation.workspace)
        for i, (x, y) in enumerate(federation.all_client_data())
    ]
    d, k = server.d, server.k
    downlink = server.broadcast(1, [0, 1, 2])
    votes = []
    for c in range(3):
        data = clients[c].train_round(downlink[c], 1, delivered=None).data
        update = decode(data, [index_spec(VOTE, d)])  # round 1: only a vote
        votes.append(read_index_set(update.tensors[VOTE], k=k, exact=False, what="vote"))
        assert not bool(clients[c].state.codec["sent"].any())
        server.receive(c, data)
    before = flatten_model(server.model, server.spec)
    server.finish_round()
    assert torch.equal(flatten_model(server.model, server.spec), before)  # nothing sent yet
    s1 = tally(votes, d, k, seed=exp.seed, round=1)
    assert server.state.downlink["mask"].nonzero().flatten().tolist() == s1.tolist()
    downlink = server.broadcast(2, [0, 1, 2])
    spec = [values_spec(CHANGE, 0), index_spec(MASK, d)]
    mask = decode(downlink[0], {Kind.MODEL_DELTA: spec}).tensors[MASK]
    assert torch.equal(read_index_set(mask, k=k, exact=True, what="mask"), s1)
    for c in range(3):
        data = clients[c].train_round(downlink[c], 2, delivered=True).data
        update = decode(data, [values_spec(VALUES, k), index_spec(VOTE, d)])
        assert set(update.tensors) == {VALUES, VOTE}
        assert clients[c].state.codec["sent"].nonzero().flatten().tolist() == s1.tolist()
        assert server.receive(c, data).accepted
    server.finish_round()
    changed = flatten_model(server.model, server.spec) != before
    assert bool(changed.any()) and set(changed.nonzero().flatten().tolist()) <= set(s1.tolist())


def hostile_bitmap(client: int, d: int) -> bytes:
    """A vote whose bitmap is 3 bytes long for a domain of d coordinates."""
    message = pb.Update.FromString(vote(client, 1, list(range(d // 2)), d))
    message.tensors[0].sparse.bitmap = b"\x01" * 3
    return message.SerializeToString()


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (lambda d, k: vote(0, 1, list(range(k + 1)), d), "lists 6 indices, at most K = 5"),
        (lambda d, k: vote(0, 1, [1, 2 * d], 2 * d + 1), "does not match"),
        (lambda d, k: hostile_bitmap(0, d), "bitmap"),
        (lambda d, k: values(0, 1, torch.ones(k)), "found 'vote:values'"),
        (lambda d, k: vote(0, 2, [1], d), "round 2"),
        (lambda d, k: vote(1, 1, [1], d), "does not match 'client-0'"),
    ],
    ids=["more-than-k", "out-of-range", "bitmap-length", "values-for-a-vote", "round", "sender"],
)
def test_a_hostile_vote_is_refused_counted_and_the_round_goes_on(make, problem):
    _, _, server = setup("two_phase")
    d, k = server.d, server.k
    server.broadcast(1, [0, 1])
    receipt = server.receive_vote(0, make(d, k))
    assert not receipt.accepted and receipt.error is not None
    assert problem in receipt.error
    assert server.receive_vote(1, vote(1, 1, [7, 8], d)).accepted
    masks = server.close_vote()
    assert set(masks) == {0, 1}  # the refused client is told S too, and its values do not count
    assert not server.receive(0, values(0, 1, torch.ones(k))).accepted
    assert server.receive(1, values(1, 1, torch.ones(k))).accepted
    result = server.finish_round()
    assert result.accepted == [1] and set(result.rejected) == {0}
    assert problem in result.rejected[0]


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (lambda k: values(0, 1, torch.ones(k + 1)), "does not match the expected"),
        (lambda k: values(0, 1, torch.full((k,), float("inf"))), "non-finite"),
        (lambda k: values(0, 1, torch.full((k,), 1e30)), "norm"),
    ],
    ids=["length-not-k", "non-finite", "unbounded"],
)
def test_hostile_values_are_refused_and_the_round_goes_on(data, problem):
    _, _, server = setup("two_phase")
    d, k = server.d, server.k
    server.broadcast(1, [0, 1])
    server.receive_vote(0, vote(0, 1, [1], d))
    server.receive_vote(1, vote(1, 1, [1], d))
    server.close_vote()
    receipt = server.receive(0, data(k))
    server.receive(1, values(1, 1, torch.ones(k)))
    result = server.finish_round()
    assert result.accepted == [1] and problem in result.rejected[0]
    assert receipt.accepted is (problem == "norm")  # the bound is checked when the round ends


def test_a_simulated_run_sends_sparse_both_ways():
    for mask in ("previous", "two_phase"):
        exp = tiny_experiment(vote={"density": DENSITY, "mask": mask}, train={"rounds": 3})
        records = simulate(exp).records
        dense = 4 * 1210  # one full model
        per_client_down = records[2]["bytes_down"] / records[2]["participants"]
        per_client_up = records[2]["bytes_up"] / records[2]["participants"]
        assert per_client_down < dense / 10 and per_client_up < dense / 10


@pytest.mark.parametrize(
    ("sections", "problem"),
    [
        ({"codec": {"select": {"kind": "topk", "density": 0.1}}}, "leave codec and downlink"),
        ({"train": {"server": {"momentum": 0.5}}}, "momentum 0"),
        ({"policy": {"kind": "censor", "threshold": {"kind": "constant", "tau": 1}}}, "always"),
        ({"runtime": {"kind": "flower"}, "vote": {"mask": "two_phase"}}, "two exchanges"),
        ({"server": {"kind": "buffered_async", "buffer": 1, "concurrency": 2}}, "asynchronous"),
    ],
)
def test_the_vote_refuses_what_it_replaces_or_cannot_run(sections, problem):
    raw = {"name": "v", "data": {"dataset": "digits"}, "vote": {"density": 0.01}}
    for key, value in sections.items():
        raw[key] = {**raw.get(key, {}), **value}
    with pytest.raises((ConfigError, ValueError), match=problem):
        parse_config(raw)


def test_hostile_mask_is_refused_by_the_client():
    _, federation, server = setup("two_phase")
    (x, y), *_ = federation.all_client_data()
    client = build_client(
        index=0, experiment=server.experiment, x=x, y=y, workspace=federation.workspace
    )
    assert isinstance(client, VoteClient)
    client.train_round(server.broadcast(1, [0])[0], 1, delivered=None)
    short = encode(
        Update("server", 1, Kind.MODEL_DELTA, {MASK: index_payload(torch.tensor([1]), server.d)})
    )
    with pytest.raises(WireError, match="exactly K = 5"):
        client.send_values(short, 1)
