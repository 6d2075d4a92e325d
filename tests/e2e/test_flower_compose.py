"""The compose files run exactly what the multi-process tests run (no drift).

No Docker engine exists where thinwire is built, so the compose files are checked as data:
every service's command must equal `service_commands` (which the end-to-end tests start as
plain processes on 127.0.0.1) for the compose network's host names and ports.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from thinwire.config import FlowerRuntime, load_config
from thinwire.runtimes.flower.deploy import SUPERLINK_PORT, SUPERNODE_PORT, flower_environment

from .flower_cluster import EXAMPLE, ROOT, client_command, service_commands

SUPERLINK = f"superlink:{SUPERLINK_PORT}"
NODES = [SUPERNODE_PORT] * 3
CERTS = Path("/app/certs")
STATE = Path("/app/state")


def _compose(name: str) -> dict[str, Any]:
    document = yaml.safe_load((ROOT / name).read_text())
    assert isinstance(document, dict)
    return document


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    """The star's services: those outside any profile (the gossip profile has its own test)."""
    services = _compose("docker-compose.yml")["services"]
    return {name: service for name, service in services.items() if "profiles" not in service}


def test_every_service_runs_the_tested_command(services: dict[str, Any]) -> None:
    expected = service_commands(
        host="0.0.0.0", superlink=SUPERLINK, node_ports=NODES, state_dir=STATE
    )
    assert {name: services[name]["command"] for name in services} == expected


def test_the_submitted_example_fits_the_cluster(services: dict[str, Any]) -> None:
    experiment = load_config(ROOT / EXAMPLE)
    supernodes = [name for name in services if name.startswith("supernode-")]
    assert experiment.data.clients == len(supernodes)
    assert isinstance(experiment.runtime, FlowerRuntime)
    assert experiment.runtime.insecure  # the plain compose network; TLS comes by override


def test_every_service_turns_flowers_telemetry_and_update_check_off(
    services: dict[str, Any],
) -> None:
    for name, service in services.items():
        assert service["environment"] == flower_environment({}), name


def test_the_tls_override_runs_the_tested_tls_commands(services: dict[str, Any]) -> None:
    tls = _compose("docker-compose.tls.yml")["services"]
    expected = service_commands(
        host="0.0.0.0",
        superlink=SUPERLINK,
        node_ports=NODES,
        state_dir=STATE,
        certificates=CERTS,
    )
    assert set(tls) == set(services)
    assert {name: tls[name]["command"] for name in tls} == expected
    for name, service in tls.items():
        assert "./docker/certs:/app/certs:ro" in service["volumes"], name


def test_the_run_folders_share_one_volume(services: dict[str, Any]) -> None:
    # The ServerApp (superexec-serverapp) writes the run folder that `submit` reads.
    for name in ("superexec-serverapp", "submit"):
        assert "runs:/app/runs" in services[name]["volumes"], name
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    assert "WORKDIR /app" in dockerfile
    assert re.search(r"^USER app$", dockerfile, re.M)  # never root
    assert "chown app:app /app/runs" in dockerfile


def test_the_gpu_override_reserves_a_gpu_for_every_supernode(services: dict[str, Any]) -> None:
    gpu = _compose("docker-compose.gpu.yml")["services"]
    supernodes = {name for name in services if name.startswith("supernode-")}
    assert set(gpu) == supernodes
    for service in gpu.values():
        assert service["build"]["args"]["VARIANT"] == "gpu"
        (device,) = service["deploy"]["resources"]["reservations"]["devices"]
        assert device["capabilities"] == ["gpu"]


def test_every_supernode_keeps_its_state_in_a_volume_of_its_own(
    services: dict[str, Any],
) -> None:
    supernodes = sorted(name for name in services if name.startswith("supernode-"))
    volumes = [services[name]["volumes"] for name in supernodes]
    assert volumes == [[f"state-{i}:{STATE}"] for i in range(len(supernodes))]
    assert set(_compose("docker-compose.yml")["volumes"]) >= {f"state-{i}" for i in range(3)}
    (client,) = _compose("docker/client.compose.yml")["services"].values()
    assert f"state:{STATE}" in client["volumes"]
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    assert f"chown app:app /app/runs {STATE}" in dockerfile  # a fresh volume is app's


def test_the_health_checks_probe_the_flower_ports(services: dict[str, Any]) -> None:
    assert f":{SUPERLINK_PORT}/health" in " ".join(services["superlink"]["healthcheck"]["test"])
    for name, service in services.items():
        if name.startswith("supernode-"):
            assert f":{SUPERNODE_PORT}/health" in " ".join(service["healthcheck"]["test"])


def test_a_client_host_runs_the_tested_supernode_command() -> None:
    (supernode,) = _compose("docker/client.compose.yml")["services"].values()
    command = [
        re.sub(r"\$\{(\w+):\?[^}]*\}", lambda m: "{" + m.group(1) + "}", str(arg))
        for arg in supernode["command"]
    ]
    expected = client_command(
        "{SUPERLINK}", "{PARTITION}", "{NUM_PARTITIONS}", SUPERNODE_PORT, CERTS / "ca.crt", STATE
    )
    assert command == expected
    assert supernode["environment"] == flower_environment({})
