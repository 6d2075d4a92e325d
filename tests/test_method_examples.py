"""Each method's example experiment runs as shipped, shortened to a few rounds."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from thinwire.cli import app

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

runner = CliRunner()


@pytest.mark.parametrize(
    "example",
    [
        "oktopk.yaml",
        "signsgd_mv.yaml",
        "multiscale_qsgd.yaml",
        "majority_vote.yaml",
        "a2sgd.yaml",
        "powersgd.yaml",
    ],
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


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_the_acp_sgd_hook_example_trains_on_two_ranks():
    # ACP-SGD runs as a DDP hook only (an experiment file refuses it): a user's own script.
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "acp_sgd.py"), "--steps", "30"],
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert [line.split()[0] for line in lines] == ["acp_sgd", "powersgd"]
    acp, power = (int(line.split(", ")[1].split()[0]) for line in lines)
    assert acp < power


def test_powersgd_resumes_from_a_checkpoint_bit_for_bit(tmp_path):
    # The warm-start Q and the residual are client state: a checkpoint carries both.
    args = [
        "--set",
        "train.rounds=4",
        "--set",
        "runtime={kind: simulation, checkpoint_every: 2}",
        "--set",
        f"output={tmp_path}",
        "--set",
        "train.device=cpu",
    ]
    result = runner.invoke(app, ["run", str(EXAMPLES / "powersgd.yaml"), "-q", *args])
    assert result.exit_code == 0, result.output
    [run_dir] = tmp_path.iterdir()
    whole = (run_dir / "metrics.jsonl").read_text().splitlines()
    (run_dir / "metrics.jsonl").write_text("\n".join(whole[:3]) + "\n")  # killed in round 4
    summary = json.loads((run_dir / "summary.json").read_text())
    (run_dir / "summary.json").write_text(json.dumps({**summary, "status": "running"}))
    result = runner.invoke(app, ["run", "--resume", str(run_dir), "-q"])
    assert result.exit_code == 0, result.output

    def untimed(rows):
        return [{k: v for k, v in json.loads(r).items() if not k.endswith("_s")} for r in rows]

    assert untimed((run_dir / "metrics.jsonl").read_text().splitlines()) == untimed(whole)
