"""A selector for coordinates chosen outside the codec: the mask the caller passes per call.

Some methods decide which coordinates an update may occupy before the update exists. DP-SGD
with random sparsification (Zhu & Blaschko, TMLR 2023; `thinwire.privacy`) zeroes every
coordinate outside a public random mask, drawn per round from a seed that all clients share,
so the update it produces lives on that mask. `shared_mask()` sends exactly the mask's
coordinates, and because the mask is a `SeededSupport` the payload carries its 8-byte seed
instead of an index list; the receiver regenerates the coordinates
(`thinwire.codecs.support.seeded_indices`).

The mask reaches the selector as a per-call argument (STYLE rule 4: public randomness is
explicit, not a hidden global): the sender encodes with `EncodeArgs(mask=support)`, which
`chain` and every wrapper forward to this selector wherever it sits (optax's extra args),
so nothing outside the codec rewrites its state. Without a mask the selector keeps every
coordinate, which is also what a drop rate of 0 means. Coordinates outside the mask are
dropped like any sparsifier drops them; wrap the codec in error feedback to carry them to a
later round.
"""

from __future__ import annotations

import torch

from thinwire.codecs.base import CodecInfo, EmptyState, EncodeArgs, Selector
from thinwire.codecs.forms import DENSE, constant, seeded_form
from thinwire.codecs.support import seeded_indices
from thinwire.wire.payload import DenseSupport, SeedScheme, Support

__all__ = ["shared_mask"]


def shared_mask() -> Selector:
    """Keeps the coordinates of the call's mask and sends the mask's seed, not indices.

    1. The sender encodes with `EncodeArgs(mask=support)`, this round's mask;
    2. `select` returns `support` and the input's values at its coordinates (sorted);
    3. the receiver rebuilds the coordinates from the seed and scatters the values.

    State: none (`EmptyState`); the mask is the call's, so a stale one can never be sent
    again. Without a mask (`args.mask` None) every coordinate is kept, densely. The selector
    is biased (coordinates outside the mask are dropped) and claims no contraction bound:
    the mask is chosen by the caller, not from the input.

    Returns:
        A `per_call` `Selector` emitting the call's `SeededSupport`, or a `DenseSupport`
        without one.

    Example:
        >>> import torch
        >>> from thinwire.codecs import EncodeArgs, chain
        >>> from thinwire.wire.payload import SeededSupport, SeedScheme
        >>> codec = chain(shared_mask())
        >>> x = torch.arange(8.0)
        >>> mask = SeededSupport(5, SeedScheme.RANDOM_K, 3)
        >>> payload, _ = codec.encode(x, codec.init(x), EncodeArgs(mask=mask))
        >>> payload.support.seed, payload.count
        (5, 3)
    """

    def init(n: int, device: torch.device) -> EmptyState:
        del n, device
        return EmptyState()

    def select(
        y: torch.Tensor, state: EmptyState, args: EncodeArgs
    ) -> tuple[Support, torch.Tensor, EmptyState]:
        if args.mask is None:
            return DenseSupport(), y, state
        kept = y[seeded_indices(args.mask, y.numel(), y.device)]
        return args.mask, kept, state

    supports = constant(DENSE, seeded_form(SeedScheme.RANDOM_K))
    return Selector(
        init,
        select,
        CodecInfo(unbiased=False),
        name="shared_mask",
        supports=supports,
        per_call=True,
    )
