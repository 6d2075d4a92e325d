"""`thinwire server --start-superlink`: a SuperLink that lives exactly as long as the run."""

from __future__ import annotations

import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from .flower_cluster import EXAMPLE, ROOT, Cluster, free_port

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


def _healthy(address: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://{address}/health", timeout=2):
            return True
    except (urllib.error.URLError, OSError):
        return False


def test_a_run_without_clients_fails_clearly_and_stops_its_superlink(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)  # only for its environment: nothing else is started
    address = f"127.0.0.1:{free_port()}"
    done = subprocess.run(
        ["thinwire", "server", EXAMPLE, "--start-superlink", "--superlink", address]
        + ["--set", f"output={tmp_path / 'runs'}", "--set", "runtime.connect_timeout_s=2"],
        cwd=ROOT,
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=150,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert f"SuperLink started at {address}" in output
    assert "0 of 3 clients connected within 2 s; runtime.min_replies is 2" in output
    assert "the run ended as finished:failed" in output
    assert not _healthy(address)
    cluster.stop()  # fails if any process of the run survived
