"""thinwire's ServerApp as Flower calls it: `app(grid, context)` with the run config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from flower_local import LocalGrid, set_task_identity
from flwr.app import Context, RecordDict

from thinwire.config import ConfigError, Experiment, parse_config
from thinwire.metrics import load_records
from thinwire.runtimes.flower.server_app import app


def experiment(tmp_path: Path, **runtime: object) -> Experiment:
    return parse_config(
        {
            "name": "app",
            "data": {"clients": 2},
            "model": {"kind": "mlp", "hidden": [8]},
            "train": {"rounds": 2, "local_steps": 3, "device": "cpu"},
            "codec": {"select": {"kind": "topk", "density": 0.1}, "error_feedback": True},
            "runtime": {"kind": "flower", "poll_interval_s": 0.005, **runtime},
            "output": str(tmp_path / "runs"),
        }
    )


def run(exp: Experiment, run_dir: str = "", resume: str = "") -> LocalGrid:
    run_config = {
        "experiment": yaml.safe_dump(exp.model_dump(mode="json")),
        "run-dir": run_dir,
        "resume": resume,
    }
    grid = LocalGrid(run_config, exp.data.clients)
    context = Context(
        run_id=1, node_id=1, node_config={}, state=RecordDict(), run_config=run_config
    )
    app(grid, context)
    return grid


@pytest.fixture(autouse=True)
def task_identity() -> None:
    set_task_identity()


def test_the_server_app_writes_the_run_folder_it_is_given(tmp_path: Path) -> None:
    run_dir = tmp_path / "the-run"
    run(experiment(tmp_path), run_dir=str(run_dir))
    records = load_records(run_dir)
    assert [r["round"] for r in records] == [1, 2]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["total_bytes_up"] == sum(r["bytes_up"] for r in records)
    assert (run_dir / "metrics.csv").is_file() and (run_dir / "curves.png").is_file()
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["runtime"]["kind"] == "flower"


def test_without_a_run_folder_it_makes_one_under_output(tmp_path: Path) -> None:
    run(experiment(tmp_path))
    (folder,) = (tmp_path / "runs").iterdir()
    assert folder.name.startswith("app-")
    assert len(load_records(folder)) == 2


def test_a_resumed_run_starts_after_its_checkpoint(tmp_path: Path) -> None:
    exp = experiment(tmp_path, checkpoint_every=1)
    run(exp, run_dir=str(tmp_path / "first"))
    checkpoint = tmp_path / "first" / "checkpoints" / "round-000001.pt"
    run(exp, run_dir=str(tmp_path / "second"), resume=str(checkpoint))
    assert [r["round"] for r in load_records(tmp_path / "second")] == [2]
    final = torch.load(tmp_path / "second" / "checkpoints" / "round-000002.pt", weights_only=True)
    assert final["round"] == 2


def test_a_bad_run_config_fails_the_run_with_the_field_named(tmp_path: Path) -> None:
    run_config = {"experiment": "name: x\ndata: {clients: 0}\n", "run-dir": "", "resume": ""}
    context = Context(
        run_id=1, node_id=1, node_config={}, state=RecordDict(), run_config=run_config
    )
    with pytest.raises(ConfigError, match="data.clients"):
        app(LocalGrid(run_config, 1), context)
