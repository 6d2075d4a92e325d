"""`thinwire run` starts whatever runtime `runtime.kind` names, a plugin's included."""

import json
from typing import Literal

import pytest
from star_helpers import tiny_experiment
from typer.testing import CliRunner

import thinwire.runtimes.ddp  # noqa: F401  (registers ddp before a fixture saves the entries)
from thinwire.cli import app
from thinwire.config import ConfigError, Section, parse_config
from thinwire.registry import RUNTIMES
from thinwire.runtimes.run_folder import FinalModel, record_run, run_experiment
from thinwire.runtimes.simulation import simulate

runner = CliRunner()


class EveryOtherRound(Section):
    """A plugin runtime: the simulator, recording only every `keep`-th round."""

    kind: Literal["every_other"] = "every_other"
    keep: int = 2


def run_every_other(section, experiment, options):
    def drive(folder, on_round):
        def kept(record):
            if record["round"] % section.keep == 0:
                on_round(record)

        result = simulate(experiment, on_round=kept)
        (folder / "note.txt").write_text(f"kept every {section.keep}\n")
        return FinalModel(result.model, result.input_shape, result.num_classes)

    return record_run(experiment, options, drive)


@pytest.fixture
def every_other():
    saved = dict(RUNTIMES._entries)
    RUNTIMES.register("every_other", section=EveryOtherRound, factory=run_every_other)
    yield
    RUNTIMES._entries = saved


def test_a_registered_runtime_validates_and_thinwire_run_runs_it(tmp_path, every_other):
    path = tmp_path / "exp.yaml"
    path.write_text(
        "name: plug\ndata: {dataset: digits, clients: 3}\nmodel: {kind: logreg}\n"
        "train: {rounds: 4, local_steps: 2, device: cpu}\n"
        f"runtime: {{kind: every_other, keep: 2}}\noutput: {tmp_path / 'runs'}\n"
    )
    shown = runner.invoke(app, ["validate", str(path)])
    assert shown.exit_code == 0, shown.output
    assert "kind: every_other" in shown.output and "keep: 2" in shown.output
    result = runner.invoke(app, ["run", str(path), "-q"])
    assert result.exit_code == 0, result.output
    [run_dir] = (tmp_path / "runs").iterdir()
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in records] == [2, 4]
    assert (run_dir / "note.txt").read_text() == "kept every 2\n"
    assert (run_dir / "model.pt").is_file()
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "finished"


def test_an_unknown_runtime_names_the_registered_ones():
    with pytest.raises(ConfigError, match="unknown runtime kind 'mpi'; expected one of ddp, "):
        parse_config({"name": "x", "runtime": {"kind": "mpi"}})


@pytest.mark.parametrize(
    ("runtime", "command"),
    [
        ({"kind": "flower"}, "thinwire server"),
        (
            {"kind": "gossip", "run_id": "r", "pattern": "p-{i}:50051", "insecure": True},
            "thinwire peer",
        ),
    ],
)
def test_runtimes_of_several_processes_are_refused_with_the_commands(tmp_path, runtime, command):
    topology = {"kind": "ring"} if runtime["kind"] == "gossip" else {"kind": "star"}
    experiment = tiny_experiment(output=str(tmp_path), runtime=runtime, topology=topology)
    with pytest.raises(ValueError, match=command):
        run_experiment(experiment)
    assert not any(tmp_path.iterdir())  # refused before any run folder


def test_every_built_in_runtime_has_an_entry():
    assert set(RUNTIMES.kinds()) >= {"simulation", "flower", "gossip", "ddp"}
    for kind in RUNTIMES.kinds():
        assert callable(RUNTIMES.factory(kind)), kind
