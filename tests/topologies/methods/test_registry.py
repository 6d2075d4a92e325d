"""The registry that turns `gossip.kind` into a node."""

from __future__ import annotations

import pytest

from thinwire.topologies.methods.choco import ChocoNode
from thinwire.topologies.methods.dpsgd import DPSGDNode
from thinwire.topologies.methods.jwins import JwinsNode
from thinwire.topologies.methods.registry import methods, register_method

from ..gossip_support import experiment, make_nodes

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


def test_the_registry_lists_every_config_kind_and_refuses_to_overwrite_one():
    assert methods() == ["choco", "dpsgd", "jwins", "sparq"]
    with pytest.raises(ValueError, match="already registered; pass force=True"):
        register_method("dpsgd", lambda core, config: DPSGDNode(core))


def test_an_unregistered_kind_names_the_registered_ones():
    config = experiment()
    odd = config.model_copy(update={"gossip": config.gossip.model_copy(update={"kind": "odd"})})
    with pytest.raises(ValueError, match=r"unknown gossip kind 'odd'; registered: \['choco'"):
        make_nodes(odd)
