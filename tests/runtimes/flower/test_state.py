"""A ClientState survives the node's state folder exactly; anything else is a StateLost."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from thinwire.clients.client import ClientState
from thinwire.config import parse_config
from thinwire.runtimes.flower.messages import StateLost
from thinwire.runtimes.flower.state import StateStore, state_key
from thinwire.statetree import flatten

MODEL = {"w": torch.zeros(2, 3), "b": torch.zeros(3)}


def state(**fields: object) -> ClientState:
    view = {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3), "b": torch.zeros(3)}
    base = ClientState(
        codec={"model": {"residual": torch.zeros(9), "seed": 0}},
        policy=None,
        view=view,
        carry={},
        pending=torch.empty(0, dtype=torch.uint8),
    )
    return base._replace(**fields)


def store(tmp_path: Path, *, keep: int = 2, partition: int = 1) -> StateStore:
    return StateStore(tmp_path, experiment="e" * 16, partition=partition, keep=keep)


def assert_same(a: ClientState, b: ClientState) -> None:
    flat_a, flat_b = flatten(a), flatten(b)
    assert flat_a.keys() == flat_b.keys()
    for key, value in flat_a.items():
        other = flat_b[key]
        if isinstance(value, torch.Tensor):
            assert isinstance(other, torch.Tensor) and other.dtype == value.dtype, key
            assert torch.equal(value, other), key
        elif isinstance(value, float) and math.isnan(value):
            assert isinstance(other, float) and math.isnan(other), key
        else:
            assert type(other) is type(value) and other == value, key


def test_every_leaf_comes_back_exactly(tmp_path: Path) -> None:
    saved = state(
        codec={
            "model": {
                "residual": torch.randn(9, generator=torch.Generator().manual_seed(0)),
                "seed": 2**64 - 5,  # a 64-bit seed, beyond int64
            }
        },
        policy={"scale": 1 / 3, "nan": math.nan, "on": True, "name": "x", "none": None},
        carry={"w": torch.full((2, 3), -1.5), "b": torch.ones(3)},
        pending=torch.tensor([1, 2, 255], dtype=torch.uint8),
    )
    digest = store(tmp_path).save(saved, 4)
    initial = state(policy={"scale": 0.0, "nan": 0.0, "on": False, "name": "", "none": None})
    restored, read = store(tmp_path).load(4, initial, MODEL)
    assert_same(restored, saved)
    assert read == digest


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.int64, torch.bool])
def test_tensors_of_any_dtype_keep_their_bits(tmp_path: Path, dtype: torch.dtype) -> None:
    values = torch.tensor([[0.1, -2.5, 3.0]]).to(dtype)
    saved = state(codec={"model": {"residual": values, "seed": 1}})
    store(tmp_path).save(saved, 1)
    initial = state(codec={"model": {"residual": torch.zeros(1, 3, dtype=dtype), "seed": 0}})
    assert_same(store(tmp_path).load(1, initial, MODEL)[0], saved)


def test_a_model_sized_state_is_read_back_memory_mapped(tmp_path: Path) -> None:
    big = {"w": torch.zeros(1000, 1000), "b": torch.zeros(1000)}
    residual = torch.randn(1_001_000, generator=torch.Generator().manual_seed(1))
    saved = state(codec={"model": {"residual": residual, "seed": 0}}, view=big)
    store(tmp_path).save(saved, 2)
    initial = state(codec={"model": {"residual": torch.zeros(1_001_000), "seed": 0}}, view=big)
    restored, _ = store(tmp_path).load(2, initial, big)
    assert torch.equal(restored.codec["model"]["residual"], residual)
    # Memory-mapped storages cannot grow; a tensor read into a fresh buffer could.
    assert not restored.codec["model"]["residual"].untyped_storage().resizable()


def test_it_keeps_the_newest_rounds_and_drops_rounds_a_resumed_run_left_behind(
    tmp_path: Path,
) -> None:
    kept = store(tmp_path, keep=2)
    for round in (1, 2, 3, 5):
        kept.save(state(), round)
    assert kept.rounds() == [3, 5]
    kept.save(state(), 4)  # a run resumed at round 3 trains round 4 again: 5 is stale
    assert kept.rounds() == [3, 4]
    kept.save(state(carry={"w": torch.ones(2, 3), "b": torch.ones(3)}), 4)  # rewritten
    assert kept.load(4, state(), MODEL)[0].carry.keys() == {"w", "b"}
    assert not [p for p in kept.folder.iterdir() if p.name.startswith(".")]  # no leftovers


def test_states_are_keyed_by_experiment_and_partition(tmp_path: Path) -> None:
    StateStore(tmp_path, experiment="a" * 16, partition=0, keep=1).save(state(), 1)
    with pytest.raises(StateLost, match=r"no client 1's state of round 1 .* holds rounds none"):
        StateStore(tmp_path, experiment="a" * 16, partition=1, keep=1).load(1, state(), MODEL)
    with pytest.raises(StateLost, match="no client 0's state"):
        StateStore(tmp_path, experiment="b" * 16, partition=0, keep=1).load(1, state(), MODEL)


def test_the_experiment_digest_ignores_where_and_how_the_run_is_deployed() -> None:
    raw = {"name": "d", "runtime": {"kind": "flower", "round_timeout_s": 5}, "output": "a"}
    same = {**raw, "runtime": {"kind": "flower", "round_timeout_s": 50}, "output": "b"}
    other = {**raw, "seed": 1}
    digest = state_key(parse_config(raw))
    assert digest == state_key(parse_config(same))
    assert digest != state_key(parse_config(other))


def test_a_round_that_was_never_saved_is_lost_and_says_which_rounds_are_there(
    tmp_path: Path,
) -> None:
    kept = store(tmp_path)
    kept.save(state(), 2)
    kept.save(state(), 3)
    with pytest.raises(StateLost, match=r"round 1 .* holds rounds \[2, 3\]"):
        kept.load(1, state(), MODEL)
    with pytest.raises(StateLost, match="round 4"):
        kept.load(4, state(), MODEL)


def test_a_deleted_file_is_lost(tmp_path: Path) -> None:
    kept = store(tmp_path)
    kept.save(state(), 1)
    kept.save(state(), 2)
    (kept.folder / "round-000001" / "tensors.pt").unlink()
    (kept.folder / "round-000002" / "manifest.json").unlink()
    with pytest.raises(StateLost, match="tensors.pt is missing"):
        kept.load(1, state(), MODEL)
    with pytest.raises(StateLost, match="manifest.json is missing"):
        kept.load(2, state(), MODEL)


def test_a_truncated_or_flipped_file_is_lost(tmp_path: Path) -> None:
    kept = store(tmp_path)
    kept.save(state(codec={"model": {"residual": torch.ones(9), "seed": 0}}), 1)
    kept.save(state(), 2)
    tensors = kept.folder / "round-000001" / "tensors.pt"
    data = tensors.read_bytes()
    tensors.write_bytes(data[: len(data) // 2])
    with pytest.raises(StateLost, match=f"tensors.pt has {len(data) // 2} bytes"):
        kept.load(1, state(), MODEL)
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 1
    tensors.write_bytes(bytes(flipped))
    with pytest.raises(StateLost, match="does not match its SHA-256"):
        kept.load(1, state(), MODEL)
    manifest = kept.folder / "round-000002" / "manifest.json"
    manifest.write_text(manifest.read_text()[:40])
    with pytest.raises(StateLost, match="manifest.json is unreadable"):
        kept.load(2, state(), MODEL)


def test_an_edited_manifest_is_lost(tmp_path: Path) -> None:
    kept = store(tmp_path)
    kept.save(state(policy={"scale": 1.0}), 1)
    manifest = kept.folder / "round-000001" / "manifest.json"
    contents = json.loads(manifest.read_text())
    contents["scalars"]["policy/scale"] = 2.0
    manifest.write_text(json.dumps(contents))
    with pytest.raises(StateLost, match="does not match its digest"):
        kept.load(1, state(policy={"scale": 0.0}), MODEL)
    contents["round"] = 7
    manifest.write_text(json.dumps(contents))
    with pytest.raises(StateLost, match="its manifest says {'round': 7}"):
        kept.load(1, state(policy={"scale": 0.0}), MODEL)


def test_a_state_of_another_model_is_lost(tmp_path: Path) -> None:
    store(tmp_path).save(state(), 1)
    other = state(view={"w": torch.zeros(3, 3), "b": torch.zeros(3)})
    with pytest.raises(StateLost, match="does not fit this client: state 'view/w'"):
        store(tmp_path).load(1, other, MODEL)


def test_a_store_keeps_at_least_one_round(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least one round"):
        store(tmp_path, keep=0)
