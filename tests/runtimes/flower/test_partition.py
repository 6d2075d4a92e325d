"""The node-local cache of a client's partition: used when intact, rebuilt when not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import thinwire.runtimes.flower.partition as cache
from thinwire.config import Experiment, LogisticRegression, parse_config
from thinwire.learning import load_federation
from thinwire.runtimes.flower.partition import data_digest, load_partition, partition_folder


@pytest.fixture
def exp() -> Experiment:
    return parse_config(
        {
            "name": "p",
            "seed": 3,
            "data": {"clients": 4, "partition": {"kind": "dirichlet", "alpha": 0.5}},
            "model": {"kind": "mlp", "hidden": [8]},
        }
    )


def forbid_rebuilding(monkeypatch: pytest.MonkeyPatch) -> None:
    """Makes any attempt to load the data set fail, so only the cache can answer."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the data set was loaded although the cache is intact")

    monkeypatch.setattr(cache, "load_dataset", refuse)


def test_a_cached_partition_equals_the_federations_and_is_read_without_the_data_set(
    exp: Experiment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    federation = load_federation(exp)
    built = [load_partition(tmp_path, exp, p) for p in range(4)]
    forbid_rebuilding(monkeypatch)
    for p in range(4):
        x, y = federation.client_data(p)
        for got in (built[p], load_partition(tmp_path, exp, p)):
            assert torch.equal(got.x, x) and torch.equal(got.y, y)
            assert got.input_shape == federation.dataset.input_shape
            assert got.num_classes == federation.dataset.num_classes


def test_the_cache_is_keyed_by_the_data_section_the_seed_and_the_partition(
    exp: Experiment, tmp_path: Path
) -> None:
    other_clients = exp.model_copy(
        update={"data": exp.data.model_copy(update={"clients": 5})}, deep=True
    )
    other_seed = exp.model_copy(update={"seed": 4})
    other_model = exp.model_copy(update={"model": LogisticRegression()})
    assert len({data_digest(e) for e in (exp, other_clients, other_seed)}) == 3
    assert data_digest(other_model) == data_digest(exp)  # the model does not change the data
    assert partition_folder(tmp_path, exp, 0) != partition_folder(tmp_path, exp, 1)


def damage_truncate(folder: Path) -> None:
    path = folder / "tensors.pt"
    path.write_bytes(path.read_bytes()[:-100])


def damage_flip(folder: Path) -> None:
    path = folder / "tensors.pt"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def damage_delete_tensors(folder: Path) -> None:
    (folder / "tensors.pt").unlink()


def damage_delete_manifest(folder: Path) -> None:
    (folder / "manifest.json").unlink()


def damage_edit_manifest(folder: Path) -> None:
    path = folder / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["num_classes"] = 3
    path.write_text(json.dumps(manifest))


def damage_other_partition(folder: Path) -> None:
    # a whole, valid cache of partition 0 put where partition 1's belongs
    sibling = folder.with_name("client-0")
    for name in ("tensors.pt", "manifest.json"):
        (folder / name).write_bytes((sibling / name).read_bytes())


@pytest.mark.parametrize(
    "damage",
    [
        damage_truncate,
        damage_flip,
        damage_delete_tensors,
        damage_delete_manifest,
        damage_edit_manifest,
        damage_other_partition,
    ],
)
def test_a_damaged_cache_is_rebuilt_never_trusted(
    exp: Experiment,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    damage: object,
) -> None:
    load_partition(tmp_path, exp, 0)
    want = load_partition(tmp_path, exp, 1)
    folder = partition_folder(tmp_path, exp, 1)
    assert callable(damage)
    damage(folder)
    got = load_partition(tmp_path, exp, 1)
    assert torch.equal(got.x, want.x) and torch.equal(got.y, want.y)
    assert got.num_classes == want.num_classes
    assert f"rebuilding the cached partition in {folder}" in caplog.text
    forbid_rebuilding(monkeypatch)  # and the rebuilt cache is whole again
    again = load_partition(tmp_path, exp, 1)
    assert torch.equal(again.x, want.x) and torch.equal(again.y, want.y)


def test_a_cache_that_cannot_be_written_leaves_the_partition_served(
    exp: Experiment, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "partitions").write_text("a file where the cache folder should be")
    x, y = load_federation(exp).client_data(2)
    got = load_partition(tmp_path, exp, 2)
    assert torch.equal(got.x, x) and torch.equal(got.y, y)
    assert "cannot cache client 2's partition" in caplog.text
