"""The DP trainer: DP-SGD from the local trainer's pieces, confined to the round's mask."""

import pytest
import torch

from thinwire.config import MLP, SGD, DataConfig
from thinwire.learning import (
    build_model,
    evaluate,
    flatten,
    load_dataset,
    model_state,
    train_private,
)
from thinwire.privacy import mask_tensors, round_mask


@pytest.fixture(scope="module")
def digits():
    return load_dataset(DataConfig(dataset="digits"), seed=0)


def run(digits, *, steps=20, mask=None, sigma=0.5, seed=0, on_step=None):
    model = build_model(MLP(hidden=[32]), digits.input_shape, 10, seed=0)
    stats = train_private(
        model,
        digits.x_train,
        digits.y_train,
        steps=steps,
        batch_size=64,
        lr=0.5,
        optimizer=SGD(momentum=0.5),
        generator=torch.Generator().manual_seed(seed),
        noise_multiplier=sigma,
        max_grad_norm=1.0,
        noise_generator=torch.Generator().manual_seed(seed + 1),
        mask=mask(model) if mask else None,
        on_step=on_step,
    )
    return model, stats


@pytest.mark.slow
def test_private_training_still_learns_digits(digits):
    model, stats = run(digits, steps=150)
    assert stats.steps == 150
    assert evaluate(model, digits.x_test, digits.y_test).accuracy > 0.75


def test_every_step_is_reported_and_the_model_is_left_plain(digits):
    taken = []
    model, stats = run(digits, steps=7, on_step=lambda: taken.append(1))
    assert len(taken) == stats.steps == 7
    assert not any(
        hasattr(p, "grad_sample") or hasattr(p, "summed_grad") for p in model.parameters()
    )


def test_runs_replay_from_their_seeds(digits):
    a, _ = run(digits, seed=3)
    b, _ = run(digits, seed=3)
    c, _ = run(digits, seed=4)
    assert all(torch.equal(a_, b_) for a_, b_ in zip(a.parameters(), b.parameters(), strict=True))
    assert not torch.equal(next(a.parameters()), next(c.parameters()))


def test_a_mask_confines_every_change_to_its_kept_coordinates(digits):
    before = model_state(build_model(MLP(hidden=[32]), digits.input_shape, 10, seed=0))
    n = sum(t.numel() for t in before.values())
    support = round_mask(seed=0, round=3, n=n, rate=0.8)
    masks = mask_tensors(support, before)
    model, _ = run(digits, mask=lambda m: masks)
    after = model_state(model)
    change = flatten({k: after[k] - before[k] for k in before})
    kept = flatten(masks)
    assert int(kept.sum()) == support.count
    assert (change[~kept] == 0).all()  # momentum and noise included
    assert (change[kept] != 0).float().mean() > 0.9
