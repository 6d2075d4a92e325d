"""Each method's example experiment runs as shipped, shortened to a few rounds."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from thinwire.cli import app

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

runner = CliRunner()


@pytest.mark.parametrize(
    "example",
    ["oktopk.yaml", "signsgd_mv.yaml", "multiscale_qsgd.yaml", "majority_vote.yaml", "a2sgd.yaml"],
)
def test_the_example_runs_in_simulation(example, tmp_path):
    result = runner.invoke(
        app,
        [
            "run",
            str(EXAMPLES / example),
            "-q",
            "--set",
            "train.rounds=2",
            "--set",
            f"output={tmp_path}",
            "--set",
            "train.device=cpu",
        ],
    )
    assert result.exit_code == 0, result.output
    [run_dir] = tmp_path.iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["rounds"] == 2 and summary["total_bytes_up"] > 0
