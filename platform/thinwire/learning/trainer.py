"""A client's local trainer as a value: plain local SGD, or any wrapper around it.

A role does not branch on how it trains. It builds one `Trainer` for the run and calls
`train(call, state)` each round, threading the state the trainer keeps (STYLE rule 1's
shape, as codecs and send policies do). Cross-cutting training features wrap a trainer and
return a trainer (STYLE rule 3): DP-SGD is `thinwire.learning.private(local_sgd(train),
...)`, which wraps the optimizer the inner trainer steps with and keeps a privacy ledger as
its state.

Example:
    >>> import torch
    >>> from thinwire.config import TrainConfig
    >>> trainer = local_sgd(TrainConfig(local_steps=5, batch_size=16))
    >>> model = torch.nn.Linear(4, 2)
    >>> x, y = torch.randn(64, 4), torch.randint(0, 2, (64,))
    >>> start = {k: v.detach() for k, v in model.named_parameters()}
    >>> call = TrainCall(model, start, x, y, round=1, batch_size=16, lr=0.1,
    ...                  generator=torch.Generator().manual_seed(0))
    >>> stats, state = trainer.train(call, trainer.init())
    >>> stats.steps, trainer.spent(state)
    (5, None)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import torch
from torch import nn

from thinwire.config import Optimizer, TrainConfig
from thinwire.learning.train import TrainStats, local_steps_for, train_local

__all__ = ["TrainCall", "Trainer", "local_sgd", "not_private"]


class TrainCall(NamedTuple):
    """One round's local training job, as every trainer receives it."""

    model: nn.Module  # loaded with `start`; trained in place
    start: Mapping[str, torch.Tensor]  # the round's start point, named tensors in model order
    x: torch.Tensor  # (N, *input_shape) features, on the model's device
    y: torch.Tensor  # (N,) int64 labels, on the model's device
    round: int  # 1-based round number
    batch_size: int  # the round's batch from the send policy's schedule (not capped at N)
    lr: float  # this round's learning rate
    generator: torch.Generator  # the batch order's source; advanced by the call


def not_private(state: Any) -> float | None:
    """`Trainer.spent` of a trainer that spends no privacy budget: None."""
    del state
    return None


class Trainer(NamedTuple):
    """A local trainer.

    - `init() -> state`: the state of a client that has not trained yet;
    - `train(call, state) -> (TrainStats, state)`: trains `call.model` in place;
    - `optimizer`: the `train.optimizer` section it steps with (a wrapper wraps it);
    - `spent(state) -> epsilon | None`: privacy spent so far; None for a non-private one.
    """

    init: Callable[[], Any]
    train: Callable[[TrainCall, Any], tuple[TrainStats, Any]]
    optimizer: Optimizer
    spent: Callable[[Any], float | None] = not_private
    name: str = "trainer"


def local_sgd(config: TrainConfig) -> Trainer:
    """Plain local training: `local_steps_for` steps of the round's batch (capped at N).

    State: none (None). The batch follows `call.batch_size` (CSGD grows it), and the step
    count is `config`'s at that batch size.
    """

    def init() -> None:
        return None

    def train(call: TrainCall, state: None) -> tuple[TrainStats, None]:
        n = int(call.x.shape[0])
        batch = min(call.batch_size, n)
        schedule = config.model_copy(update={"batch_size": batch})
        stats = train_local(
            call.model,
            call.x,
            call.y,
            steps=local_steps_for(schedule, n),
            batch_size=batch,
            lr=call.lr,
            optimizer=config.optimizer,
            generator=call.generator,
        )
        return stats, state

    return Trainer(init, train, config.optimizer, name="local_sgd")
