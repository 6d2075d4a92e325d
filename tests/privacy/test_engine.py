"""The DP-SGD step: mask, clip, sum, noise on kept coordinates, scale, in that fixed order."""

import copy

import pytest
import torch
import torch.nn.functional as F
from opacus import GradSampleModule
from opacus.optimizers import DPOptimizer
from torch import nn

from thinwire.privacy import make_private, release

# Opacus's per-sample hooks fire on a first layer whose input needs no gradient: benign.
pytestmark = pytest.mark.filterwarnings("ignore:Full backward hook is firing")

C = 1.0


def linear_model():
    model = nn.Linear(4, 3, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.arange(12.0).reshape(3, 4) / 10)
    return model


def batch():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 4, generator=g) * torch.tensor([0.1, 0.1, 5.0, 5.0])  # big last coords
    return x, torch.tensor([0, 1, 2, 0, 1, 2])


def per_sample_grads(model, x, y):
    grads = []
    for i in range(len(y)):
        model.zero_grad()
        F.cross_entropy(model(x[i : i + 1]), y[i : i + 1]).backward()
        grads.append(model.weight.grad.clone())
    return torch.stack(grads)


def clipped_mean(grads, batch_size):
    norms = grads.flatten(1).norm(dim=1)
    factors = (C / (norms + 1e-6)).clamp(max=1.0)
    return (grads * factors[:, None, None]).sum(0) / batch_size


def private_step(model, x, y, *, mask=None, sigma=0.0, seed=0, hook=None):
    private = make_private(
        module=model,
        optimizer=torch.optim.SGD(model.parameters(), lr=1.0),
        noise_multiplier=sigma,
        max_grad_norm=C,
        expected_batch_size=len(y),
        noise_generator=torch.Generator().manual_seed(seed),
        mask=mask,
        step_hook=hook,
    )
    private.optimizer.zero_grad()
    F.cross_entropy(private.module(x), y).backward()
    private.optimizer.step()
    grad = model.weight.grad.clone()
    release(private)
    return grad


MASK = torch.tensor([[True, True, False, False]] * 3)  # drops the two large coordinates


def test_the_mask_applies_before_clipping_so_the_norm_ignores_dropped_coordinates():
    x, y = batch()
    grads = per_sample_grads(linear_model(), x, y)
    mask_then_clip = clipped_mean(grads * MASK, len(y))
    clip_then_mask = clipped_mean(grads, len(y)) * MASK
    released = private_step(linear_model(), x, y, mask={"weight": MASK})
    torch.testing.assert_close(released, mask_then_clip)
    # the other order clips by the dropped coordinates' large norm: a different release
    assert not torch.allclose(released, clip_then_mask, rtol=0.1)


def test_noise_lands_only_on_kept_coordinates():
    x, y = batch()
    released = private_step(linear_model(), x, y, mask={"weight": MASK}, sigma=3.0)
    assert (released[~MASK] == 0).all()
    assert (released[MASK] != 0).all()
    noiseless = private_step(linear_model(), x, y, mask={"weight": MASK})
    noise = (released - noiseless)[MASK]
    # std sigma * C / B on each kept coordinate
    assert noise.abs().max().item() < 6 * 3.0 * C / len(y)


def test_without_a_mask_the_step_is_opacus_dp_sgd_bit_for_bit():
    x, y = batch()
    ours = private_step(linear_model(), x, y, sigma=1.3, seed=9)
    theirs_model = linear_model()
    module = GradSampleModule(theirs_model)
    optimizer = DPOptimizer(
        torch.optim.SGD(theirs_model.parameters(), lr=1.0),
        noise_multiplier=1.3,
        max_grad_norm=C,
        expected_batch_size=len(y),
        generator=torch.Generator().manual_seed(9),
    )
    F.cross_entropy(module(x), y).backward()
    optimizer.step()
    assert torch.equal(ours, theirs_model.weight.grad)


def test_a_mask_keeping_everything_is_plain_dp_sgd():
    x, y = batch()
    full = {"weight": torch.ones(3, 4, dtype=torch.bool)}
    assert torch.equal(
        private_step(linear_model(), x, y, mask=full, sigma=0.7, seed=2),
        private_step(linear_model(), x, y, sigma=0.7, seed=2),
    )


def test_the_hook_sees_every_step_and_release_leaves_a_plain_model():
    x, y = batch()
    model = linear_model()
    steps = []
    private_step(model, x, y, sigma=1.0, hook=steps.append)
    assert len(steps) == 1
    for attr in ("grad_sample", "_forward_counter", "summed_grad"):
        assert not hasattr(model.weight, attr)
    F.cross_entropy(model(x), y).backward()  # no Opacus hooks left
    assert not hasattr(model.weight, "grad_sample")


def test_the_wrapped_objects_are_validated_before_anything_is_wrapped():
    model = linear_model()
    args = {
        "module": model,
        "optimizer": torch.optim.SGD(model.parameters(), lr=0.1),
        "noise_multiplier": 1.0,
        "max_grad_norm": 1.0,
        "expected_batch_size": 4,
        "noise_generator": torch.Generator(),
    }
    cases = [
        ({"module": nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3))}, "batch norm"),
        ({"optimizer": torch.optim.SGD(linear_model().parameters(), lr=0.1)}, "exactly"),
        ({"mask": {"bias": MASK}}, "every trainable parameter"),
        ({"mask": {"weight": MASK.float()}}, "bool tensor"),
        ({"max_grad_norm": 0.0}, "max_grad_norm"),
        ({"noise_multiplier": -1.0}, "noise_multiplier"),
        ({"expected_batch_size": 0}, "expected_batch_size"),
    ]
    for change, message in cases:
        call = {**args, **change}
        if "module" in change:
            call["optimizer"] = torch.optim.SGD(change["module"].parameters(), lr=0.1)
        with pytest.raises(ValueError, match=message):
            make_private(**call)
    assert not hasattr(model.weight, "grad_sample")


def test_the_state_dict_of_the_wrapped_optimizer_is_the_original_ones():
    model = linear_model()
    original = torch.optim.SGD(model.parameters(), lr=0.3, momentum=0.5)
    private = make_private(
        module=model,
        optimizer=original,
        noise_multiplier=0.5,
        max_grad_norm=1.0,
        expected_batch_size=2,
        noise_generator=torch.Generator(),
    )
    assert private.optimizer.original_optimizer is original
    assert copy.deepcopy(private.optimizer.state_dict()) == original.state_dict()
    release(private)
