"""Real `thinwire peer` processes on loopback: equivalence, a crash, security, SIGTERM.

Each test starts its peers as separate processes (free ports chosen here, one thread of
torch each), bounds every wait, and kills whatever it started when it ends. Together they
take one to three minutes on 2 cores, mostly starting Python and torch.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import torch
import yaml

from thinwire.checkpoint import load_node_checkpoint, node_checkpoint_path
from thinwire.config import load_config
from thinwire.topologies.runtime.peer import node_log_path, summarize_peers
from thinwire.topologies.runtime.simulation import simulate_gossip
from thinwire.topologies.transport import TLSIdentity, TransportSettings, write_run_certificates
from thinwire.topologies.transport.client import PeerClient

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(240)]

RUN = "e2e-gossip"


def free_ports(count: int) -> list[int]:
    import socket

    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def write_config(
    folder: Path, nodes: int, *, gossip: dict, train: dict, topology: str = "ring", **runtime: Any
) -> Path:
    ports = free_ports(nodes)
    raw = {
        "name": "e2e",
        "seed": 7,
        "data": {
            "dataset": "digits",
            "clients": nodes,
            "partition": {"kind": "dirichlet", "alpha": 1.0},
        },
        "model": {"kind": "mlp", "hidden": [16]},
        "train": {"batch_size": 16, "lr": 0.2, "device": "cpu", **train},
        "topology": {"kind": topology},
        "gossip": gossip,
        "runtime": {
            "kind": "gossip",
            "run_id": RUN,
            "peers": [f"127.0.0.1:{p}" for p in ports],
            "listen": "127.0.0.1:{port}",
            "retries": 1,
            "backoff_s": 0.05,
            **runtime,
        },
        "output": str(folder / "runs"),
    }
    if "tls" not in runtime:
        raw["runtime"]["insecure"] = True
    path = folder / "exp.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


Spawn = Callable[..., subprocess.Popen]


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Spawn]:
    """Starts `thinwire peer` processes; every one still running at the end is killed."""
    started: list[subprocess.Popen] = []
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}

    def start(config: Path, node: int, *extra: str) -> subprocess.Popen:
        log = (tmp_path / f"peer-{node}-{len(started)}.log").open("w")
        command = [sys.executable, "-c", "from thinwire.cli import main; main()", "peer"]
        process = subprocess.Popen(
            [*command, str(config), "--node", str(node), *extra],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        started.append(process)
        return process

    try:
        yield start
    finally:
        for process in started:
            if process.poll() is None:
                process.kill()
        for process in started:
            process.wait(timeout=30)


def finish(processes: list[subprocess.Popen], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    return [p.wait(timeout=max(1.0, deadline - time.monotonic())) for p in processes]


def log_of(config: Path, node: int) -> list[dict[str, Any]]:
    path = node_log_path(config.parent / "runs" / "e2e-peers", node)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def test_eight_peers_send_the_simulators_bytes_and_end_with_its_models(tmp_path, spawn):
    gossip = {
        "kind": "sparq",
        "gamma": 0.3,
        "sync_every": 2,
        "threshold": {"kind": "constant", "c": 20},
    }
    config = write_config(
        tmp_path,
        8,
        gossip=gossip,
        train={"rounds": 8, "local_steps": 3, "eval_every": 4},
        deadline_s=60.0,  # a healthy round never waits for it
    )
    peers = [spawn(config, i) for i in range(8)]
    assert finish(peers, timeout=180) == [0] * 8

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the peers: the same kernels, the same bits
    try:
        sim = simulate_gossip(load_config(config))
    finally:
        torch.set_num_threads(threads)
    fired = [r["fired"] for r in sim.records]
    assert 0 < sum(fired) < 8 * 4, fired  # some nodes fired, some stayed silent
    for node in range(8):
        lines = log_of(config, node)
        assert [line["round"] for line in lines] == list(range(1, 9))
        sent = [{int(j): n for j, n in line["sent"].items()} for line in lines]
        assert sent == [sim.reports[r][node].sent for r in range(8)]
        assert all(line["missing"] == [] and line["push_failures"] == {} for line in lines)
        saved = load_node_checkpoint(
            node_checkpoint_path(config.parent / "runs/e2e-peers/checkpoints", node)
        )
        assert saved.round == 8
        assert torch.equal(saved.state["x"], sim.models[node])


def test_a_killed_peer_is_waited_for_then_rejoins_from_its_checkpoint(tmp_path, spawn):
    config = write_config(
        tmp_path,
        3,
        gossip={"kind": "choco", "gamma": 0.3},
        train={"rounds": 30, "local_steps": 60, "eval_every": 10},
        deadline_s=1.5,
    )
    raw = yaml.safe_load(config.read_text())
    config.write_text(
        yaml.safe_dump({**raw, "codec": {"select": {"kind": "topk", "density": 0.1}}})
    )
    peers = [spawn(config, i) for i in range(3)]
    wait_for(lambda: len(log_of(config, 1)) >= 3, 90, "node 1 to finish 3 rounds")
    os.kill(peers[1].pid, signal.SIGKILL)
    peers[1].wait(timeout=10)
    killed_after = len(log_of(config, 1))
    wait_for(
        lambda: any(1 in line["missing"] for line in log_of(config, 0)), 30, "node 0 to miss 1"
    )
    restarted = spawn(config, 1)
    assert finish([peers[0], peers[2], restarted], timeout=150) == [0] * 3

    for node in (0, 2):  # the neighbours went on without node 1, round after round
        lines = log_of(config, node)
        assert [line["round"] for line in lines] == list(range(1, 31))
        assert any(1 in line["missing"] for line in lines)
    lines = log_of(config, 1)
    rejoined = [line for line in lines if line.get("rejoined")]
    assert rejoined and rejoined[0]["round"] > killed_after
    assert lines[-1]["round"] == 30
    assert set(rejoined[0]["refreshed"]) == {0, 2}  # CHOCO estimates resynchronized
    for node in range(3):  # back in step: every message of the last rounds arrived
        assert all(line["missing"] == [] for line in log_of(config, node)[-5:])
    summary = summarize_peers(load_config(config), config.parent / "runs" / "e2e-peers")
    assert summary.rounds == {0: 30, 1: 30, 2: 30}
    assert summary.evaluation.accuracy > 0.5


def push(port: int, sender: int, identity: TLSIdentity, round: int, message: bytes) -> Any:
    settings = TransportSettings(timeout_s=5.0, retries=0)
    client = PeerClient(
        node=sender,
        run_id=RUN,
        resolve=lambda peer: f"127.0.0.1:{port}",
        settings=settings,
        tls=identity,
    )
    with client:
        return client.push(round, message, [0])[0]


def test_mutual_tls_refuses_a_foreign_certificate_and_peers_refuse_strangers_and_garbage(
    tmp_path, spawn
):
    pki = write_run_certificates(tmp_path / "pki", 4, run_id=RUN)
    foreign = write_run_certificates(tmp_path / "foreign", 4, run_id="other")
    tls = {"ca": str(pki.ca), "cert": str(pki.peers[0].cert), "key": str(pki.peers[0].key)}
    config = write_config(
        tmp_path,
        4,
        gossip={"kind": "dpsgd"},
        train={"rounds": 5, "local_steps": 2, "eval_every": 5},
        deadline_s=1.0,
        tls=tls,
    )

    def files(certs, node):
        return [
            "--set", f"runtime.tls.ca={certs.ca}",
            "--set", f"runtime.tls.cert={certs.peers[node].cert}",
            "--set", f"runtime.tls.key={certs.peers[node].key}",
            "--startup-timeout", "3",
        ]  # fmt: skip

    peers = [spawn(config, i, *files(pki, i)) for i in range(3)]
    peers.append(spawn(config, 3, *files(foreign, 3)))  # node 3's certificate is not the run's
    port = int(yaml.safe_load(config.read_text())["runtime"]["peers"][0].rsplit(":", 1)[1])
    wait_for(lambda: len(log_of(config, 0)) >= 1, 90, "node 0's first round")

    def identity(certs, node):
        return TLSIdentity.from_files(certs.ca, certs.peers[node].cert, certs.peers[node].key)

    round = log_of(config, 0)[-1]["round"] + 1
    outsider = push(port, 3, identity(foreign, 3), round, b"x")
    assert outsider.code == grpc.StatusCode.UNAVAILABLE  # no handshake without the run's CA
    stranger = push(port, 2, identity(pki, 2), round, b"x")
    assert stranger.code == grpc.StatusCode.PERMISSION_DENIED  # 2 is not a neighbour of 0
    garbage = [push(port, 3, identity(pki, 3), round + k, b"\x08garbage") for k in (0, 1)]
    assert grpc.StatusCode.INVALID_ARGUMENT in [g.code for g in garbage]
    assert finish(peers, timeout=120) == [0] * 4

    lines = log_of(config, 0)
    assert [line["round"] for line in lines] == list(range(1, 6))
    assert any(3 in line["rejected"] for line in lines)  # the garbage was counted
    assert all(3 in line["missing"] or 3 in line["rejected"] for line in lines)
    assert all(3 in line["missing"] for line in log_of(config, 2))
    refused = log_of(config, 3)
    assert all(line["missing"] == [0, 2] for line in refused)
    assert all(set(line["push_failures"]) == {"0", "2"} for line in refused)


def test_sigterm_ends_a_peer_after_its_round_and_a_second_one_abandons_the_round(tmp_path, spawn):
    config = write_config(
        tmp_path,
        2,
        gossip={"kind": "dpsgd"},
        train={"rounds": 50, "local_steps": 1, "eval_every": 50},
        topology="chain",
        deadline_s=1.0,  # node 1 never comes: every round waits this long for it
    )
    saved = node_checkpoint_path(config.parent / "runs" / "e2e-peers" / "checkpoints", 0)
    peer = spawn(config, 0, "--startup-timeout", "1")
    wait_for(lambda: len(log_of(config, 0)) >= 1, 90, "node 0's first round")
    peer.send_signal(signal.SIGTERM)
    assert peer.wait(timeout=30) == 0  # finished its round, checkpointed, closed
    stopped = log_of(config, 0)[-1]["round"]
    assert stopped < 50 and load_node_checkpoint(saved).round == stopped

    again = spawn(config, 0, "--startup-timeout", "1")
    wait_for(lambda: log_of(config, 0)[-1]["round"] > stopped, 60, "the resumed round")
    resumed = [line for line in log_of(config, 0) if line["round"] > stopped]
    assert resumed[0]["round"] == stopped + 1 and resumed[0]["rejoined"]
    output = tmp_path / "peer-0-1.log"
    waiting = f"push of round {stopped + 2} to node 1 failed"  # the next round is waiting
    wait_for(lambda: waiting in output.read_text(), 30, "the next round's wait")
    again.send_signal(signal.SIGTERM)  # in the middle of that round...
    wait_for(lambda: "signal again" in output.read_text(), 10, "the first signal's note")
    again.send_signal(signal.SIGTERM)  # ...and again: abandon it
    assert again.wait(timeout=30) == 128 + signal.SIGTERM
    assert load_node_checkpoint(saved).round == log_of(config, 0)[-1]["round"]  # no half round
