"""The gossip methods by name: `gossip.kind` in the experiment file -> a node of that method.

`build_node` is how every runtime makes its nodes, so the simulator and the peer process
run the same objects. A new method registers a factory taking the shared `NodeCore` and
its `gossip` section (STYLE rule 12: an explicit registry, no import strings).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from thinwire.config import Experiment
from thinwire.learning import Workspace
from thinwire.topologies.graph.schedule import GraphSchedule
from thinwire.topologies.methods.choco import ChocoNode
from thinwire.topologies.methods.dpsgd import DPSGDNode
from thinwire.topologies.methods.jwins import JwinsNode
from thinwire.topologies.methods.node import GossipNode, NodeCore

__all__ = ["NodeFactory", "build_node", "methods", "register_method"]

NodeFactory = Callable[[NodeCore, Any], GossipNode]
"""Builds a node from the shared core and the experiment's `gossip` section."""

_REGISTRY: dict[str, NodeFactory] = {
    "dpsgd": lambda core, config: DPSGDNode(core),
    "choco": ChocoNode,
    "sparq": ChocoNode,
    "jwins": JwinsNode,
}


def register_method(kind: str, factory: NodeFactory, *, force: bool = False) -> None:
    """Makes `gossip: {kind: <kind>}` build `factory(core, section)`.

    Raises:
        ValueError: if `kind` is taken and `force` is not set.
    """
    if kind in _REGISTRY and not force:
        raise ValueError(f"gossip kind {kind!r} is already registered; pass force=True to replace")
    _REGISTRY[kind] = factory


def methods() -> list[str]:
    """The registered gossip kinds."""
    return sorted(_REGISTRY)


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
    kind = experiment.gossip.kind
    try:
        factory = _REGISTRY[kind]
    except KeyError:
        raise ValueError(f"unknown gossip kind {kind!r}; registered: {methods()}") from None
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
