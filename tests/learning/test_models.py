from collections import OrderedDict
from typing import Literal

import pytest
import torch
from torch import nn

from thinwire.config import (
    CNN,
    MLP,
    LogisticRegression,
    PositiveInt,
    ResNet20,
    Section,
    load_config,
    parse_config,
)
from thinwire.learning import build_model, load_federation, model_state
from thinwire.registry import MODELS

IMAGE_SHAPES = [(1, 8, 8), (1, 28, 28), (3, 32, 32)]
ALL_KINDS = [LogisticRegression(), MLP(hidden=[32, 16]), CNN(), ResNet20()]


def _count(model):
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("shape", IMAGE_SHAPES)
@pytest.mark.parametrize("config", ALL_KINDS, ids=lambda c: c.kind)
def test_every_model_maps_images_to_logits(config, shape):
    model = build_model(config, shape, 10, seed=0)
    assert model(torch.zeros(3, *shape)).shape == (3, 10)


@pytest.mark.parametrize("config", [LogisticRegression(), MLP()], ids=lambda c: c.kind)
def test_dense_models_take_vectors(config):
    model = build_model(config, (60,), 7, seed=0)
    assert model(torch.zeros(5, 60)).shape == (5, 7)


def test_parameter_counts():
    assert _count(build_model(LogisticRegression(), (1, 8, 8), 10, seed=0)) == 64 * 10 + 10
    assert _count(build_model(MLP(hidden=[64]), (1, 8, 8), 10, seed=0)) == (
        64 * 64 + 64 + 64 * 10 + 10
    )
    # conv 1->16 and 16->32 (3x3, bias), 8x8 halved twice to 2x2, head 32*2*2 -> 10
    assert _count(build_model(CNN(channels=[16, 32]), (1, 8, 8), 10, seed=0)) == (
        16 * 9 + 16 + 32 * 16 * 9 + 32 + 32 * 4 * 10 + 10
    )
    # He et al.'s 0.27M: option-A shortcuts add no parameters.
    assert _count(build_model(ResNet20(), (3, 32, 32), 10, seed=0)) == 269_722


def test_resnet20_has_twenty_weighted_layers_and_batchnorm_statistics():
    model = build_model(ResNet20(), (3, 32, 32), 10, seed=0)
    weighted = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d | torch.nn.Linear)]
    assert len(weighted) == 20
    state = model_state(model)
    assert torch.equal(state["bn1.running_var"], torch.ones(16))
    assert torch.equal(state["layer3.2.bn2.running_mean"], torch.zeros(64))


def test_resnet20_trains_on_a_tiny_batch():
    model = build_model(ResNet20(), (3, 32, 32), 10, seed=0)
    loss = torch.nn.functional.cross_entropy(model(torch.randn(2, 3, 32, 32)), torch.tensor([1, 2]))
    loss.backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert model.layer3[0].conv1.weight.grad.abs().sum() > 0


def test_tensor_names_are_readable():
    assert list(model_state(build_model(MLP(hidden=[8]), (4,), 3, seed=0))) == [
        "fc1.weight",
        "fc1.bias",
        "head.weight",
        "head.bias",
    ]
    assert list(model_state(build_model(LogisticRegression(), (4,), 3, seed=0))) == [
        "linear.weight",
        "linear.bias",
    ]
    assert "conv2.weight" in model_state(build_model(CNN(), (1, 8, 8), 3, seed=0))


@pytest.mark.parametrize("config", ALL_KINDS, ids=lambda c: c.kind)
def test_initialization_is_a_function_of_the_seed_alone(config):
    torch.manual_seed(123)
    first = model_state(build_model(config, (3, 32, 32), 10, seed=7))
    torch.manual_seed(456)
    torch.rand(100)
    second = model_state(build_model(config, (3, 32, 32), 10, seed=7))
    other = model_state(build_model(config, (3, 32, 32), 10, seed=8))
    assert all(torch.equal(first[k], second[k]) for k in first)
    assert any(not torch.equal(first[k], other[k]) for k in first)


@pytest.mark.parametrize("config", ALL_KINDS, ids=lambda c: c.kind)
def test_a_blank_model_loaded_with_a_seeded_ones_tensors_is_that_model(config):
    # What a ClientApp does: build without drawing weights, then load the downlink's model.
    seeded = build_model(config, (3, 32, 32), 10, seed=7)
    before = torch.get_rng_state()
    blank = build_model(config, (3, 32, 32), 10, seed=None)
    assert torch.equal(torch.get_rng_state(), before)
    assert all(not t.any() for n, t in blank.named_parameters() if ".bn" not in f".{n}")
    assert {k: v.shape for k, v in blank.state_dict().items()} == {
        k: v.shape for k, v in seeded.state_dict().items()
    }
    blank.load_state_dict(model_state(seeded), strict=False)  # the travelling tensors
    for got, want in zip(blank.state_dict().values(), seeded.state_dict().values(), strict=True):
        assert torch.equal(got, want)  # non-travelling buffers (batch counts) agree as well
    x = torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    assert torch.equal(blank.train()(x), seeded.train()(x))


