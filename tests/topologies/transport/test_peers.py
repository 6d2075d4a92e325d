"""Peer addresses from the gossip runtime section."""

from __future__ import annotations

import pytest

from thinwire.config import GossipRuntime
from thinwire.topologies.transport import listen_address, peer_addresses


def runtime(**fields) -> GossipRuntime:
    return GossipRuntime(run_id="r", insecure=True, **fields)


def test_explicit_peer_list():
    config = runtime(peers=["10.0.0.1:7000", "10.0.0.2:7001", "[::1]:7002"])
    assert peer_addresses(config, 3) == {0: "10.0.0.1:7000", 1: "10.0.0.2:7001", 2: "[::1]:7002"}


def test_pattern():
    assert peer_addresses(runtime(pattern="peer-{i}:50051"), 3) == {
        0: "peer-0:50051",
        1: "peer-1:50051",
        2: "peer-2:50051",
    }


def test_peer_list_must_match_the_node_count():
    with pytest.raises(ValueError, match="lists 2 addresses for 3 nodes"):
        peer_addresses(runtime(peers=["a:1", "b:2"]), 3)


def test_addresses_must_be_distinct():
    with pytest.raises(ValueError, match="nodes 0 and 2 share the address a:1"):
        peer_addresses(runtime(peers=["a:1", "b:2", "a:1"]), 3)


def test_listen_address_takes_the_port_of_the_nodes_own_address():
    config = runtime(peers=["h:7000", "h:7001"])
    assert listen_address(config, 1, 2) == "[::]:7001"
    config = runtime(pattern="peer-{i}:50051", listen="0.0.0.0:{port}")
    assert listen_address(config, 4, 5) == "0.0.0.0:50051"
    with pytest.raises(ValueError, match="node 5 is not in 0..4"):
        listen_address(config, 5, 5)
