"""The buffered asynchronous server (FedBuff) on hand-built arrival orders: each update's
staleness and weight, the step after K arrivals, refusals that do not stall the buffer."""

from __future__ import annotations

import math

import pytest
import torch
from hostile_updates import CASES, hostile_bytes
from pydantic import ValidationError
from star_helpers import tiny_experiment

from thinwire.codecs.model import ModelCodec
from thinwire.config import ConfigError, Section, parse_config
from thinwire.learning import Workspace, load_federation
from thinwire.registry import STALENESS
from thinwire.server.buffered import BufferedServer, constant, hinge, polynomial
from thinwire.wire import Kind, Update, encode


def setup(
    buffer: int = 2, staleness: dict | None = None, **sections
) -> tuple[Workspace, BufferedServer]:
    server = {"kind": "buffered_async", "buffer": buffer}
    server["staleness"] = staleness or {"kind": "polynomial", "a": 0.5}
    experiment = tiny_experiment(server=server, **sections)
    workspace = load_federation(experiment).workspace
    return workspace, BufferedServer(
        experiment=experiment, workspace=workspace, initial=workspace.tensors()
    )


def update(workspace: Workspace, client: int, round: int, value: float, examples: int) -> bytes:
    codec = ModelCodec.dense(workspace.spec)
    tensors = {s.name: torch.full(s.shape, float(value)) for s in workspace.spec}
    payloads, _ = codec.encode(tensors, codec.init(tensors))
    metrics = {"num_examples": float(examples)}
    return encode(Update(f"client-{client}", round, Kind.MODEL_DELTA, payloads, metrics))


def answer(workspace, server, client, value, examples=10):
    """`client` replies to its task with a constant update."""
    round = server.in_flight[client] + 1
    return server.receive(client, update(workspace, client, round, value, examples))


@pytest.mark.parametrize(
    ("fn", "expected"),
    [
        (constant(), [1.0, 1.0, 1.0, 1.0]),
        (polynomial(0.5), [1.0, 2**-0.5, 3**-0.5, 0.5]),
        (polynomial(1.0), [1.0, 0.5, 1 / 3, 0.25]),
        (hinge(2.0, 1), [1.0, 1.0, 1 / 3, 1 / 5]),
    ],
    ids=["constant", "fedbuff-sqrt", "polynomial-1", "hinge"],
)
def test_staleness_functions(fn, expected):
    assert [fn(tau) for tau in range(4)] == pytest.approx(expected, abs=0, rel=1e-15)


def test_the_step_after_k_arrivals_is_the_discounted_weighted_mean():
    # Clients 0..3 start on version 0. Client 1 and 2 arrive: step 1 (tau 0 each). Client 1
    # restarts on version 1; then 3 (tau 1, from version 0) and 1 (tau 0) arrive: step 2.
    workspace, server = setup(buffer=2)
    x0 = {k: v.clone() for k, v in server.model.items()}
    for c in range(4):
        assert server.dispatch(c).round == 1
    assert answer(workspace, server, 2, 0.4, examples=30).accepted
    assert not server.full
    assert answer(workspace, server, 1, 0.1, examples=10).accepted
    assert server.full
    first = server.step()
    assert first.version == server.version == 1
    assert [(a.client, a.version, a.staleness, a.weight) for a in first.arrivals] == [
        (1, 0, 0, 1.0),
        (2, 0, 0, 1.0),
    ]
    x1 = {k: x0[k] + (10 * 0.1 + 30 * 0.4) / 40 for k in x0}
    for k, v in server.model.items():
        torch.testing.assert_close(v, x1[k])

    sent = server.dispatch(1)
    assert (sent.round, sent.delivered, sent.state_round) == (2, True, 1)
    assert answer(workspace, server, 3, 1.0, examples=20).accepted
    assert answer(workspace, server, 1, 0.2, examples=20).accepted
    second = server.step()
    assert [(a.client, a.version, a.staleness) for a in second.arrivals] == [(1, 1, 0), (3, 0, 1)]
    s = 2**-0.5  # FedBuff's 1/sqrt(1 + tau) at tau = 1
    assert second.arrivals[1].weight == s
    for k, v in server.model.items():
        torch.testing.assert_close(v, x1[k] + (20 * 0.2 + 20 * s * 1.0) / 40)