def test_building_a_model_leaves_the_global_rng_alone():
    before = torch.get_rng_state()
    build_model(ResNet20(), (3, 32, 32), 10, seed=0)
    assert torch.equal(torch.get_rng_state(), before)


def test_initial_weights_follow_the_documented_scales():
    model = build_model(MLP(hidden=[256]), (1, 28, 28), 10, seed=0)
    bound = 1 / 784**0.5  # kaiming_uniform with a=sqrt(5) gives U(-1/sqrt(fan_in), ...)
    assert model.fc1.weight.abs().max() <= bound
    assert model.fc1.weight.std().item() == pytest.approx(bound / 3**0.5, rel=0.05)
    resnet = build_model(ResNet20(), (3, 32, 32), 10, seed=0)
    fan_out = 64 * 9
    assert resnet.layer3[1].conv1.weight.std().item() == pytest.approx(
        (2 / fan_out) ** 0.5, rel=0.05
    )


def test_image_models_reject_vector_inputs():
    with pytest.raises(ValueError, match=r"'cnn' needs image inputs shaped \(channels"):
        build_model(CNN(), (60,), 10, seed=0)
    with pytest.raises(ValueError, match="'resnet20' needs image inputs"):
        build_model(ResNet20(), (60,), 10, seed=0)


def test_cnn_with_more_pooling_than_the_image_allows_is_an_error():
    assert build_model(CNN(channels=[8, 8, 8]), (1, 8, 8), 10, seed=0)
    with pytest.raises(ValueError, match="at least 16x16, got 8x8"):
        build_model(CNN(channels=[8, 8, 8, 8]), (1, 8, 8), 10, seed=0)


def test_bad_shapes_and_class_counts_are_rejected():
    with pytest.raises(ValueError, match="num_classes must be >= 2"):
        build_model(MLP(), (4,), 1, seed=0)
    with pytest.raises(ValueError, match="input_shape must be non-empty and positive"):
        build_model(MLP(), (0, 4), 3, seed=0)


class TinyCNN(Section):
    """One conv layer, global pooling and a linear head (a test kind)."""

    kind: Literal["tiny_cnn"] = "tiny_cnn"
    channels: PositiveInt = 4


def _tiny_cnn(config: TinyCNN, shape: tuple[int, ...], num_classes: int) -> nn.Module:
    return nn.Sequential(
        OrderedDict(
            conv=nn.Conv2d(shape[0], config.channels, 3, padding=1),
            relu=nn.ReLU(),
            pool=nn.AdaptiveAvgPool2d(1),
            flatten=nn.Flatten(),
            head=nn.Linear(config.channels, num_classes),
        )
    )


@pytest.fixture
def tiny_cnn():
    """`tiny_cnn` registered as a model for the test, removed after it."""
    saved = dict(MODELS._entries)
    MODELS.register("tiny_cnn", section=TinyCNN, factory=_tiny_cnn)
    yield
    MODELS._entries = saved


def test_a_registered_model_validates_from_yaml_and_builds_seeded(tiny_cnn, tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text("name: t\nmodel: {kind: tiny_cnn, channels: 6}\ntrain: {device: cpu}\n")
    experiment = load_config(path)
    assert experiment.model == TinyCNN(channels=6)
    federation = load_federation(experiment)  # digits: (1, 8, 8), 10 classes
    model = federation.workspace.model
    assert model(torch.zeros(2, 1, 8, 8)).shape == (2, 10)
    again = build_model(experiment.model, (1, 8, 8), 10, seed=experiment.seed)
    assert all(
        torch.equal(a, b)
        for a, b in zip(model_state(model).values(), model_state(again).values(), strict=True)
    )
    other = build_model(experiment.model, (1, 8, 8), 10, seed=experiment.seed + 1)
    assert not torch.equal(model_state(again)["conv.weight"], model_state(other)["conv.weight"])


def test_an_unknown_model_kind_names_the_registered_ones():
    with pytest.raises(ValueError, match="unknown model kind 'nope'; expected one of cnn, logreg"):
        parse_config({"name": "t", "model": {"kind": "nope"}})


def test_every_declared_model_kind_has_a_factory():
    assert MODELS.kinds() == ("cnn", "logreg", "mlp", "resnet20")
    for kind in MODELS.kinds():
        assert callable(MODELS.factory(kind)), kind
