"""A node's name, shared by messages, checkpoints and certificates."""

from __future__ import annotations

import pytest

from thinwire.topologies.naming import node_common_name, node_from_common_name


def test_node_names_round_trip():
    assert node_common_name(12) == "node-12"
    assert node_from_common_name("node-12") == 12
    assert node_from_common_name("peer-12") is None
    assert node_from_common_name("node-12x") is None
    with pytest.raises(ValueError, match="node ids are >= 0"):
        node_common_name(-1)
