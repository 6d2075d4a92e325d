"""The star on real Flower processes (SuperLink, SuperExec, SuperNodes) on 127.0.0.1.

Three runs of examples/flower.yaml (3 digits clients, top-1% updates with error feedback):

- a clean run, started exactly as docker-compose.yml starts it (`thinwire client`,
  `thinwire server`, a process-isolated SuperLink with its own SuperExec), compared with the
  simulator on the same seeded config;
- a faulty run, started with Flower's own commands only (`flower-superlink`,
  `flower-supernode`, `flwr run` on the folder `thinwire server --write-app` writes), in
  which client 0 mangles every update it sends and client 2's SuperNode is killed in round 2;
- a censored run (CSGD, `policy: censor`) submitted by `thinwire server --start-superlink`,
  in which whole rounds pass without an update on the wire.

Each run is one module fixture (a Flower round costs seconds: the SuperNode polls every 3 s
and starts a fresh process per message) that stops its processes before the tests read
the run folder it left. Every process runs in its own process group and is killed in
`finally`; `Cluster.stop` fails if any process of the run survives.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import NamedTuple

import pytest
import torch

from thinwire.config import Experiment, load_config
from thinwire.learning import evaluate, load_federation
from thinwire.metrics import load_records
from thinwire.runtimes.simulation import SimulationResult, simulate

from .flower_cluster import (
    EXAMPLE,
    ROOT,
    Cluster,
    client_command,
    free_port,
    service_commands,
    start_local_federation,
    write_app_with_client,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420)]

RUN_TIMEOUT_S = 240


class Run(NamedTuple):
    """What a finished Flower run left behind."""

    experiment: Experiment
    run_dir: Path
    output: str  # what the submitting command printed
    returncode: int


def _run_dir(output: Path) -> Path:
    found = sorted(output.glob("flower-star-*"))
    assert len(found) == 1, f"expected one run folder in {output}, found {found}"
    return found[0]


def _wait_for_records(run_output: Path, count: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while time.monotonic() < deadline and process.poll() is None:
        folders = list(run_output.glob("flower-star-*/metrics.jsonl"))
        if folders and len(folders[0].read_text().splitlines()) >= count:
            return
        time.sleep(0.2)
    raise AssertionError(f"the run did not finish round {count}")


def _wait_for_end(run_output: Path) -> dict:
    """The run's summary once the ServerApp has ended the run (bounded by RUN_TIMEOUT_S).

    `flwr run --stream` returns when the SuperLink ends the log stream, which can be before
    the ServerApp has written its last round; what the tests read is what the ServerApp did.
    """
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while True:
        folders = list(run_output.glob("flower-star-*/summary.json"))
        summary = json.loads(folders[0].read_text()) if folders else {}
        if summary.get("status", "running") != "running" or time.monotonic() > deadline:
            return summary
        time.sleep(0.5)


def _submit(command: list[str], cluster: Cluster) -> subprocess.CompletedProcess[str]:
    """Runs a submitting command to its end (bounded by RUN_TIMEOUT_S), capturing its output."""
    return subprocess.run(
        command, cwd=ROOT, env=cluster.env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S
    )


def _simulate(experiment: Experiment) -> SimulationResult:
    """The simulator on one thread, as the Flower processes ran (OMP_NUM_THREADS=1)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return simulate(experiment)
    finally:
        torch.set_num_threads(threads)


# --------------------------------------------------------------------------- clean run


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    root = tmp_path_factory.mktemp("clean")
    output = root / "runs"
    cluster = Cluster(root)
    superlink = f"127.0.0.1:{free_port()}"
    commands = service_commands(
        host="127.0.0.1",
        superlink=superlink,
        node_ports=[free_port() for _ in range(3)],
        state_dir=root / "state",
    )
    submit = [*commands.pop("submit"), "--set", f"output={output}"]
    try:
        for name, command in commands.items():
            cluster.start(name, command)
        cluster.wait_healthy(int(superlink.rpartition(":")[2]))
        done = _submit(submit, cluster)
    finally:
        cluster.stop()
    experiment = load_config(ROOT / EXAMPLE, [f"output={output}"])
    return Run(experiment, _run_dir(output), done.stdout + done.stderr, done.returncode)


