"""The `Update` wire format: one protobuf message, encoded deterministically, decoded safely.

`encode` turns an `Update` (per-tensor `Payload`s: a support and its values) into bytes;
`decode` rebuilds it from untrusted bytes against the receiver's `TensorSpec`s, raising
`WireError`, and nothing else, for anything malformed, within the caps of `Limits`.

Example:
    >>> import torch
    >>> from thinwire.wire import (
    ...     Kind, Payload, RawValues, SparseSupport, TensorSpec, Update, decode, encode)
    >>> payload = Payload((4,), SparseSupport(torch.tensor([1, 3])),
    ...                   RawValues(torch.tensor([0.5, -2.0])))
    >>> data = encode(Update("client-0", 0, Kind.MODEL_DELTA, {"w": payload}))
    >>> decode(data, [TensorSpec("w", (4,))]).tensors["w"].support.indices
    tensor([1, 3])
"""

from thinwire.wire._errors import WireError
from thinwire.wire._limits import SEEDED_DOMAIN_LIMIT, Limits
from thinwire.wire._multiscale import (
    MULTISCALE_BITS,
    MULTISCALE_MAX_SCALES,
    largest_level,
    multiscale_problem,
)
from thinwire.wire._serialize import decode, encode
from thinwire.wire.payload import (
    DenseSupport,
    FactorSupport,
    Kind,
    MultiScaleValues,
    Payload,
    QuantizedValues,
    RawValues,
    SeededSupport,
    SeedScheme,
    SignValues,
    SparseSupport,
    Support,
    TensorSpec,
    Update,
    Values,
    client_id,
    factors,
)

__all__ = [
    "MULTISCALE_BITS",
    "MULTISCALE_MAX_SCALES",
    "SEEDED_DOMAIN_LIMIT",
    "DenseSupport",
    "FactorSupport",
    "Kind",
    "Limits",
    "MultiScaleValues",
    "Payload",
    "QuantizedValues",
    "RawValues",
    "SeedScheme",
    "SeededSupport",
    "SignValues",
    "SparseSupport",
    "Support",
    "TensorSpec",
    "Update",
    "Values",
    "client_id",
    "factors",
    "largest_level",
    "multiscale_problem",
    "WireError",
    "decode",
    "encode",
]
