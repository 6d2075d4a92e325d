"""The server step: SGD at the server's lr, and momentum as a wrapper around it."""

import pytest
import torch

from thinwire.config import ServerStep
from thinwire.server.steps import build_step, sgd, with_momentum


def test_sgd_moves_by_lr_times_the_aggregate_and_keeps_no_buffer():
    model, buffer = sgd(0.5)({"w": torch.tensor([1.0])}, {"w": torch.tensor([2.0])}, {})
    assert model["w"].item() == 2.0 and buffer == {}


def test_momentum_accumulates_the_aggregates_and_steps_with_the_buffer():
    step = with_momentum(sgd(1.0), 0.5)
    model, buffer = step({"w": torch.tensor([0.0])}, {"w": torch.tensor([2.0])}, {})
    assert model["w"].item() == 2.0 and buffer["w"].item() == 2.0
    model, buffer = step(model, {"w": torch.tensor([1.0])}, buffer)
    assert buffer["w"].item() == 0.5 * 2.0 + 1.0 and model["w"].item() == 2.0 + 2.0


def test_the_config_chooses_the_wrapper():
    plain = build_step(ServerStep(lr=1.0))
    _, buffer = plain({"w": torch.zeros(1)}, {"w": torch.ones(1)}, {})
    assert buffer == {}
    _, buffer = build_step(ServerStep(momentum=0.9))(
        {"w": torch.zeros(1)}, {"w": torch.ones(1)}, {}
    )
    assert set(buffer) == {"w"}


def test_momentum_outside_its_range_is_refused():
    with pytest.raises(ValueError, match="server momentum"):
        with_momentum(sgd(1.0), 1.0)
