"""Nested state flattens to path -> leaf and rebuilds, validated, against a template."""

from typing import NamedTuple

import pytest
import torch

from thinwire.statetree import flatten, unflatten


class Inner(NamedTuple):
    residual: torch.Tensor
    step: int


class Empty(NamedTuple):
    pass


class Outer(NamedTuple):
    codec: dict
    policy: Empty
    rate: float


def make(value: float = 1.0) -> Outer:
    return Outer({"fc.weight": Inner(torch.full((2, 3), value), 4)}, Empty(), 0.5)


def test_flatten_names_every_leaf_by_path():
    flat = flatten(make())
    assert set(flat) == {"codec/fc.weight/residual", "codec/fc.weight/step", "policy/", "rate"}
    assert flat["codec/fc.weight/step"] == 4


def test_round_trip_gives_an_equal_tree():
    state = make(2.0)
    restored = unflatten(make(0.0), flatten(state))
    assert isinstance(restored, Outer) and isinstance(restored.codec["fc.weight"], Inner)
    assert torch.equal(restored.codec["fc.weight"].residual, state.codec["fc.weight"].residual)
    assert restored.rate == 0.5 and restored.policy == Empty()


def test_mismatches_are_errors():
    flat = flatten(make())
    with pytest.raises(ValueError, match="missing"):
        unflatten(make(), {k: v for k, v in flat.items() if k != "rate"})
    wrong = dict(flat, **{"codec/fc.weight/residual": torch.zeros(3, 2)})
    with pytest.raises(ValueError, match=r"expected torch.float32 \(2, 3\)"):
        unflatten(make(), wrong)
    with pytest.raises(ValueError, match="expected int"):
        unflatten(make(), dict(flat, **{"codec/fc.weight/step": "4"}))


def test_keys_with_slashes_are_refused():
    with pytest.raises(TypeError):
        flatten({"a/b": 1})
