"""The DP trainer: local DP-SGD (with optional random sparsification) from the local pieces.

`train_private` is `train_local` with the model and optimizer wrapped by
`thinwire.privacy.make_private`: the same `make_optimizer`, the same `batch_indices`, the same
`train_steps` loop, so a private client differs from a plain one only in what its optimizer
step does (mask, clip, sum, noise on kept coordinates, scale). `private(trainer, ...)` is the
trainer wrapper a role uses (`thinwire.learning.trainer`): it runs `train_private` with the
wrapped trainer's optimizer and keeps the privacy ledger as its state, so a client never
branches on privacy.

Sampling: batches are shuffled fixed-size batches (every example once per pass), while the
RDP analysis assumes Poisson sampling at rate q = B / N; this is what the method's code and
most DP-SGD work do, and the reported epsilon is read with that caveat.

`train_private` knows nothing about accounting: it calls `on_step()` after every private
step, and `private` records the count in its ledger (STYLE rule 11).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import NamedTuple

import torch
from torch import nn

from thinwire.config import Experiment, Optimizer, PrivacyConfig
from thinwire.learning.train import (
    TrainStats,
    _check_data,  # the package's shared data checks
    batch_indices,
    local_steps_for,
    make_optimizer,
    train_steps,
)
from thinwire.learning.trainer import TrainCall, Trainer
from thinwire.privacy import (
    PrivacyLedger,
    epsilon,
    mask_tensors,
    noise_multiplier_for,
    open_ledger,
    record,
)
from thinwire.wire.payload import SeededSupport

__all__ = ["PrivacyPlan", "private", "train_private"]


class PrivacyPlan(NamedTuple):
    """A client's DP-SGD parameters, fixed for the run."""

    noise_multiplier: float  # sigma: calibrated from privacy.target_epsilon, or as configured
    sample_rate: float  # q = B / N
    batch_size: int  # B = min(train.batch_size, N)
    delta: float
    max_grad_norm: float
    steps: int  # local DP-SGD steps per round, at batch B

    @classmethod
    def for_client(cls, experiment: Experiment, privacy: PrivacyConfig, n: int) -> PrivacyPlan:
        """The plan of a client holding `n` examples; validates delta against n.

        With a target epsilon, sigma is calibrated so that a client taking part in all
        `train.rounds` rounds spends exactly the target; a client that takes part in fewer
        rounds (partial participation) spends less.

        Raises:
            ValueError: delta >= 1/n, or a target no noise level can meet.
        """
        if not privacy.delta < 1.0 / n:
            raise ValueError(
                f"privacy.delta = {privacy.delta:g} must be below 1/N = 1/{n} for a client "
                f"holding N = {n} training examples (delta is the chance of a total leak); "
                f"use a delta below {1.0 / n:.3g}"
            )
        batch = min(experiment.train.batch_size, n)
        sample_rate = batch / n
        steps = local_steps_for(experiment.train, n)
        sigma = privacy.noise_multiplier
        if sigma is None:
            if privacy.target_epsilon is None:
                raise ValueError("privacy needs noise_multiplier or target_epsilon")
            sigma = noise_multiplier_for(
                target_epsilon=privacy.target_epsilon,
                delta=privacy.delta,
                sample_rate=sample_rate,
                steps=experiment.train.rounds * steps,
            )
        return cls(sigma, sample_rate, batch, privacy.delta, privacy.max_grad_norm, steps)


def private(
    trainer: Trainer,
    *,
    plan: PrivacyPlan,
    noise_seed: Callable[[int], int],
    mask: Callable[[int], SeededSupport | None],
) -> Trainer:
    """`trainer` made differentially private: DP-SGD with its optimizer, and a ledger.

    Each call runs `plan.steps` steps of `train_private` at the plan's batch B (the call's
    batch is ignored: the accounting's q = B / N must hold every round), with `trainer`'s
    optimizer wrapped by Opacus, noise drawn from `noise_seed(round)` on the data's device
    and the round's shared mask `mask(round)` over the flattened `call.start`; then records
    the steps taken in the ledger.

    State: the `PrivacyLedger` (the steps at (sigma, q) so far); `spent(state)` is epsilon
    at `plan.delta`.

    Args:
        trainer: the trainer to wrap; it must keep no state of its own (`local_sgd`).
        plan: the client's DP-SGD parameters.
        noise_seed: round -> the seed of that round's Gaussian noise.
        mask: round -> the random-sparsification mask of that round, or None.

    Raises:
        ValueError: if `trainer` keeps a state (it would be lost).
    """
    if trainer.init() is not None:
        raise ValueError(f"private() wraps a stateless trainer; {trainer.name!r} keeps a state")

    def init() -> PrivacyLedger:
        return open_ledger(plan.noise_multiplier, plan.sample_rate)

    def train(call: TrainCall, ledger: PrivacyLedger) -> tuple[TrainStats, PrivacyLedger]:
        taken = 0

        def count_step() -> None:
            nonlocal taken
            taken += 1

        noise = torch.Generator(device=call.x.device).manual_seed(noise_seed(call.round))
        stats = train_private(
            call.model,
            call.x,
            call.y,
            steps=plan.steps,
            batch_size=plan.batch_size,
            lr=call.lr,
            optimizer=trainer.optimizer,
            generator=call.generator,
            noise_multiplier=plan.noise_multiplier,
            max_grad_norm=plan.max_grad_norm,
            noise_generator=noise,
            mask=mask_tensors(mask(call.round), call.start),
            on_step=count_step,
        )
        ledger = record(
            ledger,
            noise_multiplier=plan.noise_multiplier,
            sample_rate=plan.sample_rate,
            steps=taken,
        )
        return stats, ledger

    def spent(ledger: PrivacyLedger) -> float:
        return epsilon(ledger.history, plan.delta)

    return Trainer(init, train, trainer.optimizer, spent, name=f"private({trainer.name})")


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
