"""The star server's checkpoint: a round trip restores the server; mismatched files are refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from thinwire.checkpoint import round_checkpoint_path, save_checkpoint
from thinwire.config import parse_config
from thinwire.learning import load_federation
from thinwire.runtimes.star import StarCheckpoint, load_star_checkpoint, save_star_checkpoint
from thinwire.server import Aggregator, AggregatorState

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


def save(
    path: Path,
    state: AggregatorState,
    delivered: dict[int, bool] | None = None,
    up: int = 0,
    down: int = 0,
) -> None:
    experiment = aggregator().experiment
    checkpoint = StarCheckpoint(state, delivered or {}, up, down)
    save_star_checkpoint(path, experiment=experiment, checkpoint=checkpoint)


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
    path = round_checkpoint_path(tmp_path, 1)
    save(path, server.state, {0: True, 1: False}, up=10, down=20)
    loaded = load_star_checkpoint(path, aggregator())
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
    save(tmp_path / "c.pt", server.state)
    restored = aggregator()
    restored.state = load_star_checkpoint(tmp_path / "c.pt", restored).state
    assert server.broadcast(2, [0, 1]) == restored.broadcast(2, [0, 1])  # deltas, as before


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
    save(tmp_path / "c.pt", server.state)
    contents = torch.load(tmp_path / "c.pt", weights_only=True)
    contents["state"][field] = value
    torch.save(contents, tmp_path / "bad.pt")
    with pytest.raises(ValueError, match=problem):
        load_star_checkpoint(tmp_path / "bad.pt", aggregator())


def test_a_run_folder_resumes_from_its_latest_checkpoint(tmp_path: Path) -> None:
    server = aggregator()
    for round in (1, 2):
        path = round_checkpoint_path(tmp_path / "run" / "checkpoints", round)
        save(path, server.state._replace(round=round))
    assert load_star_checkpoint(tmp_path / "run", aggregator()).state.round == 2


def test_a_checkpoint_of_another_model_is_refused(tmp_path: Path) -> None:
    small = aggregator()
    save(tmp_path / "c.pt", small.state)
    other = aggregator(model={"kind": "mlp", "hidden": [9]})
    with pytest.raises(ValueError, match="does not match"):
        load_star_checkpoint(tmp_path / "c.pt", other)


def test_a_finished_run_cannot_be_resumed(tmp_path: Path) -> None:
    server = aggregator()
    state = server.state._replace(round=5)
    save(tmp_path / "c.pt", state)
    with pytest.raises(ValueError, match="leaves nothing to run"):
        load_star_checkpoint(tmp_path / "c.pt", aggregator())


def test_a_simulators_checkpoint_is_not_a_servers(tmp_path: Path) -> None:
    save_checkpoint(tmp_path / "c.pt", kind="simulation", name="ckpt", digest="", round=1, state={})
    with pytest.raises(ValueError, match="not a 'star' one"):
        load_star_checkpoint(tmp_path / "c.pt", aggregator())