@pytest.fixture(scope="module")
def simulated(clean_run: Run) -> SimulationResult:
    return _simulate(clean_run.experiment)


def test_the_clean_run_finishes_and_prints_its_summary(clean_run: Run) -> None:
    assert clean_run.returncode == 0, clean_run.output
    assert "round 3/3" in clean_run.output  # the ServerApp's log, streamed by flwr run
    assert "final accuracy" in clean_run.output
    for name in ("config.yaml", "metrics.jsonl", "metrics.csv", "summary.json", "curves.png"):
        assert (clean_run.run_dir / name).is_file(), name


def test_accuracy_improves_over_the_initial_model(clean_run: Run) -> None:
    federation = load_federation(clean_run.experiment)
    initial = evaluate(federation.workspace.model, *federation.test_data()).accuracy
    records = load_records(clean_run.run_dir)
    assert [r["round"] for r in records] == [1, 2, 3]
    assert records[-1]["accuracy"] > initial + 0.2
    assert records[-1]["accuracy"] >= records[0]["accuracy"]


def test_uplink_bytes_are_the_serialized_update_sizes(
    clean_run: Run, simulated: SimulationResult
) -> None:
    records = load_records(clean_run.run_dir)
    for flower, sim in zip(records, simulated.records, strict=True):
        assert flower["updates_sent"] == 3
        assert flower["bytes_up"] == sim["bytes_up"]
        assert flower["bytes_down"] == sim["bytes_down"]
    model = load_federation(clean_run.experiment).workspace.model
    dense = 3 * 4 * sum(p.numel() for p in model.parameters())
    assert 0 < records[0]["bytes_up"] < 0.05 * dense  # top-1%: far below dense fp32


def test_the_final_model_equals_the_simulators_bit_for_bit(
    clean_run: Run, simulated: SimulationResult
) -> None:
    checkpoint = torch.load(
        clean_run.run_dir / "checkpoints" / "round-000003.pt", weights_only=True
    )
    assert checkpoint["round"] == 3
    assert set(checkpoint["state"]["model"]) == set(simulated.model)
    for name, tensor in simulated.model.items():
        assert torch.equal(checkpoint["state"]["model"][name], tensor.cpu()), name
    records = load_records(clean_run.run_dir)
    assert [r["accuracy"] for r in records] == [r["accuracy"] for r in simulated.records]


# --------------------------------------------------------------------------- faulty run

CORRUPTING_CLIENT = '''\
"""thinwire's ClientApp with a mod: partition 0 flips every bit of the updates it sends."""

from flwr.app import Array, ArrayRecord
from flwr.clientapp import ClientApp

from thinwire.runtimes.flower import client_app


def flip_update_bytes(message, context, call_next):
    reply = call_next(message, context)
    if context.node_config["partition-id"] == 0 and "update" in reply.content:
        data = bytes(b ^ 0xFF for b in reply.content["update"]["update"].data)
        array = Array(dtype="uint8", shape=(len(data),), stype="thinwire/update", data=data)
        reply.content["update"] = ArrayRecord({"update": array})
    return reply


app = ClientApp()
app.query()(client_app.identify)
app.train(mods=[flip_update_bytes])(client_app.train)
app.evaluate()(client_app.evaluate)
'''


