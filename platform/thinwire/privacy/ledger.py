"""The privacy ledger: what a client's DP-SGD has run, and nothing else.

A ledger records (noise multiplier sigma, sample rate q, steps) entries, run-length encoded
in the order they happened (Opacus's `RDPAccountant.history`); `thinwire.privacy.analysis`
turns a history into epsilon. The ledger does no maths and the trainer does not know about
it: the trainer reports each step through a hook, and the client records the count
(STYLE rule 11).

A thinwire DP client fixes sigma and q for its whole run (sigma is calibrated once, the
batch size does not change), so its ledger holds one entry whose step count grows: the
saved form (`thinwire.statetree`) has the same shape every round.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["PrivacyLedger", "open_ledger", "record"]


class PrivacyLedger(NamedTuple):
    """State of a client's privacy accounting."""

    history: tuple[tuple[float, float, int], ...]
    """(sigma, q, steps) entries, run-length encoded, oldest first."""


def _check(noise_multiplier: float, sample_rate: float) -> None:
    if not noise_multiplier >= 0.0:
        raise ValueError(f"noise multiplier must be >= 0, got {noise_multiplier}")
    if not 0.0 < sample_rate <= 1.0:
        raise ValueError(f"sample rate must be in (0, 1], got {sample_rate}")


def open_ledger(noise_multiplier: float, sample_rate: float) -> PrivacyLedger:
    """A ledger for a mechanism of sigma = `noise_multiplier` at rate q, with no step yet.

    Raises:
        ValueError: sigma < 0 or q outside (0, 1].
    """
    _check(noise_multiplier, sample_rate)
    return PrivacyLedger(((float(noise_multiplier), float(sample_rate), 0),))


def record(
    ledger: PrivacyLedger, *, noise_multiplier: float, sample_rate: float, steps: int = 1
) -> PrivacyLedger:
    """The ledger after `steps` more steps at (sigma, q).

    Steps with the last entry's (sigma, q) extend it; others open a new entry.

    Raises:
        ValueError: sigma < 0, q outside (0, 1] or steps < 0.
    """
    _check(noise_multiplier, sample_rate)
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    entry = (float(noise_multiplier), float(sample_rate))
    history = ledger.history
    if history and history[-1][:2] == entry:
        return PrivacyLedger((*history[:-1], (*entry, history[-1][2] + steps)))
    return PrivacyLedger((*history, (*entry, steps)))
