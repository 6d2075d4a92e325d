"""The one receive path: form check, codec decode, and a bound on the decoded numbers.

Every role that decodes an update from someone else (the server for client updates, a
client for the server's compressed downlink, a gossip node for its neighbours' corrections)
calls `open_payloads` on what `thinwire.wire.decode` returned. It runs three checks in order,
each a `WireError` subclass, so a receiver counts and logs a refusal the same way whatever
the cause:

1. `FormError` (`thinwire.codecs.forms`): a payload whose support or values form the
   receiver's codec does not send, refused before any codec code runs;
2. the codec's decode, which raises only `WireError` for what the wire accepted;
3. `BoundError`: decoded numbers that are not finite, or whose l2 norm exceeds the bound
   the receiver chose. Finite inputs can still decode to infinities (a wavelet inverse or a
   QSGD product at the edge of float32), and finite but huge values (1e30) poison whatever
   they are added to.

The bound is relative to what the receiver holds: `norm_bound(reference, ratio)` allows
`ratio * max(||reference||, 1)`, so it follows the model's scale and still admits the first
updates of a model that starts at zero.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import torch

from thinwire.codecs.forms import check_forms
from thinwire.codecs.model import ModelCodec
from thinwire.wire import Payload, WireError

__all__ = ["BoundError", "check_bounded", "l2_norm", "norm_bound", "open_payloads"]


class BoundError(WireError):
    """Decoded numbers that are not finite or exceed the receiver's norm bound."""


def l2_norm(tensors: Iterable[torch.Tensor]) -> float:
    """The l2 norm of several tensors taken as one vector, accumulated in float64.

    Infinite when a value is (or the float32 values' norm would be) out of float64 range;
    NaN when a value is NaN.
    """
    total = 0.0
    for x in tensors:
        total += float(torch.linalg.vector_norm(x.detach(), dtype=torch.float64)) ** 2
    return math.sqrt(total)


def norm_bound(reference: Mapping[str, torch.Tensor] | torch.Tensor, ratio: float) -> float:
    """`ratio * max(||reference||, 1)`: the largest update norm a receiver accepts."""
    tensors = [reference] if isinstance(reference, torch.Tensor) else list(reference.values())
    return ratio * max(l2_norm(tensors), 1.0)


def check_bounded(
    tensors: Mapping[str, torch.Tensor], max_norm: float | None, *, what: str = "update"
) -> None:
    """Refuses non-finite values, and (unless `max_norm` is None) an l2 norm above `max_norm`.

    Raises:
        BoundError: naming the first non-finite tensor, or the norm and the bound.
    """
    for name, x in tensors.items():
        if not bool(torch.isfinite(x).all()):
            raise BoundError(f"tensor {name!r}: the decoded {what} is not finite")
    if max_norm is None:
        return
    norm = l2_norm(tensors.values())
    if not norm <= max_norm:
        raise BoundError(
            f"the decoded {what} has l2 norm {norm:.4g}, above this receiver's bound {max_norm:.4g}"
        )


def open_payloads(
    codec: ModelCodec,
    payloads: Mapping[str, Payload],
    device: torch.device,
    *,
    max_norm: float | None,
    what: str = "update",
) -> dict[str, torch.Tensor]:
    """Checks the payloads' forms, decodes them with `codec`, and bounds the result.

    Args:
        codec: the codec this receiver expects the sender to use.
        payloads: one message's payloads as `thinwire.wire.decode` returned them (decoded
            against `codec.wire_spec`).
        device: where the decoded tensors go.
        max_norm: the largest l2 norm accepted (see `norm_bound`); None checks only that
            every value is finite.
        what: what the payloads are, for error messages ("update", "downlink", ...).

    Returns:
        The named float32 tensors, each finite, shaped as the codec's spec says.

    Raises:
        WireError: `FormError`, the codec's own `WireError`, or `BoundError`.
    """
    check_forms(payloads, codec.forms)
    decoded = codec.decode(payloads, device)
    check_bounded(decoded, max_norm, what=what)
    return decoded
