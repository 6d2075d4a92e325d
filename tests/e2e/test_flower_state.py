"""Client state on real SuperNodes: kept on their disks, checked, and repaired when mangled.

examples/flower.yaml (3 clients, top-1% with error feedback) for 5 rounds on real Flower
processes (`thinwire client --state-dir`, `thinwire server --start-superlink`). While the run
goes on, a watcher mangles the SuperNodes' state folder as each round finishes: after round
1 it deletes client 0's whole folder, after round 2 one file of client 1's state, after round
3 it truncates client 2's tensors. Each time the client answers `StateLost`, the server logs
and counts it (`state_lost` in the run records) and sends that client the full model and a
fresh start, and the run finishes.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pytest

from thinwire.config import load_config
from thinwire.metrics import load_records
from thinwire.runtimes.flower.state import state_key

from .flower_cluster import EXAMPLE, ROOT, Cluster, free_port, run_server, start_clients

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(420)]

RUN_TIMEOUT_S = 300
OVERRIDES = ["train.rounds=5", "runtime.checkpoint_every=0", "runtime.round_timeout_s=60"]


class Mangled(NamedTuple):
    records: list[dict[str, float]]
    output: str
    returncode: int
    mangled: list[int]  # the rounds after which the watcher mangled a folder


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


MANGLE: dict[int, tuple[int, Callable[[Path], None]]] = {
    1: (0, shutil.rmtree),
    2: (1, lambda folder: (folder / "round-000002" / "manifest.json").unlink()),
    3: (2, lambda folder: _truncate(folder / "round-000003" / "tensors.pt")),
}
"""After round r: (the client whose folder is mangled, how)."""


def _watch(output: Path, state: Path, done: threading.Event, mangled: list[int]) -> None:
    """Mangles a client's state as soon as each round of MANGLE has its record."""
    while not done.is_set():
        found = list(output.glob("*/metrics.jsonl"))
        finished = len(found[0].read_text().splitlines()) if found else 0
        for round, (client, mangle) in MANGLE.items():
            if round <= finished and round not in mangled:
                mangle(state / f"client-{client}")
                mangled.append(round)
        time.sleep(0.02)


@pytest.fixture(scope="module")
def mangled_run(tmp_path_factory: pytest.TempPathFactory) -> Mangled:
    root = tmp_path_factory.mktemp("state")
    output = root / "runs"
    overrides = [f"output={output}", *OVERRIDES]
    experiment = load_config(ROOT / EXAMPLE, overrides)
    state = root / "state"
    cluster = Cluster(root)
    superlink = f"127.0.0.1:{free_port()}"
    done = threading.Event()
    mangled: list[int] = []
    watcher = threading.Thread(
        target=_watch, args=(output, state / state_key(experiment), done, mangled)
    )
    try:
        start_clients(cluster, superlink, state)
        watcher.start()
        finished = run_server(cluster, superlink, overrides, timeout_s=RUN_TIMEOUT_S)
    finally:
        done.set()
        if watcher.is_alive():
            watcher.join(timeout=10)
        cluster.stop()
    (run_dir,) = output.glob("flower-star-*")
    return Mangled(
        load_records(run_dir),
        finished.stdout + finished.stderr,
        finished.returncode,
        mangled,
    )


def test_the_run_finishes_despite_three_mangled_state_folders(mangled_run: Mangled) -> None:
    assert mangled_run.returncode == 0, mangled_run.output
    assert mangled_run.mangled == [1, 2, 3]
    assert [r["round"] for r in mangled_run.records] == [1, 2, 3, 4, 5]


def test_each_lost_state_is_counted_and_no_update_of_it_is_averaged(
    mangled_run: Mangled,
) -> None:
    records = mangled_run.records
    assert [r["state_lost"] for r in records] == [0, 1, 1, 1, 0]
    assert [r["updates_sent"] for r in records] == [3, 2, 2, 2, 3]
    assert [r["dropouts"] for r in records] == [0] * 5
    for round, (client, _) in MANGLE.items():
        logged = f"round {round + 1}: client {client} lost its state, re-synchronizing it"
        assert logged in mangled_run.output
    assert "StateLost: no client 0's state of round 1" in mangled_run.output
    assert "round-000002: manifest.json is missing" in mangled_run.output
    assert "round-000003: tensors.pt has" in mangled_run.output


def test_resynchronized_clients_train_again_from_the_full_model(mangled_run: Mangled) -> None:
    records = mangled_run.records
    assert records[-1]["updates_sent"] == 3  # every re-synchronized client sends again
    assert records[-1]["accuracy"] > records[0]["accuracy"]
