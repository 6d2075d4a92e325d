"""A codec for a whole model: one tensor codec per parameter, or one for the flat vector.

Roles exchange *named tensors* (a model, a model delta). `ModelCodec` applies a tensor codec
built from a `CodecConfig` to each of them, with `scope`:

- `tensor`: one payload per named tensor (layer-wise selection, as most papers do);
- `model`: one payload named `model` for the concatenation of all tensors in order (global
  top-k across layers; JWINS' wavelet transform of the whole model).

Each tensor gets its own codec instance with a seed derived from the run seed and the
tensor's position, so seeded selections of different tensors are independent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from thinwire.codecs.base import NO_ARGS, Codec, EncodeArgs
from thinwire.codecs.forms import Forms
from thinwire.codecs.registry import build
from thinwire.config import CodecConfig
from thinwire.seeding import tensor_seed
from thinwire.wire.payload import Payload, TensorSpec

__all__ = ["FLAT_NAME", "ModelCodec"]

FLAT_NAME = "model"
"""Name of the single payload of a model-scope codec."""

Tensors = Mapping[str, torch.Tensor]


class ModelCodec:
    """Encodes and decodes named tensors shaped like `spec` with one codec configuration.

    The object is immutable; per-tensor codec state is a plain dict the caller threads
    through `encode` (see `init`).
    """

    def __init__(self, config: CodecConfig, spec: Sequence[TensorSpec], *, seed: int) -> None:
        self.config = config
        self.spec = tuple(spec)
        self.scope = config.scope
        if self.scope == "tensor":
            keys = [(s.name, s.shape) for s in self.spec]
        else:
            keys = [(FLAT_NAME, (sum(s.numel for s in self.spec),))]
        self._codecs: dict[str, Codec] = {
            name: build(config, seed=tensor_seed(seed, i)) for i, (name, _) in enumerate(keys)
        }
        self._shapes = dict(keys)
        self.wire_spec = tuple(
            TensorSpec(name, self._codecs[name].wire_shape(shape)) for name, shape in keys
        )
        """What a receiver passes to `thinwire.wire.decode` for these payloads."""
        self.forms: dict[str, Forms] = {
            name: self._codecs[name].forms(shape) for name, shape in keys
        }
        """The payload forms each tensor's codec sends (`thinwire.codecs.forms.check_forms`)."""

    @classmethod
    def dense(cls, spec: Sequence[TensorSpec]) -> ModelCodec:
        """The lossless codec that carries full models (fp32, every coordinate)."""
        return cls(CodecConfig(), spec, seed=0)

    @property
    def lossless(self) -> bool:
        """Whether decode(encode(x)) == x for every input."""
        return all(c.info.lossless for c in self._codecs.values())

    def _inputs(self, tensors: Tensors) -> dict[str, torch.Tensor]:
        if self.scope == "tensor":
            return {s.name: tensors[s.name] for s in self.spec}
        ordered = [tensors[s.name] for s in self.spec]
        flat = _joined(ordered)
        if flat is None:
            flat = torch.cat([x.reshape(-1) for x in ordered])
        return {FLAT_NAME: flat}

    def init(self, template: Tensors) -> dict[str, Any]:
        """Fresh codec state for tensors like `template` (on their device)."""
        return {name: self._codecs[name].init(x) for name, x in self._inputs(template).items()}

    def encode(
        self, tensors: Tensors, state: dict[str, Any], args: EncodeArgs = NO_ARGS
    ) -> tuple[dict[str, Payload], dict[str, Any]]:
        """Payloads for `tensors` and the advanced state; `args` go to every tensor's codec."""
        payloads: dict[str, Payload] = {}
        new_state: dict[str, Any] = {}
        for name, x in self._inputs(tensors).items():
            payloads[name], new_state[name] = self._codecs[name].encode(x, state[name], args)
        return payloads, new_state

    def decode(
        self, payloads: Mapping[str, Payload], device: torch.device
    ) -> dict[str, torch.Tensor]:
        """Named tensors (float32, on `device`) from payloads produced by `encode`.

        Untrusted payloads go through `thinwire.codecs.receive.open_payloads` instead, which
        checks their forms first and the decoded numbers after.
        """
        decoded = {
            name: codec.decode(payloads[name].to(device), self._shapes[name])
            for name, codec in self._codecs.items()
        }
        if self.scope == "tensor":
            return decoded
        flat = decoded[FLAT_NAME]
        out: dict[str, torch.Tensor] = {}
        offset = 0
        for s in self.spec:
            out[s.name] = flat[offset : offset + s.numel].reshape(s.shape)
            offset += s.numel
        return out


def _joined(tensors: Sequence[torch.Tensor]) -> torch.Tensor | None:
    """The flat vector `tensors` already form back to back in one buffer, as a view; else None.

    A client's update is laid out so (`thinwire.learning.model_delta`): the model-scope
    codec then reads it without a model-sized copy.
    """
    first = tensors[0]
    storage = first.untyped_storage().data_ptr()
    offset = first.storage_offset()
    for x in tensors:
        if (
            x.dtype != first.dtype
            or x.device != first.device
            or not x.is_contiguous()
            or x.untyped_storage().data_ptr() != storage
            or x.storage_offset() != offset
        ):
            return None
        offset += x.numel()
    return first.as_strided((offset - first.storage_offset(),), (1,))
