"""Server checkpoints: a round trip restores the server; foreign or mismatched files are refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from thinwire.config import parse_config
from thinwire.learning import load_federation
from thinwire.server import Aggregator
from thinwire.server.checkpoint import (
    checkpoint_path,
    find_checkpoint,
    load_checkpoint,
    save_checkpoint,
)

TOPK_EF = {"scope": "model", "select": {"kind": "topk", "density": 0.1}, "error_feedback": True}


def aggregator(**sections: object) -> Aggregator:
    raw = {
        "name": "ckpt",
        "data": {"clients": 2},
        "model": {"kind": "mlp", "hidden": [8]},
        "train": {"rounds": 5, "device": "cpu", "server": {"momentum": 0.5}},
        "downlink": TOPK_EF,
        **sections,
    }
    experiment = parse_config(raw)
    workspace = load_federation(experiment).workspace
    return Aggregator(experiment=experiment, workspace=workspace, initial=workspace.tensors())


def advanced(server: Aggregator) -> Aggregator:
    """`server` after one round with a made-up average, so momentum and public copy exist."""
    server.broadcast(1, [0, 1])
    state = server.state
    model = {k: v + 0.25 for k, v in state.model.items()}
    momentum = {k: torch.full_like(v, 0.5) for k, v in state.model.items()}
    server.state = state._replace(round=1, model=model, momentum=momentum)
    return server


def test_a_checkpoint_restores_the_server_and_which_round_each_client_is_at(
    tmp_path: Path,
) -> None:
    server = advanced(aggregator())
    stale = {"1": {k: torch.full_like(v, 3.0) for k, v in server.state.model.items()}}
    server.state = server.state._replace(stale=stale, stale_examples={"1": 12.0})
    path = checkpoint_path(tmp_path, 1)
    save_checkpoint(
        path,
        name="ckpt",
        state=server.state,
        cum_bytes_up=10,
        cum_bytes_down=20,
        delivered={0: True, 1: False},
    )
    loaded = load_checkpoint(path, aggregator())
    assert loaded.cum_bytes_up == 10 and loaded.cum_bytes_down == 20
    assert loaded.state.round == 1
    assert loaded.state.received == {"0": 1, "1": 1}  # clients continue from their state
    assert loaded.delivered == {0: True, 1: False}
    assert loaded.state.stale_examples == {"1": 12.0}
    for field in ("model", "momentum", "public"):
        saved, restored = getattr(server.state, field), getattr(loaded.state, field)
        assert saved.keys() == restored.keys()
        assert all(torch.equal(saved[k], restored[k]) for k in saved), field
    assert all(torch.equal(stale["1"][k], loaded.state.stale["1"][k]) for k in stale["1"])
    residual = server.state.downlink["model"].residual
    assert torch.equal(loaded.state.downlink["model"].residual, residual)


def test_a_restored_server_carries_on_like_the_original(tmp_path: Path) -> None:
    server = advanced(aggregator())
    save_checkpoint(
        tmp_path / "c.pt", name="ckpt", state=server.state, cum_bytes_up=0, cum_bytes_down=0
    )
    restored = aggregator()
    restored.state = load_checkpoint(tmp_path / "c.pt", restored).state
    assert server.broadcast(2, [0, 1]) == restored.broadcast(2, [0, 1])  # deltas, as before


def test_a_version_1_checkpoint_restarts_every_client_afresh(tmp_path: Path) -> None:
    server = advanced(aggregator())
    save_checkpoint(
        tmp_path / "c.pt", name="ckpt", state=server.state, cum_bytes_up=0, cum_bytes_down=0
    )
    contents = torch.load(tmp_path / "c.pt", weights_only=True)
    for key in ("received", "stale", "stale_examples", "delivered"):
        del contents[key]
    torch.save({**contents, "version": 1}, tmp_path / "v1.pt")
    loaded = load_checkpoint(tmp_path / "v1.pt", aggregator())
    assert (loaded.state.received, loaded.delivered) == ({}, {})


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("received", {"7": 1}, "received names client '7'"),
        ("received", {"0": 4}, "names rounds after 1"),
        ("delivered", {"0": "yes"}, r"delivered\['0'\] must be a bool"),
        ("stale_examples", [], "stale_examples must be a mapping"),
    ],
)
def test_client_bookkeeping_that_does_not_fit_is_refused(
    tmp_path: Path, field: str, value: object, problem: str
) -> None:
    server = advanced(aggregator())
    save_checkpoint(
        tmp_path / "c.pt", name="ckpt", state=server.state, cum_bytes_up=0, cum_bytes_down=0
    )
    contents = torch.load(tmp_path / "c.pt", weights_only=True)
    torch.save({**contents, field: value}, tmp_path / "bad.pt")
    with pytest.raises(ValueError, match=problem):
        load_checkpoint(tmp_path / "bad.pt", aggregator())


def test_a_folder_resumes_from_its_latest_checkpoint(tmp_path: Path) -> None:
    server = aggregator()
    for round in (1, 2, 10):
        state = server.state._replace(round=round)
        save_checkpoint(
            checkpoint_path(tmp_path / "run" / "checkpoints", round),
            name="ckpt",
            state=state,
            cum_bytes_up=0,
            cum_bytes_down=0,
        )
    assert find_checkpoint(tmp_path / "run").name == "round-000010.pt"
    assert find_checkpoint(tmp_path / "run" / "checkpoints").name == "round-000010.pt"
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        find_checkpoint(tmp_path / "elsewhere")


def test_a_checkpoint_of_another_model_is_refused(tmp_path: Path) -> None:
    small = aggregator()
    save_checkpoint(
        tmp_path / "c.pt", name="ckpt", state=small.state, cum_bytes_up=0, cum_bytes_down=0
    )
    other = aggregator(model={"kind": "mlp", "hidden": [9]})
    with pytest.raises(ValueError, match="does not match"):
        load_checkpoint(tmp_path / "c.pt", other)


def test_a_finished_run_cannot_be_resumed(tmp_path: Path) -> None:
    server = aggregator()
    state = server.state._replace(round=5)
    save_checkpoint(tmp_path / "c.pt", name="ckpt", state=state, cum_bytes_up=0, cum_bytes_down=0)
    with pytest.raises(ValueError, match="leaves nothing to run"):
        load_checkpoint(tmp_path / "c.pt", aggregator())


@pytest.mark.parametrize(
    ("contents", "problem"),
    [
        ({"format": "something-else"}, "not a thinwire checkpoint"),
        ({"format": "thinwire-checkpoint", "version": 99}, "version 99"),
    ],
)
def test_foreign_files_are_refused(tmp_path: Path, contents: dict, problem: str) -> None:
    torch.save(contents, tmp_path / "c.pt")
    with pytest.raises(ValueError, match=problem):
        load_checkpoint(tmp_path / "c.pt", aggregator())
    (tmp_path / "junk.pt").write_bytes(b"not a zip file")
    with pytest.raises(ValueError, match="not a readable checkpoint"):
        load_checkpoint(tmp_path / "junk.pt", aggregator())


def test_a_checkpoint_is_written_whole_or_not_at_all(tmp_path: Path) -> None:
    server = aggregator()
    path = tmp_path / "deep" / "round-000001.pt"
    save_checkpoint(path, name="ckpt", state=server.state, cum_bytes_up=0, cum_bytes_down=0)
    assert [p.name for p in path.parent.iterdir()] == ["round-000001.pt"]
