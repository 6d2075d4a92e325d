"""Payload forms: what a codec sends, named, so a receiver can refuse anything else up front.

`thinwire.wire.decode` proves a message is well formed; it cannot know which codec the
receiver runs. A sparse QSGD payload sent to a top-k server is valid on the wire, yet the
server's decoder expects plain floats. Each codec stage therefore declares the forms it emits
(`Selector.supports`, `Quantizer.values`), `chain` gathers them into the codec's `Forms`, and
`check_forms` compares an arriving payload against them before any codec code runs.

A form is a short string, so an error can name both sides:

    tensor 'fc.weight': sparse support with qsgd(s=4, bucket=0) values, but this receiver's
    codec sends dense or sparse support with fp32 values

Support forms: `dense`, `sparse`, `seeded random_k`, `seeded random_block`, `factors(rank=<r>)`
(PowerSGD's P and Q; the rank is part of the form, so a receiver refuses any rank but the
one its codec sends, a higher one included). Values forms:
`fp32`, `fp16`, `bf16`, `qsgd(s=<levels>, bucket=<b>)`, `sign(bucket=<b>)`,
`two_sided_sign(bucket=<b>)`, `multiscale(bits=<b>, scales=<s_0>/<s_1>/..., bucket=<b>)`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import NamedTuple

import torch

from thinwire.wire import WireError
from thinwire.wire.payload import (
    DenseSupport,
    FactorSupport,
    MultiScaleValues,
    Payload,
    QuantizedValues,
    RawValues,
    SeededSupport,
    SeedScheme,
    SignValues,
    SparseSupport,
    Support,
    Values,
)

__all__ = [
    "DENSE",
    "SPARSE",
    "FormError",
    "Forms",
    "check_forms",
    "constant",
    "factors_form",
    "kept_supports",
    "multiscale_form",
    "undeclared",
    "qsgd_form",
    "raw_form",
    "seeded_form",
    "sign_form",
    "support_form",
    "two_sided_sign_form",
    "values_form",
]

DENSE = "dense"
SPARSE = "sparse"

_RAW = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


class FormError(WireError):
    """A well-formed payload whose form is not one the receiver's codec sends."""


class Forms(NamedTuple):
    """The payload forms a codec emits for one tensor.

    None on either side means "not declared" (a plugin stage that names no forms): any form
    of that side passes the check, and the stage's own decoder must refuse what it cannot
    read with a `WireError`.
    """

    supports: frozenset[str] | None
    values: frozenset[str] | None

    def describe(self) -> str:
        """Both sides in words, e.g. 'dense or sparse support with fp32 values'."""
        supports = " or ".join(sorted(self.supports)) if self.supports else "any"
        values = " or ".join(sorted(self.values)) if self.values else "any"
        return f"{supports} support with {values} values"


def undeclared(shape: tuple[int, ...]) -> Forms:
    """The forms of a codec whose stages declare none: anything passes the check."""
    del shape
    return Forms(None, None)


def constant(*forms: str) -> Callable[[int], frozenset[str]]:
    """A selector's supports that do not depend on the domain size n."""
    fixed = frozenset(forms)

    def supports(n: int) -> frozenset[str]:
        del n
        return fixed

    return supports


def kept_supports(low: int, high: int, n: int) -> frozenset[str]:
    """The supports of a sparsifier that keeps between `low` and `high` of n coordinates.

    It sends a coordinate list while it keeps fewer than n, and the dense form when it keeps
    all n (a top-k of a tensor smaller than 1 / density, a threshold every value passes).
    """
    return frozenset(({SPARSE} if low < n else set()) | ({DENSE} if high >= n else set()))


def seeded_form(scheme: SeedScheme) -> str:
    """The form of a seeded support of `scheme`."""
    return f"seeded {scheme.name.lower()}"


def factors_form(rank: int) -> str:
    """The form of rank-`rank` factors (`FactorSupport`)."""
    return f"factors(rank={rank})"


def raw_form(dtype: torch.dtype) -> str:
    """The form of plain values of `dtype` (float32, float16 or bfloat16)."""
    return _RAW.get(dtype, str(dtype))


def qsgd_form(levels: int, bucket: int) -> str:
    """The form of QSGD values with `levels` positive levels and buckets of `bucket`."""
    return f"qsgd(s={levels}, bucket={bucket})"


def sign_form(bucket: int) -> str:
    """The form of scaled-sign values with buckets of `bucket`."""
    return f"sign(bucket={bucket})"


def two_sided_sign_form(bucket: int) -> str:
    """The form of two-sided scaled-sign values (a magnitude per sign) with buckets of `bucket`."""
    return f"two_sided_sign(bucket={bucket})"


def multiscale_form(bits: int, scales: tuple[int, ...], bucket: int) -> str:
    """The form of multi-scale values: level width, scales and buckets."""
    return f"multiscale(bits={bits}, scales={'/'.join(map(str, scales))}, bucket={bucket})"


def support_form(support: Support) -> str:
    """The form of a decoded support."""
    match support:
        case DenseSupport():
            return DENSE
        case SparseSupport():
            return SPARSE
        case SeededSupport(scheme=scheme):
            return seeded_form(scheme)
        case FactorSupport(rank=rank):
            return factors_form(rank)


def values_form(values: Values) -> str:
    """The form of decoded values."""
    match values:
        case RawValues(data=data):
            return raw_form(data.dtype)
        case QuantizedValues(s=s, bucket=bucket):
            return qsgd_form(s, bucket)
        case SignValues(bucket=bucket, negative_scales=None):
            return sign_form(bucket)
        case SignValues(bucket=bucket):
            return two_sided_sign_form(bucket)
        case MultiScaleValues(bits=bits, scales=scales, bucket=bucket):
            return multiscale_form(bits, scales, bucket)


def check_forms(payloads: Mapping[str, Payload], expected: Mapping[str, Forms]) -> None:
    """Refuses any payload whose form its tensor's codec does not send.

    Args:
        payloads: the decoded payloads of one message, by tensor name (as `wire.decode`
            returns them, so names and shapes already match the receiver's spec).
        expected: the forms the receiver's codec sends, by tensor name.

    Raises:
        FormError: naming the tensor, the form that arrived and the forms expected. A
            payload for a tensor the receiver does not know is refused the same way.
    """
    for name, payload in payloads.items():
        forms = expected.get(name)
        if forms is None:
            raise FormError(f"tensor {name!r}: this receiver's codec has no such tensor")
        support, values = support_form(payload.support), values_form(payload.values)
        if (forms.supports is not None and support not in forms.supports) or (
            forms.values is not None and values not in forms.values
        ):
            raise FormError(
                f"tensor {name!r}: {support} support with {values} values, but this "
                f"receiver's codec sends {forms.describe()}"
            )
