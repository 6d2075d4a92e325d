import pytest
import torch
from torch import nn

from thinwire.config import MLP, ResNet20
from thinwire.learning import (
    build_model,
    flatten,
    load_model_state,
    model_delta,
    model_state,
    state_delta,
    tensor_specs,
    unflatten,
)
from thinwire.wire.payload import TensorSpec


def _bn_net():
    return nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Flatten(), nn.Linear(8, 3))


def test_state_holds_parameters_and_float_buffers_but_not_step_counters():
    state = model_state(_bn_net())
    assert list(state) == [
        "0.weight",
        "0.bias",
        "1.weight",
        "1.bias",
        "1.running_mean",
        "1.running_var",
        "3.weight",
        "3.bias",
    ]


def test_state_is_a_copy_that_later_training_does_not_change():
    model = _bn_net()
    state = model_state(model)
    snapshot = {k: v.clone() for k, v in state.items()}
    model.train()
    model(torch.randn(4, 1, 4, 4)).sum().backward()  # updates the BN running stats
    with torch.no_grad():
        model[0].weight.add_(1.0)
    assert all(torch.equal(state[k], snapshot[k]) for k in state)
    assert not torch.equal(model_state(model)["1.running_mean"], state["1.running_mean"])


def test_load_round_trips_including_running_statistics():
    source, target = _bn_net(), _bn_net()
    source.train()
    source(torch.randn(8, 1, 4, 4))
    load_model_state(target, model_state(source))
    after = model_state(target)
    assert all(torch.equal(after[k], v) for k, v in model_state(source).items())
    source.eval()
    target.eval()
    x = torch.randn(3, 1, 4, 4)
    assert torch.equal(source(x), target(x))


def test_load_rejects_a_state_of_another_architecture():
    model = build_model(MLP(hidden=[8]), (4,), 3, seed=0)
    state = model_state(model)
    missing = {k: v for k, v in state.items() if k != "head.bias"}
    with pytest.raises(ValueError, match=r"missing \['head.bias'\]"):
        load_model_state(model, missing)
    with pytest.raises(ValueError, match=r"unexpected \['extra'\]"):
        load_model_state(model, {**state, "extra": torch.zeros(1)})
    with pytest.raises(ValueError, match=r"fc1.weight: shape \(8, 5\), model has \(8, 4\)"):
        load_model_state(model, {**state, "fc1.weight": torch.zeros(8, 5)})


def test_flatten_and_unflatten_are_inverse_and_keep_the_order():
    state = model_state(build_model(ResNet20(), (3, 32, 32), 10, seed=0))
    vector = flatten(state)
    assert vector.shape == (sum(t.numel() for t in state.values()),)
    restored = unflatten(vector, state)
    assert list(restored) == list(state)
    assert all(torch.equal(restored[k], state[k]) for k in state)
    first = next(iter(state.values()))
    assert torch.equal(vector[: first.numel()], first.reshape(-1))


def test_unflatten_returns_views_of_the_vector():
    like = {"a": torch.zeros(2, 2), "b": torch.zeros(3)}
    vector = torch.arange(7.0)
    parts = unflatten(vector, like)
    vector[4] = -1.0
    assert parts["b"][0] == -1.0


def test_unflatten_checks_the_length():
    with pytest.raises(ValueError, match="1-D vector of 5 values for 2 tensors"):
        unflatten(torch.zeros(6), {"a": torch.zeros(2), "b": torch.zeros(3)})
    with pytest.raises(ValueError, match="empty model state"):
        flatten({})


def test_delta_is_after_minus_before_per_name():
    before = {"w": torch.tensor([1.0, 2.0]), "b": torch.tensor([0.5])}
    after = {"w": torch.tensor([1.5, 1.0]), "b": torch.tensor([0.5])}
    delta = state_delta(after, before)
    assert torch.equal(delta["w"], torch.tensor([0.5, -1.0]))
    assert torch.equal(delta["b"], torch.tensor([0.0]))


def test_delta_of_states_of_different_models_is_an_error():
    with pytest.raises(ValueError, match="different tensors"):
        state_delta({"w": torch.zeros(1)}, {"v": torch.zeros(1)})
    with pytest.raises(ValueError, match=r"w: shape \(2,\) vs \(1,\)"):
        state_delta({"w": torch.zeros(2)}, {"w": torch.zeros(1)})


def test_model_delta_equals_the_delta_of_a_copy_bit_for_bit():
    model = _bn_net()
    base = {k: v + 0.25 * torch.randn_like(v) for k, v in model_state(model).items()}
    expected = state_delta(model_state(model), base)
    delta = model_delta(model, base)
    assert list(delta) == list(expected)
    assert all(torch.equal(delta[k], expected[k]) for k in expected)


def test_model_delta_lies_back_to_back_in_one_buffer():
    # A model-scope codec reads this layout's flat vector without concatenating a copy.
    model = _bn_net()
    delta = model_delta(model, model_state(model))
    tensors = list(delta.values())
    storage = tensors[0].untyped_storage().data_ptr()
    assert all(t.untyped_storage().data_ptr() == storage for t in tensors)
    offsets = [t.storage_offset() for t in tensors]
    assert offsets == [sum(t.numel() for t in tensors[:i]) for i in range(len(tensors))]


def test_model_delta_does_not_alias_the_model():
    model = nn.Linear(3, 2)
    delta = model_delta(model, model_state(model))
    with torch.no_grad():
        model.weight.add_(1.0)
    assert torch.equal(delta["weight"], torch.zeros(2, 3))


def test_model_delta_of_mixed_dtypes_keeps_each_promotion():
    # bf16 parameters minus an fp32 base: fp32, as `state_delta` of a bf16 copy gives.
    model = nn.Linear(3, 2)
    model.bias.data = model.bias.data.to(torch.bfloat16)
    base = {k: torch.zeros(v.shape) for k, v in model_state(model).items()}
    expected = state_delta(model_state(model), base)
    delta = model_delta(model, base)
    assert all(torch.equal(delta[k], expected[k]) for k in expected)
    assert {t.dtype for t in delta.values()} == {torch.float32}


def test_model_delta_against_another_architecture_is_an_error():
    with pytest.raises(ValueError, match="different tensors"):
        model_delta(nn.Linear(3, 2), {"w": torch.zeros(1)})
    with pytest.raises(ValueError, match=r"weight: shape \(2, 3\) vs \(3, 2\)"):
        model_delta(nn.Linear(3, 2), {"weight": torch.zeros(3, 2), "bias": torch.zeros(2)})


def test_tensor_specs_name_each_tensor_and_its_shape():
    state = model_state(build_model(MLP(hidden=[8]), (4,), 3, seed=0))
    assert tensor_specs(state) == (
        TensorSpec("fc1.weight", (8, 4)),
        TensorSpec("fc1.bias", (8,)),
        TensorSpec("head.weight", (3, 8)),
        TensorSpec("head.bias", (3,)),
    )
