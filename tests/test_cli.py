"""The `thinwire` command, end to end, as a user runs it."""

import csv
import json
import subprocess
import sys

import pytest
import torch
import yaml
from typer.testing import CliRunner

from thinwire.cli import app

runner = CliRunner()

EXPERIMENT = """\
name: cli-demo
seed: 3
data: {dataset: digits, clients: 3}
model: {kind: mlp, hidden: [16]}
train: {rounds: 2, local_steps: 3, device: cpu}
codec: {select: {kind: topk, density: 0.05}, error_feedback: true}
output: OUT
"""


def write(tmp_path, text=EXPERIMENT):
    path = tmp_path / "exp.yaml"
    path.write_text(text.replace("OUT", str(tmp_path / "runs")))
    return path


def test_run_writes_a_complete_run_folder(tmp_path):
    result = runner.invoke(app, ["run", str(write(tmp_path)), "--quiet"])
    assert result.exit_code == 0, result.output
    [run_dir] = (tmp_path / "runs").iterdir()
    assert run_dir.name.startswith("cli-demo-")
    assert (
        yaml.safe_load((run_dir / "config.yaml").read_text())["codec"]["select"]["density"] == 0.05
    )
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in records] == [1, 2]
    rows = list(csv.DictReader((run_dir / "metrics.csv").open()))
    assert [int(r["round"]) for r in rows] == [1, 2]
    assert int(rows[1]["cum_bytes_up"]) == records[0]["bytes_up"] + records[1]["bytes_up"]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["rounds"] == 2 and summary["total_bytes_up"] == records[-1]["cum_bytes_up"]
    assert (run_dir / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "final accuracy" in result.output and "uplink bytes" in result.output


def test_set_overrides_reach_the_run(tmp_path):
    path = write(tmp_path)
    result = runner.invoke(app, ["run", str(path), "-q", "--set", "train.rounds=1"])
    assert result.exit_code == 0, result.output
    [run_dir] = (tmp_path / "runs").iterdir()
    assert len((run_dir / "metrics.jsonl").read_text().splitlines()) == 1


def test_off_a_terminal_every_round_prints_a_line(tmp_path):
    result = runner.invoke(app, ["run", str(write(tmp_path))])
    assert result.exit_code == 0, result.output
    assert "cli-demo  round 1/2  acc" in result.output
    assert "cli-demo  round 2/2  acc" in result.output


def test_resume_continues_an_interrupted_run_folder(tmp_path):
    path = write(tmp_path)
    args = ["--set", "train.rounds=4", "--set", "runtime={kind: simulation, checkpoint_every: 2}"]
    assert runner.invoke(app, ["run", str(path), "-q", *args]).exit_code == 0
    [run_dir] = (tmp_path / "runs").iterdir()
    whole = (run_dir / "metrics.jsonl").read_text().splitlines()
    # as a run killed during round 4 leaves it: three rounds, status running
    (run_dir / "metrics.jsonl").write_text("\n".join(whole[:3]) + "\n")
    summary = json.loads((run_dir / "summary.json").read_text())
    (run_dir / "summary.json").write_text(json.dumps({**summary, "status": "running"}))
    result = runner.invoke(app, ["run", "--resume", str(run_dir), "-q"])
    assert result.exit_code == 0, result.output
    resumed = (run_dir / "metrics.jsonl").read_text().splitlines()
    untimed = [{k: v for k, v in json.loads(r).items() if not k.endswith("_s")} for r in resumed]
    assert untimed == [
        {k: v for k, v in json.loads(r).items() if not k.endswith("_s")} for r in whole
    ]
    again = runner.invoke(app, ["run", "--resume", str(run_dir)])
    assert again.exit_code == 2 and "nothing to resume" in again.output


def test_validate_prints_the_resolved_config(tmp_path):
    result = runner.invoke(app, ["validate", str(write(tmp_path))])
    assert result.exit_code == 0
    resolved = yaml.safe_load(result.output)
    assert resolved["train"]["batch_size"] == 32  # a default, filled in
    assert resolved["codec"]["error_feedback"] == {"kind": "residual"}


def test_config_errors_exit_2_with_the_dotted_path(tmp_path):
    path = write(tmp_path, EXPERIMENT.replace("density: 0.05", "density: 5"))
    for command in ("run", "validate"):
        result = runner.invoke(app, [command, str(path)])
        assert result.exit_code == 2
        assert "codec.select.density: must be in (0, 1], got 5" in result.output


def test_compare_puts_runs_side_by_side(tmp_path):
    path = write(tmp_path)
    for density in ("0.05", "1.0"):
        assert (
            runner.invoke(
                app, ["run", str(path), "-q", "--set", f"codec.select.density={density}"]
            ).exit_code
            == 0
        )
    runs = sorted(str(p) for p in (tmp_path / "runs").iterdir())
    out = tmp_path / "cmp.png"
    result = runner.invoke(app, ["compare", *runs, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:4] == b"\x89PNG"
    assert "density=0.05" in result.output and "density=1 " in result.output


def test_compare_refuses_a_folder_that_is_not_a_run(tmp_path):
    result = runner.invoke(app, ["compare", str(tmp_path)])
    assert result.exit_code == 2 and "not a thinwire run folder" in result.output


def test_console_script_is_installed():
    out = subprocess.run(
        [sys.executable, "-m", "thinwire", "--help"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0 and "run" in out.stdout


# Each file passes the schema but cannot run on this machine; `validate` must say so as
# `run` does, naming the file and the field. (case, edits of EXPERIMENT, the field named)
CODEC = "codec: {select: {kind: topk, density: 0.05}, error_feedback: true}\n"
UNRUNNABLE = [
    ("infinite-lr", [("local_steps: 3", "local_steps: 3, lr: .inf")], "train.lr"),
    ("too-many-clients", [("clients: 3", "clients: 100000")], "data.clients"),
    (
        "unknown-wavelet",
        [("{select:", "{transform: {kind: wavelet, wavelet: nosuch}, select:")],
        "codec.transform.wavelet",
    ),
    ("missing-data-root", [("digits", "mnist, root: /no/such/folder")], "data.root"),
    ("output-is-a-file", [("output: OUT", "output: OUT/afile")], "output"),
    ("output-under-a-file", [("output: OUT", "output: OUT/afile/runs")], "output"),
    (
        "torus-of-12-for-13",
        [("clients: 3", "clients: 13"), (CODEC, "topology: {kind: torus, rows: 3, cols: 4}\n")],
        "topology",
    ),
    (
        "dgc-over-wavelet",
        [("error_feedback: true", "transform: {kind: wavelet}, error_feedback: {kind: dgc}")],
        "codec",
    ),
    (
        "delta-above-1-over-n",
        [("output: OUT", "privacy: {noise_multiplier: 1.0, delta: 0.01}\noutput: OUT")],
        "privacy.delta",
    ),
]


@pytest.mark.parametrize(
    ("edits", "field"), [c[1:] for c in UNRUNNABLE], ids=[c[0] for c in UNRUNNABLE]
)
def test_validate_refuses_what_run_would_refuse(tmp_path, edits, field):
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "afile").write_text("")
    text = EXPERIMENT
    for old, new in edits:
        assert old in text
        text = text.replace(old, new)
    path = write(tmp_path, text)
    for command in ("validate", "run"):
        result = runner.invoke(app, [command, str(path)])
        assert result.exit_code == 2, (command, result.output)
        assert f"error: {path}: {field}: " in result.output, (command, result.output)
        assert "Traceback" not in result.output
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["afile"]  # nothing started


def test_validate_refuses_cuda_on_a_machine_without_it(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    path = write(tmp_path, EXPERIMENT.replace("device: cpu", "device: cuda"))
    for command in ("validate", "run"):
        result = runner.invoke(app, [command, str(path)])
        assert result.exit_code == 2
        assert f"error: {path}: train.device: device 'cuda' was requested" in result.output


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ("name: a\n".encode("utf-16"), "the file is UTF-16 text; save it as UTF-8"),
        (b"\x89PNG\r\n\x1a\n\x00\x00", "not UTF-8 text (byte 0x89 at offset 0)"),
        (b"name: a\nseed: 1\nseed: 2\n", "key 'seed' is written twice (lines 2 and 3)"),
        (b"name: a\ntrain: {rounds: true}\n", "train.rounds: a boolean (true/false) is not"),
    ],
    ids=["utf-16", "binary", "duplicate-key", "bool-as-int"],
)
def test_unreadable_or_ambiguous_files_get_one_line(tmp_path, data, problem):
    path = tmp_path / "exp.yaml"
    path.write_bytes(data)
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2
    assert f"error: {path}: {problem}" in result.output
    assert "Traceback" not in result.output
