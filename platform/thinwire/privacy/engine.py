"""The DP-SGD mechanism with random sparsification, on Opacus: `make_private`.

Opacus computes the per-sample gradients (`GradSampleModule`) and performs the clipping,
summing, noising and scaling (`DPOptimizer`); this module adds random sparsification's two
mask stages around Opacus's own, inside the optimizer step, so one `optimizer.step()`
always runs, in this order (Zhu & Blaschko 2023, algorithms.md §5.2):

1. **mask**: zero the dropped coordinates of every per-sample gradient;
2. **clip**: scale each per-sample gradient to norm at most C; the norm is that of the
   masked vector (Opacus);
3. **sum** the clipped per-sample gradients over the batch (Opacus);
4. **noise**: add N(0, (sigma C)^2) to every coordinate (Opacus), then zero the noise on
   the dropped coordinates, so the released gradient is exactly sparse;
5. **scale**: divide by the expected batch size B (Opacus);
6. report the step to the step hook (accounting), then step the wrapped optimizer.

The stages are methods of one optimizer called by Opacus's fixed `pre_step`, so a user
cannot reorder, skip or repeat one. (The issue's phrase "clip, sparsify, noise" names the
same mechanism loosely; the method's code masks *before* clipping, so that the clipping
norm ignores dropped coordinates, and we follow the code.) Without a mask the optimizer is
Opacus's DP-SGD, step for step.

Whatever the client does with the resulting model afterwards (compress it, censor it,
carry it) is post-processing of DP outputs and costs no privacy; that includes sending only
the kept coordinates with the `shared_mask` selector.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import torch
from opacus import GradSampleModule
from opacus.optimizers import DPOptimizer
from opacus.validators import ModuleValidator
from torch import nn

__all__ = ["PrivateTraining", "SparseDPOptimizer", "make_private", "release"]


class SparseDPOptimizer(DPOptimizer):
    """Opacus's `DPOptimizer` with random sparsification's mask stages (see the module).

    Extends Opacus the way Opacus's own variants do (`DPPerLayerOptimizer`,
    `AdaClipDPOptimizer`): by overriding stages of the fixed `pre_step`. `masks` maps each
    parameter to a boolean tensor of its shape (True: kept); parameters without an entry,
    or `masks=None`, are not sparsified.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        *,
        masks: Mapping[nn.Parameter, torch.Tensor] | None,
        noise_multiplier: float,
        max_grad_norm: float,
        expected_batch_size: int,
        generator: torch.Generator,
    ) -> None:
        super().__init__(
            optimizer=optimizer,
            noise_multiplier=noise_multiplier,
            max_grad_norm=max_grad_norm,
            expected_batch_size=expected_batch_size,
            loss_reduction="mean",
            generator=generator,
        )
        self.masks = {id(p): m for p, m in masks.items()} if masks is not None else {}

    def clip_and_accumulate(self) -> None:
        """Stage 1 (mask each per-sample gradient), then Opacus's stages 2-3."""
        for p in self.params:
            mask = self.masks.get(id(p))
            if mask is None:
                continue
            keep = mask.to(p.dtype)
            samples = p.grad_sample
            if isinstance(samples, list):
                p.grad_sample = [g * keep for g in samples]
            else:
                p.grad_sample = samples * keep
        super().clip_and_accumulate()

    def add_noise(self) -> None:
        """Opacus's stage 4 (noise everywhere), then zero the noise on dropped coordinates."""
        super().add_noise()
        for p in self.params:
            mask = self.masks.get(id(p))
            if mask is not None and p.grad is not None:
                p.grad.mul_(mask.to(p.grad.dtype))


class PrivateTraining(NamedTuple):
    """What `make_private` returns: use these in place of the objects passed in."""

    module: GradSampleModule  # the model, now computing per-sample gradients
    optimizer: SparseDPOptimizer  # the optimizer, now stepping with DP-SGD (+ mask)


def _same_device(a: torch.device, b: torch.device) -> bool:
    # A CUDA generator may report "cuda" where a parameter reports "cuda:0".
    return a.type == b.type and (a.index is None or b.index is None or a.index == b.index)


def _check_module(module: nn.Module) -> None:
    errors = ModuleValidator.validate(module, strict=False)
    if errors:
        listed = "; ".join(str(e) for e in errors)
        raise ValueError(
            f"DP-SGD needs per-sample gradients, which this model does not support: {listed}. "
            "Use a model without batch norm (logreg, mlp or cnn)."
        )