def test_a_stale_update_moves_the_model_less_than_a_fresh_one():
    moves = []
    for stale in (False, True):
        workspace, server = setup(buffer=1, data={"clients": 2})
        x0 = {k: v.clone() for k, v in server.model.items()}
        server.dispatch(0), server.dispatch(1)
        if stale:  # client 0 is slow: client 1 lands three steps first
            for _ in range(3):
                answer(workspace, server, 1, 0.0)
                server.step()
                server.dispatch(1)
            x0 = {k: v.clone() for k, v in server.model.items()}
        answer(workspace, server, 0, 1.0)
        step = server.step()
        assert step.arrivals[0].staleness == (3 if stale else 0)
        moves.append(float((server.model["head.bias"] - x0["head.bias"]).abs().max()))
    fresh, stale = moves
    assert stale == pytest.approx(fresh / 2)  # (1 + 3)^-0.5


def test_server_learning_rate_and_momentum_apply_to_the_buffered_mean():
    workspace, server = setup(buffer=1, train={"server": {"lr": 0.5, "momentum": 0.9}})
    x0 = server.model["head.bias"].clone()
    server.dispatch(0)
    answer(workspace, server, 0, 1.0)
    server.step()
    server.dispatch(0)
    answer(workspace, server, 0, 1.0)
    server.step()
    torch.testing.assert_close(server.model["head.bias"], x0 + 0.5 * 1.0 + 0.5 * 1.9)


@pytest.mark.parametrize(
    ("tamper", "reason"),
    [
        ("not protobuf", "not an Update message"),
        ("wrong sender", "does not match 'client-0'"),
        ("wrong round", "expected 1"),
        ("no examples", "num_examples"),
        ("not finite", "finite"),
        ("no task", "no task in flight"),
    ],
)
def test_a_refused_update_ends_the_task_and_is_counted_with_the_step(tamper, reason):
    workspace, server = setup(buffer=2)
    server.dispatch(0), server.dispatch(1)
    data = {
        "not protobuf": b"\xff\x00nope",
        "wrong sender": update(workspace, 1, 1, 0.1, 5),
        "wrong round": update(workspace, 0, 2, 0.1, 5),
        "no examples": update(workspace, 0, 1, 0.1, 0),
        "not finite": update(workspace, 0, 1, math.nan, 5),
        "no task": update(workspace, 3, 1, 0.1, 5),
    }[tamper]
    receipt = server.receive(3 if tamper == "no task" else 0, data)
    assert not receipt.accepted and reason in str(receipt.error)
    if tamper == "no task":
        return
    assert not server.full and not server.idle  # client 1 still trains
    answer(workspace, server, 1, 0.1)
    assert server.idle and not server.full  # nobody left training: step on what is there
    step = server.step()
    assert [a.client for a in step.arrivals] == [1] and list(step.rejected) == [0]
    assert server.dispatch(0).delivered is False  # told once, with its next task
    assert server.dispatch(1).delivered is True


def test_an_empty_step_keeps_the_model_and_counts_the_version():
    workspace, server = setup(buffer=1, data={"clients": 2})
    x0 = {k: v.clone() for k, v in server.model.items()}
    server.dispatch(0)
    server.drop(0)
    assert server.idle
    step = server.step()
    assert (step.version, step.arrivals, step.dropped) == (1, [], [0])
    assert all(torch.equal(v, x0[k]) for k, v in server.model.items())


