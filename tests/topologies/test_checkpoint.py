"""Checkpoints: atomic, loaded without pickled code, and tied to their experiment."""

from __future__ import annotations

import pytest
import torch

from thinwire.topologies.checkpoint import (
    Checkpoint,
    checkpoint_path,
    experiment_digest,
    load_checkpoint,
    save_checkpoint,
)

from .gossip_support import experiment


def test_a_checkpoint_round_trips_tensors_and_scalars(tmp_path):
    path = checkpoint_path(tmp_path, 3)
    assert path.name == "node-3.pt"
    state = {"x": torch.arange(4.0), "links/1/current": True, "codec/model/count": 7}
    save_checkpoint(path, Checkpoint(3, 12, state), digest="abc")
    loaded = load_checkpoint(path, digest="abc")
    assert (loaded.node, loaded.round) == (3, 12)
    assert torch.equal(loaded.state["x"], state["x"])
    assert loaded.state["links/1/current"] is True and loaded.state["codec/model/count"] == 7
    assert list(tmp_path.iterdir()) == [path]  # the temporary file was renamed away


def test_a_newer_checkpoint_replaces_the_older_one(tmp_path):
    path = tmp_path / "node-0.pt"
    for round in (1, 2):
        save_checkpoint(path, Checkpoint(0, round, {"x": torch.zeros(1)}), digest="d")
    assert load_checkpoint(path).round == 2


def test_a_checkpoint_of_another_experiment_is_refused(tmp_path):
    path = tmp_path / "node-0.pt"
    save_checkpoint(path, Checkpoint(0, 1, {"x": torch.zeros(1)}), digest="one")
    with pytest.raises(ValueError, match="written by another experiment"):
        load_checkpoint(path, digest="two")


def test_files_that_are_not_checkpoints_are_refused_clearly(tmp_path):
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a torch file")
    with pytest.raises(ValueError, match="not a readable checkpoint"):
        load_checkpoint(junk)
    other = tmp_path / "other.pt"
    torch.save({"format": 99}, other)
    with pytest.raises(ValueError, match="not a thinwire gossip checkpoint"):
        load_checkpoint(other)


def test_the_digest_ignores_where_a_node_runs_but_not_what_it_learns():
    config = experiment()
    moved = config.model_copy(update={"output": "elsewhere"})
    assert experiment_digest(moved) == experiment_digest(config)
    faster = config.model_copy(update={"train": config.train.model_copy(update={"lr": 0.2})})
    assert experiment_digest(faster) != experiment_digest(config)
