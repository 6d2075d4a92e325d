"""What a receiver is willing to accept: caps checked before anything is parsed or allocated."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FORMAT_VERSION", "MAX_SENDER_BYTES", "RICE_MAX_BITS", "SEEDED_DOMAIN_LIMIT", "Limits"]

FORMAT_VERSION = 1
"""The wire format `update.proto` defines."""

MAX_SENDER_BYTES = 128
"""Longest sender id the format allows, in UTF-8 bytes (`update.proto`)."""

RICE_MAX_BITS = 40
"""Largest Rice parameter (width of a low part) the format allows."""

SEEDED_DOMAIN_LIMIT = 1 << 40
"""Largest domain a seeded support may index.

The same bound as `thinwire.codecs.support.MAX_SEEDED_DOMAIN` (it keeps the seeded Feistel
permutation's products below 2**63); duplicated here because wire is the lowest layer and
imports no codec. A test pins the two together.
"""


@dataclass(frozen=True, slots=True)
class Limits:
    """Caps on an untrusted `Update`; every one is checked before the data it bounds is used.

    The defaults accept anything a well-formed thinwire run produces; tighten them at a
    receiver that knows more (e.g. `max_bytes` from the model's dense size).

    Attributes:
        max_bytes: largest serialized message, checked before parsing.
        max_tensors: most tensors in one message (the spec must match anyway; this bounds the
            work done before that comparison).
        max_metrics: most entries in `metrics`.
        max_name_length: longest tensor name or metric key, in UTF-8 bytes.
        max_sender_length: longest sender id, in UTF-8 bytes.
        max_round: largest round number.
        max_levels: largest QSGD level count s (the config allows up to 2**20).
        allow_nonfinite: accept NaN and infinities among raw values (norms, scales and
            metrics must be finite regardless).
    """

    max_bytes: int = 1 << 30
    max_tensors: int = 1 << 16
    max_metrics: int = 256
    max_name_length: int = 1024
    max_sender_length: int = MAX_SENDER_BYTES
    max_round: int = (1 << 31) - 1
    max_levels: int = 1 << 20
    allow_nonfinite: bool = False

    def __post_init__(self) -> None:
        for name in (
            "max_bytes",
            "max_tensors",
            "max_metrics",
            "max_name_length",
            "max_sender_length",
            "max_round",
            "max_levels",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"Limits.{name} must be a non-negative int, got {value!r}")
        if not 1 <= self.max_levels < 1 << 31:
            raise ValueError(f"Limits.max_levels must be in [1, 2**31), got {self.max_levels}")