def test_one_task_per_client_at_a_time():
    _, server = setup()
    server.dispatch(0)
    with pytest.raises(ValueError, match="already training"):
        server.dispatch(0)
    server.drop(0)
    with pytest.raises(ValueError, match="already had a task on version 0"):
        server.dispatch(0)  # its next task waits for the next version


def test_a_users_staleness_function_registers_like_the_built_ins():
    from typing import Literal

    class Cutoff(Section):
        kind: Literal["cutoff"] = "cutoff"
        tau: int = 1

    saved = dict(STALENESS._entries)
    STALENESS.register(
        "cutoff", section=Cutoff, factory=lambda s: lambda tau: 1.0 if tau <= s.tau else 0.0
    )
    try:
        workspace, server = setup(buffer=1, staleness={"kind": "cutoff", "tau": 0})
        server.dispatch(0), server.dispatch(1)
        answer(workspace, server, 1, 0.0)
        server.step()
        before = server.model["head.bias"].clone()
        answer(workspace, server, 0, 1.0)  # tau 1 > 0: weight 0
        assert server.step().arrivals[0].weight == 0.0
        assert torch.equal(server.model["head.bias"], before)
    finally:
        STALENESS._entries = saved


@pytest.mark.parametrize(
    ("server", "sections", "message"),
    [
        ({"buffer": 3, "concurrency": 2}, {}, "buffer <= concurrency <= data.clients"),
        ({"concurrency": 5}, {}, "buffer <= concurrency <= data.clients"),
        ({"speeds": {"factors": [1.0, 2.0]}}, {}, "lists 2 values for 4 clients"),
        ({}, {"train": {"participation": 0.5}}, "remove train.participation"),
        ({}, {"downlink": {"select": {"kind": "topk", "density": 0.1}}}, "remove downlink"),
        ({}, {"aggregation": {"rule": {"kind": "sign_vote"}}}, "sign_vote"),
        ({}, {"runtime": {"kind": "simulation", "checkpoint_every": 2}}, "checkpoint_every"),
        ({}, {"topology": {"kind": "ring"}}, "gossip peers have none"),
        ({"staleness": {"kind": "nope"}}, {}, "unknown staleness function kind 'nope'"),
    ],
)
def test_settings_an_asynchronous_server_cannot_honour_are_refused(server, sections, message):
    raw = {
        "name": "a",
        "data": {"dataset": "digits", "clients": 4},
        "server": {"kind": "buffered_async", **server},
        **sections,
    }
    with pytest.raises((ConfigError, ValidationError, ValueError), match=message):
        parse_config(raw)


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_hostile_update_of_the_corpus_is_refused_and_the_buffer_goes_on(case: str) -> None:
    hostile = CASES[case]
    experiment = tiny_experiment(
        codec=hostile.server_codec, server={"kind": "buffered_async", "buffer": 3}
    )
    workspace = load_federation(experiment).workspace
    server = BufferedServer(experiment=experiment, workspace=workspace, initial=workspace.tensors())
    for version in (0, 1):
        before = {k: v.clone() for k, v in server.model.items()}
        for c in range(4):
            server.dispatch(c)
        codec = server.uplink
        spec = codec.wire_spec
        receipt = server.receive(3, hostile_bytes(case, spec, 3, version + 1))
        assert not receipt.accepted and hostile.reason in str(receipt.error)
        for c in range(3):
            g = torch.Generator().manual_seed(100 * version + c)
            tensors = {s.name: torch.randn(s.shape, generator=g) * 0.01 for s in codec.spec}
            payloads, _ = codec.encode(tensors, codec.init(tensors))
            metrics = {"num_examples": 20.0}
            honest = Update(f"client-{c}", version + 1, Kind.MODEL_DELTA, payloads, metrics)
            assert server.receive(c, encode(honest)).accepted
        step = server.step()
        assert [a.client for a in step.arrivals] == [0, 1, 2] and list(step.rejected) == [3]
        assert all(bool(torch.isfinite(v).all()) for v in server.model.values())
        assert any(not torch.equal(server.model[k], before[k]) for k in before)
