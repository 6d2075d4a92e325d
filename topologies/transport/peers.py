"""Where the peers of a gossip run are: their addresses and each node's listen address."""

from __future__ import annotations

from thinwire.config import GossipRuntime

__all__ = ["listen_address", "peer_addresses"]


def peer_addresses(runtime: GossipRuntime, nodes: int) -> dict[int, str]:
    """Every node's `host:port`, from the runtime's `peers` list or its `pattern`.

    Raises:
        ValueError: if `peers` lists another number of addresses than `nodes`, or one
            address twice.
    """
    if nodes < 1:
        raise ValueError(f"nodes must be >= 1, got {nodes}")
    if runtime.peers is not None:
        if len(runtime.peers) != nodes:
            raise ValueError(
                f"runtime.peers lists {len(runtime.peers)} addresses for {nodes} nodes"
            )
        addresses = dict(enumerate(runtime.peers))
    elif runtime.pattern is not None:
        addresses = {i: runtime.pattern.format(i=i) for i in range(nodes)}
    else:
        raise ValueError("the gossip runtime sets neither peers nor pattern")
    seen: dict[str, int] = {}
    for node, address in addresses.items():
        if address in seen:
            raise ValueError(f"nodes {seen[address]} and {node} share the address {address}")
        seen[address] = node
    return addresses


def listen_address(runtime: GossipRuntime, node: int, nodes: int) -> str:
    """Where `node` serves: the runtime's `listen`, with {port} from its own peer address."""
    if not 0 <= node < nodes:
        raise ValueError(f"node {node} is not in 0..{nodes - 1}")
    port = peer_addresses(runtime, nodes)[node].rsplit(":", 1)[1]
    return runtime.listen.format(port=port, i=node)
