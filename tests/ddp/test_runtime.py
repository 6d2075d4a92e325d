"""The ddp runtime: the simulator's experiment on gloo ranks, the command, a dying rank."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from thinwire.config import parse_config
from thinwire.metrics import load_records
from thinwire.runtimes.simulation import simulate

from .ranks import results, run_ranks
from .workers import runtime_rank

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(400)]


def experiment_raw(tmp: Path, **train) -> dict:
    return {
        "name": "ddp-equal",
        "seed": 11,
        "data": {"dataset": "digits", "clients": 3},
        "model": {"kind": "mlp", "hidden": [24]},
        "train": {"rounds": 3, "local_steps": 1, "batch_size": 24, "lr": 0.2, "device": "cpu"}
        | train,
        "codec": {"select": {"kind": "topk", "density": 0.05}, "error_feedback": True},
        "runtime": {"kind": "ddp", "timeout_s": 30},
        "output": str(tmp / "runs"),
    }


@pytest.mark.parametrize(
    "codec, local_steps",
    [
        ({"select": {"kind": "topk", "density": 0.05}, "error_feedback": True}, 1),
        ({"select": {"kind": "random_k", "density": 0.1}, "quantize": {"kind": "fp16"}}, 3),
    ],
    ids=["sync-sgd-topk-ef", "local-sgd-randomk-fp16"],
)
def test_ddp_ranks_reproduce_the_simulator_bytes_and_model(codec, local_steps, tmp_path):
    raw = experiment_raw(tmp_path, local_steps=local_steps) | {"codec": codec}
    simulated = simulate(parse_config(raw | {"runtime": {"kind": "simulation"}}))

    outcomes = run_ranks(runtime_rank, 3, raw, str(tmp_path / "run"), tmp=tmp_path / "ranks")
    ranks = results(outcomes)

    records = ranks[0]["records"]
    assert [r["bytes_up"] for r in records] == [r["bytes_up"] for r in simulated.records]
    assert [r["accuracy"] for r in records] == [r["accuracy"] for r in simulated.records]
    for rank in ranks:
        assert rank["model"].keys() == simulated.model.keys()
        for name, tensor in simulated.model.items():
            assert torch.equal(rank["model"][name], tensor), name  # same decode, same order
    assert ranks[1]["records"] == [] and ranks[2]["records"] == []
    assert load_records(tmp_path / "run") == records


def _thinwire(*args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "thinwire", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


def test_thinwire_ddp_writes_the_run_folder_of_a_simulation_file(tmp_path):
    raw = experiment_raw(tmp_path) | {"runtime": {"kind": "simulation"}}
    config = tmp_path / "exp.yaml"
    config.write_text(yaml.safe_dump(raw))
    proc = _thinwire("ddp", str(config), "--nproc", "3")
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err
    (run,) = (tmp_path / "runs").iterdir()
    assert {p.name for p in run.iterdir()} >= {
        "config.yaml",
        "metrics.jsonl",
        "metrics.csv",
        "summary.json",
        "curves.png",
    }
    assert yaml.safe_load((run / "config.yaml").read_text())["runtime"]["kind"] == "ddp"
    assert len(load_records(run)) == 3
    assert "uplink bytes" in out


def test_thinwire_ddp_refuses_a_rank_count_that_is_not_the_client_count(tmp_path):
    config = tmp_path / "exp.yaml"
    config.write_text(yaml.safe_dump(experiment_raw(tmp_path)))
    proc = _thinwire("ddp", str(config), "--nproc", "2")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert "one rank per client" in err and "data.clients is 3" in err


def _rank_pids(parent: int) -> list[int]:
    children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
    return [
        int(pid)
        for pid in children
        if "spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    ]


def test_a_killed_rank_stops_the_run_with_a_clear_error(tmp_path):
    raw = experiment_raw(tmp_path, rounds=2000)
    config = tmp_path / "exp.yaml"
    config.write_text(yaml.safe_dump(raw))
    proc = _thinwire("ddp", str(config), "--nproc", "3")
    try:
        deadline = time.monotonic() + 150
        metrics = None
        while time.monotonic() < deadline and proc.poll() is None:
            found = list((tmp_path / "runs").glob("*/metrics.jsonl"))
            if found and found[0].read_text().count("\n") >= 2:
                metrics = found[0]
                break
            time.sleep(0.2)
        assert metrics is not None, proc.communicate(timeout=5)
        victims = _rank_pids(proc.pid)
        assert len(victims) == 3
        killed_at = time.monotonic()
        os.kill(victims[1], signal.SIGKILL)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1
    assert "rank" in err and ("died" in err or "failed" in err), err
    assert time.monotonic() - killed_at < 45
    assert not any(Path(f"/proc/{pid}").exists() for pid in victims)


def test_thinwire_run_of_a_ddp_file_launches_one_rank_per_client(tmp_path):
    config = tmp_path / "exp.yaml"
    config.write_text(yaml.safe_dump(experiment_raw(tmp_path)))
    proc = _thinwire("run", str(config), "-q")
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err
    (run,) = (tmp_path / "runs").iterdir()
    assert yaml.safe_load((run / "config.yaml").read_text())["runtime"]["kind"] == "ddp"
    assert len(load_records(run)) == 3
    assert "uplink bytes" in out
