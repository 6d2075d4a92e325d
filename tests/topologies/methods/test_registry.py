"""The registry that turns `gossip.kind` into a node."""

from __future__ import annotations

from typing import Literal

import pytest

from thinwire.config import ExactGossip, Section
from thinwire.registry import GOSSIP
from thinwire.topologies.methods.choco import ChocoNode
from thinwire.topologies.methods.dpsgd import DPSGDNode
from thinwire.topologies.methods.jwins import JwinsNode
from thinwire.topologies.methods.node import NodeCore

from ..gossip_support import experiment, make_nodes, play

SPARQ = {"kind": "sparq", "gamma": 0.5, "threshold": {"kind": "constant", "c": 1.0}}


@pytest.mark.parametrize(
    ("gossip", "codec", "kind", "trigger"),
    [
        ({"kind": "dpsgd"}, None, DPSGDNode, None),
        (
            {"kind": "choco", "gamma": 0.5},
            {"select": {"kind": "topk", "density": 0.1}},
            ChocoNode,
            False,
        ),
        (SPARQ, None, ChocoNode, True),
        ({"kind": "jwins"}, None, JwinsNode, None),
    ],
)
def test_every_kind_builds_its_node(gossip, codec, kind, trigger):
    nodes = make_nodes(experiment(gossip, codec))
    assert [type(n) for n in nodes] == [kind] * 4
    assert [n.core.index for n in nodes] == [0, 1, 2, 3]
    if trigger is not None:
        assert (nodes[0].trigger is not None) == trigger


def test_every_declared_kind_has_a_node_and_none_is_overwritten_without_force():
    assert GOSSIP.kinds() == ("choco", "dpsgd", "jwins", "sparq")
    for kind in GOSSIP.kinds():
        assert callable(GOSSIP.factory(kind)), kind
    with pytest.raises(ValueError, match="already registered; pass force=True"):
        GOSSIP.register("dpsgd", section=ExactGossip, factory=lambda core, config: DPSGDNode(core))


def test_an_unregistered_kind_names_the_registered_ones():
    expected = r"unknown gossip method kind 'odd'; expected one of choco, dpsgd, jwins, sparq"
    with pytest.raises(ValueError, match=expected):
        experiment({"kind": "odd"})
    config = experiment()
    odd = config.model_copy(update={"gossip": config.gossip.model_copy(update={"kind": "odd"})})
    with pytest.raises(ValueError, match=expected):
        make_nodes(odd)


class LoudGossip(Section):
    """D-PSGD under another name, with a field of its own (a test kind)."""

    kind: Literal["loud"] = "loud"
    volume: int = 1


class LoudNode(DPSGDNode):
    def __init__(self, core: NodeCore, config: LoudGossip) -> None:
        super().__init__(core)
        self.volume = config.volume


@pytest.fixture
def loud():
    saved = dict(GOSSIP._entries)
    GOSSIP.register("loud", section=LoudGossip, factory=LoudNode)
    yield
    GOSSIP._entries = saved


def test_a_registered_method_validates_from_yaml_builds_and_gossips(loud):
    config = experiment({"kind": "loud", "volume": 3})
    assert config.gossip == LoudGossip(volume=3)
    assert config.model_dump(mode="json")["gossip"] == {"kind": "loud", "volume": 3}
    nodes = make_nodes(config)
    assert [type(n) for n in nodes] == [LoudNode] * 4 and nodes[0].volume == 3
    reference = make_nodes(experiment({"kind": "dpsgd"}))
    for round in (1, 2):
        play(nodes, round)
        play(reference, round)
    assert all((a.vector() == b.vector()).all() for a, b in zip(nodes, reference, strict=True))
