"""examples/gossip-ring.yaml and the compose profile that runs it as peers agree."""

from __future__ import annotations

from pathlib import Path

import yaml

from thinwire.config import load_config
from thinwire.topologies.runtime.simulation import simulate_gossip
from thinwire.topologies.transport import peer_addresses

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "gossip-ring.yaml"


def test_the_example_is_choco_on_a_ring_of_eight_peers():
    config = load_config(EXAMPLE)
    assert (config.gossip.kind, config.topology.kind, config.data.clients) == ("choco", "ring", 8)
    assert config.runtime.kind == "gossip"


def test_the_example_simulates_as_its_comment_says():
    config = load_config(
        EXAMPLE, ["runtime={kind: simulation}", "train.rounds=2", "train.device=cpu"]
    )
    records = simulate_gossip(config).records
    assert [r["round"] for r in records] == [1, 2] and records[-1]["bytes_up"] > 0


def test_the_compose_profile_runs_one_peer_per_node_under_its_service_name():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    config = load_config(EXAMPLE)
    addresses = peer_addresses(config.runtime, config.data.clients)
    services = {
        name: service
        for name, service in compose["services"].items()
        if "gossip" in service.get("profiles", [])
    }
    assert sorted(services) == sorted(address.split(":")[0] for address in addresses.values())
    for node, address in addresses.items():
        service = services[address.split(":")[0]]
        assert service["profiles"] == ["gossip"]
        assert service["command"] == [
            "thinwire", "peer", "examples/gossip-ring.yaml", "--node", str(node)
        ]  # fmt: skip
        assert "runs:/app/runs" in service["volumes"]  # checkpoints survive a restart
        assert service["restart"] == "on-failure"
