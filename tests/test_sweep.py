"""Seeds and grids: one file, many runs, each in its own folder under one sweep folder."""

import json

import pytest
import yaml
from typer.testing import CliRunner

from thinwire.cli import app
from thinwire.config import ConfigError, parse_config, parse_sweep_options, sweep_points
from thinwire.metrics import load_records
from thinwire.runtimes.run_folder import read_status
from thinwire.sweep import run_sweep

BASE = {
    "name": "grid",
    "seed": 0,
    "data": {"dataset": "digits", "clients": 3},
    "model": {"kind": "mlp", "hidden": [16]},
    "train": {
        "rounds": 2,
        "local_steps": 2,
        "device": "cpu",
        "optimizer": {"kind": "sgd", "momentum": 0.9},
    },
    "codec": {"select": {"kind": "topk", "density": 0.05}, "error_feedback": True},
}


def test_points_cover_the_grid_times_the_seeds_and_are_named_by_their_settings():
    points = sweep_points(
        parse_config({**BASE, "seeds": [0, 1, 2], "sweep": {"codec.select.density": [0.1, 0.01]}})
    )
    assert [p.name for p in points] == [
        f"grid-density_{d}-seed_{s}" for d in ("0.1", "0.01") for s in (0, 1, 2)
    ]
    assert [(p.experiment.codec.select.density, p.experiment.seed) for p in points] == [
        (d, s) for d in (0.1, 0.01) for s in (0, 1, 2)
    ]
    assert all(p.experiment.seeds is None and p.experiment.sweep is None for p in points)
    assert points[0].settings == {"codec.select.density": 0.1, "seed": 0}


def test_a_grid_over_kinds_switches_sections_like_set_does():
    points = sweep_points(
        parse_config({**BASE, "sweep": {"train.optimizer.kind": ["sgd", "adam"]}})
    )
    assert [p.experiment.train.optimizer.kind for p in points] == ["sgd", "adam"]
    assert [p.name for p in points] == ["grid-optimizer_sgd-seed_0", "grid-optimizer_adam-seed_0"]


def test_an_invalid_point_is_named_before_anything_runs():
    with pytest.raises(ConfigError) as error:
        sweep_points(parse_config({**BASE, "sweep": {"codec.select.density": [0.1, 3]}}))
    assert "sweep point codec.select.density=3" in str(error.value)
    assert "must be in (0, 1]" in str(error.value)


def test_sweep_needs_the_simulator_and_distinct_seeds():
    with pytest.raises(ConfigError, match="lists a seed twice"):
        parse_config({**BASE, "seeds": [1, 1]})
    with pytest.raises(ConfigError, match="is not a dotted field"):
        parse_config({**BASE, "sweep": {"train..lr": [1]}})


def test_sweep_options_split_values_at_top_level_commas():
    grid = parse_sweep_options(["model.hidden=[64,32],[128]", "train.lr=0.1,0.01"])
    assert grid == {"model.hidden": [[64, 32], [128]], "train.lr": [0.1, 0.01]}
    with pytest.raises(ValueError, match="give values"):
        parse_sweep_options(["train.lr="])


def test_a_failed_point_is_marked_and_the_sweep_goes_on(tmp_path):
    points = sweep_points(parse_config({**BASE, "seeds": [0, 1]}))
    broken = points[0]._replace(
        experiment=points[0].experiment.model_copy(
            update={"data": points[0].experiment.data.model_copy(update={"clients": 5000})}
        )
    )
    folder, outcomes = run_sweep([broken, points[1]], output=tmp_path, name="grid", jobs=1)
    assert [o.status for o in outcomes] == ["failed", "finished"]
    assert read_status(folder / broken.name) == "failed"
    assert len(load_records(folder / points[1].name)) == 2


@pytest.mark.slow
def test_parallel_runs_give_the_records_of_serial_ones(tmp_path):
    points = sweep_points(parse_config({**BASE, "seeds": [0, 1], "sweep": {"train.lr": [0.1]}}))
    serial, _ = run_sweep(points, output=tmp_path / "a", name="grid", jobs=1)
    parallel, outcomes = run_sweep(points, output=tmp_path / "b", name="grid", jobs=2)
    assert [o.status for o in outcomes] == ["finished", "finished"]
    for point in points:
        untimed = [
            [
                {k: v for k, v in r.items() if not k.endswith("_s")}
                for r in load_records(f / point.name)
            ]
            for f in (serial, parallel)
        ]
        assert untimed[0] == untimed[1]
    plan = yaml.safe_load((parallel / "sweep.yaml").read_text())
    assert [p["name"] for p in plan["points"]] == [p.name for p in points]


@pytest.mark.slow
def test_the_command_line_runs_seeds_times_a_grid_and_compares_them(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({**BASE, "output": str(tmp_path / "runs")}))
    result = CliRunner().invoke(
        app,
        [
            "run",
            str(path),
            "--seeds",
            "2",
            "--sweep",
            "codec.select.density=0.1,0.01",
            "--jobs",
            "1",
        ],
    )
    assert result.exit_code == 0, result.output
    [folder] = (tmp_path / "runs").iterdir()
    assert folder.name.startswith("grid-sweep-")
    runs = sorted(p.name for p in folder.iterdir() if p.is_dir())
    assert runs == sorted(f"grid-density_{d}-seed_{s}" for d in ("0.1", "0.01") for s in (0, 1))
    assert "[4/4]" in result.output  # a line per finished point off a terminal
    assert "density=0.1" in result.output and "density=0.01" in result.output
    assert (folder / "compare.png").is_file()
    summary = json.loads((folder / runs[0] / "summary.json").read_text())
    assert summary["status"] == "finished"


def test_set_overrides_name_the_run_unless_a_name_is_given(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({**BASE, "output": str(tmp_path / "runs")}))
    runner = CliRunner()
    where = f"output={tmp_path / 'runs'}"
    assert (
        runner.invoke(
            app, ["run", str(path), "-q", "--set", "train.lr=0.2", "--set", where]
        ).exit_code
        == 0
    )
    assert (
        runner.invoke(
            app, ["run", str(path), "-q", "--set", "train.lr=0.2", "--name", "mine"]
        ).exit_code
        == 0
    )
    names = sorted(p.name.rsplit("-", 2)[0] for p in (tmp_path / "runs").iterdir())
    assert names == ["grid-lr_0.2", "mine"]
