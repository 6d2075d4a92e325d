"""The asynchronous star (FedBuff) on real Flower processes: one run that completes.

Three `thinwire client` SuperNodes and `thinwire server --start-superlink` with
examples/flower.yaml turned asynchronous (K = 2 of M = 3). Arrival order is real here, so
the run is checked for its counts, not against the simulator (the in-process tests in
tests/runtimes/flower/test_buffered_rounds.py do that where the order cannot matter). Every
process runs in its own process group and is killed in `finally`.
"""

from __future__ import annotations

import subprocess

import pytest

from thinwire.metrics import load_records

from .flower_cluster import EXAMPLE, ROOT, Cluster, client_command, free_port

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

ASYNCHRONOUS = [
    "server={kind: buffered_async, buffer: 2}",
    "train.rounds=2",
    "train.local_steps=5",
    "runtime.checkpoint_every=0",
    "runtime.round_timeout_s=60",
]


def test_an_asynchronous_run_on_flower_steps_every_two_updates(tmp_path) -> None:
    output = tmp_path / "runs"
    cluster = Cluster(tmp_path)
    superlink = f"127.0.0.1:{free_port()}"
    overrides = [f"output={output}", *ASYNCHRONOUS]
    try:
        for i in range(3):
            command = client_command(superlink, i, 3, free_port(), None, tmp_path / "state")
            cluster.start(f"supernode-{i}", command)
        server = ["thinwire", "server", EXAMPLE, "--superlink", superlink, "--insecure"]
        sets = [arg for override in overrides for arg in ("--set", override)]
        done = subprocess.run(
            [*server, "--start-superlink", *sets],
            cwd=ROOT,
            env=cluster.env,
            capture_output=True,
            text=True,
            timeout=240,
        )
    finally:
        cluster.stop()
    assert done.returncode == 0, done.stdout + done.stderr
    [run_dir] = output.glob("flower-star-*")
    records = load_records(run_dir)
    assert [r["round"] for r in records] == [1, 2]
    assert [r["buffered"] for r in records] == [2, 2]
    assert [r["participants"] for r in records] == [3, 2]
    assert all(r["rejected"] == r["dropouts"] == 0 for r in records)
    # Every update of step 1 started from version 0; step 2 may hold one that missed step 1.
    assert records[0]["staleness_max"] == 0 and records[1]["staleness_max"] <= 1
    # Each step moved the model (two top-1% steps need not raise the accuracy yet).
    assert records[0]["loss"] != records[1]["loss"]
