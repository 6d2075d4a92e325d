"""The local trainer every role uses: batches, the SGD loop, evaluation.

Data lives in tensors already on the training device, and batches are index tensors into
them (no DataLoader: at the batch sizes of federated clients its per-batch overhead costs
more than the step). Batch order comes only from the `torch.Generator` passed in, so a
client's local training is reproducible from its seed.

The pieces are separate so other trainers can reuse them: `make_optimizer` builds the
optimizer from config (from `thinwire.registry.OPTIMIZERS`: this module registers `sgd` and
`adam`, a plugin adds one with `OPTIMIZERS.register(kind, section=..., factory=...)`, where
`factory(section, parameters, lr)` returns a `torch.optim.Optimizer`), `batch_indices` draws
the batches, and `train_steps` runs the loop with any optimizer. The DP trainer, for
instance, wraps the model and the optimizer from `make_optimizer` with Opacus and calls
`train_steps` with the same batches.

Example:
    >>> import torch
    >>> from thinwire.config import SGD
    >>> model = torch.nn.Linear(4, 2)
    >>> x, y = torch.randn(64, 4), torch.randint(0, 2, (64,))
    >>> stats = train_local(model, x, y, steps=5, batch_size=16, lr=0.1, optimizer=SGD(),
    ...                     generator=torch.Generator().manual_seed(0))
    >>> stats.steps, stats.examples
    (5, 80)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple, Protocol

import torch
import torch.nn.functional as F
from torch import nn

from thinwire.config import SGD, Adam, Optimizer, TrainConfig
from thinwire.learning._sgd import PlainSGD
from thinwire.registry import OPTIMIZERS

__all__ = [
    "Evaluation",
    "Steps",
    "TrainStats",
    "batch_indices",
    "evaluate",
    "local_steps_for",
    "make_optimizer",
    "train_local",
    "train_steps",
]


class TrainStats(NamedTuple):
    """What one call of local training did."""

    loss: float  # mean cross-entropy over every example seen
    examples: int  # examples seen, counting repeats across epochs
    steps: int  # optimizer steps taken


class Evaluation(NamedTuple):
    """A model's quality on a data set."""

    loss: float  # mean cross-entropy per example
    accuracy: float  # fraction of examples whose arg-max logit is the label
    examples: int  # number of examples evaluated


def make_optimizer(
    parameters: Iterable[torch.nn.Parameter], config: Optimizer, *, lr: float
) -> torch.optim.Optimizer:
    """Builds the local optimizer that `config` (the `train.optimizer` section) describes.

    Args:
        parameters: the parameters to optimize.
        config: any registered optimizer section: `SGD` (momentum, Nesterov, weight decay),
            `Adam` (weight decay), or a plugin's.
        lr: the learning rate for this round (see `thinwire.learning.learning_rate`).

    Raises:
        ValueError: `lr` <= 0, or the kind has no registered factory.
    """
    if not lr > 0:
        raise ValueError(f"lr must be > 0, got {lr}")
    optimizer: torch.optim.Optimizer = OPTIMIZERS.factory(config.kind)(config, parameters, lr)
    return optimizer


def _sgd(config: SGD, parameters: Iterable[torch.nn.Parameter], lr: float) -> torch.optim.SGD:
    return torch.optim.SGD(
        parameters,
        lr=lr,
        momentum=config.momentum,
        nesterov=config.nesterov,
        weight_decay=config.weight_decay,
    )


def _adam(config: Adam, parameters: Iterable[torch.nn.Parameter], lr: float) -> torch.optim.Adam:
    return torch.optim.Adam(parameters, lr=lr, weight_decay=config.weight_decay)


OPTIMIZERS.register("sgd", section=SGD, factory=_sgd)
OPTIMIZERS.register("adam", section=Adam, factory=_adam)


def local_steps_for(train: TrainConfig, n_examples: int) -> int:
    """Returns the number of local steps a client with `n_examples` takes per round.

    `train.local_steps` when set; otherwise `train.local_epochs` passes over the data, each
    ceil(n_examples / batch_size) steps (the last batch of a pass may be smaller).

    Raises:
        ValueError: `n_examples` < 1.
    """
    if n_examples < 1:
        raise ValueError(f"a client needs at least one example, got {n_examples}")
    if train.local_steps is not None:
        return train.local_steps
    if train.local_epochs is None:  # the config sets exactly one of the two
        raise ValueError("train needs local_steps or local_epochs")
    return train.local_epochs * math.ceil(n_examples / train.batch_size)


