"""The star at a GPU client's model size, on real processes, equals the simulator bit for bit.

examples/flower.yaml with a 10.5M-parameter MLP (digits, one hidden layer of 140,000 units),
3 clients, 3 rounds, top-1% with error feedback on the uplink and on the downlink. Each
client's state (residual and model copy, 42 MB each) lives in its SuperNode's state folder
between rounds. The first round, in which every ClientApp process starts cold, gets its own
longer deadline (`runtime.first_round_timeout_s`), so a busy machine slows the run down
rather than failing it. Every round's accuracy, loss and bytes up and down must equal the
simulator's.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import pytest
import torch

from thinwire.config import Experiment, load_config
from thinwire.learning import load_federation
from thinwire.metrics import load_records
from thinwire.runtimes.simulation import simulate

from .flower_cluster import EXAMPLE, ROOT, Cluster, free_port, run_server, start_clients

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(900)]

RUN_TIMEOUT_S = 840
HIDDEN = 140_000
OVERRIDES = [
    f"model.hidden=[{HIDDEN}]",
    "train.rounds=3",
    "train.local_steps=5",
    "train.device=cpu",
    "downlink={scope: model, select: {kind: topk, density: 0.01}, error_feedback: true}",
    "runtime.checkpoint_every=0",
    "runtime.round_timeout_s=240",
    "runtime.first_round_timeout_s=480",
]


class ScaledRun(NamedTuple):
    experiment: Experiment
    run_dir: Path
    output: str
    returncode: int
    client_logs: list[str]


@pytest.fixture(scope="module")
def scaled_run(tmp_path_factory: pytest.TempPathFactory) -> ScaledRun:
    root = tmp_path_factory.mktemp("scale")
    output = root / "runs"
    overrides = [f"output={output}", *OVERRIDES]
    cluster = Cluster(root)
    superlink = f"127.0.0.1:{free_port()}"
    try:
        start_clients(cluster, superlink, root / "state")
        done = run_server(cluster, superlink, overrides, timeout_s=RUN_TIMEOUT_S)
    finally:
        cluster.stop()
    (run_dir,) = output.glob("flower-star-*")
    experiment = load_config(ROOT / EXAMPLE, overrides)
    logs = [cluster.log(f"supernode-{i}") for i in range(3)]
    return ScaledRun(experiment, run_dir, done.stdout + done.stderr, done.returncode, logs)


def test_the_model_has_at_least_ten_million_parameters(scaled_run: ScaledRun) -> None:
    model = load_federation(scaled_run.experiment).workspace.model
    assert sum(p.numel() for p in model.parameters()) >= 10_000_000


def test_every_round_equals_the_simulators_bit_for_bit(scaled_run: ScaledRun) -> None:
    assert scaled_run.returncode == 0, scaled_run.output[-5000:]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the Flower processes ran (OMP_NUM_THREADS=1)
    try:
        simulated = simulate(scaled_run.experiment).records
    finally:
        torch.set_num_threads(threads)
    records = load_records(scaled_run.run_dir)
    assert [r["round"] for r in records] == [1, 2, 3]
    for got, want in zip(records, simulated, strict=True):
        for key in ("accuracy", "loss", "bytes_up", "bytes_down", "updates_sent"):
            assert got[key] == want[key], (got["round"], key)
        assert (got["state_lost"], got["dropouts"]) == (0, 0)
    assert records[1]["bytes_down"] < records[0]["bytes_down"] / 20  # top-1% deltas after


def test_one_long_lived_process_per_node_answered_every_train_message(
    scaled_run: ScaledRun,
) -> None:
    for log in scaled_run.client_logs:
        assert log.count("running the ClientApp messages of the SuperNode") == 1, log[-3000:]
        assert log.count("train message of run") == 3, log[-3000:]  # one per round
        assert ": failed in" not in log, log[-3000:]
