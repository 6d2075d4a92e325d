"""The DP trainer: local DP-SGD (with optional random sparsification) from the local pieces.

`train_private` is `train_local` with the model and optimizer wrapped by
`thinwire.privacy.make_private`: the same `make_optimizer`, the same `batch_indices`, the same
`train_steps` loop, so a private client differs from a plain one only in what its optimizer
step does (mask, clip, sum, noise on kept coordinates, scale).

Sampling: batches are shuffled fixed-size batches (every example once per pass), while the
RDP analysis assumes Poisson sampling at rate q = B / N; this is what the method's code and
most DP-SGD work do, and the reported epsilon is read with that caveat.

The trainer knows nothing about accounting: it calls `on_step()` after every private step,
and the caller records the count in its ledger (STYLE rule 11).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping

import torch
from torch import nn

from thinwire.config import Optimizer
from thinwire.learning.train import (
    TrainStats,
    _check_data,  # the package's shared data checks
    batch_indices,
    make_optimizer,
    train_steps,
)

__all__ = ["train_private"]


def train_private(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    steps: int,
    batch_size: int,
    lr: float,
    optimizer: Optimizer,
    generator: torch.Generator,
    noise_multiplier: float,
    max_grad_norm: float,
    noise_generator: torch.Generator,
    mask: Mapping[str, torch.Tensor] | None = None,
    on_step: Callable[[], None] | None = None,
) -> TrainStats:
    """Trains `model` in place for `steps` DP-SGD steps on (x, y).

    Each step takes a batch of B = min(batch_size, N) examples; the summed clipped
    gradient is divided by B. The model is left without Opacus's hooks or attributes,
    also when training fails.

    Args:
        model: the model, on the same device as `x` and `y`; no batch norm.
        x: features shaped (N, *input_shape).
        y: int64 labels shaped (N,).
        steps: number of optimizer steps.
        batch_size: examples per step, capped at N.
        lr: learning rate for this round.
        optimizer: the `train.optimizer` config (a fresh optimizer per call).
        generator: source of the batch order; advanced by the call.
        noise_multiplier: sigma; the noise std is sigma * max_grad_norm.
        max_grad_norm: C, the per-sample clipping norm.
        noise_generator: source of the Gaussian noise, on the model's device.
        mask: per parameter name, True where the coordinate is kept; None: plain DP-SGD.
        on_step: called after every private step.

    Returns:
        The mean training loss, examples seen and steps taken.

    Raises:
        ValueError: mismatched, empty or misplaced data, a model Opacus cannot train, a
            mask that does not fit, or an out-of-range number.
    """
    from thinwire.privacy.engine import make_private, release  # imports Opacus: on first use

    _check_data(model, x, y)
    batch = min(batch_size, int(x.shape[0]))
    private = make_private(
        module=model,
        optimizer=make_optimizer(model.parameters(), optimizer, lr=lr),
        noise_multiplier=noise_multiplier,
        max_grad_norm=max_grad_norm,
        expected_batch_size=batch,
        noise_generator=noise_generator,
        mask=mask,
        step_hook=(lambda _: on_step()) if on_step is not None else None,
    )
    try:
        batches = batch_indices(
            x.shape[0], steps=steps, batch_size=batch, generator=generator, device=x.device
        )
        with warnings.catch_warnings():
            # Opacus's per-sample hooks are full backward hooks; on the first layer (whose
            # input needs no gradient) torch warns that they see only output gradients,
            # which is all they use.
            warnings.filterwarnings("ignore", message="Full backward hook is firing")
            return train_steps(private.module, private.optimizer, x, y, batches)
    finally:
        release(private)
