"""The one exception `thinwire.wire.decode` raises."""

from __future__ import annotations

__all__ = ["WireError"]


class WireError(ValueError):
    """Bytes that are not a valid `Update` for the receiver's spec.

    The message names the tensor when there is one, then the problem, e.g.
    ``tensor 'fc.weight': sparse index 1048577 out of range [0, 1048576)``. Receivers count and
    log it, drop the update, and carry on; nothing else escapes `decode`.
    """
