import math

import pytest
import torch
from torch import nn

from thinwire.config import MLP, SGD, Adam, DataConfig, TrainConfig, parse_config
from thinwire.learning import (
    batch_indices,
    build_model,
    evaluate,
    load_dataset,
    local_steps_for,
    make_optimizer,
    model_state,
    train_local,
    train_steps,
)


@pytest.fixture(scope="module")
def digits():
    return load_dataset(DataConfig(dataset="digits"), seed=0)


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


@pytest.mark.slow
def test_a_few_hundred_steps_of_mlp_learn_digits(digits):
    model = build_model(MLP(hidden=[64]), digits.input_shape, digits.num_classes, seed=0)
    untrained = evaluate(model, digits.x_test, digits.y_test)
    stats = train_local(
        model,
        digits.x_train,
        digits.y_train,
        steps=300,
        batch_size=32,
        lr=0.05,
        optimizer=SGD(momentum=0.9),
        generator=_gen(),
    )
    result = evaluate(model, digits.x_test, digits.y_test)
    # 1438 examples make 45 batches a pass (the last of 30); 300 steps = 6 passes + 30 batches.
    assert len(digits.y_train) == 1438
    assert stats.steps == 300 and stats.examples == 6 * 1438 + 30 * 32
    assert result.accuracy > 0.9
    assert result.loss < untrained.loss
    assert result.examples == len(digits.y_test)


def _trained(digits, seed, optimizer=None):
    model = build_model(MLP(hidden=[32]), digits.input_shape, 10, seed=0)
    optimizer = optimizer or SGD(momentum=0.9)
    train_local(
        model,
        digits.x_train,
        digits.y_train,
        steps=20,
        batch_size=32,
        lr=0.05,
        optimizer=optimizer,
        generator=_gen(seed),
    )
    return model_state(model)


@pytest.mark.parametrize("optimizer", [SGD(momentum=0.9), Adam()], ids=["sgd", "adam"])
def test_same_seed_gives_bitwise_identical_parameters(digits, optimizer):
    first, second = _trained(digits, 3, optimizer), _trained(digits, 3, optimizer)
    assert all(torch.equal(first[k], second[k]) for k in first)


def test_the_generator_alone_decides_the_batch_order(digits):
    first, other = _trained(digits, 3), _trained(digits, 4)
    assert any(not torch.equal(first[k], other[k]) for k in first)


def test_batches_reshuffle_each_pass_and_cover_every_example_once_per_pass():
    batches = list(batch_indices(10, steps=7, batch_size=4, generator=_gen()))
    assert [len(b) for b in batches] == [4, 4, 2, 4, 4, 2, 4]
    first_pass, second_pass = torch.cat(batches[:3]), torch.cat(batches[3:6])
    assert sorted(first_pass.tolist()) == list(range(10))
    assert sorted(second_pass.tolist()) == list(range(10))
    assert not torch.equal(first_pass, second_pass)


def test_a_batch_larger_than_the_data_is_all_of_it():
    batches = list(batch_indices(5, steps=2, batch_size=32, generator=_gen()))
    assert [sorted(b.tolist()) for b in batches] == [list(range(5))] * 2


def test_batch_sizes_must_be_positive():
    with pytest.raises(ValueError, match="need n, steps and batch_size >= 1"):
        next(batch_indices(0, steps=1, batch_size=1, generator=_gen()))


def test_train_local_is_make_optimizer_plus_batches_plus_train_steps(digits):
    # The DP trainer relies on this shape: same batches, its own optimizer, same loop.
    x, y = digits.x_train, digits.y_train
    reference = build_model(MLP(hidden=[16]), digits.input_shape, 10, seed=1)
    train_local(reference, x, y, steps=15, batch_size=8, lr=0.1, optimizer=SGD(), generator=_gen())
    model = build_model(MLP(hidden=[16]), digits.input_shape, 10, seed=1)
    optimizer = make_optimizer(model.parameters(), SGD(), lr=0.1)
    stats = train_steps(
        model, optimizer, x, y, batch_indices(len(y), steps=15, batch_size=8, generator=_gen())
    )
    assert stats.steps == 15 and stats.examples == 120 and math.isfinite(stats.loss)
    expected, got = model_state(reference), model_state(model)
    assert all(torch.equal(expected[k], got[k]) for k in expected)


def test_reported_loss_is_the_mean_over_examples_seen():
    model = nn.Linear(3, 4)
    with torch.no_grad():
        model.weight.zero_()
        model.bias.zero_()
    x, y = torch.randn(5, 3), torch.tensor([0, 1, 2, 3, 0])
    stats = train_steps(
        model, torch.optim.SGD(model.parameters(), lr=1e-9), x, y, [torch.arange(5)]
    )
    assert stats.loss == pytest.approx(math.log(4))


