"""Gossip methods: the round logic of a decentralized node, transport-free, over bytes.

`build_node` makes the node that the `gossip:` section describes
(`thinwire.registry.GOSSIP.register` adds a kind): `DPSGDNode` (exact averaging),
`ChocoNode` (CHOCO-SGD, and SPARQ-SGD with its `Trigger`), `JwinsNode`. Each is a plain
object over the parts every node shares (`NodeCore`: training, message checks, the inbox):
`prepare` a round's messages, `open` a neighbour's bytes, `absorb` what arrived. Every
runtime drives the same objects, so the simulator and the peer processes agree bit for bit.

Importing this package loads no gRPC, TLS or plotting library: the round logic knows
nothing of how bytes travel.
"""

from thinwire.topologies.methods.choco import ChocoNode, ChocoState, Link
from thinwire.topologies.methods.dpsgd import DPSGDNode, DPSGDState
from thinwire.topologies.methods.jwins import JwinsNode, JwinsState
from thinwire.topologies.methods.node import (
    ASK,
    Absorbed,
    GossipNode,
    Inbox,
    NodeCore,
    Prepared,
    Received,
    Specs,
    StateNode,
    asks,
    elapsed,
)
from thinwire.topologies.methods.registry import NodeFactory, build_node
from thinwire.topologies.methods.sparq import Trigger, threshold

__all__ = [
    "ASK",
    "Absorbed",
    "ChocoNode",
    "ChocoState",
    "DPSGDNode",
    "DPSGDState",
    "GossipNode",
    "Inbox",
    "JwinsNode",
    "JwinsState",
    "Link",
    "NodeCore",
    "NodeFactory",
    "Prepared",
    "Received",
    "Specs",
    "StateNode",
    "Trigger",
    "asks",
    "build_node",
    "elapsed",
    "threshold",
]
