"""Server halves of send policies: each piece alone, mixed, and chosen by the policy kind."""

import pytest
import torch
from star_helpers import tiny_experiment

from thinwire.codecs.model import ModelCodec
from thinwire.config import AlwaysSend
from thinwire.learning import load_federation
from thinwire.registry import POLICIES
from thinwire.server import Aggregator, ServerHalf, build_server_half, register_server_half
from thinwire.server.halves import (
    _HALVES,
    Memory,
    check_slot,
    deliver_all,
    equal_share,
    reuse_stale,
    slot_frame,
)
from thinwire.server.rules import weighted_mean
from thinwire.wire import Kind, Update, WireError


def update(client, slot=None):
    metrics = {"num_examples": 1.0} | ({"slot": float(slot)} if slot is not None else {})
    return Update(f"client-{client}", 1, Kind.MODEL_DELTA, {}, metrics)


def test_a_dedicated_uplink_delivers_everything():
    frame = deliver_all({0: update(0), 1: update(1)})
    assert sorted(frame.through) == [0, 1] and frame.collided == [] and frame.stats is None


def test_a_shared_slot_loses_both_updates():
    frame = slot_frame(3)({0: update(0, 1), 1: update(1, 1), 2: update(2, 0)})
    assert sorted(frame.through) == [2] and frame.collided == [0, 1]
    assert (frame.stats.successes, frame.stats.collisions, frame.stats.idle) == (1, 1, 1)


@pytest.mark.parametrize("slot", [None, -1, 3, 0.5])
def test_a_slot_out_of_range_is_refused(slot):
    with pytest.raises(WireError, match="metric slot"):
        check_slot(3)(update(0, slot))


def test_stale_reuse_stands_in_for_silent_clients_that_delivered_before():
    first = {"w": torch.ones(2)}
    _, memory = reuse_stale({0: (first, 4.0)}, [], Memory({}, {}))
    contributions, memory = reuse_stale({1: ({"w": torch.zeros(2)}, 2.0)}, [0, 2], memory)
    assert sorted(contributions) == [0, 1]  # 2 never delivered: left out
    assert contributions[0] == (first, 4.0)
    assert sorted(memory.updates) == ["0", "1"] and memory.examples == {"0": 4.0, "1": 2.0}


def test_equal_shares_divide_the_sum_by_every_selected_client():
    rule = equal_share(4)
    out = rule([({"w": torch.tensor([2.0])}, 10.0), ({"w": torch.tensor([6.0])}, 1.0)])
    assert out["w"].item() == 2.0  # (2 + 6) / 4, example counts ignored


def test_the_policy_kind_names_its_half():
    names = {
        kind: build_server_half(tiny_experiment(**sections)).name
        for kind, sections in {
            "always": {},
            "censor": {"policy": {"kind": "censor", "threshold": {"kind": "constant", "tau": 0}}},
            "random_access": {"policy": {"kind": "random_access"}, "channel": {"slots": 2}},
        }.items()
    }
    assert names == {"always": "plain", "censor": "stale_reuse", "random_access": "slotted"}


@pytest.fixture
def plugin_policy():
    from typing import Literal

    from thinwire.policies import always

    class Section(AlwaysSend):
        kind: Literal["always_reusing"] = "always_reusing"  # type: ignore[assignment]

    entries, servers = dict(POLICIES._entries), dict(POLICIES._servers)
    POLICIES.register(
        "always_reusing",
        section=Section,
        factory=lambda config, context: always(),
        server="plugin_half",
    )
    register_server_half(
        "plugin_half", lambda experiment: ServerHalf(contribute=reuse_stale, name="plugin_half")
    )
    yield
    POLICIES._entries, POLICIES._servers = entries, servers
    del _HALVES["plugin_half"]


def test_a_plugin_policy_brings_its_own_server_half(plugin_policy):
    experiment = tiny_experiment(policy={"kind": "always_reusing"})
    workspace = load_federation(experiment).workspace
    agg = Aggregator(experiment=experiment, workspace=workspace, initial=workspace.tensors())
    assert agg.half.name == "plugin_half"
    codec = ModelCodec.dense(workspace.spec)
    tensors = {s.name: torch.full(s.shape, 1.0) for s in workspace.spec}
    payloads, _ = codec.encode(tensors, codec.init(tensors))
    from thinwire.wire import encode

    agg.broadcast(1, [0, 1])
    agg.receive(0, encode(Update("client-0", 1, Kind.MODEL_DELTA, payloads, {"num_examples": 1.0})))
    agg.silent(1)
    agg.finish_round()
    agg.broadcast(2, [0, 1])
    agg.silent(0)
    assert agg.finish_round().reused == (0,)


def test_an_unregistered_half_is_refused_with_the_known_ones(plugin_policy):
    del _HALVES["plugin_half"]
    with pytest.raises(ValueError, match="names server half 'plugin_half'.*plain"):
        build_server_half(tiny_experiment(policy={"kind": "always_reusing"}))
    _HALVES["plugin_half"] = lambda experiment: ServerHalf()


def test_a_taken_half_name_needs_force():
    with pytest.raises(ValueError, match="already registered"):
        register_server_half("plain", lambda experiment: ServerHalf())


def test_pieces_mix_into_one_half():
    half = ServerHalf(admit=slot_frame(2), contribute=reuse_stale)
    assert half.combine(weighted_mean(), 5) is not None
    frame = half.admit({0: update(0, 0), 1: update(1, 1)})
    assert sorted(frame.through) == [0, 1]
