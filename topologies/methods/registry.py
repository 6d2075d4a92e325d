"""The gossip methods by name: `gossip.kind` in the experiment file -> a node of that method.

`build_node` is how every runtime makes its nodes, so the simulator and the peer process
run the same objects. It looks the kind up in `thinwire.registry.GOSSIP`: this module
registers the nodes of the gossip sections `thinwire.config` declares, and a new method
binds its kind, its section and a factory taking the shared `NodeCore` and that section in
one call, `GOSSIP.register(kind, section=..., factory=...)` (STYLE rule 12: an explicit
registry, no import strings).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from thinwire.config import ChocoGossip, ExactGossip, Experiment, JwinsGossip, SparqGossip
from thinwire.learning import Workspace
from thinwire.registry import GOSSIP
from thinwire.topologies.graph.schedule import GraphSchedule
from thinwire.topologies.methods.choco import ChocoNode
from thinwire.topologies.methods.dpsgd import DPSGDNode
from thinwire.topologies.methods.jwins import JwinsNode
from thinwire.topologies.methods.node import GossipNode, NodeCore

__all__ = ["NodeFactory", "build_node"]

NodeFactory = Callable[[NodeCore, Any], GossipNode]
"""Builds a node from the shared core and the experiment's `gossip` section."""

GOSSIP.register("dpsgd", section=ExactGossip, factory=lambda core, config: DPSGDNode(core))
GOSSIP.register("choco", section=ChocoGossip, factory=ChocoNode)
GOSSIP.register("sparq", section=SparqGossip, factory=ChocoNode)
GOSSIP.register("jwins", section=JwinsGossip, factory=JwinsNode)


def build_node(
    experiment: Experiment,
    index: int,
    *,
    x: torch.Tensor,
    y: torch.Tensor,
    workspace: Workspace,
    schedule: GraphSchedule,
    initial: torch.Tensor,
) -> GossipNode:
    """The node `experiment.gossip` describes, for graph node `index` and its data.

    Args:
        experiment: the run's configuration.
        index: the node's id, 0..n-1.
        x: the node's training features, on the workspace's device.
        y: its labels.
        workspace: the model the node trains in.
        schedule: the run's graph schedule.
        initial: the common initial model, flat (`thinwire.learning.flatten` of the
            workspace's tensors before anyone trained).

    Raises:
        ValueError: for an unregistered kind, or a setting the method cannot run with.
    """
    factory: NodeFactory = GOSSIP.factory(experiment.gossip.kind)
    core = NodeCore(
        index=index,
        experiment=experiment,
        x=x,
        y=y,
        workspace=workspace,
        schedule=schedule,
        initial=initial,
    )
    return factory(core, experiment.gossip)
