"""TLS as docker-compose.tls.yml sets it up, on real processes on 127.0.0.1.

docker/make-certs.sh writes the certificates; the SuperLink, its SuperExec and a SuperNode
started by `thinwire client --root-certificates` connect over TLS, and `flwr` (through the
connection `thinwire server` writes) sees the SuperNode online.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from thinwire.runtimes.flower.deploy import CONNECTION, write_connection

from .flower_cluster import ROOT, Cluster, free_port, service_commands

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(180),
    pytest.mark.skipif(shutil.which("openssl") is None, reason="make-certs.sh needs openssl"),
]


def _online_nodes(cluster: Cluster) -> list[dict[str, object]]:
    listing = subprocess.run(
        ["flwr", "supernode", "ls", CONNECTION, "--format", "json"],
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listing.returncode == 0, listing.stdout + listing.stderr
    return [n for n in json.loads(listing.stdout)["nodes"] if n["status"] == "online"]


def test_a_supernode_joins_over_tls_with_the_helpers_certificates(tmp_path: Path) -> None:
    certificates = tmp_path / "certs"
    made = subprocess.run(
        [str(ROOT / "docker" / "make-certs.sh"), str(certificates)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    cluster = Cluster(tmp_path)
    port = free_port()
    commands = service_commands(
        host="127.0.0.1",
        superlink=f"127.0.0.1:{port}",
        node_ports=[free_port()],
        state_dir=cluster.root / "state",
        certificates=certificates,
    )
    write_connection(
        Path(cluster.env["FLWR_HOME"]),
        address=f"127.0.0.1:{port}",
        insecure=False,
        root_certificates=certificates / "ca.crt",
    )
    try:
        for name in ("superlink", "superexec-serverapp", "supernode-0"):
            cluster.start(name, commands[name])
        cluster.wait_healthy(port, ca=certificates / "ca.crt")
        deadline = time.monotonic() + 60
        while not (online := _online_nodes(cluster)) and time.monotonic() < deadline:
            time.sleep(1)
        assert len(online) == 1, cluster.log("supernode-0")
        # The ServerApp's SuperExec reached the SuperLink over TLS (it retries, and says
        # so, while it cannot; it says nothing when the first attempt works).
        superexec = cluster.log("superexec-serverapp")
        assert cluster.processes["superexec-serverapp"].poll() is None, superexec
        assert "Connection attempt failed" not in superexec or "Connection successful" in superexec
    finally:
        cluster.stop()
