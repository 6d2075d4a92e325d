"""The codec interface: stages with explicit state, chained into a `Codec`.

A codec turns one tensor into a `Payload` and back. It is built from up to three *stages*,
applied in this order (the design card's `transform -> select -> quantize`; `pack` is the
wire encoder's job):

- a `Transform` maps the flattened tensor into another domain (identity, wavelet);
- a `Selector` picks the coordinates that travel (top-k, random-k, ...);
- a `Quantizer` writes the picked values (fp32 / fp16, QSGD levels, scaled signs).

Each stage is a NamedTuple of pure functions; anything that changes between calls (a
random seed's counter, a density estimate) lives in a state value the caller threads
through, as in optax's gradient transformations. `chain` validates the order and returns a
`Codec`; cross-cutting behaviour such as error feedback wraps a `Codec` and returns a `Codec`
(`thinwire.codecs.feedback`), it is never a flag on a stage.

What one call must know but no state should keep (DP random sparsification's mask for
this round, decided outside the codec) is a per-call argument, `EncodeArgs`, the third
argument of `encode` (optax's `extra_args`): `chain` hands it to a selector that declares
`per_call=True`, every wrapper forwards it to the codec it wraps, and stages that read
nothing from it never see it.

A selector declares the supports it emits (`supports(n)`, by domain size: a top-k of a
tensor smaller than 1 / density keeps every coordinate and goes dense) and a quantizer its
values form (`thinwire.codecs.forms`); the chained codec's `forms(shape)` is what a receiver
accepts, checked before decode runs. A stage that declares nothing (a plugin's) lets any
form through to its own decoder, which must then refuse what it cannot read with a
`WireError`.

Example:
    >>> import torch
    >>> from thinwire.codecs import chain, top_k, cast
    >>> codec = chain(top_k(density=0.25), cast("fp16"))
    >>> x = torch.tensor([0.1, -4.0, 0.2, 3.0])
    >>> state = codec.init(x)
    >>> payload, state = codec.encode(x, state)
    >>> codec.decode(payload, x.shape)
    tensor([ 0., -4.,  0.,  0.])
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol, cast

import torch

from thinwire.codecs.forms import DENSE, Forms, constant, raw_form, undeclared, values_form
from thinwire.codecs.support import scatter
from thinwire.wire import WireError
from thinwire.wire.payload import (
    DenseSupport,
    Payload,
    RawValues,
    SeededSupport,
    Support,
    Values,
)

__all__ = [
    "Codec",
    "CodecInfo",
    "EmptyState",
    "Encode",
    "EncodeArgs",
    "NO_ARGS",
    "Quantizer",
    "Selector",
    "Transform",
    "chain",
]


class EmptyState(NamedTuple):
    """State of a stage that keeps none."""


class EncodeArgs(NamedTuple):
    """Per-call inputs of one encode that are not state: decided outside the codec, used once.

    Forwarded unchanged by `chain` (to a `per_call` selector) and by every wrapper, so a
    wrapped, chained, per-tensor codec receives them wherever its stage sits.
    """

    mask: SeededSupport | None = None
    """The coordinates this call must send (DP random sparsification's round mask, over the
    codec's domain), read by `shared_mask`; None: the selector keeps every coordinate."""


NO_ARGS = EncodeArgs()
"""The per-call arguments of a call that passes none."""


class Encode(Protocol):
    """A codec's encode: `encode(x, state, args=NO_ARGS) -> (payload, state)`.

    STYLE rule 1's encode plus the call's `EncodeArgs`, which a wrapper passes on to the
    codec it wraps.
    """

    def __call__(
        self, x: torch.Tensor, state: Any, args: EncodeArgs = NO_ARGS, /
    ) -> tuple[Payload, Any]:
        """Encodes `x` from `state`; returns the payload and the advanced state."""
        ...


SelectFn = Callable[[torch.Tensor, Any], tuple[Support, torch.Tensor, Any]]
"""`select(y, state) -> (support, kept values, state)`."""
SelectWithArgs = Callable[[torch.Tensor, Any, EncodeArgs], tuple[Support, torch.Tensor, Any]]
"""`select(y, state, args) -> (support, kept values, state)`: a `per_call` selector's."""


class CodecInfo(NamedTuple):
    """What a codec guarantees, so tests and users can check it.

    `delta(n)`: a contraction bound, E||C(x) - x||^2 <= (1 - delta) ||x||^2 for every x of
    n coordinates; None where no such bound is known. `omega(n)`: for an unbiased codec,
    E||C(x) - x||^2 <= omega ||x||^2. `lossless`: decode(encode(x)) == x exactly.
    """

    unbiased: bool
    delta: Callable[[int], float] | None = None
    omega: Callable[[int], float] | None = None
    lossless: bool = False


LOSSLESS = CodecInfo(unbiased=True, delta=lambda n: 1.0, omega=lambda n: 0.0, lossless=True)


class Transform(NamedTuple):
    """An invertible map of the flattened tensor into the domain that is compressed."""

    forward: Callable[[torch.Tensor], torch.Tensor]  # (n,) -> (size(n),)
    inverse: Callable[[torch.Tensor, int], torch.Tensor]  # (size(n),), n -> (n,)
    size: Callable[[int], int]  # n -> length of the transformed vector
    name: str = "transform"


class Selector(NamedTuple):
    """Picks the coordinates that travel and returns them with their values."""

    init: Callable[[int, torch.device], Any]  # domain size, device -> state
    select: SelectFn | SelectWithArgs  # SelectWithArgs exactly when `per_call`
    info: CodecInfo
    name: str = "selector"
    # domain size n -> the support forms it emits there (`thinwire.codecs.forms`); None:
    # not declared
    supports: Callable[[int], frozenset[str]] | None = None
    per_call: bool = False  # select takes the call's `EncodeArgs` as a third argument


class Quantizer(NamedTuple):
    """Writes the picked values; `dequantize` returns them as float32."""

    init: Callable[[torch.device], Any]  # device -> state
    quantize: Callable[[torch.Tensor, Any], tuple[Values, Any]]
    dequantize: Callable[[Values], torch.Tensor]
    info: CodecInfo
    name: str = "quantizer"
    values: str | None = None  # the values form it emits (`thinwire.codecs.forms`)


class Codec(NamedTuple):
    """A complete tensor codec.

    - `init(template) -> state`: the state for tensors shaped like `template` (on its device);
    - `encode(x, state, args=NO_ARGS) -> (payload, state)`: sender side, stays on x's
      device; `args` are the call's `EncodeArgs`, which wrappers forward;
    - `decode(payload, shape) -> x_hat`: receiver side, on the payload's device, shaped `shape`;
    - `wire_shape(shape)`: the shape of the domain its payloads index (for wire validation);
    - `transform`: the transform stage, None when payloads index the tensor's own
      coordinates (wrappers such as DGC's momentum masking need those);
    - `forms`: the payload forms encode emits, which receivers check before decode runs.

    `decode` raises only `WireError` for a payload that `thinwire.wire.decode` accepted.
    """

    init: Callable[[torch.Tensor], Any]
    encode: Encode
    decode: Callable[[Payload, tuple[int, ...]], torch.Tensor]
    wire_shape: Callable[[tuple[int, ...]], tuple[int, ...]]
    info: CodecInfo
    name: str = "codec"
    transform: Transform | None = None
    forms: Callable[[tuple[int, ...]], Forms] = undeclared  # tensor shape -> forms


class ChainState(NamedTuple):
    """State of a chained codec."""

    selector: Any  # the selector's state (EmptyState without a selector)
    quantizer: Any  # the quantizer's state (EmptyState without a quantizer)


def _keep_all() -> Selector:
    def init(n: int, device: torch.device) -> EmptyState:
        del n, device
        return EmptyState()

    def select(y: torch.Tensor, state: EmptyState) -> tuple[Support, torch.Tensor, EmptyState]:
        return DenseSupport(), y, state

    return Selector(init, select, LOSSLESS, name="dense", supports=constant(DENSE))


def _fp32() -> Quantizer:
    def init(device: torch.device) -> EmptyState:
        del device
        return EmptyState()

    def quantize(v: torch.Tensor, state: EmptyState) -> tuple[Values, EmptyState]:
        return RawValues(v.float()), state

    def dequantize(values: Values) -> torch.Tensor:
        if not isinstance(values, RawValues):
            raise WireError(f"fp32 decodes plain values, got {values_form(values)}")
        return values.data.float()

    return Quantizer(
        init, quantize, dequantize, LOSSLESS, name="fp32", values=raw_form(torch.float32)
    )


def _combined_info(infos: list[CodecInfo]) -> CodecInfo:
    lossless = all(i.lossless for i in infos)
    if lossless:
        return LOSSLESS
    lossy = [i for i in infos if not i.lossless]
    if len(lossy) == 1:
        return lossy[0]
    # A selector S then a quantizer Q on the k <= n kept values. A contractive selector keeps
    # the values it picks, so ||x - S(x)||^2 = ||x||^2 - ||y||^2 with y = S(x), and Q errs
    # only on the support: ||x - Q(y)||^2 = ||x||^2 - ||y||^2 + ||y - Q(y)||^2
    # <= ||x||^2 - d_Q(k) ||y||^2 <= (1 - d_Q(k) d_S(n)) ||x||^2. Every thinwire quantizer's
    # d_Q is non-increasing, so d = d_S(n) d_Q(n) is a valid (loose) bound. Independent
    # unbiased stages compose to an unbiased codec with 1 + omega <= (1 + omega_S(n)) *
    # (1 + omega_Q(k)), and omega_Q is non-decreasing, so omega_Q(n) may stand for it.
    selector, quantizer = lossy
    delta = omega = None
    if selector.delta is not None and quantizer.delta is not None:
        d_s, d_q = selector.delta, quantizer.delta

        def delta(n: int) -> float:
            return d_s(n) * d_q(n)

    unbiased = selector.unbiased and quantizer.unbiased
    if unbiased and selector.omega is not None and quantizer.omega is not None:
        w_s, w_q = selector.omega, quantizer.omega

        def omega(n: int) -> float:
            return (1.0 + w_s(n)) * (1.0 + w_q(n)) - 1.0

    return CodecInfo(unbiased=unbiased, delta=delta, omega=omega)


def chain(*stages: Transform | Selector | Quantizer) -> Codec:
    """Builds a codec from stages given in pipeline order: [transform] [selector] [quantizer].

    Missing stages default to identity / keep-all / fp32. A stage out of order, or two of the
    same role, raises `ValueError`.

    Args:
        *stages: at most one of each role, in the order transform, selector, quantizer.

    Returns:
        The `Codec` applying the stages in turn; decode undoes them in reverse.
    """
    order = (Transform, Selector, Quantizer)
    ranks = [next(i for i, role in enumerate(order) if isinstance(s, role)) for s in stages]
    if ranks != sorted(set(ranks)) or len(ranks) != len(stages):
        given = ", ".join(type(s).__name__ for s in stages)
        raise ValueError(
            f"chain() takes at most one Transform, Selector and Quantizer, in that order; "
            f"got ({given}). Example: chain(wavelet('sym2', 4), top_k(0.01), cast('fp16'))"
        )
    transform = next((s for s in stages if isinstance(s, Transform)), None)
    selector = next((s for s in stages if isinstance(s, Selector)), _keep_all())
    quantizer = next((s for s in stages if isinstance(s, Quantizer)), _fp32())

    def domain(shape: tuple[int, ...]) -> tuple[int, ...]:
        return shape if transform is None else (transform.size(math.prod(shape)),)

    def init(template: torch.Tensor) -> ChainState:
        n = math.prod(domain(tuple(template.shape)))
        return ChainState(selector.init(n, template.device), quantizer.init(template.device))

    def select(y: torch.Tensor, state: Any, args: EncodeArgs) -> tuple[Support, torch.Tensor, Any]:
        if selector.per_call:
            return cast(SelectWithArgs, selector.select)(y, state, args)
        return cast(SelectFn, selector.select)(y, state)

    def encode(
        x: torch.Tensor, state: ChainState, args: EncodeArgs = NO_ARGS
    ) -> tuple[Payload, ChainState]:
        y = x.reshape(-1) if transform is None else transform.forward(x.reshape(-1))
        support, kept, selector_state = select(y, state.selector, args)
        values, quantizer_state = quantizer.quantize(kept, state.quantizer)
        payload = Payload(domain(tuple(x.shape)), support, values)
        return payload, ChainState(selector_state, quantizer_state)

    def decode(payload: Payload, shape: tuple[int, ...]) -> torch.Tensor:
        kept = quantizer.dequantize(payload.values)
        y = scatter(payload.support, kept, payload.numel)
        x = y if transform is None else transform.inverse(y, math.prod(shape))
        return x.reshape(shape)

    names = [s.name for s in (transform, selector, quantizer) if s is not None]
    info = _combined_info([selector.info, quantizer.info])
    values = frozenset({quantizer.values}) if quantizer.values is not None else None

    def forms(shape: tuple[int, ...]) -> Forms:
        supports = selector.supports
        n = math.prod(domain(shape))
        return Forms(supports(n) if supports is not None else None, values)

    return Codec(
        init, encode, decode, domain, info, name="+".join(names), transform=transform, forms=forms
    )
