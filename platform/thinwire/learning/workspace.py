"""A model on a device that several roles of one process take turns to use.

The simulator runs every client of a run through one `Workspace`: load the client's view of
the model, train, read the result back. Clients therefore keep only their own state
(residuals, policy state), never a model object of their own.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from thinwire.learning.model_state import (
    ModelState,
    load_model_state,
    model_delta,
    model_state,
    tensor_specs,
)
from thinwire.wire.payload import TensorSpec

__all__ = ["Workspace"]


class Workspace:
    """A model module, its device, and the spec of the named tensors that travel."""

    def __init__(self, model: nn.Module, device: torch.device) -> None:
        self.model = model.to(device)
        self.device = device
        self.spec: tuple[TensorSpec, ...] = tensor_specs(model_state(self.model))

    def tensors(self) -> ModelState:
        """Copies of the model's travelling tensors (parameters and float buffers)."""
        return model_state(self.model)

    def delta(self, base: Mapping[str, torch.Tensor]) -> ModelState:
        """The model's travelling tensors minus `base`, without a copy of it (`model_delta`)."""
        return model_delta(self.model, base)

    def load(self, tensors: Mapping[str, torch.Tensor]) -> None:
        """Writes named tensors into the model (names and shapes must match)."""
        load_model_state(self.model, tensors)

    def zeros(self) -> ModelState:
        """Float32 zeros shaped like the travelling tensors, on the device."""
        return {s.name: torch.zeros(s.shape, device=self.device) for s in self.spec}
