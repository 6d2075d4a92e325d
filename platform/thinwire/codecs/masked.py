"""A selector for coordinates chosen outside the codec: a mask the sender installs.

Some methods decide which coordinates an update may occupy before the update exists. DP-SGD
with random sparsification (Zhu & Blaschko, TMLR 2023; `thinwire.privacy`) zeroes every
coordinate outside a public random mask, drawn per round from a seed that all clients share,
so the update it produces lives on that mask. `shared_mask()` sends exactly the mask's
coordinates, and because the mask is a `SeededSupport` the payload carries its 8-byte seed
instead of an index list; the receiver regenerates the coordinates
(`thinwire.codecs.support.seeded_indices`).

The mask reaches the selector through the codec state (STYLE rule 4: public randomness is
state, not a hidden global): the sender calls `install_mask(codec_state, support)` before
encoding, which replaces the `SharedMaskState` wherever it sits in the (possibly wrapped,
per-tensor) state tree. Until a mask is installed the selector keeps every coordinate, which
is also what a drop rate of 0 means. Coordinates outside the mask are dropped like any
sparsifier drops them; wrap the codec in error feedback to carry them to a later round.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import torch

from thinwire.codecs.base import CodecInfo, Selector
from thinwire.codecs.forms import DENSE, constant, seeded_form
from thinwire.codecs.support import seeded_indices
from thinwire.wire.payload import DenseSupport, SeededSupport, SeedScheme, Support

__all__ = ["SharedMaskState", "install_mask", "shared_mask"]


class SharedMaskState(NamedTuple):
    """State of `shared_mask`."""

    support: SeededSupport | None  # the installed mask over the domain; None keeps everything


def shared_mask() -> Selector:
    """Keeps the coordinates of the installed mask and sends the mask's seed, not indices.

    1. The sender installs this round's mask with `install_mask(state, support)`;
    2. `select` returns `support` and the input's values at its coordinates (sorted);
    3. the receiver rebuilds the coordinates from the seed and scatters the values.

    State: the installed `SeededSupport` (None: every coordinate is kept, densely). A mask
    serves one encode: `select` hands back a state without it, so between encodes the state
    is always `SharedMaskState(None)`, the same structure as `init`'s (runtimes that save
    codec states restore them against `init`), and a stale mask can never be sent again.
    The selector is biased (coordinates outside the mask are dropped) and claims no
    contraction bound: the mask is chosen by the caller, not from the input.

    Returns:
        A `Selector` emitting the installed `SeededSupport`, or a `DenseSupport` before any.

    Example:
        >>> import torch
        >>> from thinwire.codecs import chain
        >>> from thinwire.wire.payload import SeededSupport, SeedScheme
        >>> codec = chain(shared_mask())
        >>> x = torch.arange(8.0)
        >>> state = install_mask(codec.init(x), SeededSupport(5, SeedScheme.RANDOM_K, 3))
        >>> payload, _ = codec.encode(x, state)
        >>> payload.support.seed, payload.count
        (5, 3)
    """

    def init(n: int, device: torch.device) -> SharedMaskState:
        del n, device
        return SharedMaskState(None)

    def select(
        y: torch.Tensor, state: SharedMaskState
    ) -> tuple[Support, torch.Tensor, SharedMaskState]:
        if state.support is None:
            return DenseSupport(), y, state
        kept = y[seeded_indices(state.support, y.numel(), y.device)]
        return state.support, kept, SharedMaskState(None)

    supports = constant(DENSE, seeded_form(SeedScheme.RANDOM_K))
    return Selector(init, select, CodecInfo(unbiased=False), name="shared_mask", supports=supports)


def install_mask(state: Any, support: SeededSupport | None) -> Any:
    """Returns `state` with every `SharedMaskState` in it holding `support`.

    Walks NamedTuples, tuples, lists and string-keyed mappings (the shapes codec states
    take: wrappers around chains, one entry per tensor in a `ModelCodec`); other leaves
    are returned as they are.

    Raises:
        ValueError: if `state` holds no `SharedMaskState` (the codec has no shared_mask
            selector, so the mask would silently be ignored).
    """
    found = False

    def walk(node: Any) -> Any:
        nonlocal found
        if isinstance(node, SharedMaskState):
            found = True
            return SharedMaskState(support)
        if isinstance(node, tuple) and hasattr(node, "_fields"):
            return type(node)(*(walk(v) for v in node))
        if isinstance(node, tuple | list):
            return type(node)(walk(v) for v in node)
        if isinstance(node, Mapping):
            return {k: walk(v) for k, v in node.items()}
        return node

    result = walk(state)
    if not found:
        raise ValueError(
            "install_mask: the codec state has no shared_mask selector; "
            "configure codec.select: {kind: shared_mask}"
        )
    return result