def _parameter_masks(
    module: nn.Module, mask: Mapping[str, torch.Tensor]
) -> dict[nn.Parameter, torch.Tensor]:
    named = {n: p for n, p in module.named_parameters() if p.requires_grad}
    if set(mask) != set(named):
        missing = sorted(set(named) - set(mask))
        extra = sorted(set(mask) - set(named))
        raise ValueError(
            f"mask must name every trainable parameter: missing {missing}, extra {extra}"
        )
    out: dict[nn.Parameter, torch.Tensor] = {}
    for name, p in named.items():
        m = mask[name]
        if m.dtype != torch.bool or m.shape != p.shape or m.device != p.device:
            raise ValueError(
                f"mask[{name!r}] must be a bool tensor shaped {tuple(p.shape)} on {p.device}, "
                f"got {m.dtype} {tuple(m.shape)} on {m.device}"
            )
        out[p] = m
    return out


def make_private(
    *,
    module: nn.Module,
    optimizer: torch.optim.Optimizer,
    noise_multiplier: float,
    max_grad_norm: float,
    expected_batch_size: int,
    noise_generator: torch.Generator,
    mask: Mapping[str, torch.Tensor] | None = None,
    step_hook: Callable[[DPOptimizer], None] | None = None,
) -> PrivateTraining:
    """Wraps a model and its optimizer for DP-SGD with optional random sparsification.

    Everything is validated before anything is wrapped. Afterwards:

    - `module` computes per-sample gradients in its backward pass (Opacus
      `GradSampleModule`, loss reduction "mean");
    - `optimizer.step()` runs mask, clip, sum, noise, scale in that fixed order (see the
      module docstring), calls `step_hook(optimizer)` and steps the wrapped optimizer.

    Training with any other objects voids the guarantee. Call `release` when done: it
    removes Opacus's hooks and per-parameter attributes from the model.

    Args:
        module: the model; every trainable parameter must support per-sample gradients.
        optimizer: an optimizer over exactly the module's trainable parameters.
        noise_multiplier: sigma, the noise std in units of `max_grad_norm`; >= 0.
        max_grad_norm: C, the per-sample clipping norm; > 0.
        expected_batch_size: B, the divisor of the summed gradient; >= 1.
        noise_generator: the source of the Gaussian noise, on the module's device.
        mask: per parameter name, a bool tensor of its shape (True: kept); None: plain
            DP-SGD.
        step_hook: called with the optimizer after every private step (accounting).

    Returns:
        `PrivateTraining(module, optimizer)`.

    Raises:
        ValueError: a model Opacus cannot handle, an optimizer over other parameters, a
            mask that does not fit the parameters, or an out-of-range number.
    """
    if not noise_multiplier >= 0.0:
        raise ValueError(f"noise_multiplier must be >= 0, got {noise_multiplier}")
    if not max_grad_norm > 0.0:
        raise ValueError(f"max_grad_norm must be > 0, got {max_grad_norm}")
    if expected_batch_size < 1:
        raise ValueError(f"expected_batch_size must be >= 1, got {expected_batch_size}")
    _check_module(module)
    trainable = [p for p in module.parameters() if p.requires_grad]
    optimized = [p for group in optimizer.param_groups for p in group["params"]]
    if {id(p) for p in trainable} != {id(p) for p in optimized} or len(optimized) != len(trainable):
        raise ValueError(
            "the optimizer must optimize exactly the module's trainable parameters: "
            "build it as make_optimizer(module.parameters(), ...)"
        )
    if trainable and not _same_device(noise_generator.device, trainable[0].device):
        raise ValueError(
            f"noise_generator is on {noise_generator.device}, the module on "
            f"{trainable[0].device}: create it with torch.Generator(device=...)"
        )
    masks = _parameter_masks(module, mask) if mask is not None else None
    private_module = GradSampleModule(module, loss_reduction="mean")
    private_optimizer = SparseDPOptimizer(
        optimizer,
        masks=masks,
        noise_multiplier=noise_multiplier,
        max_grad_norm=max_grad_norm,
        expected_batch_size=expected_batch_size,
        generator=noise_generator,
    )
    if step_hook is not None:
        private_optimizer.attach_step_hook(step_hook)
    return PrivateTraining(private_module, private_optimizer)


_OPTIMIZER_ATTRS = ("summed_grad",)


def release(private: PrivateTraining) -> nn.Module:
    """Removes Opacus's hooks and per-parameter attributes; returns the plain model.

    Opacus keeps its per-sample buffers as attributes of the model's parameters; releasing
    deletes them (and the optimizer's `summed_grad`) so the model is as it was, apart from
    its trained weights and `.grad`.
    """
    model: Any = private.module.to_standard_module()
    for p in model.parameters():
        for attr in _OPTIMIZER_ATTRS:
            if hasattr(p, attr):
                delattr(p, attr)
    return model
