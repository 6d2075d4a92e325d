"""Keeping a client's `ClientState` in Flower's `context.state` between messages.

Flower starts a fresh ClientApp process for every message, so nothing a client keeps between
rounds (error-feedback residuals, policy state, its copy of the global model, the last update
it sent) survives in memory: it lives in `context.state`, the `RecordDict` a SuperNode keeps
per run. The state is flattened with `thinwire.statetree` into `path -> leaf` and stored as
two records:

- `thinwire.tensors` (ArrayRecord): one Array per tensor leaf, holding the tensor's raw
  bytes with its dtype and shape (stype `thinwire/tensor`). Exact for every dtype, bf16
  included, with no NumPy round trip.
- `thinwire.scalars` (ConfigRecord): the JSON text of every other leaf, so 64-bit seeds
  beyond int64, floats (bit for bit), strings and `None` all come back as they were.

Restoring rebuilds the tree against the client's initial state, which also validates it
(every key present, every tensor of the expected shape and dtype). Two parts of a
`ClientState` change shape over a run: `carry` (empty, or one tensor shaped like each model
tensor) and `pending` (the bytes of the last update, whose length is taken as saved). The
`view` may be left out (see `save_state`); the initial state's then stands in for it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, ConfigRecordValues, RecordDict

from thinwire.clients.client import ClientState
from thinwire.statetree import Leaf, flatten, unflatten

__all__ = ["TENSOR_STYPE", "load_state", "save_state"]

TENSOR_STYPE = "thinwire/tensor"
"""The `Array.stype` of a tensor stored as raw bytes."""

_TENSORS = "thinwire.tensors"
_SCALARS = "thinwire.scalars"
_DTYPES = {
    str(dtype).removeprefix("torch."): dtype
    for dtype in (
        torch.float64,
        torch.float32,
        torch.float16,
        torch.bfloat16,
        torch.int64,
        torch.int32,
        torch.int16,
        torch.int8,
        torch.uint8,
        torch.bool,
    )
}


def save_state(state: ClientState, records: RecordDict, *, with_view: bool = True) -> None:
    """Writes `state` into `records` (a `context.state`), replacing what was there.

    Args:
        state: the client's state after a round.
        records: the `context.state` of the client's SuperNode.
        with_view: keep the client's copy of the global model. Without a downlink codec
            every downlink is the full model, which replaces the copy, so leaving it out
            halves what travels between the SuperNode and the ClientApp each message.
    """
    tensors: dict[str, Array] = {}
    scalars: dict[str, ConfigRecordValues] = {}
    for path, leaf in flatten(state if with_view else state._replace(view={})).items():
        if isinstance(leaf, torch.Tensor):
            tensors[path] = _tensor_array(leaf)
        else:
            scalars[path] = json.dumps(leaf)
    records[_TENSORS] = ArrayRecord(tensors)
    records[_SCALARS] = ConfigRecord(scalars)


def load_state(
    records: RecordDict, initial: ClientState, model: Mapping[str, torch.Tensor]
) -> ClientState | None:
    """The state `save_state` wrote into `records`, or None if it holds none yet.

    Args:
        records: the `context.state` of the client's SuperNode.
        initial: the client's `initial_state()`; the template the state must match.
        model: the model's tensors (their names, shapes and dtypes shape `carry`).

    Raises:
        ValueError: if the stored state does not fit this client (another model or codec).
    """
    if _TENSORS not in records.array_records or _SCALARS not in records.config_records:
        return None
    flat: dict[str, Leaf] = {
        path: _array_tensor(path, array) for path, array in records.array_records[_TENSORS].items()
    }
    for path, text in records.config_records[_SCALARS].items():
        if not isinstance(text, str):
            raise ValueError(f"stored client state {path!r} is not JSON text")
        flat[path] = json.loads(text)
    pending = flat.get("pending")
    if not isinstance(pending, torch.Tensor) or pending.dtype != torch.uint8 or pending.ndim != 1:
        raise ValueError("stored client state has no 'pending' byte tensor")
    carried = any(path.startswith("carry/") and path != "carry/" for path in flat)
    viewless = "view/" in flat  # saved with_view=False: the initial view stands in
    template = initial._replace(
        view={} if viewless else initial.view,
        carry=_zeros_like(model) if carried else {},
        pending=torch.empty_like(pending),
    )
    state: ClientState = unflatten(template, flat)
    return state._replace(view=initial.view) if viewless else state


def _zeros_like(tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: torch.zeros_like(v) for k, v in tensors.items()}


def _tensor_array(tensor: torch.Tensor) -> Array:
    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    data = flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
    dtype = str(tensor.dtype).removeprefix("torch.")
    if dtype not in _DTYPES:
        raise TypeError(f"cannot store a {dtype} tensor in the client state")
    return Array(dtype=dtype, shape=tuple(tensor.shape), stype=TENSOR_STYPE, data=data)


def _array_tensor(path: str, array: Array) -> torch.Tensor:
    dtype = _DTYPES.get(array.dtype)
    if array.stype != TENSOR_STYPE or dtype is None:
        raise ValueError(
            f"stored client state {path!r}: expected a {TENSOR_STYPE!r} array, "
            f"got stype {array.stype!r} and dtype {array.dtype!r}"
        )
    shape = tuple(array.shape)
    numel = 1
    for size in shape:
        numel *= size
    data = bytes(array.data)
    if len(data) != numel * dtype.itemsize:
        raise ValueError(f"stored client state {path!r}: {len(data)} bytes for {dtype} {shape}")
    if not data:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).view(dtype).reshape(shape)