@pytest.fixture(scope="module")
def faulty_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    root = tmp_path_factory.mktemp("faulty")
    output = root / "runs"
    app = root / "app"
    cluster = Cluster(root)
    port = free_port()
    overrides = [f"output={output}", "runtime.round_timeout_s=30", "runtime.checkpoint_every=0"]
    write_app_with_client(
        cluster, app, overrides, module="corrupting_client", source=CORRUPTING_CLIENT
    )
    try:
        start_local_federation(cluster, port)
        flwr = cluster.start("flwr-run", ["flwr", "run", str(app), "local", "--stream"])
        _wait_for_records(output, 1, flwr)
        cluster.kill("supernode-2")  # round 2 has just been sent out
        flwr.wait(timeout=RUN_TIMEOUT_S)
        summary = _wait_for_end(output)
    finally:
        cluster.stop()
    experiment = load_config(ROOT / EXAMPLE, overrides)
    # The ServerApp's own log, should the run have failed: Flower's stream may stop short.
    output_text = cluster.log("flwr-run") + f"\nsummary: {summary}\n" + cluster.log("superlink")
    return Run(experiment, _run_dir(output), output_text, flwr.returncode)


def test_flowers_own_commands_run_the_written_app(faulty_run: Run) -> None:
    assert faulty_run.returncode == 0, faulty_run.output
    summary = json.loads((faulty_run.run_dir / "summary.json").read_text())
    assert summary["status"] == "finished", faulty_run.output[-6000:]
    assert summary["rounds"] == 3


def test_a_corrupted_update_is_logged_dropped_and_the_run_goes_on(faulty_run: Run) -> None:
    assert "client 0: update dropped: WireError: not an Update message" in faulty_run.output
    records = load_records(faulty_run.run_dir)
    assert [r["rejected"] for r in records] == [1, 1, 1]
    assert records[0]["updates_sent"] == 3  # sent, and counted in bytes, but not averaged


def test_a_killed_supernode_costs_its_update_not_the_run(faulty_run: Run) -> None:
    records = load_records(faulty_run.run_dir)
    assert [r["round"] for r in records] == [1, 2, 3]
    assert (records[1]["participants"], records[1]["dropouts"]) == (3, 1)
    assert (records[2]["participants"], records[2]["dropouts"]) == (2, 0)
    # No reply by the deadline; the SuperLink may answer first that the message expired.
    assert "client 2 dropped out" in faulty_run.output


# --------------------------------------------------------------------------- censored run

CENSORING = [
    "policy={kind: censor, threshold: {kind: constant, tau: 3.0}}",
    "train.rounds=4",
    "runtime.checkpoint_every=0",
]
"""With tau = 3 the clients send in rounds 1 and 4 (two of three) and stay silent between."""


@pytest.fixture(scope="module")
def censored_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    root = tmp_path_factory.mktemp("censored")
    output = root / "runs"
    cluster = Cluster(root)
    superlink = f"127.0.0.1:{free_port()}"
    overrides = [f"output={output}", *CENSORING]
    try:
        for i in range(3):
            cluster.start(
                f"supernode-{i}", client_command(superlink, i, 3, free_port(), None, root / "state")
            )
        server = ["thinwire", "server", EXAMPLE, "--superlink", superlink, "--insecure"]
        sets = [arg for override in overrides for arg in ("--set", override)]
        done = _submit([*server, "--start-superlink", *sets], cluster)
    finally:
        cluster.stop()
    experiment = load_config(ROOT / EXAMPLE, overrides)
    return Run(experiment, _run_dir(output), done.stdout + done.stderr, done.returncode)


def test_censored_rounds_send_no_update_bytes(censored_run: Run) -> None:
    assert censored_run.returncode == 0, censored_run.output
    records = load_records(censored_run.run_dir)
    simulated = _simulate(censored_run.experiment).records
    assert [r["censored"] for r in records] == [0, 3, 3, 1]
    for flower, sim in zip(records, simulated, strict=True):
        assert flower["updates_sent"] + flower["censored"] == 3
        assert flower["reused"] == flower["censored"]  # the server averages their last update
        for key in ("bytes_up", "updates_sent", "censored", "accuracy"):
            assert flower[key] == sim[key], key
    assert [r["bytes_up"] for r in records][1:3] == [0, 0]
