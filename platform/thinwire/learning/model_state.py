"""What of a model travels: its named floating-point tensors, and their flat vector form.

A `ModelState` is an ordered mapping from a tensor's `state_dict` name to a copy of that
tensor. It holds every parameter *and* every floating-point buffer (BatchNorm's running mean
and variance), because a receiver that averaged only the parameters would evaluate with its
own stale statistics. Integer buffers (BatchNorm's `num_batches_tracked`) stay local: they
count steps, only matter when a BatchNorm layer has `momentum=None` (thinwire's models keep
the default 0.1), and a mean of counters means nothing.

Per-tensor codecs encode each named tensor on its own; model-scope codecs encode
`flatten(state)`, one vector in the same order, and `unflatten` restores the names. A delta
(`state_delta(after, before)`) is what a client sends as a `MODEL_DELTA` update; for buffers
it is the change of the running statistics, so averaging deltas averages the statistics.

Example:
    >>> import torch
    >>> model = torch.nn.Linear(3, 2)
    >>> before = model_state(model)
    >>> list(before)
    ['weight', 'bias']
    >>> flatten(before).shape
    torch.Size([8])
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from thinwire.wire.payload import TensorSpec

__all__ = [
    "ModelState",
    "flatten",
    "load_model_state",
    "model_delta",
    "model_state",
    "state_delta",
    "tensor_specs",
    "unflatten",
]

ModelState = dict[str, torch.Tensor]
"""Named floating-point tensors of a model, in `state_dict` order."""


def _travelling(model: nn.Module) -> dict[str, torch.Tensor]:
    # keep_vars=True returns the live parameters and buffers, which load_model_state writes.
    return {
        name: tensor
        for name, tensor in model.state_dict(keep_vars=True).items()
        if torch.is_floating_point(tensor)
    }


def model_state(model: nn.Module) -> ModelState:
    """Returns detached copies of the model's parameters and floating-point buffers.

    The copies stay on the model's device and keep their dtypes; changing the model later
    does not change them.
    """
    return {name: tensor.detach().clone() for name, tensor in _travelling(model).items()}


def load_model_state(model: nn.Module, state: Mapping[str, torch.Tensor]) -> None:
    """Writes `state` into the model's parameters and floating-point buffers, in place.

    Values are cast to each tensor's dtype and moved to its device. The names and shapes
    must match the model's exactly, so a state from another architecture cannot half-load.

    Raises:
        ValueError: listing missing names, unexpected names and shape mismatches.
    """
    targets = _travelling(model)
    problems = []
    missing = [name for name in targets if name not in state]
    unexpected = [name for name in state if name not in targets]
    if missing:
        problems.append(f"missing {missing}")
    if unexpected:
        problems.append(f"unexpected {unexpected}")
    for name, target in targets.items():
        if name in state and state[name].shape != target.shape:
            problems.append(
                f"{name}: shape {tuple(state[name].shape)}, model has {tuple(target.shape)}"
            )
    if problems:
        raise ValueError(f"model state does not fit the model: {'; '.join(problems)}")
    with torch.no_grad():
        for name, target in targets.items():
            target.copy_(state[name])


def flatten(state: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """Concatenates the tensors of `state`, in order, into one 1-D tensor on their device."""
    if not state:
        raise ValueError("cannot flatten an empty model state")
    return torch.cat([tensor.reshape(-1) for tensor in state.values()])


def unflatten(vector: torch.Tensor, like: Mapping[str, torch.Tensor]) -> ModelState:
    """Splits a flat vector back into tensors named and shaped as `like` (views of `vector`).

    Raises:
        ValueError: `vector` is not 1-D or its length differs from the total size of `like`.
    """
    sizes = [tensor.numel() for tensor in like.values()]
    if vector.dim() != 1 or vector.numel() != sum(sizes):
        raise ValueError(
            f"expected a 1-D vector of {sum(sizes)} values for {len(sizes)} tensors, "
            f"got shape {tuple(vector.shape)}"
        )
    pieces = torch.split(vector, sizes)
    return {
        name: piece.view(tensor.shape)
        for (name, tensor), piece in zip(like.items(), pieces, strict=True)
    }


def state_delta(
    after: Mapping[str, torch.Tensor], before: Mapping[str, torch.Tensor]
) -> ModelState:
    """Returns `after - before` per name (what a client sends as its model delta).

    Raises:
        ValueError: the two states do not have the same names in the same order and shapes.
    """
    _check_alike(after, before)
    return {name: tensor - before[name] for name, tensor in after.items()}


def _check_alike(a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor]) -> None:
    """Raises ValueError unless `a` and `b` name the same tensors, in order, shaped alike."""
    if list(a) != list(b):
        raise ValueError(f"states name different tensors: {list(a)} vs {list(b)}")
    for name, tensor in a.items():
        if tensor.shape != b[name].shape:
            raise ValueError(f"{name}: shape {tuple(tensor.shape)} vs {tuple(b[name].shape)}")


def model_delta(model: nn.Module, base: Mapping[str, torch.Tensor]) -> ModelState:
    """Returns the model's travelling tensors minus `base` (a client's update after training).

    Bit for bit `state_delta(model_state(model), base)`, without that copy of the model. The
    differences lie back to back in one flat buffer, in order, so a model-scope codec reads
    their flat vector as a view instead of concatenating a copy (`ModelCodec`): at 100M
    parameters each of those copies is 381 MiB of a client's peak.

    Raises:
        ValueError: `base` does not name the model's tensors in order with their shapes.
    """
    live = {name: tensor.detach() for name, tensor in _travelling(model).items()}
    _check_alike(live, base)
    dtypes = {torch.result_type(tensor, base[name]) for name, tensor in live.items()}
    devices = {tensor.device for tensor in (*live.values(), *base.values())}
    if len(dtypes) != 1 or len(devices) != 1:  # no one buffer holds them all
        return {name: tensor - base[name] for name, tensor in live.items()}
    flat = torch.empty(
        sum(t.numel() for t in live.values()), dtype=dtypes.pop(), device=devices.pop()
    )
    delta = unflatten(flat, base)
    for name, tensor in live.items():
        torch.sub(tensor, base[name], out=delta[name])
    return delta


def tensor_specs(state: Mapping[str, torch.Tensor]) -> tuple[TensorSpec, ...]:
    """Returns the wire specs (name and shape per tensor) a receiver validates updates against."""
    return tuple(TensorSpec(name, tuple(tensor.shape)) for name, tensor in state.items())