def test_training_and_evaluation_restore_the_model_mode(digits):
    model = build_model(MLP(), digits.input_shape, 10, seed=0).eval()
    train_local(
        model,
        digits.x_train,
        digits.y_train,
        steps=1,
        batch_size=4,
        lr=0.1,
        optimizer=SGD(),
        generator=_gen(),
    )
    assert not model.training
    model.train()
    evaluate(model, digits.x_test, digits.y_test)
    assert model.training


def test_evaluate_counts_correct_argmax_and_mean_loss():
    model = nn.Linear(2, 3)
    with torch.no_grad():
        model.weight.zero_()
        model.bias.copy_(torch.tensor([1.0, 0.0, 0.0]))  # always predicts class 0
    x = torch.randn(10, 2)
    y = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 2, 0])
    result = evaluate(model, x, y, batch_size=3)
    expected_loss = torch.nn.functional.cross_entropy(model(x), y).item()
    assert result.accuracy == pytest.approx(0.4)
    assert result.loss == pytest.approx(expected_loss)
    assert result.examples == 10
    assert evaluate(model, x, y) == result


def test_local_steps_for_uses_steps_or_turns_epochs_into_steps():
    assert local_steps_for(TrainConfig(local_steps=7, batch_size=32), 1000) == 7
    epochs = TrainConfig(local_epochs=2, batch_size=32)
    assert local_steps_for(epochs, 100) == 2 * 4  # ceil(100 / 32) = 4 batches per pass
    assert local_steps_for(epochs, 96) == 2 * 3
    assert local_steps_for(epochs, 1) == 2
    with pytest.raises(ValueError, match="at least one example"):
        local_steps_for(epochs, 0)


def test_make_optimizer_follows_the_config():
    params = [nn.Parameter(torch.zeros(2))]
    sgd = make_optimizer(params, SGD(momentum=0.9, nesterov=True, weight_decay=1e-4), lr=0.2)
    assert isinstance(sgd, torch.optim.SGD)
    group = sgd.param_groups[0]
    assert (group["lr"], group["momentum"], group["nesterov"], group["weight_decay"]) == (
        0.2,
        0.9,
        True,
        1e-4,
    )
    adam = make_optimizer(params, Adam(weight_decay=0.01), lr=1e-3)
    assert isinstance(adam, torch.optim.Adam)
    assert adam.param_groups[0]["weight_decay"] == 0.01
    with pytest.raises(ValueError, match="lr must be > 0"):
        make_optimizer(params, SGD(), lr=0.0)


def test_nesterov_without_momentum_is_a_config_error():
    from thinwire.config import ConfigError

    with pytest.raises(ConfigError, match="nesterov needs momentum > 0"):
        parse_config({"name": "x", "train": {"optimizer": {"kind": "sgd", "nesterov": True}}})


def test_bad_data_is_rejected_with_a_clear_error():
    model = nn.Linear(2, 2)
    kwargs = dict(steps=1, batch_size=1, lr=0.1, optimizer=SGD(), generator=_gen())
    with pytest.raises(ValueError, match="x has 3 examples but y has 2 labels"):
        train_local(model, torch.zeros(3, 2), torch.zeros(2, dtype=torch.int64), **kwargs)
    with pytest.raises(ValueError, match="labels must be int64"):
        train_local(model, torch.zeros(2, 2), torch.zeros(2), **kwargs)
    with pytest.raises(ValueError, match="no examples"):
        evaluate(model, torch.zeros(0, 2), torch.zeros(0, dtype=torch.int64))
    with pytest.raises(ValueError, match="model on meta"):
        evaluate(model.to("meta"), torch.zeros(2, 2), torch.zeros(2, dtype=torch.int64))


def test_every_declared_optimizer_kind_has_a_factory():
    from thinwire.registry import OPTIMIZERS

    assert OPTIMIZERS.kinds() == ("adam", "sgd")
    for kind in OPTIMIZERS.kinds():
        assert callable(OPTIMIZERS.factory(kind)), kind


def test_training_leaves_no_gradients_behind(digits):
    # The client encodes its update right after training: a model's worth of gradients
    # kept alive then is a model's worth of peak memory for nothing.
    model = build_model(MLP(), digits.input_shape, 10, seed=0)
    train_local(
        model,
        digits.x_train,
        digits.y_train,
        steps=2,
        batch_size=4,
        lr=0.1,
        optimizer=SGD(momentum=0.9),
        generator=_gen(),
    )
    assert all(p.grad is None for p in model.parameters())
