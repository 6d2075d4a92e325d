"""`preflight`: what a run would refuse before its first round, each named by its field."""

import os
from pathlib import Path

import pytest
import torch

from thinwire.config import ConfigError, load_config, parse_config
from thinwire.preflight import preflight, writable_folder

EXAMPLES = sorted((Path(__file__).parents[1] / "examples").glob("*.yaml"))


def refused(tmp_path: Path, raw: dict) -> list[str]:
    experiment = parse_config({"name": "p", "output": str(tmp_path / "runs"), **raw})
    with pytest.raises(ConfigError) as info:
        preflight(experiment, "exp.yaml")
    assert str(info.value).startswith("exp.yaml: ")
    return info.value.problems


def fields(problems: list[str]) -> list[str]:
    return [p.split(": ", 1)[0] for p in problems]


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_every_example_passes(path, tmp_path):
    experiment = load_config(path, [f"output={tmp_path}", "train.device=cpu"])
    preflight(experiment, str(path))


@pytest.mark.parametrize(
    ("partition", "clients", "says"),
    [
        ({"kind": "iid"}, 1439, "1438 examples cannot give each of 1439 clients one"),
        ({"kind": "dirichlet", "min_examples": 200}, 8, "min_examples=200"),
        ({"kind": "dirichlet", "alpha": 0.001, "min_examples": 100}, 12, "no split in 1000"),
        ({"kind": "shards", "shards": 300}, 5, "cannot fill 5 clients x 300 shards"),
    ],
    ids=["iid", "dirichlet-size", "dirichlet-draws", "shards"],
)
def test_data_that_cannot_be_split_names_data_clients(tmp_path, partition, clients, says):
    [problem] = refused(tmp_path, {"data": {"clients": clients, "partition": partition}})
    assert problem.startswith("data.clients: ") and says in problem


def test_synthetic_data_is_generated_for_its_clients(tmp_path):
    experiment = parse_config(
        {"name": "p", "output": str(tmp_path), "data": {"dataset": "synthetic", "clients": 5}}
    )
    preflight(experiment, "exp.yaml")


def test_a_data_root_must_hold_the_data_set(tmp_path):
    empty = tmp_path / "mnist"
    empty.mkdir()
    [problem] = refused(tmp_path, {"data": {"dataset": "mnist", "root": str(empty)}})
    assert problem.startswith("data.root: ") and "train-images-idx3-ubyte" in problem


@pytest.mark.parametrize(
    ("topology", "clients", "says"),
    [
        ({"kind": "torus", "rows": 3, "cols": 4}, 13, "torus 3 x 4 has 12 nodes"),
        ({"kind": "regular", "degree": 3}, 5, "regular"),
        ({"kind": "ring"}, 2, "ring"),
        ({"kind": "edges", "path": "/no/such/edges.txt"}, 4, "/no/such/edges.txt"),
    ],
    ids=["torus", "odd-regular", "ring-of-2", "missing-edge-file"],
)
def test_a_graph_that_cannot_have_the_clients_names_topology(tmp_path, topology, clients, says):
    problems = refused(tmp_path, {"data": {"clients": clients}, "topology": topology})
    assert fields(problems) == ["topology"] and says in problems[0]


@pytest.mark.parametrize("section", ["codec", "downlink"])
def test_a_codec_that_refuses_its_settings_names_its_section(tmp_path, section):
    dgc_over_wavelet = {
        "transform": {"kind": "wavelet"},
        "select": {"kind": "topk", "density": 0.1},
        "error_feedback": {"kind": "dgc"},
    }
    [problem] = refused(tmp_path, {section: dgc_over_wavelet})
    assert problem.startswith(f"{section}: with_dgc masks momentum")


def test_delta_is_checked_against_every_client_size(tmp_path):
    raw = {
        "data": {"clients": 20, "partition": {"kind": "dirichlet", "alpha": 0.3}},
        "privacy": {"noise_multiplier": 1.0, "delta": 0.02},
    }
    [problem] = refused(tmp_path, raw)
    assert problem.startswith("privacy.delta: privacy.delta = 0.02 must be below 1/N")


@pytest.mark.skipif(torch.cuda.device_count() > 7, reason="this machine has a cuda:7")
def test_a_device_must_be_present(tmp_path):
    [problem] = refused(tmp_path, {"train": {"device": "cuda:7"}})
    assert problem.startswith("train.device: ")


def test_every_problem_is_reported_at_once(tmp_path):
    (tmp_path / "taken").write_text("")
    raw = {
        "output": str(tmp_path / "taken"),
        "data": {"clients": 13},
        "topology": {"kind": "torus", "rows": 3, "cols": 4},
        "train": {"device": "cuda:7"},
    }
    device = [] if torch.cuda.device_count() > 7 else ["train.device"]
    assert fields(refused(tmp_path, raw)) == ["output", *device, "topology"]


def test_writable_folder_accepts_a_folder_yet_to_be_made(tmp_path):
    assert writable_folder(tmp_path / "a" / "b") is None
    assert writable_folder(tmp_path) is None


def test_writable_folder_refuses_a_file_on_the_way(tmp_path):
    (tmp_path / "f").write_text("")
    assert writable_folder(tmp_path / "f") == f"{tmp_path / 'f'} is a file, not a folder"
    assert writable_folder(tmp_path / "f" / "runs") == (
        f"{tmp_path / 'f'} is a file, not a folder (in {tmp_path / 'f' / 'runs'})"
    )


def test_writable_folder_refuses_a_read_only_folder(tmp_path, monkeypatch):
    # Root may write anywhere, so the permission answer is what the check must follow.
    monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != tmp_path)
    assert writable_folder(tmp_path / "runs") == (
        f"the folder {tmp_path} is not writable (for {tmp_path / 'runs'})"
    )
