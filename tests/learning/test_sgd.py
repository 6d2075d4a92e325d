"""PlainSGD trains bit for bit like torch.optim.SGD on the CPU, without torch._dynamo."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from thinwire.learning._sgd import PlainSGD


def trained(make: object, settings: dict[str, float | bool], steps: int = 6) -> torch.nn.Module:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
    optimizer = make(model.parameters(), lr=0.05, **settings)  # type: ignore[operator]
    data = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x, y = torch.randn(32, 64, generator=data), torch.randint(0, 10, (32,), generator=data)
        optimizer.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    return model


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"momentum": 0.9},
        {"momentum": 0.9, "nesterov": True},
        {"momentum": 0.5, "weight_decay": 1e-3},
        {"weight_decay": 0.01},
    ],
    ids=["plain", "momentum", "nesterov", "momentum-decay", "decay"],
)
def test_it_updates_exactly_as_torch_optim_sgd(settings: dict[str, float | bool]) -> None:
    ours, theirs = trained(PlainSGD, settings), trained(torch.optim.SGD, settings)
    for a, b in zip(ours.parameters(), theirs.parameters(), strict=True):
        assert torch.equal(a, b)


def test_a_parameter_without_a_gradient_is_left_alone() -> None:
    used, unused = torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(3))
    optimizer = PlainSGD([used, unused], lr=0.1, momentum=0.9)
    used.grad = torch.full((3,), 2.0)
    optimizer.step()
    assert torch.equal(used, torch.full((3,), 0.8)) and torch.equal(unused, torch.ones(3))
    assert optimizer.buffers[1] is None


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="lr > 0"):
        PlainSGD([], lr=0.0)
    with pytest.raises(ValueError, match="nesterov needs momentum"):
        PlainSGD([], lr=0.1, nesterov=True)


def test_local_training_does_not_import_torch_dynamo() -> None:
    # torch.optim's wrappers import torch._dynamo (about a second in a fresh process).
    script = (
        "import sys, torch\n"
        "from thinwire.config import SGD\n"
        "from thinwire.learning import train_local\n"
        "model = torch.nn.Linear(4, 2)\n"
        "x, y = torch.randn(16, 4), torch.randint(0, 2, (16,))\n"
        "train_local(model, x, y, steps=2, batch_size=8, lr=0.1, optimizer=SGD(momentum=0.9),"
        " generator=torch.Generator().manual_seed(0))\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.stdout.strip() == "False", done.stderr
