"""A node's name: `node-<id>`, shared by the round logic, checkpoints and TLS certificates.

A gossip message names its sender this way, a checkpoint file is named after its node, and
a peer's certificate carries the name as its common name, so that a receiver can bind a
TLS identity to the sender a push claims. The name lives here, apart from the TLS side, so
that the transport-free round logic needs nothing from it.

Example:
    >>> node_common_name(3), node_from_common_name("node-3"), node_from_common_name("peer-3")
    ('node-3', 3, None)
"""

from __future__ import annotations

import re

__all__ = ["node_common_name", "node_from_common_name"]

_NODE_NAME = re.compile(r"node-(\d{1,9})")


def node_common_name(node: int) -> str:
    """The name (and certificate common name) that identifies node `node`: `node-<id>`."""
    if node < 0:
        raise ValueError(f"node ids are >= 0, got {node}")
    return f"node-{node}"


def node_from_common_name(name: str) -> int | None:
    """The node id a common name identifies, or None if it names no node."""
    match = _NODE_NAME.fullmatch(name)
    return int(match.group(1)) if match else None
