"""Checkpoints: one format, atomic, loaded without pickled code, tied to their experiment."""

from __future__ import annotations

import pytest
import torch
from star_helpers import tiny_experiment

from thinwire.checkpoint import (
    VERSION,
    NodeCheckpoint,
    experiment_digest,
    find_checkpoint,
    load_checkpoint,
    load_node_checkpoint,
    node_checkpoint_path,
    round_checkpoint_path,
    save_checkpoint,
    save_node_checkpoint,
)


def test_a_checkpoint_round_trips_tensors_and_scalars(tmp_path):
    path = node_checkpoint_path(tmp_path, 3)
    assert path.name == "node-3.pt"
    state = {"x": torch.arange(4.0), "links/1/current": True, "codec/model/count": 7}
    save_node_checkpoint(path, NodeCheckpoint(3, 12, state), digest="abc")
    loaded = load_node_checkpoint(path, digest="abc")
    assert (loaded.node, loaded.round) == (3, 12)
    assert torch.equal(loaded.state["x"], state["x"])
    assert loaded.state["links/1/current"] is True and loaded.state["codec/model/count"] == 7
    assert list(tmp_path.iterdir()) == [path]  # the temporary file was renamed away


def test_a_newer_checkpoint_replaces_the_older_one(tmp_path):
    path = tmp_path / "node-0.pt"
    for round in (1, 2):
        save_node_checkpoint(path, NodeCheckpoint(0, round, {"x": torch.zeros(1)}), digest="d")
    assert load_node_checkpoint(path).round == 2


def test_a_checkpoint_of_another_experiment_is_refused(tmp_path):
    path = tmp_path / "node-0.pt"
    save_node_checkpoint(path, NodeCheckpoint(0, 1, {"x": torch.zeros(1)}), digest="one")
    with pytest.raises(ValueError, match="written by another experiment"):
        load_node_checkpoint(path, digest="two")


def test_files_that_are_not_checkpoints_are_refused_clearly(tmp_path):
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a torch file")
    with pytest.raises(ValueError, match="not a readable checkpoint"):
        load_node_checkpoint(junk)
    other = tmp_path / "other.pt"
    torch.save({"format": 99}, other)
    with pytest.raises(ValueError, match="not a thinwire checkpoint"):
        load_node_checkpoint(other)


@pytest.mark.parametrize(
    ("contents", "problem"),
    [
        ({"format": "thinwire-checkpoint", "version": 2}, "version 2 is not supported"),
        ({"format": "thinwire-checkpoint", "version": 99}, "version 99 is not supported"),
        ({"format": "thinwire-simulation", "version": 1}, "not a thinwire checkpoint"),
        ({"format": 1, "digest": "d", "node": 0, "round": 1, "state": {}}, "not a thinwire"),
    ],
)
def test_older_and_foreign_files_are_refused_naming_why(tmp_path, contents, problem):
    torch.save(contents, tmp_path / "c.pt")
    with pytest.raises(ValueError, match=problem):
        load_checkpoint(tmp_path / "c.pt", kind="star")


def test_a_checkpoint_of_another_kind_is_refused(tmp_path):
    path = round_checkpoint_path(tmp_path, 1)
    save_checkpoint(path, kind="simulation", name="x", digest="d", round=1, state={})
    with pytest.raises(ValueError, match="holds a 'simulation' state, not a 'star' one"):
        load_checkpoint(path, kind="star")
    saved = load_checkpoint(path, kind="simulation")
    assert (saved.name, saved.digest, saved.round, saved.state) == ("x", "d", 1, {})
    assert torch.load(path, weights_only=True)["version"] == VERSION


def test_a_folder_resumes_from_its_latest_checkpoint(tmp_path):
    for round in (1, 2, 10):
        path = round_checkpoint_path(tmp_path / "run" / "checkpoints", round)
        save_checkpoint(path, kind="star", name="x", digest="d", round=round, state={})
    assert find_checkpoint(tmp_path / "run").name == "round-000010.pt"
    assert find_checkpoint(tmp_path / "run" / "checkpoints").name == "round-000010.pt"
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        find_checkpoint(tmp_path / "elsewhere")


def test_a_checkpoint_is_written_whole_or_not_at_all(tmp_path):
    path = tmp_path / "deep" / "round-000001.pt"
    save_checkpoint(path, kind="star", name="x", digest="d", round=1, state={})
    assert [p.name for p in path.parent.iterdir()] == ["round-000001.pt"]


def test_the_digest_ignores_where_a_node_runs_but_not_what_it_learns():
    config = tiny_experiment()
    moved = config.model_copy(update={"output": "elsewhere"})
    assert experiment_digest(moved) == experiment_digest(config)
    faster = config.model_copy(update={"train": config.train.model_copy(update={"lr": 0.2})})
    assert experiment_digest(faster) != experiment_digest(config)
