"""A ClientState survives context.state exactly, and a state that does not fit is refused."""

from __future__ import annotations

import math

import pytest
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict
from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects
from flwr.supercore.inflatable.inflatable_utils import inflate_object_from_contents

from thinwire.clients.client import ClientState
from thinwire.clients.flower_state import load_state, save_state
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


def persisted(records: RecordDict) -> RecordDict:
    """`records` after Flower serialized and restored them (as a SuperNode does)."""
    objects = get_all_nested_objects(records)
    contents = {object_id: obj.deflate() for object_id, obj in objects.items()}
    restored = inflate_object_from_contents(records.object_id, contents)
    assert isinstance(restored, RecordDict)
    return restored


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


def test_an_empty_context_holds_no_state() -> None:
    assert load_state(RecordDict(), state(), MODEL) is None


def test_every_leaf_comes_back_exactly() -> None:
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
    records = RecordDict()
    save_state(saved, records)
    initial = state(policy={"scale": 0.0, "nan": 0.0, "on": False, "name": "", "none": None})
    assert_same(load_state(persisted(records), initial, MODEL), saved)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.int64, torch.bool])
def test_tensors_of_any_dtype_keep_their_bits(dtype: torch.dtype) -> None:
    values = torch.tensor([[0.1, -2.5, 3.0]]).to(dtype)
    saved = state(codec={"model": {"residual": values, "seed": 1}})
    records = RecordDict()
    save_state(saved, records)
    initial = state(codec={"model": {"residual": torch.zeros(1, 3, dtype=dtype), "seed": 0}})
    assert_same(load_state(persisted(records), initial, MODEL), saved)


def test_saving_again_replaces_the_previous_state() -> None:
    records = RecordDict()
    save_state(state(carry={"w": torch.ones(2, 3), "b": torch.ones(3)}), records)
    save_state(state(), records)
    assert load_state(records, state(), MODEL).carry == {}


def test_a_state_of_another_model_is_refused() -> None:
    records = RecordDict()
    save_state(state(), records)
    other = state(view={"w": torch.zeros(3, 3), "b": torch.zeros(3)})
    with pytest.raises(ValueError, match="state 'view/w': expected torch.float32 \\(3, 3\\)"):
        load_state(records, other, MODEL)


def test_stored_records_that_are_not_client_state_are_refused() -> None:
    records = RecordDict()
    save_state(state(), records)
    records["thinwire.tensors"] = ArrayRecord(
        {"pending": Array(dtype="uint8", shape=(4,), stype="thinwire/tensor", data=b"xy")}
    )
    with pytest.raises(ValueError, match="2 bytes for torch.uint8 \\(4,\\)"):
        load_state(records, state(), MODEL)
    records["thinwire.tensors"] = ArrayRecord({"pending": Array(torch.zeros(2).numpy())})
    with pytest.raises(ValueError, match="expected a 'thinwire/tensor' array"):
        load_state(records, state(), MODEL)
    records["thinwire.tensors"] = ArrayRecord({})
    records["thinwire.scalars"] = ConfigRecord({"pending": "null"})
    with pytest.raises(ValueError, match="no 'pending' byte tensor"):
        load_state(records, state(), MODEL)


def test_a_state_saved_without_its_view_comes_back_with_the_initial_view() -> None:
    saved = state(view={"w": torch.full((2, 3), 7.0), "b": torch.ones(3)})
    records = RecordDict()
    save_state(saved, records, with_view=False)
    assert not any(key.startswith("view/") for key in records["thinwire.tensors"])
    initial = state()
    restored = load_state(persisted(records), initial, MODEL)
    assert_same(restored, saved._replace(view=initial.view))


def test_carry_comes_back_without_a_view_to_shape_it() -> None:
    saved = state(view={}, carry={"w": torch.full((2, 3), 0.5), "b": torch.ones(3)})
    records = RecordDict()
    save_state(saved, records, with_view=False)
    assert_same(load_state(persisted(records), state(view={}), MODEL), saved)
