"""The server's step: how the round's aggregate moves the global model, as composable pieces.

A `Step` maps (model, aggregate, buffer) to (model, buffer), where the buffer is whatever
the step keeps between rounds (the server momentum; {} when none). `sgd(lr)` applies
x <- x + lr * a; `with_momentum(step, beta)` wraps a step so that it sees the momentum
m <- beta * m + a instead of a (FedAvgM, Hsu et al. 2019), as optax's `trace` wraps an
update. `build_step` builds the one the `train.server` section describes, so server
momentum is a wrapper the config chooses, not a branch in the `Aggregator`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from thinwire.config import ServerStep

__all__ = ["Step", "build_step", "sgd", "with_momentum"]

Tensors = dict[str, torch.Tensor]

Step = Callable[[Tensors, Tensors, Tensors], tuple[Tensors, Tensors]]
"""(model, aggregate, buffer) -> (model, buffer); the aggregate is non-empty."""


def sgd(lr: float) -> Step:
    """X <- x + lr * a; keeps no buffer."""

    def step(model: Tensors, aggregate: Tensors, buffer: Tensors) -> tuple[Tensors, Tensors]:
        return {k: model[k] + lr * aggregate[k] for k in model}, buffer

    return step


def with_momentum(step: Step, beta: float) -> Step:
    """`step` applied to the momentum m <- beta * m + a (m starts as the first aggregate).

    The buffer is m, one model-sized float32 tensor per name.
    """
    if not 0.0 <= beta < 1.0:
        raise ValueError(f"server momentum must be in [0, 1), got {beta}")

    def wrapped(model: Tensors, aggregate: Tensors, buffer: Tensors) -> tuple[Tensors, Tensors]:
        momentum = {
            k: beta * buffer[k] + aggregate[k] if k in buffer else aggregate[k] for k in aggregate
        }
        model, _ = step(model, momentum, {})
        return model, momentum

    return wrapped


def build_step(config: ServerStep) -> Step:
    """The step `train.server` describes: SGD at its lr, wrapped by momentum when it is > 0."""
    step = sgd(config.lr)
    return with_momentum(step, config.momentum) if config.momentum > 0 else step