def batch_indices(
    n: int,
    *,
    steps: int,
    batch_size: int,
    generator: torch.Generator,
    device: torch.device | str = "cpu",
) -> Iterator[torch.Tensor]:
    """Yields `steps` index batches into n examples, reshuffling at every pass.

    Each pass is a fresh permutation drawn from `generator` and cut into batches of
    `batch_size`; the last batch of a pass holds the remainder, so every example is seen
    once per pass. The permutation is drawn on the generator's device and then moved to
    `device`, so a CPU generator gives the same batches whatever the training device.

    Raises:
        ValueError: n, steps or batch_size < 1.
    """
    if n < 1 or steps < 1 or batch_size < 1:
        raise ValueError(f"need n, steps and batch_size >= 1, got {n}, {steps}, {batch_size}")
    taken = 0
    while True:
        order = torch.randperm(n, generator=generator, device=generator.device).to(device)
        for start in range(0, n, batch_size):
            yield order[start : start + batch_size]
            taken += 1
            if taken == steps:
                return


class Steps(Protocol):
    """What `train_steps` needs of an optimizer (`torch.optim.Optimizer` or `PlainSGD`)."""

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Forgets the gradients of the last step."""

    def step(self) -> Any:
        """Updates the parameters from their gradients."""


def train_steps(
    model: nn.Module,
    optimizer: torch.optim.Optimizer | Steps,
    x: torch.Tensor,
    y: torch.Tensor,
    batches: Iterable[torch.Tensor],
) -> TrainStats:
    """Runs one optimizer step of cross-entropy per index batch, in training mode.

    The loss is accumulated on the device and read once at the end, so the loop does not
    synchronize with the GPU at every step. The model's previous train/eval mode is
    restored afterwards.
    """
    was_training = model.training
    model.train()
    total = torch.zeros((), device=x.device)
    examples = steps = 0
    try:
        for index in batches:
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x[index]), y[index])
            loss.backward()
            optimizer.step()
            total += loss.detach() * index.numel()
            examples += index.numel()
            steps += 1
    finally:
        model.train(was_training)
        # The last step's gradients are dead weight from here on: one model's worth of
        # memory while the client encodes its update.
        optimizer.zero_grad(set_to_none=True)
    mean = total.item() / examples if examples else math.nan
    return TrainStats(loss=mean, examples=examples, steps=steps)


def _check_data(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> None:
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"x has {x.shape[0]} examples but y has {y.shape[0]} labels")
    if x.shape[0] == 0:
        raise ValueError("no examples")
    if y.dtype != torch.int64:
        raise ValueError(f"labels must be int64 class indices, got {y.dtype}")
    param = next(model.parameters(), None)
    if param is not None and (x.device != param.device or y.device != param.device):
        raise ValueError(
            f"data on {x.device}/{y.device} but the model on {param.device}; "
            "move the dataset with Dataset.to(device) before training"
        )


def train_local(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    steps: int,
    batch_size: int,
    lr: float,
    optimizer: Optimizer,
    generator: torch.Generator,
) -> TrainStats:
    """Trains `model` in place for `steps` mini-batch steps on (x, y).

    A fresh optimizer is built for the call, so momentum or Adam moments do not carry over
    between rounds (the usual local-SGD setting, and what keeps a client's state explicit).

    Args:
        model: the model, on the same device as `x` and `y`.
        x: features shaped (N, *input_shape).
        y: int64 labels shaped (N,).
        steps: number of optimizer steps (see `local_steps_for`).
        batch_size: examples per step (the last batch of a pass may be smaller).
        lr: learning rate for this round.
        optimizer: the `train.optimizer` config.
        generator: source of the batch order; advanced by the call.

    Returns:
        The mean training loss, examples seen and steps taken.

    Raises:
        ValueError: mismatched, empty or misplaced data, or non-positive sizes.
    """
    _check_data(model, x, y)
    # Plain SGD skips torch.optim (and the torch._dynamo import it costs a fresh process);
    # the update is bit-identical to torch.optim.SGD's on the CPU.
    opt: torch.optim.Optimizer | Steps = (
        PlainSGD(
            model.parameters(),
            lr=lr,
            momentum=optimizer.momentum,
            nesterov=optimizer.nesterov,
            weight_decay=optimizer.weight_decay,
        )
        if isinstance(optimizer, SGD)
        else make_optimizer(model.parameters(), optimizer, lr=lr)
    )
    batches = batch_indices(
        x.shape[0], steps=steps, batch_size=batch_size, generator=generator, device=x.device
    )
    return train_steps(model, opt, x, y, batches)


def evaluate(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, batch_size: int = 1024
) -> Evaluation:
    """Returns the mean loss and accuracy of `model` on (x, y), in eval mode, without grads.

    The model's previous train/eval mode is restored afterwards.
    """
    _check_data(model, x, y)
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    was_training = model.training
    model.eval()
    loss = torch.zeros((), device=x.device)
    correct = torch.zeros((), dtype=torch.int64, device=x.device)
    try:
        with torch.no_grad():
            for start in range(0, x.shape[0], batch_size):
                logits = model(x[start : start + batch_size])
                labels = y[start : start + batch_size]
                loss += F.cross_entropy(logits, labels, reduction="sum")
                correct += (logits.argmax(dim=1) == labels).sum()
    finally:
        model.train(was_training)
    n = x.shape[0]
    return Evaluation(loss=loss.item() / n, accuracy=correct.item() / n, examples=n)
