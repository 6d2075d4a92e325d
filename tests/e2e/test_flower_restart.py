"""Restarts lose nothing: a killed server resumes, a restarted SuperNode continues, bit for bit.

examples/flower.yaml (top-1% with error feedback) for 4 rounds on real processes. The
SuperNodes (`thinwire client --state-dir`) keep running while `thinwire server
--start-superlink` is SIGKILLed once round 2's checkpoint is written:

- the SuperLink it started, and the ServerApp running the round, die with it (parent-death
  signal), so the port is free again and no orphaned run goes on;
- client 1's SuperNode is killed too and started afresh (a new node id, the same disk);
- `thinwire server --start-superlink --resume RUN` on the same port runs rounds 3 and 4 in
  a new run folder. The SuperNodes that outlived the SuperLink reconnect, every client
  continues from the state on its disk, and the records and final model equal the
  uninterrupted simulator's bit for bit.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import NamedTuple

import pytest
import torch

from thinwire.config import Experiment, load_config
from thinwire.metrics import load_records
from thinwire.runtimes.simulation import SimulationResult, simulate

from .flower_cluster import EXAMPLE, ROOT, Cluster, _processes, client_command, free_port

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(600)]

RUN_TIMEOUT_S = 300
OVERRIDES = ["train.rounds=4", "runtime.checkpoint_every=1", "runtime.round_timeout_s=90"]


class Restarted(NamedTuple):
    experiment: Experiment
    first: Path  # the killed run's folder
    resumed: Path  # the resumed run's folder
    output: str  # what the resuming command printed
    returncode: int
    left_behind: list[str]  # processes of the killed server still alive after 30 s
    port_freed: bool
    outlived: list[bool]  # per original SuperNode: alive from start to end


def _wait_for(path_glob: str, folder: Path, process: subprocess.Popen[bytes]) -> Path:
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while time.monotonic() < deadline and process.poll() is None:
        found = sorted(folder.glob(path_glob))
        if found:
            return found[0]
        time.sleep(0.1)
    raise AssertionError(f"{path_glob} did not appear in {folder}")


def _port_free(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _of_the_server(port: int) -> list[str]:
    """Live processes of a server at `port`: its SuperLink, SuperExec and ServerApp."""
    superlink = f"--port {port}"
    api = f"127.0.0.1:{port}"
    return [
        line
        for _, line in _processes()
        if ("flower-superlink" in line and superlink in line)
        or (api in line and "--superlink" not in line)
    ]


@pytest.fixture(scope="module")
def restarted(tmp_path_factory: pytest.TempPathFactory) -> Restarted:
    root = tmp_path_factory.mktemp("restart")
    output = root / "runs"
    overrides = [f"output={output}", *OVERRIDES]
    state = root / "state"
    cluster = Cluster(root)
    port = free_port()
    superlink = f"127.0.0.1:{port}"
    server = ["thinwire", "server", EXAMPLE, "--superlink", superlink, "--insecure"]
    server += ["--start-superlink", *[a for o in overrides for a in ("--set", o)]]
    try:
        nodes = [
            cluster.start(
                f"supernode-{i}", client_command(superlink, i, 3, free_port(), None, state)
            )
            for i in range(3)
        ]
        first = cluster.start("server-1", server)
        checkpoint = _wait_for("*/checkpoints/round-000002.pt", output, first)
        os.kill(first.pid, signal.SIGKILL)  # the server host's process dies, nothing else
        first.wait(timeout=10)
        deadline = time.monotonic() + 30
        while _of_the_server(port) and time.monotonic() < deadline:
            time.sleep(0.2)
        left_behind = _of_the_server(port)
        port_freed = _port_free(port)
        cluster.kill("supernode-1")  # its host restarts: a new SuperNode, the same disk
        cluster.start("supernode-1b", client_command(superlink, 1, 3, free_port(), None, state))
        resumed = subprocess.run(
            [*server, "--resume", str(checkpoint.parents[1])],
            cwd=ROOT,
            env=cluster.env,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
        )
        outlived = [nodes[i].poll() is None for i in (0, 2)]
    finally:
        cluster.stop()
    first_dir = checkpoint.parents[1]
    (resumed_dir,) = [p for p in output.glob("flower-star-*") if p != first_dir]
    return Restarted(
        load_config(ROOT / EXAMPLE, overrides),
        first_dir,
        resumed_dir,
        resumed.stdout + resumed.stderr,
        resumed.returncode,
        left_behind,
        port_freed,
        outlived,
    )


@pytest.fixture(scope="module")
def simulated(restarted: Restarted) -> SimulationResult:
    """The uninterrupted run, on one thread as the Flower processes ran."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return simulate(restarted.experiment)
    finally:
        torch.set_num_threads(threads)


def test_a_killed_server_takes_its_superlink_and_serverapp_with_it(restarted: Restarted) -> None:
    assert restarted.left_behind == []
    assert restarted.port_freed


def test_supernodes_outlive_a_superlink_restart_and_reconnect(restarted: Restarted) -> None:
    assert restarted.returncode == 0, restarted.output
    assert restarted.outlived == [True, True]
    records = load_records(restarted.resumed)
    assert [(r["participants"], r["updates_sent"]) for r in records] == [(3, 3), (3, 3)]


def test_the_resumed_run_writes_a_new_folder_for_the_rounds_after_the_checkpoint(
    restarted: Restarted,
) -> None:
    assert [r["round"] for r in load_records(restarted.resumed)] == [3, 4]
    assert [r["round"] for r in load_records(restarted.first)][:2] == [1, 2]


def test_the_resumed_run_equals_the_uninterrupted_one_bit_for_bit(
    restarted: Restarted, simulated: SimulationResult
) -> None:
    records = load_records(restarted.resumed)
    for got, want in zip(records, simulated.records[2:], strict=True):
        for key in ("accuracy", "loss", "bytes_up", "bytes_down", "cum_bytes_up"):
            assert got[key] == want[key], (got["round"], key)
        assert got["state_lost"] == 0  # the restarted SuperNode found its state on disk
    final = torch.load(restarted.resumed / "checkpoints" / "round-000004.pt", weights_only=True)
    for name, tensor in simulated.model.items():
        assert torch.equal(final["state"]["model"][name], tensor.cpu()), name
