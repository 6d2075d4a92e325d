"""Local SGD without `torch.optim`: the same arithmetic, none of its start-up cost.

Building or stepping any `torch.optim.Optimizer` imports `torch._dynamo` (its methods are
wrapped to opt out of compilation), which costs about a second of CPU in a fresh process.
A Flower ClientApp is a fresh process for every message, so that second is paid on every
round by every client. `PlainSGD` performs exactly the update of `torch.optim.SGD`'s
single-tensor path (the one it takes for CPU tensors), operation for operation, so the
models it trains are bit-identical to those `torch.optim.SGD` trains on the CPU; on CUDA,
`torch.optim.SGD` takes its multi-tensor path by default, which may round differently.

Only plain training uses it: DP-SGD wraps a real `torch.optim.SGD` with Opacus.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

__all__ = ["PlainSGD"]


class PlainSGD:
    """SGD with optional heavy-ball or Nesterov momentum and weight decay (no dampening).

    For each parameter p with gradient g, as `torch.optim.SGD`:
    1. g <- g + weight_decay * p
    2. with momentum: b <- g on the first step, else b <- momentum * b + g;
       g <- g + momentum * b (Nesterov) or g <- b
    3. p <- p - lr * g

    Args:
        parameters: the parameters to train.
        lr: learning rate (> 0).
        momentum: momentum factor in [0, 1).
        nesterov: Nesterov momentum (needs momentum > 0).
        weight_decay: L2 penalty (>= 0).
    """

    def __init__(
        self,
        parameters: Iterable[torch.nn.Parameter],
        *,
        lr: float,
        momentum: float = 0.0,
        nesterov: bool = False,
        weight_decay: float = 0.0,
    ) -> None:
        if not lr > 0 or not 0.0 <= momentum < 1.0 or not weight_decay >= 0:
            raise ValueError(
                f"need lr > 0, 0 <= momentum < 1, weight_decay >= 0; got {lr}, {momentum}, "
                f"{weight_decay}"
            )
        if nesterov and momentum == 0.0:
            raise ValueError("nesterov needs momentum > 0")
        self.parameters = list(parameters)
        self.lr, self.momentum, self.nesterov = lr, momentum, nesterov
        self.weight_decay = weight_decay
        self.buffers: list[torch.Tensor | None] = [None] * len(self.parameters)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Forgets the gradients (sets them to None; zeroing in place is not supported)."""
        if not set_to_none:
            raise ValueError("PlainSGD.zero_grad only sets gradients to None")
        for parameter in self.parameters:
            parameter.grad = None

    @torch.no_grad()
    def step(self) -> None:
        """One update of every parameter that has a gradient."""
        for i, parameter in enumerate(self.parameters):
            grad = parameter.grad
            if grad is None:
                continue
            if self.weight_decay != 0:
                grad = grad.add(parameter, alpha=self.weight_decay)
            if self.momentum != 0:
                buffer = self.buffers[i]
                if buffer is None:
                    buffer = grad.detach().clone()
                    self.buffers[i] = buffer
                else:
                    buffer.mul_(self.momentum).add_(grad, alpha=1)
                grad = grad.add(buffer, alpha=self.momentum) if self.nesterov else buffer
            parameter.add_(grad, alpha=-self.lr)
